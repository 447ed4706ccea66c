"""What a person, a tool, an evaluation or a policy holds of a loop: :class:`Loop`, the handle's face.

:class:`~unity_nb.loop.LoopHandle` implements it. The modules below the handle (tools, records,
answers, steering, where code runs) name a loop by this type, not by the handle's class, so none of
them imports the module above it: loop/'s imports run one way.
"""

from __future__ import annotations

from typing import Any

from ..models import Usage
from ._status import Status

__all__ = ("Loop",)


class Loop:
    """A running loop as its users see it: who it is, where it stands, and the steering verbs."""

    __slots__ = ()

    id: str
    """Unique across kernels and time."""
    name: str
    """What the widget and the magics call it."""
    task: str
    """What it was asked."""
    run: Any
    """Its :class:`~unity_nb.loop.Run`: the tree, events, ending and steering notes its parts and tools work with."""

    @property
    def parent(self) -> Loop | None:
        """The loop whose tool call started it (``None`` for a root)."""
        raise NotImplementedError

    @property
    def state(self) -> Any:
        """What it has done so far (a :class:`LoopState`: references, printed characters, how it ended)."""
        raise NotImplementedError

    @property
    def status(self) -> Status:
        raise NotImplementedError

    @property
    def steps(self) -> int:
        raise NotImplementedError

    @property
    def tool_calls(self) -> int:
        raise NotImplementedError

    @property
    def usage(self) -> Usage:
        raise NotImplementedError

    @property
    def transcript(self) -> list[Any]:
        raise NotImplementedError

    def done(self) -> bool:
        raise NotImplementedError

    @property
    def tree(self) -> Any:
        """It and every loop under it (iterable, depth first), with their totals."""
        raise NotImplementedError

    async def result(self) -> Any:
        raise NotImplementedError

    async def pause(self) -> None:
        raise NotImplementedError

    async def resume(self) -> None:
        raise NotImplementedError

    async def interject(self, message: str, *, request_id: str | None = None) -> None:
        raise NotImplementedError

    async def stop(self, reason: str | None = None) -> None:
        raise NotImplementedError

    async def ask(self, question: str, **options: Any) -> Loop:
        raise NotImplementedError

