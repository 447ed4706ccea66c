"""How long an attempt may go without progress: :class:`Silence` (a model's ``timeout`` of no complete line of the
stream) ends it through its :class:`Deadline`, and one timer an event loop (:class:`_Watch`) watches them all."""

from __future__ import annotations

import asyncio
import contextvars
import math
import weakref
from typing import Any

__all__ = ("Deadline", "Silence")


class Deadline:
    """The deadline :class:`Silence` ends an attempt by: what ``asyncio.timeout(None)`` is to it, without that
    object's cost on every request. Entered in the attempt's task; :meth:`reschedule` (the silence is over)
    cancels that task, and leaving turns that cancellation into a ``TimeoutError``, as ``asyncio.timeout`` does
    (a cancellation that is not its own, a stop, passes on as it is)."""

    __slots__ = ("_cancelling", "_task", "expired")

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadline is entered in a task")
        self._task = task
        self._cancelling = task.cancelling()
        self.expired = False
        return self

    def reschedule(self, when: float | None) -> None:
        """Called by :class:`Silence` once ``when`` has passed: the attempt is cancelled now (``None``: no deadline,
        nothing to do)."""
        if when is not None and not self.expired:
            self.expired = True
            self._task.cancel()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.expired and self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc


class Silence:
    """Ends an attempt (its ``asyncio.timeout``, as a TimeoutError) after ``timeout`` seconds without progress.

    :meth:`alive` only notes the time. The silences of one event loop are watched by one timer (:class:`_Watch`),
    set for the earliest moment one of them could be over; when it comes, each silence is over if its last sign
    of life is ``timeout`` seconds old, and the timer moves on to the next earliest moment: the same deadline as
    rescheduling the timeout at each sign of life, without cancelling and pushing a timer on the event loop's
    heap for each piece of each stream, nor one for each attempt (a batch's hundred attempts at once each
    pushed one, and cancelled it behind the loop's earlier timers, where the heap kept it until rebuilt).
    """

    __slots__ = ("_deadline", "_last", "_loop", "_timeout", "_watch")

    def __init__(self, timeout: float, deadline: asyncio.Timeout | Deadline) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._timeout = timeout
        self._deadline = deadline
        self._last = now = loop.time()
        ref, watch = _last_watch
        if ref is None or ref() is not loop:
            watch = _watch_of(loop)
        self._watch = watch
        watch.add(self, now + timeout)

    def alive(self) -> None:
        self._last = self._loop.time()

    def cancel(self) -> None:
        self._watch.remove(self)


_TIMER_CONTEXT = contextvars.Context()
"""The context the silence timer runs in: none of any model call's."""


class _Watch:
    """The silences of one event loop and the one timer that ends those that are over (:class:`Silence`)."""

    __slots__ = ("_handle", "_when", "silences")

    def __init__(self) -> None:
        self.silences: dict[Silence, None] = {}
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf

    def add(self, silence: Silence, due: float) -> None:
        self.silences[silence] = None
        if due < self._when:
            self._arm(silence._loop, due)

    def remove(self, silence: Silence) -> None:
        silences = self.silences
        silences.pop(silence, None)
        if not silences and self._handle is not None:  # nothing left to watch: no timer (nor its loop) kept
            self._handle.cancel()
            self._handle, self._when = None, math.inf

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        # in a context of its own: the timer may outlive the call that armed it (cancelled, it stays in the loop's
        # heap until it comes due), and that call's context holds its loop and handle
        self._handle = loop.call_at(when, self._check, loop, context=_TIMER_CONTEXT)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._handle, self._when = None, math.inf
        now = loop.time()
        earliest = math.inf
        for silence in list(self.silences):
            due = silence._last + silence._timeout
            if due > now:
                earliest = min(earliest, due)
            else:  # a moment passed: the timeout cancels the attempt at once
                del self.silences[silence]
                silence._deadline.reschedule(due)
        if earliest < math.inf:
            self._arm(loop, earliest)


_watches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()
_last_watch: tuple[Any, Any] = (None, None)
"""The event loop last looked up (held weakly) and its watch: most processes run one."""


def _watch_of(loop: asyncio.AbstractEventLoop) -> _Watch:
    global _last_watch
    watch = _watches.get(loop)
    if watch is None:
        watch = _watches[loop] = _Watch()
    _last_watch = (weakref.ref(loop), watch)
    return watch
