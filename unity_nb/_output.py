"""Route what tools and plans print or display to where they belong, not into a cell.

In a kernel, ``print`` inside a background tool would land in whichever cell is running at
that moment. Once installed, ``sys.stdout`` and ``sys.stderr`` are wrapped: a write made
while ``tool_output`` is set (inside a tool call, also in worker threads) goes to that hook
as ``hook(text, stream)``; every other write passes through untouched. Likewise IPython's
display publisher: a ``display(...)`` made while ``display_output`` is set goes to that hook
as ``hook(data, metadata)``.

Wrapping is idempotent and cheap when no hook is set (one context-variable read per write).
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Callable
from typing import Any

__all__ = ("tool_output", "display_output", "install", "uninstall", "install_display")

tool_output: contextvars.ContextVar[Callable[[str, str], None] | None] = contextvars.ContextVar(
    "unity_nb_tool_output", default=None
)
display_output: contextvars.ContextVar[Callable[[dict, dict], None] | None] = contextvars.ContextVar(
    "unity_nb_display_output", default=None
)


class _Routed:
    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def write(self, text: str) -> int:
        hook = tool_output.get()
        if hook is None:
            return self._inner.write(text)
        hook(text, self._name)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (again, if something replaced them since)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Routed):
            setattr(sys, name, _Routed(stream, name))


def uninstall() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Routed):
            setattr(sys, name, stream._inner)


def install_display(shell: Any) -> None:
    """Route ``shell.display_pub.publish`` calls made under ``display_output`` to that hook."""
    pub = getattr(shell, "display_pub", None)
    if pub is None or getattr(pub, "_unity_nb_routed", False):
        return
    original = pub.publish

    def publish(data: dict, metadata: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        hook = display_output.get()
        if hook is None:
            return original(data, metadata, *args, **kwargs)
        hook(dict(data or {}), dict(metadata or {}))
        return None

    pub.publish = publish
    pub._unity_nb_routed = True
