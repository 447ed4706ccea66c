"""The collector tuning: while many loops are live, the first threshold is raised; put back after."""

from __future__ import annotations

import asyncio
import gc

import pytest

import unity_nb as u


@pytest.fixture
def tuning():
    """Tuning on, from 4 more live loops than now, 1,000 per loop, no ceiling to speak of; the process's
    thresholds put back after. Yields the number of loops live before the test (other tests' loops
    that never ended)."""
    before = gc.get_threshold()
    saved = u.tune_collector()
    gc.set_threshold(700, 10, 10)
    base = saved["live_loops"]
    u.tune_collector(True, start_at=base + 4, per_loop=1000, ceiling=10**9)
    yield base
    u.tune_collector(saved["enabled"], start_at=saved["start_at"], per_loop=saved["per_loop"],
                     ceiling=saved["ceiling"])
    gc.set_threshold(*before)


async def _held_loops(n: int, gate: asyncio.Event) -> list[u.LoopHandle]:
    async def wait_for_gate() -> str:
        """Wait until the test lets go."""
        await gate.wait()
        return "released"

    script = [u.call_tool("wait_for_gate"), "done"]
    return [
        u.start_loop("hold", model=u.ScriptedModel(list(script)), tools=[wait_for_gate], bus=u.EventBus())
        for _ in range(n)
    ]


async def _running(handles: list[u.LoopHandle]) -> None:
    for h in handles:
        await h.wait_for("tool_started", timeout=10)


async def test_many_live_loops_raise_the_first_threshold_and_it_is_put_back_when_they_end(tuning):
    gate = asyncio.Event()
    handles = await _held_loops(6, gate)
    await _running(handles)
    assert gc.get_threshold() == (1000 * (tuning + 6), 10, 10)
    assert u.tune_collector()["threshold_set"] == 1000 * (tuning + 6)
    gate.set()
    assert await asyncio.wait_for(asyncio.gather(*handles), 10) == ["done"] * 6
    assert gc.get_threshold() == (700, 10, 10)
    assert u.tune_collector()["threshold_set"] is None


async def test_few_loops_leave_the_collector_alone(tuning):
    gate = asyncio.Event()
    handles = await _held_loops(3, gate)
    await _running(handles)
    assert gc.get_threshold() == (700, 10, 10)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*handles), 10)


async def test_thresholds_the_person_sets_while_raised_are_left_alone(tuning):
    gate = asyncio.Event()
    handles = await _held_loops(5, gate)
    await _running(handles)
    assert gc.get_threshold() == (1000 * (tuning + 5), 10, 10)
    gc.set_threshold(1234, 5, 5)  # the person's own
    more = await _held_loops(3, gate)  # more loops start: unity_nb does not take over again
    await _running(more)
    assert gc.get_threshold() == (1234, 5, 5)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*handles, *more), 10)
    assert gc.get_threshold() == (1234, 5, 5)


async def test_a_higher_threshold_already_set_is_kept(tuning):
    gc.set_threshold(10_000_000, 10, 10)
    gate = asyncio.Event()
    handles = await _held_loops(5, gate)
    await _running(handles)
    assert gc.get_threshold() == (10_000_000, 10, 10)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*handles), 10)
    assert gc.get_threshold() == (10_000_000, 10, 10)


async def test_turning_it_off_puts_the_thresholds_back_at_once(tuning):
    gate = asyncio.Event()
    handles = await _held_loops(5, gate)
    await _running(handles)
    assert gc.get_threshold()[0] == 1000 * (tuning + 5)
    assert u.tune_collector(False)["threshold_set"] is None
    assert gc.get_threshold() == (700, 10, 10)
    more = await _held_loops(2, gate)
    await _running(more)
    assert gc.get_threshold() == (700, 10, 10)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*handles, *more), 10)


