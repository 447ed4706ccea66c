"""What the subcommands kept in their own modules (``_magics_ops``, ``_magics_tasks``, ``_magics_model``) read of
the magics: the :class:`Host` protocol, which :class:`UnityMagics` meets, so those modules never import the magics
they serve (no import circle); and :func:`missing_names`, which both use to say what a resumed operation lacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..loop import LoopHandle

__all__ = ("Host", "missing_names")


class Host(Protocol):
    """The magics, as a subcommand's module sees them."""

    handles: dict[str, LoopHandle]
    widgets: dict[str, Any]
    model: Any
    """The model in use (None: none yet)."""
    default_model: str
    base_url: str
    approval: str
    """The kernel's approval mode for the operations started here (``%config UnityMagics.approval``)."""
    show_widgets: bool
    """Whether operations show a live widget (else what it would say is printed)."""

    def set_model(self, model: Any, *, made: bool) -> None: ...

    @property
    def user_ns(self) -> dict[str, Any]: ...

    @property
    def store(self) -> Any: ...

    @property
    def tasks_manager(self) -> Any: ...

    def current_model(self) -> Any: ...

    def loop_options(self, options: dict) -> dict: ...

    def actor(self, model: Any, options: dict) -> Any: ...

    def start(self, name: str | None, launch: Callable[[str], LoopHandle], *, sub: str = "act",
              notice: str = "") -> LoopHandle: ...

    def _map(self, cmd: Any, *, done: dict | None = None, name: str | None = None, notice: str = "",
             batches: list | None = None) -> Any: ...


def missing_names(expr: str, namespace: dict) -> list[str]:
    """The names ``expr`` reads that ``namespace`` (and the builtins) lacks."""
    import ast
    import builtins

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return []
    names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    return [n for n in dict.fromkeys(names) if n not in namespace and not hasattr(builtins, n)]
