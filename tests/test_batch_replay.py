"""A batch recorded through a CachedModel replays offline, identically."""

from __future__ import annotations

import asyncio

import pandas as pd

import unity_nb as u


def label(word: str) -> str:
    """The label of a word."""
    return word.upper()


async def test_a_recorded_batch_replays_offline_and_gives_the_same_result(tmp_path):
    path = tmp_path / "batch.json"
    papers = pd.Series(["alpha", "beta", "gamma", "delta", "epsilon"], index=[10, 11, 12, 13, 14], name="title")
    calls = []

    def script(messages, tools):
        calls.append(1)
        if messages[-1]["role"] == "user":
            return u.call_tool("label", word=messages[-1]["content"].rsplit(" ", 1)[-1])
        return f"label: {messages[-1]['content']}"

    recorded = u.CachedModel(u.ScriptedModel(script), path, mode="auto")
    first = await asyncio.wait_for(
        u.map(papers, "Label {title}", model=recorded, tools=[label], concurrency=3, bus=u.EventBus()), 10
    )
    assert first.tolist() == ["label: ALPHA", "label: BETA", "label: GAMMA", "label: DELTA", "label: EPSILON"]
    assert recorded.misses == len(calls) == 10

    def offline(messages, tools):
        raise AssertionError("the replay called the model")

    replayed = u.CachedModel(u.ScriptedModel(offline), path, mode="replay")
    second = await asyncio.wait_for(
        u.map(papers, "Label {title}", model=replayed, tools=[label], concurrency=3, bus=u.EventBus()), 10
    )
    pd.testing.assert_series_equal(first, second)
    assert (replayed.hits, replayed.misses) == (10, 0)


async def test_recording_a_batch_writes_the_file_a_few_times_not_once_a_reply(tmp_path, monkeypatch):
    import os

    writes = []
    replace = os.replace

    def counting(src, dst):
        writes.append(dst)
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", counting)
    path = tmp_path / "batch.json"
    recorded = u.CachedModel(u.ScriptedModel(lambda m, t: "ok " + m[-1]["content"][-3:]), path, mode="auto")
    rows = [f"row {i:03d}" for i in range(200)]
    first = await asyncio.wait_for(u.map(rows, "Label", model=recorded, concurrency=20, bus=u.EventBus()), 10)
    assert recorded.misses == 200
    # another CachedModel on the file sees every recording: what was not yet written is written first
    replayed = u.CachedModel(u.ScriptedModel(lambda m, t: "never"), path, mode="replay")
    assert len(writes) == 1  # the file made once, every later recording appended (was: rewritten once a reply)
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1 + 200  # JSON lines: a header, a line each
    second = await asyncio.wait_for(u.map(rows, "Label", model=replayed, concurrency=20, bus=u.EventBus()), 10)
    pd.testing.assert_series_equal(first, second)
    assert replayed.hits == 200


async def test_save_writes_what_was_recorded_and_not_yet_written(tmp_path):
    import json

    path = tmp_path / "r.json"
    model = u.CachedModel(u.ScriptedModel(lambda m, t: m[-1]["content"].upper()), path, mode="auto")
    await asyncio.wait_for(u.start_loop("first", model=model, bus=u.EventBus()), 10)
    await asyncio.wait_for(u.start_loop("second", model=model, bus=u.EventBus()), 10)
    model.save()  # at once, whether or not the second recording's write was due yet
    assert [json.loads(line).get("key") is not None for line in path.read_text(encoding="utf-8").splitlines()] == [
        False,
        True,
        True,
    ]
