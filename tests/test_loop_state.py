"""The state a loop's parts write lives in one object, ``h.state`` (issue 25); the handle only reads it."""

import asyncio

import pytest

import unity_nb as u
from unity_nb.loop import LoopHandle


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_the_parts_write_the_state_and_the_handle_reads_it(bus):
    replies = iter([u.call_tool("add", a=1, b=2), "three"])
    h = u.start_loop("add", model=u.ScriptedModel(lambda m, t: next(replies)), tools=[add], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "three"
    s = h.state
    assert (s.steps, s.tool_calls, s.called_tools, s.status, s.answer) == (2, 1, {"add"}, u.Status.FINISHED, "three")
    assert (h.steps, h.tool_calls, h.status) == (2, 1, "finished")
    assert h.usage is s.usage and h.state.ended_at == s.ended_at is not None


def test_the_counters_are_read_only_on_the_handle():
    for name in ("steps", "tool_calls", "usage", "state"):
        prop = getattr(LoopHandle, name)
        assert isinstance(prop, property) and prop.fset is None, name


async def test_a_stopped_loop_keeps_its_reason_in_the_state(bus):
    gate = asyncio.Event()

    async def script(messages, tools):
        await gate.wait()
        return "never"

    h = u.start_loop("wait", model=u.ScriptedModel(script), bus=bus)
    await h.wait_for("model_request", timeout=10)
    await h.stop("enough")
    assert h.state.stop_reason == "enough" and h.state.status is u.Status.STOPPED
    with pytest.raises(u.Stopped):
        await h.result()


async def test_loop_ids_stay_unique_when_the_person_seeds_random(bus):
    """A loop's id is unique across kernels (the store keys loops by it): the person's ``random.seed(0)``, common in
    a notebook, must not make two kernels (here: two loops after the same seed) draw the same one."""
    import random

    ids = set()
    for _ in range(2):
        random.seed(0)
        h = u.start_loop("hi", model=u.ScriptedModel(lambda m, t: "ok"), bus=bus)
        assert await asyncio.wait_for(h.result(), 10) == "ok"
        ids.add(h.id)
    assert len(ids) == 2 and all(len(i) == 16 and int(i, 16) >= 0 for i in ids)
