"""What a stop says: a second stop giving another reason is told that the first one stands.

Every wait is on an event, with a timeout; nothing is timed."""

import asyncio
import warnings

import pytest
from conftest import Gate

import unity_nb as u

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
