"""Loops on an event loop closed without running them leave the collector's count as it was (issue 24, 7)."""

from __future__ import annotations

import asyncio
import gc
import sys

import pytest

import unity_nb as u


@pytest.fixture
def tuning():
    """Tuning on from 4 more live loops than now, 1,000 per loop; yields the loops live before the test."""
    before = gc.get_threshold()
    saved = u.tune_collector()
    gc.set_threshold(700, 10, 10)
    base = saved["live_loops"]
    u.tune_collector(True, start_at=base + 4, per_loop=1000, ceiling=10**9)
    yield base
    u.tune_collector(saved["enabled"], start_at=saved["start_at"], per_loop=saved["per_loop"],
                     ceiling=saved["ceiling"])
    gc.set_threshold(*before)


@pytest.fixture
def unraisable(monkeypatch):
    """What would print as "Exception ignored in ..." (a coroutine's ``finally`` failing as it is collected)."""
    seen: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda r: seen.append(f"{r.exc_type.__name__}: {r.exc_value}"))
    return seen


def _start_on_a_loop_then_close_it(n: int, *, let_them_run: bool) -> None:
    event_loop = asyncio.new_event_loop()

    async def start() -> list[u.LoopHandle]:
        gate = asyncio.Event()

        async def wait_for_gate() -> str:
            """Wait for a gate nobody opens."""
            await gate.wait()
            return "never"

        script = [u.call_tool("wait_for_gate"), "done"]
        handles = [
            u.start_loop("hold", model=u.ScriptedModel(list(script)), tools=[wait_for_gate], bus=u.EventBus())
            for _ in range(n)
        ]
        if let_them_run:
            for h in handles:
                await h.wait_for("tool_started", timeout=10)
        return handles

    handles = event_loop.run_until_complete(start())
    assert u.tune_collector()["live_loops"] >= n
    assert gc.get_threshold()[0] >= 1000 * n  # raised
    event_loop.close()  # their tasks are never run again
    del handles


@pytest.mark.parametrize("let_them_run", [True, False], ids=["waiting-on-a-tool", "never-started"])
def test_loops_of_a_closed_event_loop_leave_the_count_as_it_was_and_print_nothing(
    tuning, unraisable, let_them_run
):
    _start_on_a_loop_then_close_it(200, let_them_run=let_them_run)
    gc.collect()  # the tasks and their coroutines are collected; the collection itself puts the threshold back
    assert gc.get_threshold() == (700, 10, 10)
    assert unraisable == []
    settings = u.tune_collector()
    assert settings["live_loops"] == tuning
    assert settings["threshold_set"] is None


def test_the_count_read_after_the_close_is_right_before_any_collection(tuning, unraisable):
    gc.disable()
    try:
        _start_on_a_loop_then_close_it(50, let_them_run=True)
        assert u.tune_collector()["live_loops"] == tuning
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.enable()
    gc.collect()
    assert unraisable == []


async def test_loops_on_a_running_loop_still_count_while_another_event_loop_closes(tuning):
    gate = asyncio.Event()

    async def wait_for_gate() -> str:
        """Wait until the test lets go."""
        await gate.wait()
        return "released"

    script = [u.call_tool("wait_for_gate"), "done"]
    handles = [u.start_loop("hold", model=u.ScriptedModel(list(script)), tools=[wait_for_gate], bus=u.EventBus())
               for _ in range(6)]
    for h in handles:
        await h.wait_for("tool_started", timeout=10)
    other = asyncio.new_event_loop()
    other.close()
    assert u.tune_collector()["live_loops"] == tuning + 6
    assert gc.get_threshold()[0] == 1000 * (tuning + 6)
    gate.set()
    assert await asyncio.wait_for(asyncio.gather(*handles), 10) == ["done"] * 6
    assert u.tune_collector()["live_loops"] == tuning
    assert gc.get_threshold() == (700, 10, 10)
