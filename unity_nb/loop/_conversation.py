"""A loop's two records of its conversation, and how steering enters the model's view.

``transcript`` is what happened, in order, for people (steering is written where it happened).
The *wire* is the conversation as the model receives it, kept valid at all times: every
assistant tool call is followed by exactly one result, and what arrives mid-step (steering,
requests, notes) waits in ``pending`` and is delivered as one user message at the next step.
The wire grows by appending only (until a compression replaces its middle), so a request costs
no more than the list it sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._secrets import scrub
from ..models import Reply
from ._policies import message_chars
from ._records import Message, ToolCallRecord

__all__ = ("Conversation",)

MULTI_NOTE = (
    "You serve several requests in this one conversation. Each arrives as '[request <id>] <text>', and "
    "messages about one say which. Complete each request with the tool final_answer(request_id, answer) "
    "as soon as it is done, in any order; other tools may take a request_id saying which request they serve."
)


class Conversation:
    """The transcript, the wire, and the notes waiting for the model's next call."""

    __slots__ = ("_counted", "_pending", "_tokens", "heard", "interjected", "last_user", "transcript", "wire")

    def __init__(self) -> None:
        self.transcript: list[Message] = []
        self.wire: list[dict[str, Any]] = []
        self._pending: list[str] = []
        self.interjected = False
        """Something arrived for the model since its last call began (an answer written before it is not final)."""
        self.heard = 0
        """Messages from people so far (interjections, posts): one arriving while an answer is checked
        makes the answer not final."""
        self._counted = 0  # wire messages whose tokens are in _tokens (the wire only grows, until replaced)
        self._tokens = 0
        self.last_user: str | None = None
        """The text of the newest user message on the wire (what the model is answering)."""

    def open(
        self, task: str, system: str | None, context: Sequence[dict] | None, outer: str | None, *, multi: bool
    ) -> None:
        """The start: system prompt, inherited context, the caller's conversation (``outer``), the task."""
        if system:
            self.add({"role": "system", "content": system})
            self.record(Message("system", system, kind="system"))
        if context:  # copies: the wire's messages are this loop's own, never changed once sent
            self.extend(dict(m) for m in context)
        if outer is not None:
            note = (
                "Context: the conversation of the loop that called you, for reference only. Its roles "
                f"are prefixed outer_; your own conversation follows.\n{outer}"
            )
            self.add({"role": "system", "content": note})
            self.record(Message("system", note, kind="context"))
        if multi:
            self.add({"role": "system", "content": MULTI_NOTE})
            self.add({"role": "user", "content": f"[request r1] {task}"})
        else:
            self.add({"role": "user", "content": task})
        self.record(Message("user", task, kind="task"))

    # -- what people read ------------------------------------------------------------------

    def record(self, message: Message) -> Message:
        """Add an entry to the transcript (people's record) only."""
        self.transcript.append(message)
        return message

    def find_call(self, call_id: str | None) -> ToolCallRecord | None:
        """The record of tool call ``call_id`` (newest first)."""
        for m in reversed(self.transcript):
            for c in m.tool_calls:
                if c.id == call_id:
                    return c
        return None

    def tool_name(self, call_id: str | None) -> str | None:
        rec = self.find_call(call_id)
        return rec.name if rec is not None else None

    # -- what the model reads --------------------------------------------------------------

    def add(self, message: dict[str, Any]) -> None:
        """Append a message to the wire."""
        self.wire.append(message)
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            self.last_user = message["content"]

    def extend(self, messages: Iterable[dict[str, Any]]) -> None:
        for m in messages:
            self.add(m)

    def replace(self, wire: list[dict[str, Any]]) -> None:
        """Put a compressed wire in place of the current one."""
        self.wire = wire
        self._counted = self._tokens = 0

    def estimated_tokens(self) -> int:
        """The wire's size in tokens at about four characters a token, counting only messages new since
        the last count (``estimate_tokens`` of the whole wire, without walking it every step)."""
        new = self.wire[self._counted :]
        if new:
            self._tokens += message_chars(new)
            self._counted = len(self.wire)
        return self._tokens // 4 + 1

    @property
    def pending(self) -> tuple[str, ...]:
        """Notes waiting for the model's next call, in order."""
        return tuple(self._pending)

    def note(self, text: str) -> None:
        """Tell the model ``text`` at its next call (with whatever else arrived meanwhile)."""
        self._pending.append(text)

    def take_pending(self) -> dict[str, Any] | None:
        """The waiting notes as one user message (and none left waiting), or ``None`` if none wait."""
        self.interjected = False
        if not self._pending:
            return None
        message = {"role": "user", "content": "\n".join(self._pending)}
        self._pending.clear()
        return message

    def deliver(self) -> None:
        """Before a model call: the waiting notes join the wire as one user message."""
        message = self.take_pending()
        if message is not None:
            self.add(message)

    def add_reply(self, reply: Reply, *, final: bool) -> tuple[Message, dict[str, Any], list[ToolCallRecord]]:
        """Record the model's reply in both records: ``(transcript entry, wire message, call records)``."""
        calls = reply.tool_calls
        records = [ToolCallRecord(c.id, c.name, c.arguments) for c in calls] if calls else []
        entry = Message(
            "assistant",
            reply.content,
            kind="answer" if final else "text",
            tool_calls=records,
            thinking=reply.thinking,
            error=bool(reply.refusal),
        )
        self.transcript.append(entry)
        wire_msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            wire_msg["tool_calls"] = [c.to_wire() for c in reply.tool_calls]
        if reply.echo:
            for key, value in reply.echo.items():
                wire_msg[key] = scrub(value) if isinstance(value, str) else value
        self.wire.append(wire_msg)
        return entry, wire_msg, records

    def add_results(self, records: Iterable[ToolCallRecord], after: Iterable[dict[str, Any]] = ()) -> None:
        """Each call's result, in the order of the calls, then what was deferred while they ran."""
        for rec in records:
            self.wire.append({"role": "tool", "tool_call_id": rec.id, "content": rec.result or ""})
        self.extend(after)
