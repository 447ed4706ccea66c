"""Calls waiting for a person's approval: a tool marked ``needs_approval`` (any loop), an actor's plan.

A call that needs approval waits, the loop's status says ``waiting``, and the call is listed in
``h.inbox.approvals`` (of the loop and of every ancestor). ``await h.inbox.approve(call_id)`` lets it
run; ``await h.inbox.skip(call_id, reason=...)`` does not, and the model reads the reason as the call's
result. ``approve(call_id, always=True)`` also lets every later call of that tool in the operation (the loop
at the top of the tree and every loop under it) run unasked, and the calls of it waiting now. A stop while a
call waits cancels the wait: the call's result says it was cancelled. The widget's Run / Skip / Always allow
and ``%unity approve`` / ``%unity skip`` call these methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .. import events as ev
from .._errors import UserError
from .._secrets import scrub
from ._records import Message

if TYPE_CHECKING:
    from ._conversation import Conversation

__all__ = ("PLAN", "decide", "pending_approvals", "skipped_result", "wait_for_approval", "was_skipped")

PLAN = "execute_code"
"""The actor's tool: what waits is a plan (its code is shown), not a JSON call."""
_ALWAYS = "always_allowed"
"""The tag of an operation's top run holding the tools the person allowed for the rest of it."""


def _top(run: Any) -> Any:
    """The run at the top of ``run``'s operation (a row's loop: its batch's; a child loop: its root's)."""
    while getattr(run, "parent", None) is not None:
        run = run.parent.run
    return run


def _runs(run: Any) -> Any:
    """``run`` and the runs of every loop under it."""
    yield run
    for child in run.children:
        yield from _runs(child.run)


def _allowed(run: Any) -> set[str]:
    tags = getattr(_top(run), "tags", None)
    return tags.setdefault(_ALWAYS, set()) if tags is not None else set()


class _Run(Protocol):
    """What approval works with of a loop: its run (events, conversation, the calls waiting)."""

    name: str
    approvals: dict[str, dict]
    event_loop: asyncio.AbstractEventLoop
    conversation: Conversation

    def emit(self, kind: type[ev.Event], **fields: Any) -> None: ...
    def require_live(self, verb: str) -> None: ...


class _Node(Protocol):
    """A loop of the tree approvals are looked for in (a handle: its id, its run)."""

    id: str

    @property
    def run(self) -> Any: ...


async def wait_for_approval(
    run: _Run, awaiting_person: Callable[[], AbstractContextManager[None]], call_id: str, *, tool: str, code: str,
    intent: str | None = None,
) -> tuple[bool, str | None]:
    """Wait until the person approves or skips call ``call_id`` of ``run``'s loop: ``(run, reason)``
    (the loop's status says ``waiting`` meanwhile, through ``awaiting_person``)."""
    if tool != PLAN and tool in _allowed(run):  # the person allowed this tool for the rest of the operation
        run.emit(ev.ApprovalDecided, call_id=call_id, approved=True, reason=f"{tool} is allowed in this operation")
        return True, None
    code = scrub(code)
    intent = scrub(intent) if intent is not None else f"call {tool}"
    fut: asyncio.Future = run.event_loop.create_future()
    run.approvals[call_id] = {"tool": tool, "code": code, "intent": intent, "future": fut}
    run.emit(ev.ApprovalRequested, call_id=call_id, code=code, intent=intent, tool=tool)
    try:
        with awaiting_person():
            approved, reason = await fut
    finally:
        run.approvals.pop(call_id, None)
    reason = scrub(reason)
    what = "plan" if tool == PLAN else f"call to {tool}"
    why = f": {reason}" if reason else ""
    if approved and tool != PLAN and tool in _allowed(run):
        why += f"; {tool} is allowed for the rest of this operation"
    run.conversation.record(
        Message("user", f"[{what} {'approved' if approved else 'skipped'} by the user{why}]", kind="steering")
    )
    run.emit(ev.ApprovalDecided, call_id=call_id, approved=approved, reason=reason)
    return approved, reason


def pending_approvals(tree: Iterable[_Node]) -> list[dict]:
    """Calls waiting for the person in ``tree`` (a loop and its descendants): ``{call_id, code, intent, loop,
    loop_id}`` for a plan (its code), and ``tool`` besides for a tool's call (``code``: its JSON arguments)."""
    return [
        {"call_id": cid, "code": a["code"], "intent": a["intent"], "loop": h.run.name, "loop_id": h.id}
        | ({"tool": a["tool"]} if a["tool"] != PLAN else {})
        for h in tree
        for cid, a in h.run.approvals.items()
    ]


def decide(
    root: _Run, tree: Iterable[_Node], call_id: str | None, approved: bool, reason: str | None, *,
    always: bool = False,
) -> None:
    """Approve or skip the call ``call_id`` waiting in ``tree`` (the only one waiting when ``None``). With
    ``always`` (an approval of a tool's call, not of a plan), that tool runs unasked for the rest of the operation:
    its calls waiting anywhere in the operation now are approved too."""
    root.require_live("approve" if approved else "skip")
    pending = [(h.run, cid) for h in tree for cid in h.run.approvals]
    if call_id is None:
        if len(pending) != 1:
            raise UserError(
                "nothing is waiting for approval" if not pending else
                f"{len(pending)} calls wait for approval; name one: {[cid for _r, cid in pending]}"
            )
        owner, call_id = pending[0]
    else:
        found = next((r for r, cid in pending if cid == call_id), None)
        if found is None:
            waiting = [c for _r, c in pending] or "none"
            raise UserError(f"no plan with call_id {call_id!r} waits for approval, nor a tool call; waiting: {waiting}")
        owner = found
    waiting = owner.approvals[call_id]
    decided = [waiting]
    if always and approved:
        tool = waiting["tool"]
        if tool == PLAN:
            raise UserError("a plan is approved one at a time: `always` is for a tool's calls")
        _allowed(owner).add(tool)
        decided += [a for r in _runs(_top(owner)) for a in r.approvals.values() if a["tool"] == tool]
    for a in decided:
        if not a["future"].done():
            a["future"].set_result((approved, reason))


_SKIPPED = "[the person skipped this "


def skipped_result(tool: str, reason: str | None) -> str:
    """What the model reads for a call the person skipped."""
    what = "plan" if tool == PLAN else "call"
    did = "it" if tool == PLAN else tool
    return f"{_SKIPPED}{what}; {did} did not run]{': ' + reason if reason else ''}"


def was_skipped(result: str | None) -> bool:
    """Whether a call's result is :func:`skipped_result`'s: the person skipped the call, which did not run."""
    return result is not None and result.startswith(_SKIPPED)

