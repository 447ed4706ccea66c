"""Money as a person reads it (issue 34): at $1/$2 per million tokens a batch said "The estimate for this batch
($0.00 for 30 rows...) exceeds its budget of $0.00", then "$0.0026 so far, ≈$0.00 projected · paused at its budget of
$0.00", and the warning was shown twice. Every amount is written to at least two significant digits ($0.0026, never
$0.00 for an amount above zero), a projection is never below what was spent, and each warning is said once."""

import asyncio
import re

import pytest
from conftest import magics

import unity_nb as u

T = 10.0
ZERO = re.compile(r"\$0\.00(?!\d)")  # "$0.00" as a whole amount: nothing at all
AMOUNT = re.compile(r"\$(\d[\d,]*\.\d+)")


def amounts(text):
    return [float(a.replace(",", "")) for a in AMOUNT.findall(text)]


def assert_readable(text):
    """No amount above zero written as $0.00, and every amount to two significant digits at least."""
    assert not ZERO.search(text), text
    for raw in AMOUNT.findall(text):
        digits = raw.replace(",", "").replace(".", "").lstrip("0")
        assert len(digits) >= 2, (raw, text)


def priced(name):
    model = u.ScriptedModel(lambda m, t: "label " * 20, name=name)
    u.set_price(model, input=1.0, output=2.0)  # dollars per million tokens
    return model


ROWS = [f"row {i} " + "word " * 60 for i in range(30)]


async def test_a_budgeted_batch_through_the_magics_says_its_money_readably_and_its_warning_once(stored_shell, capsys):
    stored_shell.user_ns.update(m=priced("money-34"), items=ROWS)
    stored_shell.run_line_magic("unity", "model --var m")
    capsys.readouterr()
    h = stored_shell.run_line_magic("unity", "map items --budget 0.002 --name cheap Label {value}")
    note = h.spending.note
    assert note is not None and "exceeds its budget of $0.0020" in note
    assert_readable(note)
    printed = capsys.readouterr().out
    widget = magics(stored_shell).widgets["cheap"]
    assert printed.count("exceeds its budget") + widget.notice.count("exceeds its budget") == 1  # once, not twice
    assert widget.notice.count("exceeds its budget") == 1  # the widget says it (and its snapshot, where it is seen)

    reached = await asyncio.wait_for(h.wait_for("budget_reached"), T)
    await asyncio.wait_for(h.wait_for("row_finished", lambda e: h.progress["running"] == 0), T)
    assert "$0.0020" in reached.message and reached.spent > 0
    assert_readable(reached.message)
    widget.flush()
    p = widget.nodes[0]["progress"]
    text = p["text"]
    assert_readable(text)
    assert "paused at its budget of $0.0020" in text and re.search(r"\$0\.00\d\d so far, ≈\$0\.00\d\d projected", text)
    spent, projected = amounts(text.split(" so far")[0])[-1], amounts(text.split("projected")[0])[-1]
    assert projected >= spent > 0 and p["projected_cost"] >= p["cost"]
    assert_readable(h.spending.message())
    assert_readable(repr(h.spending))
    await h.stop("enough")
    assert capsys.readouterr().out.count("exceeds its budget") == 0  # said once, at the start


async def test_without_widgets_the_magics_print_the_warning_once(stored_shell, capsys):
    stored_shell.user_ns.update(m=priced("money-34-plain"), items=ROWS)
    stored_shell.run_line_magic("unity", "model --var m")
    magics(stored_shell).show_widgets = False
    try:
        h = stored_shell.run_line_magic("unity", "map items --budget 0.002 --name plain Label {value}")
        await h.stop("only the note was wanted")
    finally:
        magics(stored_shell).show_widgets = True
    assert capsys.readouterr().out.count("exceeds its budget of $0.0020") == 1


def test_an_estimate_at_a_low_price_says_its_dollars_to_two_significant_digits():
    est = u.estimate(ROWS, "Label {value}", model=priced("money-34-estimate"))
    assert 0 < est.dollars < 0.01
    assert_readable(str(est))
    assert re.search(r"\$0\.00\d\d at scripted:money-34-estimate's price", str(est)), str(est)


@pytest.mark.parametrize("budget", [0.002, 1234.5])
async def test_a_batch_held_at_its_budget_says_so_readably(bus, budget):
    model = priced(f"money-34-held-{budget}")
    h = u.map(ROWS, "Label {value}", model=model, budget=budget, concurrency=1, bus=bus)
    if budget < 1:
        await asyncio.wait_for(h.wait_for("budget_reached"), T)
        assert_readable(h.spending.message())
    else:
        await asyncio.wait_for(h.result(), T)
        assert "budget $1,234.50" in h.progress["text"]
    assert_readable(h.progress["text"])
    assert h.progress["projected_cost"] >= h.progress["cost"]
    if not h.done():
        await h.stop("enough")
