"""A loop's lifecycle."""

from __future__ import annotations

import enum

__all__ = ("Status",)


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
