"""u.agg (issue 34): chunks sized from the model's context window, a row longer than a chunk split into marked parts
(never cut), and the handle returned before the input is read (the first level's chunks made as its map starts
them)."""

import asyncio
import re

import numpy as np
import pandas as pd
import pytest

import unity_nb as u

T = 30
PART = re.compile(r"\[row (\w+), part (\d+) of (\d+)\]\n")


def task_of(messages):
    return next(m["content"] for m in messages if m["role"] == "user")


def recorder(answer=lambda text: "ok"):
    """A ScriptedModel keeping every request's task; it answers ``answer(text)``."""
    seen = []

    def script(messages, tools):
        text = task_of(messages)
        seen.append(text)
        return answer(text)

    return u.ScriptedModel(script), seen


def rows_of(text):
    """A first-level request's rows: what follows its instructions."""
    return text.split("\n\n", 2)[2]


async def test_a_row_longer_than_a_chunk_reaches_the_model_whole_in_marked_parts(bus):
    long = " ".join(f"w{i:04d}" for i in range(5000))  # 30,000 characters
    assert len(long) == 29_999
    frame = pd.DataFrame({"text": ["a short row", long, "another short row"]},
                         index=pd.Index(["first", "long", "last"], name="id"))
    model, seen = recorder(lambda text: "note" if "one part of the group" in text else "the answer")
    h = u.agg(frame, "Summarise {text}", chunk_chars=2_000, model=model, bus=bus)
    answer = await asyncio.wait_for(h.result(), T)
    assert answer.to_dict() == {"all": "the answer"}
    # every part reached the model, in order, and the parts joined are the row: nothing cut
    parts = {}
    for text in seen:
        for m in PART.finditer(text):
            body = text[m.end():].split("\n\n")[0]
            parts[int(m.group(2))] = (m.group(1), int(m.group(3)), body)
    n = len(parts)
    assert n >= 15 and sorted(parts) == list(range(1, n + 1))
    assert {who for who, _n, _b in parts.values()} == {"long"} and {k for _w, k, _b in parts.values()} == {n}
    assert "text: " + long == "".join(parts[i][2] for i in range(1, n + 1))
    assert all(len(rows_of(t)) <= 2_000 for t in seen if "one part of the group" in t)
    # and the result says how the row was split
    assert answer.attrs["split"] == {"long": n} and h.split == {"long": n} and answer.attrs["reasons"] == {}
    assert "split into parts" in h.summary()


async def test_a_long_note_is_split_too_never_cut(bus):
    rows = pd.DataFrame({"text": [f"row {i} " + "x" * 900 for i in range(6)]})

    def answer(text):
        if "one part of the group" in text:  # a long note of its part: its words counted at the next level
            return " ".join(f"n{i:04d}" for i in range(400))
        return "done"

    model, seen = recorder(answer)
    h = u.agg(rows, "Summarise {text}", chunk_chars=1_000, model=model, bus=bus)
    assert (await asyncio.wait_for(h.result(), T)).to_dict() == {"all": "done"}
    later = " ".join(t for t in seen if "notes" in t)
    assert "[note 1, part 1 of" in later and all(f"n{i:04d}" in later for i in range(400))


async def test_the_chunks_follow_the_models_context_window_when_it_is_known(bus):
    rows = pd.DataFrame({"text": [f"finding {i}: " + "x" * 480 for i in range(20)]})  # about 10,000 characters

    small, seen_small = recorder(lambda t: "note" if "one part" in t else "small answer")
    small.context_window = 1_000  # tokens: chunks of (1,000 - 250) x 3 = 2,250 characters
    h = u.agg(rows, "Summarise {text}", model=small, bus=bus)
    assert h.chunk_chars == 2_250 and h.sizing.window == 1_000
    result = await asyncio.wait_for(h.result(), T)
    first = [t for t in seen_small if "one part of the group" in t]
    assert len(first) >= 5 and all(len(rows_of(t)) <= 2_250 for t in first)
    assert "1,000 tokens" in result.attrs["sizing"] and result.attrs["chunk_chars"] == 2_250

    # a model whose window is known by name (gpt-4o-mini: 128,000 tokens) reads the whole group in one request
    large = u.OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    h = u.agg(rows, "Summarise {text}", model=large, bus=bus, estimate=False)
    assert h.sizing.window == 128_000 and h.chunk_chars > 100_000
    await h.stop("not run")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), T)
    await large.close()

    # context_window= says the window; unknown, an assumed one is said
    told, _seen = recorder()
    assert u.agg(rows, "Summarise {text}", model=told, context_window=2_000, bus=bus).chunk_chars == 4_500
    unknown = u.agg(rows, "Summarise {text}", model=told, bus=bus)
    assert "unknown" in str(unknown.sizing) and "8,192" in str(unknown.sizing)
    assert "context window" in (await asyncio.wait_for(unknown.result(), T)).attrs["sizing"]


class Counted:
    """A value that counts how often its text is read."""

    reads = 0

    def __init__(self, i):
        self.i = i

    def __format__(self, spec):
        Counted.reads += 1
        return f"value {self.i}"

    def __str__(self):
        return self.__format__("")

    __repr__ = __str__


async def test_agg_returns_its_handle_before_reading_a_large_dataframe(bus):
    n = 50_000
    Counted.reads = 0
    frame = pd.DataFrame({"text": [Counted(i) for i in range(n)], "g": np.arange(n) % 7})
    asked = asyncio.Event()

    async def held(messages, tools):
        asked.set()
        await asyncio.Event().wait()

    h = u.agg(frame, "Summarise {text}", by="g", chunk_chars=2_000, model=u.ScriptedModel(held), concurrency=2,
              bus=bus)
    assert isinstance(h, u.AggHandle) and Counted.reads == 0  # the handle exists; no row's text was read
    await asyncio.wait_for(asked.wait(), T)
    assert h.phase.name.endswith("level1") and h.phase.rows.total is None  # chunks made as the map starts them
    assert 0 < Counted.reads < 1_000 and h.phase.rows.source.made < 20
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), T)
    assert Counted.reads < 1_000


async def test_agg_streams_a_generator_and_answers_each_group_from_its_rows_in_order(bus):
    taken = 0

    def rows(n):
        nonlocal taken
        for i in range(n):
            taken += 1
            yield f"item {i}"

    asked = asyncio.Event()

    async def held(messages, tools):
        asked.set()
        await asyncio.Event().wait()

    h = u.agg(rows(1_000_000), "Summarise", chunk_chars=1_000, model=u.ScriptedModel(held), concurrency=1, bus=bus)
    assert taken <= 1  # the first item, read to refuse an empty input
    await asyncio.wait_for(asked.wait(), T)
    assert h.phase.rows.total is None and taken < 1_000
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), T)

    # run to its end: every group's rows reach the model in the input's order; rows without a group are said
    frame = pd.DataFrame({"text": [f"r{i}" for i in range(30)], "g": [["b", "a", None][i % 3] for i in range(30)]})
    model, _seen = recorder(lambda t: " ".join(re.findall(r"r\d+", t)))
    result = await asyncio.wait_for(u.agg(frame, "List {text}", by="g", model=model, bus=bus).result(), T)
    assert list(result.index) == ["a", "b"] and result.index.name == "g"
    assert result["a"] == " ".join(f"r{i}" for i in range(1, 30, 3))
    assert result["b"] == " ".join(f"r{i}" for i in range(0, 30, 3))
    assert "10 row(s) have no value in the column 'g'" in result.attrs["reasons"][None]
