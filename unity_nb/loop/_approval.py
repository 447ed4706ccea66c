"""Calls waiting for a person's approval: a tool marked ``needs_approval`` (any loop), an actor's plan.

A call that needs approval waits, the loop's status says ``waiting``, and the call is listed in
``h.pending_approvals`` (of the loop and of every ancestor). ``await h.approve(call_id)`` lets it
run; ``await h.skip(call_id, reason=...)`` does not, and the model reads the reason as the call's
result. A stop while a call waits cancels the wait: the call's result says it was cancelled. The
widget's Run / Skip and ``%unity approve`` / ``%unity skip`` call these methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, cast

from .. import events as ev
from .._errors import UserError
from .._secrets import scrub
from ._records import Message
from ._steering import on_own_loop

if TYPE_CHECKING:
    from ._conversation import Conversation
    from ._tools import Tool

__all__ = ("Approvals",)

PLAN = "execute_code"
"""The actor's tool: what waits is a plan (its code is shown), not a JSON call."""


class _Router(Protocol):
    def awaiting_person(self) -> AbstractContextManager[None]: ...


class _Loop(Protocol):
    """What the approval side reads of the loop it is part of (a :class:`LoopHandle`)."""

    _approvals: dict[str, dict] | None
    name: str
    id: str
    event_loop: asyncio.AbstractEventLoop
    conversation: Conversation

    run: Any
    @property
    def router(self) -> _Router: ...
    def walk(self) -> Iterator[_Loop]: ...


class Approvals:
    """The approval side of a :class:`LoopHandle` (a mixin: its state is made on first use)."""

    _approvals: dict[str, dict] | None = None
    """``{call_id: {"tool", "code", "intent", "future"}}`` of this loop's calls waiting now."""

    def needs_approval(self, tool: Tool) -> bool:
        """Whether a call of ``tool`` waits for the person before it runs (a subclass may widen it)."""
        return tool.needs_approval

    @property
    def pending_approvals(self) -> list[dict]:
        """Calls waiting for the person, here and in every descendant: ``{call_id, code, intent, loop,
        loop_id}`` for a plan (its code), and ``tool`` besides for a tool's call (``code``: its JSON arguments)."""
        me = cast(_Loop, self)
        return [
            {"call_id": cid, "code": a["code"], "intent": a["intent"], "loop": h.name, "loop_id": h.id}
            | ({"tool": a["tool"]} if a["tool"] != PLAN else {})
            for h in me.walk()
            if h._approvals
            for cid, a in h._approvals.items()
        ]

    async def wait_for_approval(
        self, call_id: str, *, tool: str, code: str, intent: str | None = None
    ) -> tuple[bool, str | None]:
        """Wait until the person approves or skips call ``call_id``: ``(run, reason)``."""
        me = cast(_Loop, self)
        code = scrub(code)
        intent = scrub(intent) if intent is not None else f"call {tool}"
        fut: asyncio.Future = me.event_loop.create_future()
        if self._approvals is None:
            self._approvals = {}
        self._approvals[call_id] = {"tool": tool, "code": code, "intent": intent, "future": fut}
        me.run.emit(ev.ApprovalRequested, call_id=call_id, code=code, intent=intent, tool=tool)
        try:
            with me.router.awaiting_person():
                run, reason = await fut
        finally:
            self._approvals.pop(call_id, None)
        reason = scrub(reason)
        what = "plan" if tool == PLAN else f"call to {tool}"
        why = f": {reason}" if reason else ""
        me.conversation.record(
            Message("user", f"[{what} {'approved' if run else 'skipped'} by the user{why}]", kind="steering")
        )
        me.run.emit(ev.ApprovalDecided, call_id=call_id, approved=run, reason=reason)
        return run, reason

    def _decide(self, call_id: str | None, run: bool, reason: str | None) -> None:
        me = cast(_Loop, self)
        me.run.require_live("approve" if run else "skip")
        pending = [(h, cid) for h in me.walk() if h._approvals for cid in h._approvals]
        if call_id is None:
            if len(pending) != 1:
                raise UserError(
                    "nothing is waiting for approval" if not pending else
                    f"{len(pending)} calls wait for approval; name one: {[cid for _h, cid in pending]}"
                )
            owner, call_id = pending[0]
        else:
            found = next((h for h, cid in pending if cid == call_id), None)
            if found is None:
                waiting = [c for _h, c in pending] or "none"
                raise UserError(
                    f"no plan with call_id {call_id!r} waits for approval, nor a tool call; waiting: {waiting}"
                )
            owner = found
        assert owner._approvals is not None
        fut = owner._approvals[call_id]["future"]
        if not fut.done():
            fut.set_result((run, reason))

    @on_own_loop
    async def approve(self, call_id: str | None = None) -> None:
        """Let the call (a plan, or a tool marked ``needs_approval``) waiting for approval run
        (``call_id`` chooses when several wait, here or below)."""
        self._decide(call_id, True, None)

    @on_own_loop
    async def skip(self, call_id: str | None = None, reason: str | None = None) -> None:
        """Do not run the waiting call; the model reads that it was skipped (and ``reason``) as its result."""
        self._decide(call_id, False, reason)


def skipped_result(tool: str, reason: str | None) -> str:
    """What the model reads for a call the person skipped."""
    what = "plan" if tool == PLAN else "call"
    did = "it" if tool == PLAN else tool
    return f"[the person skipped this {what}; {did} did not run]{': ' + reason if reason else ''}"

