"""Three things a person reads of a loop as one word each: ``h.tree``, ``h.inbox`` and ``h.requests``.

- :class:`Tree`: the loop and every loop under it (iterate it, depth first), their tokens and dollars
  (``usage``, ``cost``), and where the loop sits (``lineage``);
- :class:`Inbox`: what waits for the person here and below: calls to approve or skip (``approvals``,
  ``approve``, ``skip``), questions tools ask (``questions``, ``next_question``, ``answer``) and progress
  notes (``next_notification``);
- :class:`Requests`: the requests of a multi-request loop, in order, and ``submit`` for another.

Each is a small view made when read; it holds the loop, and the loop holds none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, overload

from .._errors import UserError
from ..models import Usage, cost_of
from ._approval import decide, pending_approvals
from ._steering import on_own_loop

if TYPE_CHECKING:
    from ._routing import Mailbox
    from ._run import Run

__all__ = ("Inbox", "Requests", "Tree")


class _Loop(Protocol):
    """What the views read of a loop (a handle): who it is, its run, its children and its own tokens."""

    id: str
    name: str
    model: Any

    @property
    def run(self) -> Run: ...
    @property
    def children(self) -> Sequence[_Loop]: ...
    @property
    def usage(self) -> Usage: ...
    @property
    def tree(self) -> Tree: ...

Totals = Callable[[], tuple[Usage, float | None]]
"""``() -> (usage, cost)`` of a tree whose owner counts it itself (a batch: its rows are released as they end)."""


class Tree:
    """A loop and every loop under it: ``for h in loop.tree`` walks them depth first (the loop first);
    ``usage`` and ``cost`` are their totals (``loop.usage`` and ``loop.cost`` are the loop's own)."""

    __slots__ = ("_loop", "_totals")

    def __init__(self, loop: _Loop, totals: Totals | None = None) -> None:
        self._loop = loop
        self._totals = totals

    def __iter__(self) -> Iterator[Any]:
        yield self._loop
        for c in self._loop.children:
            yield from c.tree

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"<tree of {self._loop.name!r}: {len(self)} loops>"

    @property
    def lineage(self) -> tuple[str, ...]:
        """Where the loop sits: ``name(id)`` of each loop from the root down to it."""
        return self._loop.run.lineage

    @property
    def usage(self) -> Usage:
        """Tokens of the loop and every loop under it."""
        if self._totals is not None:
            return self._totals()[0]
        own = self._loop.usage
        total = Usage(own.input_tokens, own.output_tokens, own.estimated)
        for c in self._loop.children:
            total += c.tree.usage
        return total

    @property
    def cost(self) -> float | None:
        """Dollars of the loop and every loop under it; ``None`` when any of them has an unknown price."""
        if self._totals is not None:
            return self._totals()[1]
        parts = [cost_of(self._loop.usage, self._loop.model), *(c.tree.cost for c in self._loop.children)]
        return None if None in parts else sum(p for p in parts if p is not None)


class Inbox:
    """What waits for the person in a loop and in every loop under it (or, for one request of a
    multi-request loop, what its tool calls ask): approvals, questions and progress notes."""

    __slots__ = ("_loop", "_mailbox")

    def __init__(self, loop: _Loop, mailbox: Mailbox) -> None:
        self._loop = loop
        self._mailbox = mailbox

    def __repr__(self) -> str:
        return f"<inbox of {self.name!r}: {len(self.approvals)} approvals, {len(self.questions)} questions>"

    @property
    def name(self) -> str:
        """The loop's name."""
        return self._loop.name

    @property
    def run(self) -> Run:
        """The loop's run (a verb called from another thread is handed to its event loop)."""
        return self._loop.run

    # -- calls waiting for approval (``_approval.py``) ----------------------------------------

    @property
    def approvals(self) -> list[dict]:
        """Calls waiting for the person, here and in every descendant: ``{call_id, code, intent, loop,
        loop_id}`` for a plan (its code), and ``tool`` besides for a tool's call (``code``: its JSON arguments)."""
        return pending_approvals(self._loop.tree)

    @on_own_loop
    async def approve(self, call_id: str | None = None, *, always: bool = False) -> None:
        """Let the call (a plan, or a tool marked ``needs_approval``) waiting for approval run
        (``call_id`` chooses when several wait, here or below). ``always=True`` (a tool's call): that tool's
        later calls in this operation run unasked, and its calls waiting now run too."""
        decide(self._loop.run, self._loop.tree, call_id, True, None, always=always)

    @on_own_loop
    async def skip(self, call_id: str | None = None, reason: str | None = None) -> None:
        """Do not run the waiting call; the model reads that it was skipped (and ``reason``) as its result."""
        decide(self._loop.run, self._loop.tree, call_id, False, reason)

    # -- questions tools ask the person, and their progress notes (``_routing.py``) -----------------

    @property
    def questions(self) -> list[dict]:
        """Open questions in the loop and its descendants: ``{call_id, question, loop, loop_id}``."""
        return [
            {"call_id": cid, "question": q, "loop": h.name, "loop_id": h.id}
            for h in self._loop.tree
            for cid, (q, _future) in h.run.questions.items()
        ]

    async def next_question(self) -> dict:
        """Wait for the next question a tool (here or in any descendant) asks the person:
        ``{"call_id", "question", "loop", "tool"}``; answer it with :meth:`answer`."""
        return await self._mailbox.next_question()

    @on_own_loop
    async def answer(self, call_id: str, answer: str) -> None:
        """Answer the question asked by tool call ``call_id`` (here or in any descendant)."""
        for h in self._loop.tree:
            pending = h.run.questions.get(call_id)
            if pending is not None:
                future = pending[1]
                if not future.done():
                    future.set_result(answer)
                return
        asked = [q["call_id"] for q in self.questions]
        raise UserError(f"no open clarification with call_id {call_id!r} in {self.name!r}; open: {asked or 'none'}")

    async def next_notification(self) -> dict:
        """Wait for the next progress note from a tool here or in any descendant: ``{"call_id", "text", "loop",
        "tool"}``."""
        return await self._mailbox.notes.get()


class Requests(Sequence[Any]):
    """The requests of a multi-request loop (``start_loop(..., multi=True)``), in order: the task is the
    first. :meth:`submit` adds one."""

    __slots__ = ("_loop", "_submit")

    def __init__(self, loop: _Loop, submit: Callable[[Any, str], Any]) -> None:
        self._loop = loop
        self._submit = submit

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: Any) -> Any:
        return self._loop.run.requests[i]

    def __len__(self) -> int:
        return len(self._loop.run.requests)

    def __repr__(self) -> str:
        return repr(self._loop.run.requests)

    def __eq__(self, other: object) -> bool:
        return list(self) == (list(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]

    def submit(self, text: str) -> Any:
        """Add a request; it shares the loop's context and gets a handle of its own."""
        return self._submit(self._loop, text)
