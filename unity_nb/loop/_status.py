"""A loop's lifecycle."""

from __future__ import annotations

import asyncio
import enum

__all__ = ("PauseGate", "Signal", "Status")


class Status(str, enum.Enum):
    """A loop's lifecycle. The values are plain strings (``h.status == "running"``)."""

    RUNNING = "running"
    PAUSED = "paused"
    WAITING = "waiting"
    """Waiting for a person: a clarification (or, with the actor, an approval)."""
    IDLE = "idle"
    """A persistent multi-request loop with no open request, waiting for the next one."""
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class Signal:
    """``asyncio.Event`` without its deque: every loop has two (its end, and its tool runner's wake-up),
    and an event's empty deque alone is 760 bytes. Waiters' futures are kept in a list made when the
    first one waits; ``set``, ``clear``, ``is_set`` and ``wait`` behave as the event's do."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[bool]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            waiters, self._waiters = self._waiters, None
            for fut in waiters or ():
                if not fut.done():
                    fut.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        if self._set:
            return True
        fut = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(fut)
        try:
            await fut
            return True
        finally:
            if self._waiters is not None and fut in self._waiters:
                self._waiters.remove(fut)


class PauseGate:
    """Closed while a loop is paused: nothing new starts (a model call, a tool) until it opens."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: Signal | None = None  # made when first closed: most loops are never paused

    @property
    def paused(self) -> bool:
        return self._open is not None and not self._open.is_set()

    def close(self) -> None:
        if self._open is None:
            self._open = Signal()
        self._open.clear()

    def open(self) -> None:
        if self._open is not None:
            self._open.set()

    async def wait(self) -> None:
        """Return once the gate is open (at once when it is)."""
        while self._open is not None and not self._open.is_set():
            await self._open.wait()
