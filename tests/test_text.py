"""Huge text through the engine: a streamed reply and printed output of megabytes complete whole
where they must (the answer) and bounded where they are kept for show (a call's printed output:
its head and tail, with a line saying how much was cut). Their cost is linear: see
bench/bench_text.py (no timing here)."""

import asyncio
import json
import random
import sys

import pytest
from conftest import tool_messages

import unity_nb as u
from unity_nb.events import ModelDelta, ToolOutput
from unity_nb.jupyter._widget import HandleWidget
from unity_nb.loop._text import OUTPUT_LIMIT, PrintedOutput, TextBuffer, cut_line
from unity_nb.store import Store

VALUE = "sk-live-0a1b2c3d4e5f6a7b"
MB3 = 3_000_000


@pytest.fixture
def secret():
    u.set_secret("BIG_TOKEN", VALUE)
    yield
    u.forget_secret("BIG_TOKEN")


@pytest.fixture
def routed():
    """Route what tools print to their call records, as the notebook layer does (call it in the test)."""
    from unity_nb import _output

    yield _output.install
    _output.uninstall()


def lines(count: int) -> list[str]:
    """``count`` numbered lines of 100 characters (with the newline)."""
    return [f"{i:08d}".ljust(99, ".") + "\n" for i in range(count)]


