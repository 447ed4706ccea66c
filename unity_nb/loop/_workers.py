"""Worker threads for sync tools: kept and reused, never a queue behind a tool that blocks.

A sync tool runs off the event loop, in a worker thread. Starting a thread per call was a third of the CPU of
a model round trip with a sync tool (``bench/bench_cost.py`` B), so a worker that finishes a call waits for the
next one (at most :data:`KEEP` wait; one idle for :data:`IDLE_SECONDS` ends). A call never waits for a worker:
when none is idle, a new one starts, as a thread per call did, so a tool that blocks forever holds its own
worker and nothing else (the calls in flight are bounded by the loop's ``max_parallel_tools``, per loop).
Unlike a ``ThreadPoolExecutor`` (joined at exit, a fixed bound, a shared queue), workers are daemon threads:
a tool blocked forever does not keep the interpreter from exiting, nor the next call from running.

:func:`in_worker` runs one call. When the awaiting task is cancelled (a stop, a tool's timeout), the worker gets
:class:`ToolTimeout` raised at its next Python instruction, instead of running on unseen; a call not started
yet never starts. The exception is only ever raised inside that call: the call's own code checks, under a lock
the canceller holds while raising it, whether it was sent, and takes it before it returns (a worker that got
one ends instead of serving again, to be sure).
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ("KEEP", "IDLE_SECONDS", "ToolExit", "ToolTimeout", "in_worker")

KEEP = 8
"""Idle workers kept at most."""
IDLE_SECONDS = 30.0
"""A worker idle this long ends."""


class ToolTimeout(Exception):
    """Raised inside a sync tool's thread when its call was cancelled (a stop, its timeout)."""


class ToolExit(Exception):
    """What a call that raised ``SystemExit``, ``KeyboardInterrupt`` or another ``BaseException`` that is not an
    ``Exception`` in its worker thread raises where it is awaited. Handed on as it was, it ended the awaiting task
    and escaped the event loop itself (asyncio re-raises those two), ending the program or the kernel's loop; raised
    in a worker, it is the call's own (no signal reaches a worker thread): the call fails, saying so."""

    def __init__(self, raised: BaseException) -> None:
        detail = f"({raised})" if str(raised) else "()"
        super().__init__(
            f"raised {type(raised).__name__}{detail}: a tool cannot end or interrupt the program, so the call "
            "failed and the program goes on"
        )
        self.raised = raised


class _Pool:
    __slots__ = ("idle", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[queue.SimpleQueue] = []
        """The inboxes of idle workers (the last one to finish first: its stack and caches are warm)."""


_pool = _Pool()


def _after_fork() -> None:  # pragma: no cover - in a forked child: the workers were not copied
    global _pool
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _submit(job: Callable[[], bool]) -> None:
    """Run ``job`` in an idle worker, or in a new one when none is idle."""
    pool = _pool
    with pool.lock:
        inbox = pool.idle.pop() if pool.idle else None
    if inbox is not None:
        inbox.put(job)
        return
    inbox = queue.SimpleQueue()
    inbox.put(job)  # not an argument of the thread: the Thread object would keep its first call while it serves
    worker = threading.Thread(target=_serve, args=(pool, inbox), name="unity_nb-tool", daemon=True)
    # started outside the call's context: a worker serves many calls, so it must not keep the output hooks of
    # the first (unity_nb._output gives a thread those of the context it was started in); each call runs in its own
    contextvars.Context().run(worker.start)


def _serve(pool: _Pool, inbox: queue.SimpleQueue) -> None:
    """A worker: run jobs handed to its inbox; wait idle while kept; end when not (or when a job says so)."""
    try:
        job: Callable[[], bool] | None = inbox.get()
        while job is not None:
            again = job()
            # the call let go before waiting idle: it holds its context (the loop, its handle), the tool's
            # arguments and its result, which an idle worker kept alive until its next call or its end
            job = None
            if not again:
                return
            with pool.lock:
                if len(pool.idle) >= KEEP:
                    return
                pool.idle.append(inbox)
            try:
                job = inbox.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with pool.lock:
                    if inbox in pool.idle:
                        pool.idle.remove(inbox)
                        return
                job = inbox.get()  # taken from the idle list just now: its job is on the way
    except BaseException:  # noqa: BLE001, S110 - a worker ends quietly; the calls report their own errors
        pass


def _checkpoint() -> None:
    """A Python call: an exception sent to this thread is raised here at the latest."""


_WAITING, _RUNNING, _DONE, _CANCELLED = range(4)


class _Call:
    """One sync call in a worker: its state, under a lock it shares with whoever cancels it."""

    __slots__ = ("ctx", "fn", "fut", "ident", "kwargs", "lock", "loop", "sent", "state")

    def __init__(self, fn: Callable[..., Any], kwargs: dict[str, Any], loop: asyncio.AbstractEventLoop,
                 fut: asyncio.Future) -> None:
        self.fn = fn
        self.kwargs = kwargs
        self.ctx = contextvars.copy_context()
        self.loop = loop
        self.fut = fut
        self.lock = threading.Lock()
        self.state = _WAITING
        self.ident = 0
        self.sent = False

    def run(self) -> bool:
        """In the worker: the call, its outcome handed to the loop. True if the worker may serve again."""
        with self.lock:
            if self.state == _CANCELLED:
                return True
            self.state = _RUNNING
            self.ident = threading.get_ident()
        try:
            try:
                value, ok = self.ctx.run(self.fn, **self.kwargs), True
            except Exception as err:  # noqa: BLE001 - handed to the awaiting call
                value, ok = err, False
            except BaseException as err:  # noqa: BLE001 - the call's own (a ToolTimeout sent is an Exception)
                value, ok = ToolExit(err), False
            with self.lock:
                self.state = _DONE
                sent = self.sent
            if sent:  # a ToolTimeout sent as the call returned: taken here, not in the worker's next call
                _checkpoint()
            self.loop.call_soon_threadsafe(self._deliver, ok, value)
        except BaseException:  # noqa: BLE001 - the ToolTimeout sent, or the loop closed: nobody waits
            return False
        return not sent

    def _deliver(self, ok: bool, value: Any) -> None:
        fut = self.fut
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def cancel(self) -> None:
        """The awaiting task was cancelled: a call not started never starts; a running one gets ToolTimeout."""
        with self.lock:
            if self.state == _WAITING:
                self.state = _CANCELLED
            elif self.state == _RUNNING and not self.sent:
                self.sent = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident), ctypes.py_object(ToolTimeout))


async def in_worker(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` in a worker thread, in the calling context (a copy); cancelled, it stops the call
    (see the module's docstring)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    call = _Call(fn, kwargs, loop, fut)
    _submit(call.run)
    try:
        return await fut
    except asyncio.CancelledError:
        call.cancel()
        raise
