"""A durable task as stored, and what its names and descriptions must be (moved out of :mod:`._tasks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import UserError

__all__ = ("DESCRIPTION_NEEDED", "NAME_NEEDED", "RunningElsewhere", "Task", "needed")


class RunningElsewhere(UserError):
    """The task runs in another live kernel sharing the store: that kernel delivers what is sent to it."""


@dataclass
class Task:
    """One durable task as stored."""

    id: str
    name: str
    description: str
    status: str
    """``new``, ``running``, ``idle`` (its last turn ended), ``stopped``, ``failed``, or
    ``interrupted`` (it was running in a kernel that is gone)."""
    parent_id: str | None
    position: float
    created: float
    updated: float
    result: str | None = None
    """The answer that ended its last turn."""


NAME_NEEDED, DESCRIPTION_NEEDED = "a task needs a name", "a task needs a description: what it is to do"


def needed(text: Any, what: str) -> str:
    if not isinstance(text, str) or not text.strip():  # blank, or not text
        raise UserError(what)
    return text.strip()
