"""Loops on an event loop closed without running them leave the collector's count as it was (issue 24, 7)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import weakref

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


def _closed_wipe(table: str) -> str:
    """Wipe a table (irreversible)."""
    _ENTERED.set()
    _RELEASE.wait(10)
    return f"wiped {table}"


def _closed_sales(region: str) -> dict:
    """Sales of a region."""
    _ENTERED.set()
    _RELEASE.wait(10)
    return {"region": region, "sales": 1}


_ENTERED, _RELEASE = threading.Event(), threading.Event()


@pytest.fixture
def wipe():
    """``_closed_wipe`` marked: registered, its gate waiting for the person's approval; forgotten after the test."""
    yield u.tool(needs_approval=True)(_closed_wipe)
    u.unregister_tool("_closed_wipe")


def _close_under(scenario: str, wipe) -> weakref.ref:
    """Start ``scenario``'s run on an event loop, let it reach its waiting point, close the loop under it."""
    event_loop = asyncio.new_event_loop()

    async def start() -> u.LoopHandle:
        bus = u.EventBus()
        if scenario == "approved-gated-tool":
            h = u.start_loop("x", model=u.ScriptedModel([u.call_tool("_closed_wipe", table="a"), "done"]),
                             tools=[wipe], bus=bus)
            asked = await h.wait_for("approval_requested", timeout=10)
            await h.inbox.approve(asked.call_id)
            await asyncio.to_thread(_ENTERED.wait, 10)
        elif scenario == "plan-awaiting-approval":
            code = "await _closed_wipe('a')"
            h = u.act("x", model=u.ScriptedModel([u.call_tool("execute_code", code=code, intent="wipe"), "done"]),
                      namespace={"_closed_wipe": wipe}, bus=bus)
            await h.wait_for("approval_requested", timeout=10)
        else:  # a JSON tool called by reference, running in its thread
            h = u.act("x", model=u.ScriptedModel([u.call_tool("_closed_sales", region="n"), "done"]), namespace={},
                      tools=[_closed_sales], bus=bus)
            await asyncio.to_thread(_ENTERED.wait, 10)
        return h

    ref = weakref.ref(event_loop.run_until_complete(start()))
    event_loop.close()  # the run is never resumed: its coroutines are closed when collected
    return ref


@pytest.mark.parametrize("scenario", ["approved-gated-tool", "plan-awaiting-approval", "json-tool-by-reference"])
def test_a_run_closed_under_an_approval_or_a_reference_call_ends_quietly_when_collected(unraisable, scenario, wipe):
    _ENTERED.clear()
    _RELEASE.clear()
    try:
        ref = _close_under(scenario, wipe)
    finally:
        _RELEASE.set()  # a tool still running in its thread holds its call's context: let it end
    for _ in range(200):  # until the thread has let go of the call (a wait, with its end)
        gc.collect()
        if ref() is None:
            break
        time.sleep(0.05)
    assert ref() is None
    assert unraisable == []  # no context variable reset in the collector's context ("Exception ignored in")


def test_a_thread_waiting_for_approval_is_let_go_once_its_event_loop_is_closed(wipe):
    """A sync tool calling a marked function waits in its thread for the person; the event loop closed under it
    can never answer, so the wait ends (it woke twice a second forever, the thread held)."""
    outcome: list[str] = []
    done = threading.Event()

    def relay(table: str) -> str:
        """Ask for a wipe, from this tool's thread."""
        try:
            return wipe(table)
        except u.NotApproved as err:
            outcome.append(str(err))
            return "not approved"
        finally:
            done.set()

    event_loop = asyncio.new_event_loop()

    async def start() -> None:
        h = u.start_loop("x", model=u.ScriptedModel([u.call_tool("relay", table="a"), "done"]), tools=[relay],
                         bus=u.EventBus())
        await h.wait_for("approval_requested", timeout=10)

    event_loop.run_until_complete(start())
    event_loop.close()
    assert done.wait(10)
    assert outcome and "was closed while it waited for approval" in outcome[0]
