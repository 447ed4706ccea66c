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
