"""Options of a ``%unity`` line that were accepted and then did nothing: each now does what it says, or the line is
refused saying what to do."""

import asyncio

import pytest
from conftest import magics
from IPython.core.error import UsageError

import unity_nb as u

T = 10


@pytest.fixture
def ip(stored_shell):
    return stored_shell


async def test_resume_budget_of_an_interrupted_act_from_the_store_is_refused_not_dropped(ip, tmp_path):
    hold = asyncio.Event()

    async def thinking(messages, tools):
        await hold.wait()  # its kernel dies while the model thinks
        return "never"

    other = u.Store(str(tmp_path / "state.db"))  # another kernel on the same file
    bus = u.EventBus()
    other.attach(bus)
    model = u.ScriptedModel(thinking, name="priced-48")
    u.set_price("scripted:priced-48", input=1.0, output=1.0)  # a budget could be counted: only its kind refuses it
    tour = u.act("Compute the answer.", model=model, name="tour", bus=bus, namespace={})
    await tour.wait_for("model_request", timeout=T)
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone
    ip.user_ns["m"] = u.ScriptedModel(lambda messages, tools: "the answer is 42", name="priced-48")
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=r"--budget is for a batch .*which 'tour' is not.*leave out --budget"):
        ip.run_line_magic("unity", "resume tour --budget 5")
    assert "tour" not in magics(ip).handles  # nothing started
    resumed = ip.run_line_magic("unity", "resume tour")  # without it, it resumes
    assert await asyncio.wait_for(resumed.result(), T) == "the answer is 42"
    hold.set()
    await tour.stop()
    other.close()


def _oracle(messages, tools):
    text = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    if "Decide for this row" in text:
        return u.call_tool("submit_answer", keep="apples" in text, reason="read it")
    if "Rate this row" in text:
        return u.call_tool("submit_answer", score=int(text.split("item ")[-1].split()[0]) % 11, reason="r")
    if "\nA:\n" in text:
        return u.call_tool("submit_answer", better="A", reason="first")
    return "a summary"


async def test_expected_output_tokens_counts_in_an_operator_s_budget_as_in_a_map_s(ip):
    u.set_price("scripted:priced-49", input=10.0, output=10.0)
    items = [f"item {i} about apples" for i in range(40)]
    ip.user_ns.update(m=u.ScriptedModel(_oracle, name="priced-49"), items=items)
    ip.run_line_magic("unity", "model --var m")
    # 40 rows of 5,000 tokens out: about $2, over a budget of $1 (the assumption, 80 a row, is a few cents)
    for line in ("map items --budget 1 --expected-output-tokens 5000 Label {value}",
                 "filter items --budget 1 --expected-output-tokens 5000 Is {value} about apples?"):
        h = ip.run_line_magic("unity", line)
        assert h.spending.expected_output_tokens == 5000, line
        assert "exceeds its budget of $1.00" in (h.spending.note or ""), line
        await asyncio.wait_for(h.wait_for("loop_finished", timeout=T), T)
    best = ip.run_line_magic("unity", "topk items 2 --budget 5 --expected-output-tokens 30 Which item is biggest?")
    await asyncio.wait_for(best.result(), T)
    assert best.phases and all(p.spending.expected_output_tokens == 30 for p in best.phases)  # every phase's