async def test_a_3_mb_streamed_reply_completes_whole_and_a_secret_split_between_deltas_is_caught(secret):
    chunk = 64
    start = (MB3 // 2 // chunk + 1) * chunk - 10  # the value straddles two deltas
    reply = "y" * start + VALUE + "z" * (MB3 - start - len(VALUE))
    bus = u.EventBus()
    h = u.start_loop("answer at length", model=u.ScriptedModel([reply], chunk=chunk), bus=bus)
    answer = await h
    assert answer == "y" * start + "<<secret:BIG_TOKEN>>" + "z" * (MB3 - start - len(VALUE))  # the answer is never cut
    deltas = [e.text for e in h.events if isinstance(e, ModelDelta)]
    assert len(deltas) >= MB3 // chunk
    assert "".join(deltas) == answer  # nothing lost, nothing shown twice
    assert not any(VALUE in d for d in deltas) and VALUE not in json.dumps([e.model_dump_json() for e in h.events])
    assert h.state.streaming_text == ""  # nothing in flight any more


async def test_a_tool_printing_3_mb_keeps_a_bounded_head_and_tail_saying_how_much_was_cut(routed, tmp_path):
    text = lines(MB3 // 100)

    def noisy() -> str:
        """Print a lot."""
        for line in text:
            print(line, end="")
        return "printed"

    routed()
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    script = lambda m, t: u.call_tool("noisy") if not tool_messages(m) else "done"
    h = u.start_loop("print", model=u.ScriptedModel(script), tools=[noisy], bus=bus)
    w = HandleWidget(h)
    assert await h == "done"
    w.flush()
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    whole = "".join(text)
    cut = MB3 - OUTPUT_LIMIT
    assert rec.output_cut == cut == 2_000_000
    cut_note = "\n[... 2,000,000 characters cut ...]\n"
    assert rec.output == whole[: OUTPUT_LIMIT // 2] + cut_note + whole[-OUTPUT_LIMIT // 2 :]
    assert h.state.printed == MB3  # what was printed, counted in full
    # the ToolOutput events add up to what is kept (head as it came, then the cut line and the tail at the end)
    published = [e.text for e in h.events if isinstance(e, ToolOutput)]
    assert "".join(published) == rec.output
    assert published[-1].startswith("\n[... 2,000,000 characters cut ...]\n")
    rebuilt = [c for m in store.transcript(h.id) for c in m.tool_calls]
    assert [c.output for c in rebuilt] == [rec.output]  # the store keeps no more than the record
    store.close()
    shown = next(c["output"] for e in w.entries[h.id] for c in e.get("calls", ()))
    assert shown.startswith("00000000.") and len(shown) < 5000  # the widget shows a clip of the record


async def test_a_plan_printing_3_mb_is_bounded_and_the_model_is_told_how_much_it_does_not_see():
    code = "for i in range(30_000):\n    print(f'{i:08d}'.ljust(99, '.'))"
    script = lambda m, t: u.call_tool("execute_code", code=code, intent="print") if not tool_messages(m) else "done"
    model = u.ScriptedModel(script)
    h = u.act("print", model=model, namespace={}, bus=u.EventBus())
    assert await h == "done"
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    assert rec.output_cut == 2_000_000 and "\n[... 2,000,000 characters cut ...]\n" in rec.output
    assert rec.output.startswith("00000000.") and rec.output.endswith("00029999" + "." * 91 + "\n")
    assert len(rec.output) < OUTPUT_LIMIT + 100
    (seen,) = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    assert "truncated: 2,996,000 characters omitted" in seen and len(seen) < 5000


@pytest.mark.parametrize("limit", [None, 10, 101, 1000])
def test_a_text_buffer_keeps_what_str_concatenation_would_within_its_limit(limit):
    rng = random.Random(limit or 0)
    for _ in range(50):
        pieces = ["".join(rng.choice("abc\n") for _ in range(rng.choice([0, 1, 2, 7, 40, 300])))
                  for _ in range(rng.randint(0, 40))]
        buf, shown, whole = TextBuffer(limit=limit), [], ""
        for p in pieces:
            shown.append(buf.append(p))
            whole += p
            if rng.random() < 0.3:
                _ = buf.text  # reading between appends changes nothing
        if limit is None or len(whole) <= limit:
            expected = whole
        else:
            expected = whole[: limit // 2] + cut_line(len(whole) - limit) + whole[len(whole) - (limit - limit // 2) :]
        read = buf.text
        assert read == expected and buf.total == len(whole)
        assert buf.cut == (max(len(whole) - limit, 0) if limit else 0)
        shown.append(buf.seal())
        assert "".join(shown) == read  # what append and seal hand out adds up to the text
        assert buf.append("late") == "late" and buf.text.endswith("late")


def test_printed_output_written_from_threads_is_published_whole_and_in_order():
    import threading

    out = PrintedOutput(limit=None)
    taken: list[str] = []

    def writer(k: int) -> None:
        for i in range(2000):
            out.write(f"{k}:{i};")
            if i % 97 == 0:
                taken.append(out.take())

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.end()
    taken.append(out.take())
    assert "".join(taken) == out.text
    for k in range(4):
        mine = [p for p in out.text.split(";") if p.startswith(f"{k}:")]
        assert mine == [f"{k}:{i}" for i in range(2000)]


def test_the_bench_script_runs_at_a_tiny_size():
    """bench/bench_text.py stays runnable (its figures come from running it by hand)."""
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "bench" / "bench_text.py"
    run = subprocess.run([sys.executable, str(script), "--small", "2000", "--repeat", "1"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert "A. streamed reply" in run.stdout and "C. plan printing" in run.stdout


async def test_the_widget_shows_the_head_and_tail_of_huge_output_and_how_much_is_not_shown(routed):
    def noisy() -> str:
        """Print a lot."""
        print("first line")
        print("x" * 2_000_000)
        print("last line")
        return "done"

    routed()
    m = u.ScriptedModel([u.call_tool("noisy"), "finished"])
    h = u.start_loop("go", model=m, tools=[noisy])
    assert await asyncio.wait_for(h.result(), 30) == "finished"
    w = HandleWidget(h)
    w.flush()
    call = next(c for e in w.entries[h.id] for c in e.get("calls", []))
    out = call["output"]
    assert out.startswith("first line") and out.rstrip().endswith("last line") and len(out) < 10_000
    rec = h.transcript[1].tool_calls[0]
    head, rest = out.split("\n... [", 1)
    hidden, tail = rest.split(" characters not shown] ...\n", 1)
    assert int(hidden.replace(",", "")) == len(rec.output) + rec.output_cut - len(head) - len(tail) > 2_000_000 - 10_000
