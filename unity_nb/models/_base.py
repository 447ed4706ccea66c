"""The model protocol and the types that cross it.

A model is one coroutine: ``complete(request, on_delta=None) -> Reply``. Messages and tool
schemas travel in the OpenAI chat wire format (plain dicts), so the OpenAI-compatible model
sends them untouched and every other model reads one well-known shape.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

__all__ = (
    "MAX_TOKENS", "DeltaCallback", "Model", "ModelRequest", "Reply", "ToolCall", "Usage", "call_tool", "checked_usage",
    "queued", "retry_hook", "token_count", "turn_hook", "wait_hook", "weak_hook",
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

turn_hook: contextvars.ContextVar[Callable[[bool], None] | None] = contextvars.ContextVar(
    "unity_nb_turn_hook", default=None
)
"""Set by whoever runs a model (a batch, for each row): a request that waits for its turn (a rate limit, a server's
one slot) calls ``hook(True)`` as it starts waiting and ``hook(False)`` once its turn came or it gave up
(:func:`queued`), so a row waiting for the model reads *queued*, not *running*. Any model may use it."""


_Hook = TypeVar("_Hook", bound=Callable[..., None])


def weak_hook(hook: _Hook | None) -> _Hook | None:
    """``hook`` (a bound method: what a hook above is set to) through a weak reference to its object; any other
    callable as it is. A model call's context, which holds the hooks, outlives the call wherever something copied
    it: aiohttp's keep-alive timer and a pooled connection's reader keep it while the pool keeps the connection,
    and the hook's object (a loop's turn, a batch's row) would live as long. Once the object is gone the hook does
    nothing."""
    if not inspect.ismethod(hook):
        return hook
    method = weakref.WeakMethod(hook)

    def call(*args: Any) -> None:
        alive = method()
        if alive is not None:
            alive(*args)

    return cast("_Hook", call)


@contextlib.contextmanager
def queued() -> Iterator[None]:
    """Around a wait for a request's turn: the caller's :data:`turn_hook` hears when it starts and ends (a wait
    that does not block costs two calls)."""
    hook = turn_hook.get()
    if hook is None:
        yield
        return
    hook(True)
    try:
        yield
    finally:
        hook(False)


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


MAX_TOKENS = 100_000_000
"""The most tokens one call is believed to count, in or out: a provider's count above it is not a count."""


def token_count(value: Any) -> int | None:
    """``value`` as a count of tokens: a whole number from 0 to :data:`MAX_TOKENS` (``12.0`` is 12); ``None`` for
    anything else (a negative, a fraction, text, ``True``, an absurd number)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and 0 <= value <= MAX_TOKENS:
        return value
    return None


def checked_usage(usage: Any) -> tuple[Usage, str | None]:
    """``usage`` as spending can count it, and what was wrong with it: counts that are not whole numbers from 0 to
    :data:`MAX_TOKENS` are dropped (0, and the usage marked ``estimated``), never negative, never text."""
    if isinstance(usage, Usage):
        said_in, said_out = usage.input_tokens, usage.output_tokens
        if type(said_in) is int and type(said_out) is int and 0 <= said_in <= MAX_TOKENS and \
                0 <= said_out <= MAX_TOKENS:  # the usual counts (every model call's): no more to look at
            return usage, None
        tokens_in, tokens_out = token_count(said_in), token_count(said_out)
        if tokens_in is not None and tokens_out is not None:
            return usage, None
        raw = f"input_tokens={usage.input_tokens!r:.40}, output_tokens={usage.output_tokens!r:.40}"
    else:
        tokens_in = tokens_out = None
        raw = f"{usage!r:.100}"
    fixed = Usage(tokens_in or 0, tokens_out or 0, estimated=True)
    return fixed, f"the model reported usage {raw}, which is not a count of tokens: the bad counts are taken as 0"


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
    truncated: bool = False
    """The stream ended with neither a ``finish_reason`` nor ``[DONE]``: the reply may be cut off (its finish is
    inferred). It is used, marked so in its ``model_response`` event, and never cached."""
    warnings: list[str] = field(default_factory=list)
    """What the client noticed about this reply and set right (usage that was not a count of tokens, a stream
    that may be cut off): recorded in its ``model_response`` event."""
    id: str | None = None
    """The provider's id of the reply (``chatcmpl-...``), where it gives one."""


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
    once: bool = False
    """The loop expects no request to continue this one (a loop's first call, offering no tools: its answer ends
    it, as a map row's does): a model need not keep what would help encode a continuation. A hint only: a request
    that continues it after all is sent the same, encoded whole."""


@runtime_checkable
class Model(Protocol):
    """Anything that can produce an assistant turn.

    ``name`` is shown wherever a model is named. ``complete`` may call ``on_delta`` with
    pieces of text as they stream; it must be cancellable (cancelling it abandons the call).
    """

    name: str

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply: ...
