"""What travels between a loop and the loops around it.

Down: steering that arrives while tools with live children run is routed by the model, through
one tool per steering verb and child (see :data:`VERBS`). Up: a question a tool asks the person
(a clarification) and a progress note bubble to every ancestor, and to the request each
multi-request ancestor was serving with the call that led there.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from .. import events as ev
from .._secrets import scrub
from ._records import Message, ToolCallRecord
from ._steering import child_tools

if TYPE_CHECKING:
    from ..models import Reply
    from ._run import Run
    from ._tools import Tool

__all__ = ("Mailbox", "Router")

_ROUTING_NOTE = {
    "role": "system",
    "content": "Tool calls above are still running as sub-operations. Route the user's new message to "
    "them with the steering tools if it concerns them; otherwise reply briefly. Their results will follow.",
}


class _Turn(Protocol):
    async def call(
        self, messages: list[dict], tools: list[Tool], choice: str | dict, last_user: str | None
    ) -> Reply | None: ...


class _Runner(Protocol):
    @property
    def call_requests(self) -> dict[str, str]: ...
    @property
    def turn(self) -> _Turn: ...
    async def execute(self, rec: ToolCallRecord, tool: Tool | None) -> None: ...
    def finish_call(
        self, rec: ToolCallRecord, result: str, error: bool, duration: float, *, cut: bool = False
    ) -> None: ...


class _Request(Protocol):
    @property
    def mailbox(self) -> Mailbox: ...


class _Loop(Protocol):
    """What the router reads of a loop in the tree (its own, its ancestors' and descendants')."""

    @property
    def name(self) -> str: ...
    @property
    def parent(self) -> _Loop | None: ...
    @property
    def run(self) -> Run: ...
    @property
    def _router(self) -> Router: ...
    @property
    def _runner(self) -> _Runner | None: ...  # None for a batch (its rows run the tools)


class Mailbox:
    """Where questions and notes bubbling up arrive: a loop's, or one request's of a multi-request loop."""

    __slots__ = ("_notes", "_questions", "waiting")

    def __init__(self) -> None:
        self.waiting = 0
        """How many questions and approvals (here or below) wait for the person."""
        self._questions: asyncio.Queue[dict] | None = None  # made when first used: most loops never ask
        self._notes: asyncio.Queue[dict] | None = None

    @property
    def questions(self) -> asyncio.Queue[dict]:
        if self._questions is None:
            self._questions = asyncio.Queue()
        return self._questions

    @property
    def notes(self) -> asyncio.Queue[dict]:
        if self._notes is None:
            self._notes = asyncio.Queue()
        return self._notes

    async def next_question(self) -> dict:
        """The next question still open (one answered meanwhile is skipped)."""
        while True:
            item = await self.questions.get()
            asker: _Loop = item["handle"]
            if item["call_id"] in asker.run.questions:
                return {k: v for k, v in item.items() if k != "handle"}


class Router:
    """One loop's routing of steering down to its children, and of questions and notes up.

    It is given the loop's :class:`Run` (its conversation, gate and events), its turn (the routing
    call) and, held weakly, the loop itself (``source``): the tree the questions and notes climb
    and the children steering is routed to are loops."""

    __slots__ = ("__weakref__", "_run", "_source", "mailbox")

    def __init__(self, run: Run, source: _Loop) -> None:
        self._run = run
        self._source = weakref.ref(source)
        self.mailbox = Mailbox()

    @property
    def source(self) -> _Loop:
        """The loop this router routes for (held weakly: the loop holds its router)."""
        source = self._source()
        if source is None:  # only reachable through a router kept after its loop was dropped
            raise ReferenceError("this router's loop is gone")
        return source

    # -- down: steering to running children ----------------------------------------------------

    async def route(self, runner: _Runner, records: list[ToolCallRecord], deferred: list[dict]) -> None:
        """Steering arrived while tools (with live children) run: let the model route it (through
        ``runner``'s turn, and ``runner`` runs the steering calls it makes)."""
        h = self._run
        conv = h.conversation
        await h.gate.wait()
        message = conv.take_pending()
        if message is None:
            return
        deferred.append(message)
        live = h.live_children()
        if not live:
            return
        tools = [t for c in live for t in child_tools(c)]
        placeholders = [
            {"role": "tool", "tool_call_id": r.id, "content": r.result if r.result is not None else "[still running]"}
            for r in records
        ]
        for _ in range(3):
            # the wire ends with the running calls: their placeholders follow it
            reply = await runner.turn.call(
                [*conv.wire, *placeholders, *deferred, _ROUTING_NOTE], tools, "auto", deferred[-1].get("content")
            )
            if reply is None:  # interrupted by another interjection: include it and re-issue
                more = conv.take_pending()
                if more is not None:
                    deferred.append(more)
                continue
            break
        else:
            return
        recs = [ToolCallRecord(c.id, c.name, c.arguments) for c in reply.tool_calls]
        conv.record(Message("assistant", reply.content, kind="routing", tool_calls=recs))
        msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            msg["tool_calls"] = [c.to_wire() for c in reply.tool_calls]
        deferred.append(msg)
        by_name = {t.name: t for t in tools}
        try:
            for rec in recs:
                await runner.execute(rec, by_name.get(rec.name))
                deferred.append({"role": "tool", "tool_call_id": rec.id, "content": rec.result or ""})
        finally:  # stopped meanwhile: every routing call still has its one result (transcript, events, wire)
            for rec in recs:
                if rec.result is None:
                    why = f"cancelled: {h.state.stop_reason or 'the loop was cancelled'}"
                    runner.finish_call(rec, why, True, 0.0, cut=True)
                    deferred.append({"role": "tool", "tool_call_id": rec.id, "content": rec.result or why})

    # -- up: questions and notes ---------------------------------------------------------------

    def bubble(self, call_id: str | None, request_id: str | None) -> list[Mailbox]:
        """Where a question or note from tool call ``call_id`` goes: this loop, its ancestors, and
        the request each multi-request loop among them was serving with the call that led here."""
        out: list[Mailbox] = []
        me = self.source
        h: _Loop | None = me
        via = call_id
        while h is not None:
            out.append(h._router.mailbox)
            if h.run.config.multi:
                runner = h._runner
                rid = request_id if h is me or runner is None else runner.call_requests.get(via or "")
                req = h.run.find_request(rid)
                if req is not None:
                    out.append(req.mailbox)
            via = h.run.parent_call
            h = h.parent
        return out

    @contextmanager
    def awaiting_person(self) -> Iterator[None]:
        """While inside: this loop and its ancestors say ``waiting`` (a question or an approval is open)."""
        chain: list[Mailbox] = []
        h: _Loop | None = self.source
        while h is not None:
            chain.append(h._router.mailbox)
            h = h.parent
        for box in chain:
            box.waiting += 1
        try:
            yield
        finally:
            for box in chain:
                box.waiting -= 1

    async def clarify(self, call_id: str, question: str, request_id: str | None = None) -> str:
        h, me = self._run, self.source
        question = scrub(question)
        fut = h.event_loop.create_future()
        h.questions[call_id] = (question, fut)
        h.conversation.record(Message("assistant", question, kind="clarification", tool_call_id=call_id))
        item = {
            "call_id": call_id,
            "question": question,
            "loop": me.name,
            "tool": h.conversation.tool_name(call_id),
            "handle": me,
        }
        if request_id is not None:
            item["request_id"] = request_id
        chain = self.bubble(call_id, request_id)
        for box in chain:
            box.waiting += 1
            box.questions.put_nowait(item)
        h.emit(ev.ClarificationRequested, call_id=call_id, question=question)
        try:
            answer = await fut
        finally:
            h.questions.pop(call_id, None)
            for box in chain:
                box.waiting -= 1
        shown = scrub(answer)  # the tool gets the answer itself; people and the store see it scrubbed
        h.conversation.record(Message("user", shown, kind="clarification", tool_call_id=call_id))
        h.emit(ev.ClarificationAnswered, call_id=call_id, answer=shown)
        return answer

    def notify(self, call_id: str | None, text: str, request_id: str | None = None) -> None:
        h = self._run
        text = scrub(text)
        name = h.conversation.tool_name(call_id)
        h.conversation.record(Message("tool", text, kind="notification", tool_call_id=call_id, name=name))
        item = {"call_id": call_id, "text": text, "loop": self.source.name, "tool": name}
        if request_id is not None:
            item["request_id"] = request_id
        for box in self.bubble(call_id, request_id):
            box.notes.put_nowait(item)
        h.emit(ev.Notification, call_id=call_id, text=text)
