"""Route what tools and plans print or display to where they belong, not into a cell.

In a kernel, ``print`` inside a background tool would land in whichever cell is running at
that moment. Once installed, ``sys.stdout`` and ``sys.stderr`` are wrapped: a write made
while ``tool_output`` is set (inside a tool call, also in worker threads) goes to that hook
as ``hook(text, stream)``; every other write passes through untouched. Likewise IPython's
display publisher: a ``display(...)`` made while ``display_output`` is set goes to that hook
as ``hook(data, metadata)``.

A thread started while a hook is set (a plan's or a tool's own thread, or a pool it makes)
keeps that hook for its whole life, also after the plan or call ended: what it prints later
still belongs to that call's record (scrubbed there), never to whichever cell runs then.
Python threads do not inherit context variables, so ``install`` also wraps
``threading.Thread.start`` to remember the hooks in force where a thread was started.
Writes and displays that belong to no hook pass through with every secret value scrubbed.

Wrapping is idempotent and cheap when no hook is set (one context-variable read and one
thread attribute read per write).
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Callable
from typing import Any

from . import _secrets

__all__ = (
    "tool_output", "display_output", "install", "uninstall", "install_display", "started_in", "started_under",
)

tool_output: contextvars.ContextVar[Callable[[str, str], None] | None] = contextvars.ContextVar(
    "unity_nb_tool_output", default=None
)
display_output: contextvars.ContextVar[Callable[[dict, dict], None] | None] = contextvars.ContextVar(
    "unity_nb_display_output", default=None
)


_HOOKS = "_unity_nb_hooks"  # (tool_output hook, display_output hook) of the context a thread was started in
_CONTEXT = "_unity_nb_context"  # the context (copied) a thread was started in, when a hook was set there


def started_in() -> contextvars.Context | None:
    """The context the current thread was started in, if it was started inside a tool call or a plan (so a
    marked function it calls is asked in the operation that started it)."""
    return getattr(threading.current_thread(), _CONTEXT, None)


def started_under(thread: threading.Thread) -> Callable[[str, str], None] | None:
    """The output hook in force where ``thread`` was started (a plan's or a tool call's), else ``None``."""
    hooks = getattr(thread, _HOOKS, None)
    return hooks[0] if hooks is not None else None


def _out_hook() -> Callable[[str, str], None] | None:
    hook = tool_output.get()
    if hook is None:
        hooks = getattr(threading.current_thread(), _HOOKS, None)
        if hooks is not None:
            hook = hooks[0]
    return hook


def _display_hook() -> Callable[[dict, dict], None] | None:
    hook = display_output.get()
    if hook is None:
        hooks = getattr(threading.current_thread(), _HOOKS, None)
        if hooks is not None:
            hook = hooks[1]
    return hook


_thread_start: Any = None
"""The ``Thread.start`` that :func:`install` replaced (``None`` while not installed)."""


def _start(self: threading.Thread) -> None:
    """``Thread.start``, remembering the output hooks in force where the thread is started (not for
    asyncio's shared default executor, whose threads serve everyone and copy each caller's context)."""
    out, disp = _out_hook(), _display_hook()
    if (out is not None or disp is not None) and not self.name.startswith("asyncio_"):
        setattr(self, _HOOKS, (out, disp))
        setattr(self, _CONTEXT, contextvars.copy_context())
    (_thread_start or _ORIGINAL_START)(self)


_ORIGINAL_START = threading.Thread.start


class _Routed:
    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def write(self, text: str) -> int:
        hook = _out_hook()
        if hook is None:
            clean = _secrets.scrub(text)
            if clean is text:
                return self._inner.write(text)
            self._inner.write(clean)
            return len(text)
        try:
            hook(text, self._name)
        except RuntimeError:  # the hook's event loop is gone (a thread outlived it): never unscrubbed
            self._inner.write(_secrets.scrub(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


_KEPT: list[_Routed] = []
"""Every wrapper ever installed, never freed: CPython 3.11's ``print`` holds ``sys.stdout`` without a reference
while it writes its pieces, so a thread printing while another swaps the streams back (``uninstall``) would
write through freed memory and crash the process."""


def install() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (again, if something replaced them since), and make
    threads keep the hooks of the context that started them (:func:`uninstall` puts back what it replaced)."""
    global _thread_start
    if threading.Thread.start is not _start:
        _thread_start = threading.Thread.start
        threading.Thread.start = _start  # type: ignore[method-assign]
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _Routed):
            routed = _Routed(stream, name)
            _KEPT.append(routed)
            setattr(sys, name, routed)


def uninstall() -> None:
    """Undo :func:`install`: the streams and ``threading.Thread.start`` are what they were before it
    (a ``Thread.start`` someone replaced since stays theirs, and keeps working through ours)."""
    global _thread_start
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, _Routed):
            setattr(sys, name, stream._inner)
    if threading.Thread.start is _start and _thread_start is not None:
        threading.Thread.start = _thread_start  # type: ignore[method-assign]
        _thread_start = None


def install_display(shell: Any) -> None:
    """Route ``shell.display_pub.publish`` calls made under ``display_output`` to that hook."""
    pub = getattr(shell, "display_pub", None)
    if pub is None or getattr(pub, "_unity_nb_routed", False):
        return
    original = pub.publish

    def publish(data: dict, metadata: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        hook = _display_hook()
        if hook is None:
            if isinstance(data, dict):
                data = _secrets.scrub_bundle({"data": data})["data"]
            return original(data, metadata, *args, **kwargs)
        hook(dict(data or {}), dict(metadata or {}))
        return None

    pub.publish = publish
    pub._unity_nb_routed = True
