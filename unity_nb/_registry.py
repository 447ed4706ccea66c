"""Tools registered for notebook use: ``@unity_nb.tool`` and ``unity_nb.register_tool(fn)``.

``%unity act`` offers every registered tool (the CodeAct actor will offer them too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from .loop import Tool, as_tool

__all__ = ("tool", "register_tool", "unregister_tool", "registered_tools")

F = TypeVar("F", bound=Callable[..., Any])
_TOOLS: dict[str, Tool] = {}


def register_tool(
    fn: Callable[..., Any] | Tool, *, name: str | None = None, needs_approval: bool | None = None
) -> Tool:
    """Register ``fn`` as a tool for notebook operations; re-registering a name replaces it.
    ``needs_approval=True``: each call waits for a person's Run or Skip (see ``unity_nb.as_tool``); the tool's
    ``.fn`` is then the function's gate (bind that name where plans can see it: ``@unity_nb.tool`` does)."""
    t = as_tool(fn, name=name, needs_approval=needs_approval)
    _TOOLS[t.name] = t
    return t


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(*, name: str | None = None, needs_approval: bool | None = None) -> Callable[[F], F]: ...
def tool(fn: Any = None, /, *, name: str | None = None, needs_approval: bool | None = None) -> Any:
    """Decorator: ``@unity_nb.tool`` (or ``@unity_nb.tool(name="x", needs_approval=True)``) registers a
    function as a tool.

    The function itself is returned unchanged, so it stays callable from the notebook; marked
    ``needs_approval``, what is returned is its gate: the same function, which waits for the person's
    approval at each call an operation makes (a plan calling it by name too), and runs at once when the
    person calls it in a cell (see ``unity_nb.loop`` ``_gate``).
    """

    def register(f: Any) -> Any:
        t = register_tool(f, name=name, needs_approval=needs_approval)
        return t.fn if t.gated is not None else f

    return register if fn is None else register(fn)


def unregister_tool(name: str) -> None:
    """Forget the registered tool ``name`` (no error if absent)."""
    _TOOLS.pop(name, None)


def registered_tools() -> list[Tool]:
    """The registered tools, in registration order."""
    return list(_TOOLS.values())
