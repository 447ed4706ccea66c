"""What a plan cannot do, said plainly to the model: read from the person, and leave threads running unsaid.

``input()`` in a plan failed with Python's own ``EOFError`` (a plan runs in the background: no console, nobody sees
the prompt), which told the model nothing it could act on. While a plan runs, ``builtins.input`` is routed: called
from a plan (or a thread it started) it raises :class:`PlanInputUnavailable`, which says why and what to do instead;
called from anywhere else (the person's cell) it is the ``input`` it wraps. The router is put in place at each plan's
start, over whatever ``builtins.input`` is then (ipykernel puts its own there while a cell runs, and its own back
after: the router never outlives what it wraps). A cell started while a plan runs installs ipykernel's ``input``
over it: an ``input()`` the plan calls then is ipykernel's.

A thread a plan started that still runs when the plan ends was said nowhere. :func:`threads_left` names them: the
threads alive that were started under the plan's output hook (``_output`` records the hook in force where a thread
starts, so threads those threads start count too; asyncio's shared executor's do not, they serve everyone), without
the executor's own watchdog timers (:func:`own_thread`).
"""

from __future__ import annotations

import builtins
import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from .. import _output

__all__ = ("PlanInputUnavailable", "INPUT_MESSAGE", "no_input", "input_again", "threads_left", "own_thread")

INPUT_MESSAGE = (
    "input() cannot read from the person in a plan: a plan runs in the background, with no console to type into, "
    "and nobody sees its prompt. Do not wait for input. To ask the person something, call a tool of yours that asks "
    "the person if you have one; else reply with your question without calling a tool (that ends this task with "
    "your question, and the person answers in a new one)."
)


class PlanInputUnavailable(EOFError):
    """``input()`` called in a plan (an ``EOFError``, as ``input`` with no console raises: code that handles one
    handles this too)."""


class _Reads:
    """The ``input()`` calls of one plan (and of the threads it started)."""

    def __init__(self) -> None:
        self.calls = 0


_plan: contextvars.ContextVar[_Reads | None] = contextvars.ContextVar("unity_nb_plan_input", default=None)
_ROUTED = "_unity_nb_plan_input"


def _current() -> _Reads | None:
    reads = _plan.get()
    if reads is None:
        started = _output.started_in()  # a thread the plan started: the context it was started in
        reads = started.get(_plan) if started is not None else None
    return reads


def _install() -> None:
    inner = builtins.input
    if getattr(inner, _ROUTED, False):
        return

    def input(prompt: Any = "") -> str:  # in place of the builtin, under its name
        reads = _current()
        if reads is None:
            return inner(prompt)
        reads.calls += 1
        raise PlanInputUnavailable(INPUT_MESSAGE)

    setattr(input, _ROUTED, True)
    builtins.input = input


def no_input() -> tuple[_Reads, contextvars.Token]:
    """From now on in this context (a plan's), ``input()`` raises :class:`PlanInputUnavailable`, until
    :func:`input_again`; the reads count the calls (a plan that caught the error is still said to have called it)."""
    _install()
    reads = _Reads()
    return reads, _plan.set(reads)


def input_again(token: contextvars.Token) -> None:
    """Undo :func:`no_input` (in the context that called it)."""
    _plan.reset(token)


_OWN = "_unity_nb_own_thread"
_T = TypeVar("_T", bound=threading.Thread)


def own_thread(thread: _T) -> _T:
    """Mark ``thread`` as the executor's own (a watchdog's timer): never named as one a plan left running."""
    setattr(thread, _OWN, True)
    return thread


def threads_left(hook: Callable[[str, str], None]) -> list[str]:
    """The names of the threads alive now that were started under ``hook`` (a plan's output hook), but for the
    executor's own."""
    return [
        t.name for t in threading.enumerate()
        if t.is_alive() and not getattr(t, _OWN, False) and _output.started_under(t) is hook
    ]
