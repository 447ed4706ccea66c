"""An awaited handle keeps the main thread's event loop awake, so an interrupt ends the wait at once.

Jupyter's interrupt is a SIGINT to the kernel. During an async cell ipykernel's handler cancels the cell
through a callback for the main thread's event loop, and nothing wakes that loop to run it: asleep in
``select`` with nothing else scheduled (a model that is silent), it ran the cancellation only when
something else woke it: ``await h`` ended 18 s after the interrupt, or never (ipykernel#881; seen with
ipykernel 7.4, while ``for ...: await asyncio.sleep(0.1)`` ends at once). While any handle is awaited
on the main thread, one timer per event loop wakes it every :data:`PERIOD` seconds, so the interrupt
ends the cell within that time.

An awaiter cancelled while the operation goes on (the cell interrupted) is counted on the handle
(``state.cancelled_waits``): the operation is not stopped, and the widget says so.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ("PERIOD", "awake")

PERIOD = 0.1
"""Seconds between wake-ups of a main thread's event loop while a handle is awaited on it."""

_timers: dict[asyncio.AbstractEventLoop, list[Any]] = {}  # loop -> [awaiters, its timer]


def _tick(loop: asyncio.AbstractEventLoop) -> None:
    entry = _timers.get(loop)
    if entry is not None:
        entry[1] = loop.call_later(PERIOD, _tick, loop)  # the wake-up itself: a turn of the loop


@contextmanager
def awake(loop: asyncio.AbstractEventLoop, handle: Any) -> Iterator[None]:
    """Around an await of ``handle`` on ``loop``: wake ``loop`` periodically if it runs on the main thread,
    and count a cancellation of the await that leaves the operation running."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        entry = _timers.setdefault(loop, [0, None])
        entry[0] += 1
        if entry[1] is None:
            entry[1] = loop.call_later(PERIOD, _tick, loop)
    try:
        yield
    except asyncio.CancelledError:
        if not handle.done():
            handle.run.state.cancelled_waits += 1
        raise
    finally:
        if main:
            entry[0] -= 1
            if not entry[0]:
                entry[1].cancel()
                del _timers[loop]
