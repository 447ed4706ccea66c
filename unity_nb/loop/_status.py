"""A loop's lifecycle."""

from __future__ import annotations

import asyncio
import enum

__all__ = ("PauseGate", "Status")


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


class PauseGate:
    """Closed while a loop is paused: nothing new starts (a model call, a tool) until it opens."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: asyncio.Event | None = None  # made when first closed: most loops are never paused

    @property
    def paused(self) -> bool:
        return self._open is not None and not self._open.is_set()

    def close(self) -> None:
        if self._open is None:
            self._open = asyncio.Event()
        self._open.clear()

    def open(self) -> None:
        if self._open is not None:
            self._open.set()

    async def wait(self) -> None:
        """Return once the gate is open (at once when it is)."""
        while self._open is not None and not self._open.is_set():
            await self._open.wait()
