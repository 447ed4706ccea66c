"""Route what tools print to their call records (and so to the widget), not into a cell.

In a kernel, ``print`` inside a background tool would land in whichever cell is running at
that moment. While the extension is loaded, ``sys.stdout`` and ``sys.stderr`` are wrapped:
a write made inside a tool call (``unity_nb.loop._handle.tool_output`` is set there, also in
worker threads) goes to that call; every other write passes through untouched.
"""

from __future__ import annotations

import sys
from typing import Any

from ..loop._handle import tool_output

__all__ = ("install", "uninstall")


class _Routed:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        hook = tool_output.get()
        if hook is None:
            return self._inner.write(text)
        hook(text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Routed):
            setattr(sys, name, _Routed(stream))


def uninstall() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Routed):
            setattr(sys, name, stream._inner)
