"""A model whose replies a Python function computes: for tests, demos and offline notebooks."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence

from .._errors import UserError
from ._base import DeltaCallback, ModelRequest, Reply, ToolCall, Usage

__all__ = ("ScriptedModel",)

ScriptOutput = str | ToolCall | Sequence[ToolCall] | Reply
Script = Callable[[list[dict], list[dict]], ScriptOutput | Awaitable[ScriptOutput]]


def _as_reply(out: ScriptOutput) -> Reply:
    if isinstance(out, Reply):
        return out
    if isinstance(out, str):
        return Reply(content=out)
    if isinstance(out, ToolCall):
        return Reply(tool_calls=[out])
    if isinstance(out, (list, tuple)) and all(isinstance(c, ToolCall) for c in out):
        return Reply(tool_calls=list(out))
    raise UserError(
        f"a ScriptedModel script returned {type(out).__name__}; return a str (the answer), "
        "a ToolCall (unity_nb.call_tool(name, **args)), a list of ToolCalls, or a Reply"
    )


class ScriptedModel:
    """Replies computed by ``script(messages, tools)`` (sync or async), or taken from a list.

    ``messages`` and ``tools`` are what a real model would receive (OpenAI wire format). The
    script returns the answer text, a :class:`ToolCall` (see :func:`unity_nb.call_tool`), a
    list of them, or a :class:`Reply`. With ``chunk`` set, text streams in pieces of that many
    characters, ``delay`` seconds apart, so a demo looks live. It is named ``"scripted"``
    wherever a model name is shown.
    """

    provider = "unity_nb.scripted"
    """What traces name its provider (``gen_ai.provider.name``): no provider's server is called."""

    def __init__(
        self,
        script: Script | Iterable[ScriptOutput],
        *,
        chunk: int | None = None,
        delay: float = 0.0,
        name: str = "scripted",
    ) -> None:
        if callable(script):
            self._script: Script = script
        else:
            if isinstance(script, (str, bytes, Reply, ToolCall)) or not isinstance(script, Iterable):
                single = isinstance(script, (str, Reply, ToolCall))
                one = f"; for one reply, ScriptedModel([{script!r}])" if single else ""
                raise UserError(
                    f"ScriptedModel takes a function script(messages, tools) returning a reply, or a list of "
                    f"replies (each a str, a ToolCall, a list of ToolCalls or a Reply), not "
                    f"{type(script).__name__} {script!r:.80}{one}"
                )
            replies = iter(list(script))

            def from_list(messages: list[dict], tools: list[dict]) -> ScriptOutput:
                try:
                    return next(replies)
                except StopIteration:
                    raise UserError("the ScriptedModel's list of replies is used up") from None

            self._script = from_list
        self.chunk = chunk
        self.delay = delay
        self.name = name if name.startswith("scripted") else f"scripted:{name}"
        self.requests: list[ModelRequest] = []
        """Every request received, in order (for tests)."""
        self._ids = itertools.count(1)
        self._seen: list[dict] = []
        self._chars = 0
        """The usage estimate's running count: the messages last counted, and their characters."""

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r})"

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply:
        self.requests.append(request)
        out = self._script(request.messages, request.tools)
        if inspect.isawaitable(out):
            out = await out
        reply = _as_reply(out)
        for call in reply.tool_calls:
            if not call.id:
                call.id = f"call_{next(self._ids)}"
        if reply.content and (self.chunk or self.delay):
            size = self.chunk or len(reply.content)
            for i in range(0, len(reply.content), size):
                if self.delay:
                    await asyncio.sleep(self.delay)
                if on_delta is not None:
                    on_delta(reply.content[i : i + size])
        elif reply.content and on_delta is not None:
            on_delta(reply.content)
        if self.delay and not reply.content:
            await asyncio.sleep(self.delay)
        if not reply.usage.input_tokens and not reply.usage.output_tokens:
            chars_in = self._chars_in(request.messages)
            reply.usage = Usage(chars_in // 4 + 1, len(reply.content or "") // 4 + 1)
        reply.model = reply.model or self.name
        return reply

    def _chars_in(self, messages: list[dict]) -> int:
        """The characters of the messages' contents, counted once each: a loop's next request is the
        previous one plus a few messages, so only those are added; any other request is counted anew.
        (The earlier messages are compared in C, by identity first, not counted again; a message
        dict changed in place after it was counted is not seen.)"""
        seen = self._seen
        n = len(seen)
        if n and len(messages) >= n and messages[n - 1] is seen[-1] and messages[:n] == seen:
            total = self._chars + sum(len(str(m.get("content") or "")) for m in itertools.islice(messages, n, None))
        else:
            total = sum(len(str(m.get("content") or "")) for m in messages)
        self._seen, self._chars = list(messages), total  # a copy: the caller may change its list
        return total
