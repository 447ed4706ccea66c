"""Whether a ``KeyboardInterrupt`` or ``SystemExit`` came from a signal or from code that raised it.

Code the loop runs on its event loop's thread (an async tool, the model) may raise either itself: a
``raise KeyboardInterrupt`` in a library, a command-line parser's ``sys.exit(2)``. Handed on, asyncio re-raises
both from the task they end in, and they end the event loop (the program, the kernel's loop), not only what raised
them: the loop catches them where that code runs and fails that call, or that run, saying what was raised.

A person's interrupt is not such code's: a Ctrl-C (or a kernel interrupt) that Python's default SIGINT handler
turns into a ``KeyboardInterrupt`` raises it wherever the main thread happens to be, which may be inside a tool's
coroutine; a ``SIGTERM`` handler calling ``sys.exit()``, asyncio's second Ctrl-C, raise from a handler. Those
end the program as they would anywhere else: :func:`from_signal` tells them apart. (ipykernel turns an
interrupt during an async cell into a cancellation of the cell, and ignores SIGINT between cells: in a notebook
neither reaches a tool as a ``KeyboardInterrupt``.)
"""

from __future__ import annotations

import dis
import signal
import threading
from types import CodeType, TracebackType
from typing import Any

__all__ = ("from_signal",)

_RAISE = dis.opmap["RAISE_VARARGS"]


def _code(handler: Any) -> CodeType | None:
    """The code a Python signal handler runs (a function, a bound method, a ``functools.partial`` of one)."""
    for _ in range(4):
        inner = getattr(handler, "func", None)  # a partial
        if inner is None:
            break
        handler = inner
    handler = getattr(handler, "__func__", handler)  # a bound method
    code = getattr(handler, "__code__", None)
    return code if isinstance(code, CodeType) else None


def _handler_codes() -> set[CodeType]:
    """The code of every Python signal handler installed now."""
    codes = set()
    for sig in signal.valid_signals():
        try:
            code = _code(signal.getsignal(sig))
        except (OSError, ValueError):  # pragma: no cover - a number the platform lists but cannot query
            continue
        if code is not None:
            codes.add(code)
    return codes


def _raised_by_a_statement(tb: TracebackType) -> bool:
    """The innermost entry of ``tb`` is a ``raise`` statement (not a call into C, not a loop's jump, where the
    interpreter runs the signal handlers it owes)."""
    while tb.tb_next is not None:
        tb = tb.tb_next
    try:
        return tb.tb_frame.f_code.co_code[tb.tb_lasti] == _RAISE
    except IndexError:  # pragma: no cover - an offset outside its code: not a statement we can read
        return False


def _one(err: BaseException, handlers: set[CodeType]) -> bool:
    tb = err.__traceback__
    if tb is None:
        return False
    entry: TracebackType | None = tb
    while entry is not None:
        if entry.tb_frame.f_code in handlers:  # raised in (or under) a Python signal handler
            return True
        entry = entry.tb_next
    # Python's own SIGINT handler is C: its KeyboardInterrupt appears where the thread was, never at a raise
    return isinstance(err, KeyboardInterrupt) and not _raised_by_a_statement(tb)


def from_signal(err: BaseException) -> bool:
    """Whether ``err`` (a ``KeyboardInterrupt``, a ``SystemExit``) came from a signal: a person's Ctrl-C or a
    signal handler, or raised while handling one (``except KeyboardInterrupt: sys.exit(1)``). Such an exception
    is the program's, and goes on up; one that code raised with a ``raise`` statement or ``sys.exit()`` is
    that code's. Only the main thread runs signal handlers: raised on any other, it is the code's."""
    if threading.current_thread() is not threading.main_thread():
        return False
    handlers = _handler_codes()
    seen: set[int] = set()
    chained: BaseException | None = err
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        if isinstance(chained, KeyboardInterrupt | SystemExit) and _one(chained, handlers):
            return True
        chained = chained.__cause__ or chained.__context__
    return False