async def test_stopped_and_failed_loops_count_as_ended(tuning):
    gate = asyncio.Event()
    handles = await _held_loops(4, gate)
    await _running(handles)
    assert gc.get_threshold()[0] == 1000 * (tuning + 4)
    live = u.tune_collector()["live_loops"]
    await handles[0].stop()
    def boom(messages, tools):
        raise RuntimeError("boom")

    failing = u.start_loop("fail", model=u.ScriptedModel(boom), bus=u.EventBus())
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(failing.result(), 10)
    assert u.tune_collector()["live_loops"] == live - 1
    gate.set()
    await asyncio.wait_for(asyncio.gather(*handles[1:]), 10)
    assert u.tune_collector()["live_loops"] == live - 4
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("bad", [{"start_at": 0}, {"per_loop": -5}, {"ceiling": 1.5}, {"start_at": True}])
def test_bad_settings_are_refused_naming_the_setting(bad):
    (name,) = bad
    with pytest.raises(u.UserError, match=name):
        u.tune_collector(**bad)


def test_enabled_takes_a_bool():
    with pytest.raises(u.UserError, match="enabled"):
        u.tune_collector("yes")  # type: ignore[arg-type]


async def test_a_batch_keeps_the_threshold_raised_between_waves_of_its_rows(tuning):
    """Rows that all answer at once end in waves: between one wave ending and the next starting, the batch
    still counts as its concurrency of live loops, so the threshold is not put back and raised again."""
    bus = u.EventBus()
    seen: list[int] = []
    bus.subscribe(lambda e: seen.append(gc.get_threshold()[0]), kinds=["row_finished", "loop_started"])
    h = u.map([f"item {i}" for i in range(30)], "Label {value}", model=u.ScriptedModel(lambda m, t: "ok"),
              concurrency=6, bus=bus)
    assert (await asyncio.wait_for(h, 10)).tolist() == ["ok"] * 30
    assert len(seen) == 30 + 31
    assert min(seen[6:]) >= 1000 * 6  # from the first wave on
    assert gc.get_threshold() == (700, 10, 10)
    assert u.tune_collector()["threshold_set"] is None


async def test_a_small_batch_raises_the_threshold_too_and_it_is_put_back_when_it_ends(tuning):
    """Fewer rows at once than ``start_at`` loops: the batch still raises the threshold (its rows end and start
    all the time), for as long as it runs."""
    bus = u.EventBus()
    seen: list[int] = []
    bus.subscribe(lambda e: seen.append(gc.get_threshold()[0]), kinds=["row_finished"])
    h = u.map([f"item {i}" for i in range(10)], "Label {value}", model=u.ScriptedModel(lambda m, t: "ok"),
              concurrency=2, bus=bus)
    assert (await asyncio.wait_for(h, 10)).tolist() == ["ok"] * 10
    assert len(seen) == 10 and min(seen) >= 1000 * 2
    assert gc.get_threshold() == (700, 10, 10)
    assert u.tune_collector()["threshold_set"] is None


async def test_a_batch_counts_as_its_concurrency_of_live_loops_while_it_runs_and_none_after(tuning):
    """A batch's rows count as live loops through the batch (its concurrency), however many of them are running,
    and the count is back where it was once the batch ends, stopped rows included."""
    gate = asyncio.Event()

    async def wait_for_gate() -> str:
        """Wait until the test lets go."""
        await gate.wait()
        return "released"

    bus = u.EventBus()
    waiting: list[object] = []
    three = asyncio.Event()
    bus.subscribe(lambda e: (waiting.append(e), len(waiting) == 3 and three.set()), kinds=["tool_started"])
    h = u.map([f"item {i}" for i in range(12)], "Label {value}", tools=[wait_for_gate], concurrency=3, bus=bus,
              model=u.ScriptedModel(lambda m, t: u.call_tool("wait_for_gate") if len(m) < 3 else "ok"))
    await asyncio.wait_for(three.wait(), 10)
    assert u.tune_collector()["live_loops"] == tuning + 1 + 3  # the batch's loop, and its 3 rows
    gate.set()
    assert (await asyncio.wait_for(h, 10)).tolist() == ["ok"] * 12
    assert u.tune_collector()["live_loops"] == tuning
    h = u.map([f"item {i}" for i in range(12)], "Label {value}", tools=[wait_for_gate], concurrency=3, bus=bus,
              model=u.ScriptedModel(lambda m, t: u.call_tool("wait_for_gate")))
    gate.clear()
    waiting.clear()
    three.clear()
    await asyncio.wait_for(three.wait(), 10)
    await asyncio.wait_for(h.stop(), 10)
    assert u.tune_collector()["live_loops"] == tuning
