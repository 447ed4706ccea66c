"""The model protocol and the types that cross it.

A model is one coroutine: ``complete(request, on_delta=None) -> Reply``. Messages and tool
schemas travel in the OpenAI chat wire format (plain dicts), so the OpenAI-compatible model
sends them untouched and every other model reads one well-known shape.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = (
    "DeltaCallback", "Model", "ModelRequest", "Reply", "ToolCall", "Usage", "call_tool", "retry_hook", "wait_hook",
)

DeltaCallback = Callable[[str], None]
"""Receives each piece of streamed assistant text as it arrives. If it also has a ``thinking``
attribute (a callable), a model that streams reasoning calls ``on_delta.thinking(text)`` with it."""

retry_hook: contextvars.ContextVar[Callable[[int, str, float], None] | None] = contextvars.ContextVar(
    "unity_nb_retry_hook", default=None
)
"""Set by whoever runs a model (the loop): a model calls ``hook(attempt, error, delay)`` before each
retry, so partial streamed text can be discarded and the retry shown. Any model may use it."""

wait_hook: contextvars.ContextVar[Callable[[float, str], None] | None] = contextvars.ContextVar(
    "unity_nb_wait_hook", default=None
)
"""Set by whoever runs a model (the loop): a rate limit calls ``hook(seconds, reason)`` before a wait of
more than a few seconds, so a long wait is shown, not silent. Any model may use it."""


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    """True when any part of it was estimated (the provider reported no usage), so a display can say "≈"."""

    def __iadd__(self, other: Usage) -> Usage:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.estimated = self.estimated or other.estimated
        return self


@dataclass(slots=True)
class ToolCall:
    """One tool call requested by the model. ``arguments`` is JSON text, as on the wire."""

    name: str
    arguments: str = "{}"
    id: str = ""
    extra: dict = field(default_factory=dict)
    """Provider fields of the call that must be sent back with it (Gemini's ``extra_content``)."""

    def to_wire(self) -> dict:
        wire = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        if self.extra:
            wire.update(self.extra)
        return wire


def call_tool(name: str, /, **arguments: Any) -> ToolCall:
    """A tool call for a :class:`ScriptedModel` reply: ``call_tool("lookup", key="a")``."""
    return ToolCall(name=name, arguments=json.dumps(arguments))


@dataclass(slots=True)
class Reply:
    """One assistant turn: text, tool calls, or both."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    finish_reason: str | None = None
    thinking: str | None = None
    """The model's reasoning, where the provider streams it (shown, never sent back)."""
    refusal: str | None = None
    """The model declined to answer: its words, or what the provider said withheld the reply."""
    echo: dict = field(default_factory=dict)
    """Fields the provider needs back on this assistant message when the conversation goes on."""


@dataclass(slots=True)
class ModelRequest:
    """What the loop asks of a model at one step."""

    messages: list[dict]
    """Chat messages in the OpenAI wire format."""
    tools: list[dict] = field(default_factory=list)
    """Tool schemas in the OpenAI wire format (``{"type": "function", "function": {...}}``)."""
    tool_choice: str | dict = "auto"
    """``"auto"``, ``"required"``, ``"none"``, or ``{"type": "function", "function": {"name": ...}}``."""
    options: dict = field(default_factory=dict)
    """Extra request options (temperature, ...), passed through."""
    continues: int = 0
    """How many of ``messages``, from the first, are the very message objects of the loop's previous request,
    unchanged since (a loop never edits a message it has sent; compressing makes a new list): a model that
    kept their encoding may reuse it without checking them again. ``0`` promises nothing."""


@runtime_checkable
class Model(Protocol):
    """Anything that can produce an assistant turn.

    ``name`` is shown wherever a model is named. ``complete`` may call ``on_delta`` with
    pieces of text as they stream; it must be cancellable (cancelling it abandons the call).
    """

    name: str

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply: ...
