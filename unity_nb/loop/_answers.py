"""What happens around a final answer (after UniqueAI): references, evaluations,
post-processors and handing control to a tool's loop.

- A tool may return :class:`ToolResult` with citable :class:`Reference` chunks. The loop numbers
  every reference once (``[1]``, ``[2]``, ...) and shows the model their numbers with the
  result; the final answer keeps the references it cites (``h.references``).
- **Evaluations** run on a final answer: ``fn(answer, loop) -> Evaluation | bool | str | None``
  (sync or async; ``fn(answer)`` is fine too). A failed one sends the model back with its feedback, at most
  ``max_corrections`` times; after that the answer stands and the failure stays on record.
- **Post-processors** transform the final answer: ``fn(answer, loop) -> str`` (sync or async).
- A tool that returns :func:`handoff(handle) <handoff>` takes control: the loop ends and
  ``result()`` is that handle, still running.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ._face import Loop

__all__ = (
    "Reference",
    "ToolResult",
    "Evaluation",
    "HandOff",
    "handoff",
    "cited_numbers",
    "cites_references",
    "evaluate",
    "call_hook",
    "hook_name",
    "accepts_positional",
)

_CITE = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


@dataclass(slots=True)
class Reference:
    """A citable chunk a tool found: where it is from and what it says."""

    title: str
    text: str = ""
    url: str | None = None
    number: int = 0
    """Assigned by the loop when the tool's result arrives: cite it as ``[number]``."""
    tool: str | None = None
    """The tool that produced it (set by the loop)."""


@dataclass(slots=True)
class ToolResult:
    """A tool's return value with the references it found: ``ToolResult(content, references=[...])``."""

    content: Any
    references: Sequence[Reference] = field(default_factory=tuple)


@dataclass(slots=True)
class Evaluation:
    """The verdict of one evaluation of a final answer."""

    passed: bool
    feedback: str = ""
    """What is wrong (sent to the model when it fails)."""
    name: str = ""


class HandOff:
    """Returned by a tool to hand control to ``handle``: the calling loop ends with it as its result."""

    __slots__ = ("handle",)

    def __init__(self, handle: Loop) -> None:
        if not isinstance(handle, Loop):
            raise TypeError(f"handoff needs a loop handle, not {type(handle).__name__}")
        self.handle = handle


def handoff(handle: Loop) -> HandOff:
    """From a tool: ``return unity_nb.handoff(start_loop(...))`` ends the calling loop with that
    loop's handle as its result; the person steers it from there."""
    return HandOff(handle)


def cited_numbers(text: str | None) -> list[int]:
    """The reference numbers ``text`` cites as ``[n]`` or ``[n, m]``, in order of first use."""
    seen: list[int] = []
    for group in _CITE.findall(text or ""):
        for part in group.split(","):
            n = int(part)
            if n not in seen:
                seen.append(n)
    return seen


def hook_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def accepts_positional(fn: Any, n: int, *, unknown: bool) -> bool:
    """Whether ``fn`` takes at least ``n`` positional arguments (``unknown`` when it has no signature)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return unknown
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= n


async def call_hook(fn: Any, answer: str, loop: Loop) -> Any:
    """``fn(answer, loop)``, or ``fn(answer)`` for a one-argument function (``str.strip``, say)."""
    value = fn(answer, loop) if accepts_positional(fn, 2, unknown=True) else fn(answer)
    if inspect.isawaitable(value):
        value = await value
    return value


async def evaluate(fn: Any, answer: str, loop: Loop) -> Evaluation:
    """Run one evaluation; its verdict as an :class:`Evaluation` (``True``/``None`` pass, a str fails with it)."""
    name = hook_name(fn)
    try:
        value = await call_hook(fn, answer, loop)
    except Exception as err:  # noqa: BLE001 - a broken evaluation must not lose the answer
        return Evaluation(False, f"the evaluation raised {type(err).__name__}: {err}", name)
    if isinstance(value, Evaluation):
        return value if value.name else Evaluation(value.passed, value.feedback, name)
    if value is None or value is True:
        return Evaluation(True, "", name)
    if value is False:
        return Evaluation(False, "the answer did not pass this check", name)
    return Evaluation(False, str(value), name)


def cites_references(*, required: bool = True):
    """An evaluation: every ``[n]`` the answer cites is a reference the loop received, and (with
    ``required``) the answer cites at least one when references exist."""

    def cites_references(answer: str, loop: Loop) -> Evaluation:
        known = {r.number for r in loop.state.all_references}
        cited = cited_numbers(answer)
        unknown = [n for n in cited if n not in known]
        if unknown:
            return Evaluation(False, f"the answer cites {unknown}, which no tool returned; cite only {sorted(known)}")
        if required and known and not cited:
            return Evaluation(
                False, f"the answer cites none of the references; support its claims with them ({sorted(known)})"
            )
        return Evaluation(True)

    return cites_references
