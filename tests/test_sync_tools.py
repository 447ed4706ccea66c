"""Sync tools run in worker threads that are kept and reused, and a tool that blocks holds only its own.

A stop or a timeout ends the call the loop waits for at once, whatever the tool's thread is doing; the
thread gets ToolTimeout at its next Python instruction, and that exception never reaches another call."""

import asyncio
import subprocess
import sys
import textwrap
import threading

from conftest import assert_every_call_answered_once, tool_messages

import unity_nb as u


def calls_then_answer(name, n, per_step=1):
    """A script calling ``name(i=...)`` ``n`` times, ``per_step`` calls a step, then answering with the results."""

    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < n:
            return [u.call_tool(name, i=len(done) + k) for k in range(min(per_step, n - len(done)))]
        return ",".join(m["content"] for m in done)

    return script


async def test_sync_calls_one_after_another_reuse_their_worker_threads(bus):
    threads = []

    def where(i: int) -> int:
        """Note the thread."""
        threads.append(threading.current_thread())  # the objects held: two alive are two threads
        return i

    h = u.start_loop("go", model=u.ScriptedModel(calls_then_answer("where", 30)), tools=[where], max_steps=40, bus=bus)
    assert await asyncio.wait_for(h.result(), 30) == ",".join(map(str, range(30)))
    assert threading.current_thread() not in threads
    assert len({id(t) for t in threads}) <= 2  # a thread per call made 30


async def test_many_sync_calls_at_once_in_many_loops_all_complete(bus):
    both = threading.Barrier(2, timeout=10)

    def double(i: int) -> int:
        """Double, once a partner call is running too (proving calls run at once)."""
        both.wait()
        return 2 * i

    def pairs(messages, tools):
        done = tool_messages(messages)
        if len(done) < 8:
            return [u.call_tool("double", i=len(done)), u.call_tool("double", i=len(done) + 1)]
        return str(sum(int(m["content"]) for m in done))

    h = u.start_loop("go", model=u.ScriptedModel(pairs), tools=[double], bus=bus)
    assert await asyncio.wait_for(h.result(), 30) == "56"

    def square(i: int) -> int:
        """Square."""
        return i * i

    many = [
        u.start_loop("go", model=u.ScriptedModel(calls_then_answer("square", 12, per_step=6)), tools=[square], bus=bus)
        for _ in range(20)
    ]
    expected = ",".join(str(i * i) for i in range(12))
    assert await asyncio.wait_for(asyncio.gather(*(h.result() for h in many)), 60) == [expected] * 20


async def test_a_stop_ends_the_loop_while_a_sync_tool_blocks_and_others_still_run(bus):
    entered, release = threading.Event(), threading.Event()

    def block(i: int) -> str:
        """Waits in C (a lock) until released: no Python instruction to interrupt."""
        entered.set()
        release.wait()
        return "released"

    try:
        blocked = []
        for _ in range(12):  # more than the workers kept idle: each holds a worker of its own
            entered.clear()
            h = u.start_loop("wait", model=u.ScriptedModel(calls_then_answer("block", 1)), tools=[block], bus=bus)
            assert await asyncio.to_thread(entered.wait, 10)
            await asyncio.wait_for(h.stop("enough"), 10)
            assert h.status == "stopped"
            assert [m.content for m in h.transcript if m.kind == "tool_result"] == ["cancelled: enough"]
            assert_every_call_answered_once(h)
            blocked.append(h)

        def quick(i: int) -> int:
            """At once."""
            return i

        h = u.start_loop("go", model=u.ScriptedModel(calls_then_answer("quick", 5)), tools=[quick], bus=bus)
        assert await asyncio.wait_for(h.result(), 10) == "0,1,2,3,4"  # not queued behind the blocked ones
    finally:
        release.set()


async def test_a_timed_out_sync_tool_is_interrupted_and_its_worker_s_next_calls_are_clean(bus):
    stopped = threading.Event()

    def spin(i: int) -> str:
        """Spins in Python until interrupted."""
        try:
            while True:
                pass
        finally:
            stopped.set()

    def echo(i: int) -> int:
        """Echo (a little Python work, where a stray exception would land)."""
        return sum(range(200)) * 0 + i

    for _ in range(3):
        stopped.clear()
        h = u.start_loop("spin", model=u.ScriptedModel(calls_then_answer("spin", 1)), tools=[spin], tool_timeout=0.2,
                         bus=bus)
        assert "did not finish within its timeout of 0.2 s" in await asyncio.wait_for(h.result(), 10)
        assert await asyncio.to_thread(stopped.wait, 10)
        h = u.start_loop("echo", model=u.ScriptedModel(calls_then_answer("echo", 40, per_step=4)), tools=[echo],
                         bus=bus)
        results = (await asyncio.wait_for(h.result(), 30)).split(",")
        assert results == [str(i) for i in range(40)]


def test_a_process_exits_while_a_sync_tool_is_still_blocked():
    script = textwrap.dedent("""
        import asyncio, threading
        import unity_nb as u

        entered = threading.Event()

        def block(i: int) -> str:
            '''Never returns.'''
            entered.set()
            threading.Event().wait()

        def script(messages, tools):
            return u.call_tool("block", i=1)

        async def main():
            h = u.start_loop("wait", model=u.ScriptedModel(script), tools=[block])
            await asyncio.to_thread(entered.wait, 10)
            await h.stop("bye")
            print("stopped", h.status)

        asyncio.run(main())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "stopped stopped"


async def test_an_idle_worker_keeps_nothing_of_the_calls_it_ran():
    """A worker waiting for its next call held the call it ran last, and a worker's Thread its first call: their
    context (the loop's handle and transcript), the tool's arguments and its result, for as long as it lived."""
    import gc
    import weakref

    class Big:
        """Stands for a large argument or result (a DataFrame)."""

    made: list[weakref.ref] = []
    both = threading.Barrier(2, timeout=10)

    def load(i: int) -> Big:
        """Make a large object; two calls at once, so a new worker starts for one of them."""
        big = Big()
        made.append(weakref.ref(big))
        both.wait()
        return big

    def pairs(messages, tools):
        done = tool_messages(messages)
        return [u.call_tool("load", i=1), u.call_tool("load", i=2)] if not done else "done"

    handles = []
    for _ in range(3):
        h = u.start_loop("load", model=u.ScriptedModel(pairs), tools=[load], bus=u.EventBus())
        assert await asyncio.wait_for(h.result(), 30) == "done"
        handles.append(weakref.ref(h))
    del h
    idle = [t for t in threading.enumerate() if t.name == "unity_nb-tool"]
    assert len(idle) >= 2  # the workers that ran the calls wait for more: what they hold is still theirs
    gc.collect()
    assert [r() for r in handles] == [None] * 3  # no handle, with its transcript, kept by an idle worker
    assert len(made) == 6 and [r() for r in made] == [None] * 6  # nor a result
