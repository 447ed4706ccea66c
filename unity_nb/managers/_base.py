"""The base of every manager: a slice of state behind a natural-language API.

Each public method of a manager starts a tool loop over the manager's own tools and returns
its handle at once (``await`` it for the answer; steer it like any loop). The method's
docstring is the model-facing contract: the loop's system prompt is built from the class
and method docstrings, and says who is calling (the person, the actor, or another manager,
by its ``caller_description``). Managers talk to each other only through public methods.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle, Tool, as_tool, current_loop, start_loop
from ..models import default_model

__all__ = ("Manager",)


def _doc(obj: Any) -> str:
    return inspect.getdoc(obj) or ""


class Manager:
    """Base class. Subclasses set ``alias`` and ``caller_description`` and implement public
    methods with :meth:`_loop`."""

    alias: ClassVar[str] = ""
    """The name under which plans reach it: ``primitives.<alias>.<method>``."""
    caller_description: ClassVar[str] = ""
    """How this manager introduces itself when it calls another one."""
    exposed: ClassVar[tuple[str, ...] | None] = None
    """The methods a registry offers the actor by default (``None``: every public method)."""
    approve_writes: bool = False
    """Set it on a manager (``km.approve_writes = True``) and every call of the tools that change its
    state (its ``_write_tools``: the knowledge manager's create_table, add_column, add_rows,
    update_rows and delete_rows; the guidance manager's writes) waits for a person's approval
    (``h.inbox.approve()`` / ``h.inbox.skip(reason=...)`` on the loop or any ancestor, the widget,
    ``%unity approve``)."""

    def __init__(self, *, model: Any = None, bus: ev.EventBus | None = None, registry: Any = None) -> None:
        self.model = model
        self.bus = bus
        self.registry = registry

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r}>"

    # -- for subclasses -------------------------------------------------------------------

    def _tools(self) -> Sequence[Callable[..., Any] | Tool]:
        """The tools the manager's loops use (its private API over its state)."""
        return []

    def _loop(
        self, method: str, request: str, *, tools: Iterable[Callable[..., Any] | Tool] | None = None,
        context: str = "", caller: str | None = None, **options: Any,
    ) -> LoopHandle:
        """Start the loop behind public method ``method`` on ``request`` (``caller`` overrides who
        the prompt says is calling: for loops started from an event rather than a call)."""
        if not isinstance(request, str) or not request.strip():
            raise UserError(f"{self.alias}.{method} needs a request: a non-empty string")
        model = self.model or default_model(f"the {type(self).__name__}")
        fn = getattr(type(self), method, None)
        system = "\n\n".join(p for p in (
            f"You are the {type(self).__name__}: {_doc(type(self))}",
            f"You are serving its method `{method}`: {_doc(fn)}" if fn is not None else "",
            f"Who is calling: {caller or self.caller()}.",
            context,
            "Use your tools to do what is asked; answer concisely with what you found or did.",
        ) if p)
        handle = start_loop(
            request, model=model, tools=self._gated(tools if tools is not None else self._tools()), system=system,
            name=f"{self.alias}.{method}", bus=self.bus, **options,
        )
        handle.run.tags["manager"] = self  # who started it, for callers further down
        return handle

    def _gated(self, tools: Iterable[Callable[..., Any] | Tool]) -> list[Callable[..., Any] | Tool]:
        """``tools``, the write tools marked ``needs_approval`` when :attr:`approve_writes` is set."""
        writes = getattr(self, "_write_tools", None)
        if not self.approve_writes or not callable(writes):
            return list(tools)
        names = {as_tool(t).name for t in writes()}
        return [as_tool(t, needs_approval=True) if as_tool(t).name in names else t for t in tools]

    @staticmethod
    def caller() -> str:
        """Who is calling right now: another manager (its description), the actor, or the person."""
        loop = current_loop()
        if loop is None:
            return "the person, from the notebook"
        tags = loop.run.tags
        manager = tags.get("manager")
        if manager is not None:
            return f"the {type(manager).__name__}, {manager.caller_description}"
        if tags.get("actor") is not None:
            return "the CodeAct actor, running a plan for the person"
        return f"the loop {loop.name!r}"

    def _other(self, alias: str) -> Manager:
        """Another manager of the same registry (to call its public methods only)."""
        if self.registry is None:
            raise UserError(f"{type(self).__name__} needs the {alias!r} manager: register both in one Registry")
        return self.registry.manager(alias)
