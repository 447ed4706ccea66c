"""Where a loop's tools come from: a :class:`ToolSource`, given to the loop.

A loop offers, at each step, the tools its source says are available, runs the tool a call names by
asking the source, lets the source do its work before each model call, and asks it which calls wait for
a person's approval. By default a loop's source is its own tools (:class:`OwnTools`); the actor's
source computes them from the notebook's namespace (``unity_nb.actor``): what the actor adds to a loop
is a source, not a subclass overriding the loop's methods.

A source is bound to the loop's :class:`~unity_nb.loop.Run` once the run exists (:meth:`ToolSource.bind`):
the run is what it works with (its events, its conversation, its counters), never the loop's handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._tools import Tool

if TYPE_CHECKING:
    from ._run import Run

__all__ = ("OwnTools", "ToolSource")


class ToolSource:
    """The tools a loop offers and runs. Subclass it to compute them (see :class:`OwnTools`)."""

    run: Run | None = None
    """The run this source serves (set by :meth:`bind` when the loop is made)."""
    approval: str | None = None
    """How plans wait for the person (the actor's source: ``never``, ``first``, ``always``), recorded with the
    loop's start (``LoopStarted.approval``) so that a resume keeps it; ``None`` for a source without plans."""
    settings: dict[str, Any] = {}
    """The source's own options a resume needs (an actor's ``code_timeout``), recorded with an operation's start
    (``LoopStarted.settings``)."""

    def bind(self, run: Run) -> None:
        """Called once, when the loop this source serves has its run."""
        self.run = run

    def available(self) -> list[Tool]:
        """The tools this step may offer."""
        raise NotImplementedError

    def named(self, name: str) -> Tool | None:
        """The tool a call names (it may know tools not offered this step)."""
        raise NotImplementedError

    def before_step(self) -> None:
        """Called before each model call, after pause and before steering is delivered."""

    def needs_approval(self, tool: Tool) -> bool:
        """Whether a call of ``tool`` waits for the person before it runs."""
        return tool.needs_approval


class OwnTools(ToolSource):
    """A loop's own tools (``start_loop(..., tools=[...])``), all offered at every step."""

    def __init__(self, tools: dict[str, Tool]) -> None:
        self.tools = tools

    def available(self) -> list[Tool]:
        return list(self.tools.values())

    def named(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def __repr__(self) -> str:
        return f"OwnTools({sorted(self.tools)})"


def as_source(value: Any, tools: dict[str, Tool]) -> ToolSource:
    """``value`` (a :class:`ToolSource`, or ``None`` for the loop's own ``tools``) as a source."""
    if value is None:
        return OwnTools(tools)
    if not isinstance(value, ToolSource):
        from .._errors import UserError

        raise UserError(f"tool_source= takes a unity_nb.loop.ToolSource, not {type(value).__name__}")
    return value
