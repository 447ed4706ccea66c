"""A tool that raises what is not an ``Exception`` (``SystemExit``, ``KeyboardInterrupt``, ``CancelledError``):
the call fails and the model reads why; the event loop and the loop go on. A signal's (a Ctrl-C while an async
tool's code runs, a signal handler's ``sys.exit``) still ends the program."""

import asyncio
import signal
import sys

import pytest
from conftest import assert_every_call_answered_once, on_own_event_loop, tool_messages

import unity_nb as u


def _script(messages, tools):
    done = tool_messages(messages)
    return "read: " + done[0]["content"] if done else u.call_tool(tools[0]["function"]["name"])


@pytest.mark.parametrize("raised", [SystemExit(2), KeyboardInterrupt(), asyncio.CancelledError(), GeneratorExit()])
async def test_a_sync_tool_raising_a_base_exception_fails_its_call_and_the_loop_goes_on(bus, raised):
    def bad() -> str:
        """Fails."""
        raise raised

    h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[bad], bus=bus)
    answer = await asyncio.wait_for(h.result(), 10)
    name = type(raised).__name__
    assert answer.startswith(f"read: error: bad raised {name}(")
    assert "the call failed" in answer
    assert h.status == "finished"
    assert_every_call_answered_once(h)
    # the event loop is still running and serves another loop
    again = u.start_loop("go", model=u.ScriptedModel(lambda m, t: "fine"), bus=bus)
    assert await asyncio.wait_for(again.result(), 10) == "fine"


async def test_an_async_tool_raising_system_exit_fails_its_call_and_the_loop_goes_on(bus):
    async def bad() -> str:
        """Fails."""
        raise SystemExit("usage: bad [-h]")

    h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[bad], bus=bus)
    answer = await asyncio.wait_for(h.result(), 10)
    assert answer.startswith("read: error: bad raised SystemExit(usage: bad [-h])")
    assert h.status == "finished"


async def test_an_async_tool_raising_cancelled_error_itself_is_its_error_not_a_stop(bus):
    async def bad() -> str:
        """Fails."""
        raise asyncio.CancelledError

    h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[bad], bus=bus)
    answer = await asyncio.wait_for(h.result(), 10)
    assert answer == "read: error: bad raised CancelledError, though nothing cancelled it; the call failed"
    assert "loop was cancelled" not in answer


async def test_a_stop_while_a_sync_tool_runs_is_still_a_stop(bus):
    import threading

    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        """Waits."""
        started.set()
        while not release.wait(0.01):
            pass
        return "late"

    h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[slow], bus=bus)
    await asyncio.wait_for(asyncio.to_thread(started.wait, 10), 10)
    await asyncio.wait_for(h.stop("halt"), 10)
    release.set()
    with pytest.raises(u.Stopped, match="halt"):
        await h.result()
    results = [m.content for m in h.transcript if m.kind == "tool_result"]
    assert results == ["cancelled: halt"]


def _ran(tool):
    """A loop whose model calls ``tool`` once and answers with what it read, run on an event loop of its own on the
    main thread: ``((handle, answer), None)``, or ``(None, what escaped the event loop)``."""

    async def main():
        h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[tool], bus=u.EventBus())
        return h, await h.result()

    return on_own_event_loop(main)


def test_an_async_tool_raising_keyboard_interrupt_fails_its_call_and_the_loop_goes_on(python_sigint):
    async def bad() -> str:
        """Fails."""
        raise KeyboardInterrupt("not now")

    ran, escaped = _ran(bad)
    assert escaped is None, f"{escaped!r} escaped the event loop"
    h, answer = ran
    assert answer.startswith("read: error: bad raised KeyboardInterrupt(not now): a tool cannot end or interrupt")
    assert h.status == "finished"
    assert_every_call_answered_once(h)


def test_a_ctrl_c_while_an_async_tool_runs_still_ends_the_program(python_sigint):
    async def busy() -> str:
        """Works."""
        signal.raise_signal(signal.SIGINT)  # the person's Ctrl-C, arriving while the tool's code runs
        return "done"

    ran, escaped = _ran(busy)
    assert ran is None and isinstance(escaped, KeyboardInterrupt)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 here")
def test_a_signal_handlers_exit_while_an_async_tool_runs_still_ends_the_program():
    def on_signal(signum, frame):  # as a SIGTERM handler that ends the program cleanly would
        sys.exit(0)

    async def busy() -> str:
        """Works."""
        signal.raise_signal(signal.SIGUSR1)
        return "done"

    before = signal.signal(signal.SIGUSR1, on_signal)
    try:
        ran, escaped = _ran(busy)
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert ran is None and isinstance(escaped, SystemExit)
