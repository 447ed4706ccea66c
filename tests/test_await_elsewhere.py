"""A handle awaited from another thread's event loop gives its answer (issue 24, 9): it hung."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import unity_nb as u


class LoopThread:
    """An event loop running in a thread of its own (as a kernel's is, beside the caller's)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture
def other():
    t = LoopThread()
    yield t
    if not t.loop.is_closed():
        t.close()


def held_loop(gate: asyncio.Event) -> u.LoopHandle:
    async def wait_for_gate() -> str:
        """Wait until the test lets go."""
        await gate.wait()
        return "released"

    return u.start_loop("hold", model=u.ScriptedModel([u.call_tool("wait_for_gate"), "the answer"]),
                        tools=[wait_for_gate], bus=u.EventBus())


async def start_held(other: LoopThread) -> tuple[u.LoopHandle, asyncio.Event]:
    async def start():
        gate = asyncio.Event()
        h = held_loop(gate)
        await h.wait_for("tool_started")
        return h, gate

    return other.run(start())


async def test_a_running_handle_awaited_from_another_threads_loop_gives_its_answer(other):
    h, gate = await start_held(other)
    waiting = asyncio.ensure_future(h.result())
    other.loop.call_soon_threadsafe(gate.set)
    assert await asyncio.wait_for(waiting, 10) == "the answer"
    assert await asyncio.wait_for(h, 10) == "the answer"  # and once it has ended


async def test_a_handle_stopped_while_awaited_from_another_loop_raises_stopped(other):
    h, _gate = await start_held(other)
    waiting = asyncio.ensure_future(h.result())
    await asyncio.wait_for(h.stop("enough"), 10)
    with pytest.raises(u.Stopped, match="enough"):
        await asyncio.wait_for(waiting, 10)


async def test_the_wait_cancelled_on_the_callers_loop_leaves_the_loop_running(other):
    h, gate = await start_held(other)
    waiting = asyncio.ensure_future(h.result())
    await asyncio.sleep(0)  # the wait begins (a yield, not a timing)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not h.done()
    other.loop.call_soon_threadsafe(gate.set)
    assert await asyncio.wait_for(h, 10) == "the answer"


@pytest.mark.parametrize("end", ["stopped", "closed"])
async def test_a_handle_whose_event_loop_no_longer_runs_is_a_clear_error_not_a_hang(other, end):
    h, _gate = await start_held(other)
    other.close() if end == "closed" else (other.loop.call_soon_threadsafe(other.loop.stop), other.thread.join(10))
    with pytest.raises(u.HandleStateError, match="the event loop it runs on is" + (" closed" if end == "closed"
                                                                                     else " not running")):
        await asyncio.wait_for(h.result(), 10)
    if end == "stopped":
        other.loop.close()


async def test_a_request_awaited_from_another_threads_loop_gives_its_answer_at_once(other):
    """A multi-request loop's request, awaited from another thread's event loop, as its loop's handle is: the wait
    is on the loop's own, so its end wakes the caller (it was set from the loop's thread on the caller's loop, which
    nothing woke: the wait ended only when something else did, a timeout here, or never)."""
    gate = threading.Event()

    async def script(messages, tools):
        await asyncio.to_thread(gate.wait, 10)
        return "the answer"

    async def start():
        return u.start_loop("first", model=u.ScriptedModel(script), multi=True, bus=u.EventBus())

    h = other.run(start())
    (request,) = h.requests
    waiting = asyncio.ensure_future(request.result())
    await asyncio.sleep(0)  # the wait begins
    gate.set()
    began = time.monotonic()
    assert await asyncio.wait_for(waiting, 10) == "the answer"
    assert time.monotonic() - began < 5
    assert await asyncio.wait_for(h, 10) == {"r1": "the answer"}
