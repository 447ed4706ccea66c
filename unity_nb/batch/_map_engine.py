"""The engine of a batch: rows start while fewer than ``concurrency`` run and the batch is neither paused, stopped,
over its budget nor failing every row; each row ends as a row of the batch, never as the batch's own failure."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

from .._errors import UnityError
from ..loop import Driver

if TYPE_CHECKING:
    from ._map import MapHandle

__all__ = ("MapEngine",)

_SETTLED_YIELD = 256
"""Rows settled without a call (kept, from the cache) in a row before the batch lets the event loop run."""


class MapEngine(Driver):
    """Drives a batch: rows start while fewer than ``concurrency`` run and the batch is not paused."""

    async def drive(self) -> str:
        h = cast("MapHandle", self.source)
        running: set[asyncio.Task] = set()
        # each row's task says when it ends (asyncio.wait(FIRST_COMPLETED) would add and remove a callback
        # on every running row at each wake-up: concurrency x wake-ups)
        ended: list[asyncio.Task] = []
        wake = asyncio.Event()

        def row_ended(task: asyncio.Task) -> None:
            running.discard(task)
            ended.append(task)
            wake.set()

        h.first_start = time.monotonic()
        settled = 0
        try:
            while True:
                await h.run.gate.wait()
                while (len(running) < h.concurrency and not h.run.gate.paused and h.state.stop_reason is None
                       and h.fatal is None and not h.check_budget()):
                    row = h.next_row()
                    if row is None:
                        break
                    if h.settle(row):  # kept, from the cache, or a template it cannot fill: no call
                        settled += 1
                        if settled % _SETTLED_YIELD == 0:
                            await asyncio.sleep(0)  # a long run of them leaves the event loop its turns
                        continue
                    task = h.run.event_loop.create_task(h.run_row(row))
                    running.add(task)
                    task.add_done_callback(row_ended)
                if not running and not ended and (h.exhausted or h.state.stop_reason is not None):
                    break
                if not ended and running:
                    wake.clear()
                    await wake.wait()
                while ended:
                    ended.pop(0).result()  # a row's own failure is recorded on the row; this raises only the batch's
                if h.fatal is not None:  # it would fail every row: the rows running stop, no other starts
                    raise h.fatal
        finally:
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running)
        if h.state.stop_reason is not None:  # stopped while its last rows ended: a stop, not an answer
            raise asyncio.CancelledError
        c = h.counts
        if c["failed"] and not c["finished"] and not c["stopped"]:  # nothing came of it: not a success
            first = h.ended_badly[0].reason if h.ended_badly else None
            raise UnityError(f"every row of the batch failed ({c['failed']}); the first: {first}")
        h.state.result_object = h.results()
        p = h.progress
        return f"{p['done']} of {p['total']} rows done, {p['failed']} failed"
