"""What a stop says: a second stop giving another reason is told that the first one stands; a stop a tool's code
asked for says that tool stopped the loop, not the person (its transcript, its event, the store's rebuilt
transcript, and without a reason the reason too).

Every wait is on an event, with a timeout; nothing is timed."""

import asyncio
import warnings

import pytest
from conftest import Gate

import unity_nb as u
from unity_nb.store import Store

T = 10


async def test_a_second_stop_with_another_reason_is_said_and_the_first_reason_stands(bus):
    h = u.start_loop("wait", model=u.ScriptedModel(Gate(lambda m, t: "never")), name="waiter", bus=bus)
    await h.wait_for("model_request", timeout=T)
    await asyncio.wait_for(h.stop("first reason"), T)
    with pytest.warns(UserWarning) as said:
        await h.stop("second reason")  # (the loop has ended: nothing to wait for)
    assert [str(w.message) for w in said] == [
        "'waiter' was stopped already, with the reason 'first reason': this stop's reason 'second reason' was not "
        "taken (result() raises Stopped with the first)"
    ]
    assert said[0].filename == __file__  # the line that asked
    with pytest.raises(u.Stopped, match="first reason"):
        await h.result()
    assert h.state.stop_reason == "first reason"
    with warnings.catch_warnings():  # the same reason again, or none: nothing was dropped, nothing to say
        warnings.simplefilter("error")
        await asyncio.wait_for(h.stop("first reason"), T)
        await asyncio.wait_for(h.stop(), T)


async def test_a_stop_with_another_reason_while_the_first_is_ending_is_said(bus):
    started, cancelled, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def tidy() -> str:
        """Works, and tidies up when stopped."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            await release.wait()  # its tidying up, which the loop's end waits for
            raise
        return "never"

    h = u.start_loop("go", model=u.ScriptedModel(lambda m, t: u.call_tool("tidy")), tools=[tidy], name="tidier",
                     bus=bus)
    await asyncio.wait_for(started.wait(), T)
    first = asyncio.create_task(h.stop("first reason"))
    await asyncio.wait_for(cancelled.wait(), T)
    assert not h.done()
    with pytest.warns(UserWarning, match="'tidier' is stopping already, with the reason 'first reason': this stop's "
                      "reason 'second reason' was not taken"):
        second = asyncio.create_task(h.stop("second reason"))
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second), T)
    with pytest.raises(u.Stopped, match="first reason"):
        await h.result()


def _steering(h):
    return [m.content for m in h.transcript if m.kind == "steering"]


@pytest.mark.parametrize("reason", [None, "its budget is spent"])
async def test_a_tool_stopping_its_own_loop_is_the_tools_stop_not_the_persons(tmp_path, reason):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)

    async def end_early(ctx: u.ToolContext) -> str:
        """Ends the work."""
        await ctx.handle.stop(reason)
        return "never read"

    h = u.start_loop("go", model=u.ScriptedModel(lambda m, t: u.call_tool("end_early")), tools=[end_early],
                     name="job", bus=bus)
    expected = reason or "stopped by the tool end_early"
    with pytest.raises(u.Stopped, match=expected):
        await asyncio.wait_for(h.result(), T)
    entry = f"[stopped by the tool end_early{': ' + reason if reason else ''}]"
    assert _steering(h) == [entry]
    (steered,) = [e for e in h.events if e.kind == "steering"]
    assert (steered.action, steered.message, steered.by) == ("stop", reason, "the tool end_early")
    assert h.events[-1].kind == "loop_finished" and h.events[-1].reason == expected
    assert not any("by the user" in str(m.content) for m in h.transcript)
    assert entry in [m.content for m in store.transcript("job")]


async def test_a_tool_stopping_another_loop_is_that_tools_stop(bus):
    other = u.start_loop("wait", model=u.ScriptedModel(Gate(lambda m, t: "never")), name="other", bus=bus)
    await other.wait_for("model_request", timeout=T)

    async def halt_other() -> str:
        """Stops the other work."""
        await other.stop("no longer needed")
        return "stopped it"

    script = lambda m, t: "done" if any(x["role"] == "tool" for x in m) else u.call_tool("halt_other")
    boss = u.start_loop("go", model=u.ScriptedModel(script), tools=[halt_other], name="boss", bus=bus)
    assert await asyncio.wait_for(boss.result(), T) == "done"
    with pytest.raises(u.Stopped, match="no longer needed"):
        await other.result()
    assert _steering(other) == ["[stopped by the tool halt_other of boss: no longer needed]"]


async def test_the_persons_stop_is_still_the_users(bus):
    h = u.start_loop("wait", model=u.ScriptedModel(Gate(lambda m, t: "never")), bus=bus)
    await h.wait_for("model_request", timeout=T)
    await asyncio.wait_for(h.stop(), T)
    assert _steering(h) == ["[stopped by the user]"] and h.state.stop_reason == "stopped by the user"
    (steered,) = [e for e in h.events if e.kind == "steering"]
    assert steered.by is None


async def test_the_librarys_own_stop_of_a_loop_stopping_already_warns_nobody(bus):
    """A batch stopped while one of its rows is stopping with a reason of its own (its tidy-up still running): the
    batch's stop reaches the row without the warning a person's second stop gets (the person asked one stop, of the
    batch), and the row keeps its own reason. So does a parent's model stopping a child stopped already: it is
    told, in its tool's result, and nobody is warned."""
    started, cancelled, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def tidy(messages, tools):
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            await release.wait()  # its tidying up, which the row's end waits for
            raise
        return "never"

    h = u.map(["a"], "Label {value}", model=u.ScriptedModel(tidy), bus=bus)
    await asyncio.wait_for(started.wait(), T)
    (row,) = h.children
    first = asyncio.create_task(row.stop("the row's own reason"))
    await asyncio.wait_for(cancelled.wait(), T)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        batch = asyncio.create_task(h.stop("the batch's reason"))
        release.set()
        await asyncio.wait_for(asyncio.gather(first, batch), T)
    assert [str(w.message) for w in said if issubclass(w.category, UserWarning)] == []
    assert h.state.stop_reason == "the batch's reason" and row.state.stop_reason == "the row's own reason"

    child = u.start_loop("wait", model=u.ScriptedModel(Gate(lambda m, t: "never")), name="worker", bus=bus)
    await asyncio.wait_for(child.stop("done with it"), T)
    stop_tool = u.loop.VERBS["stop"].child_tool(child)  # the tool a parent's model stops its child with
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        told = await asyncio.wait_for(stop_tool.fn(reason="another reason"), T)
    assert [w for w in said if issubclass(w.category, UserWarning)] == []
    assert told == "worker was stopped already, with the reason 'done with it' (yours was not taken)"
