"""Replies assembled from Chat Completions chunks, as providers really send them.

One :class:`Assembler` takes the decoded JSON payloads of a stream (or the one object of a reply
that was not streamed) and builds a :class:`Reply`. It is written against the general shape of the
format, not against any one provider's sample:

- ``delta.content`` is a string, or a list of parts (``{"type": "text", "text": ...}``; thinking
  parts, ``{"type": "thinking", "thinking": str | [parts]}``, go to ``Reply.thinking``; refusal
  parts to ``Reply.refusal``);
- reasoning arrives as ``reasoning_content``, ``reasoning`` or ``thinking`` on the delta;
- tool-call deltas are joined by ``index`` where there is one; a delta with no ``index`` continues
  the newest call unless it brings a new id or a second name, which start a new call. A call's
  fields besides ``index``, ``id``, ``type`` and ``function`` (Gemini's ``extra_content`` with its
  thought signature) are kept in ``ToolCall.extra`` and sent back with the call;
- reasoning is not sent back, except ``reasoning_content`` of a turn that called tools (``Reply.echo``),
  which DeepSeek's thinking mode requires;
- usage comes from ``usage`` or ``x_groq.usage``, the newest one counting;
- a stream may end without a ``finish_reason``: it is inferred (``tool_calls`` or ``stop``);
- an ``error`` object in a payload is the provider speaking: :class:`ProviderError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ._base import DeltaCallback, Reply, ToolCall, Usage

__all__ = ("Assembler", "ProviderError", "provider_error")

_RETRY_CODES = frozenset({408, 409, 429})
_CALL_KEYS = frozenset({"index", "id", "type", "function"})
_PLAIN = frozenset({"role", "content"})
"""A delta with no other keys carries at most text: no reasoning, refusal or tool calls to look for."""


class ProviderError(Exception):
    """The provider reported an error: in the stream, or as a JSON body with a success status."""

    def __init__(self, message: str, code: Any = None) -> None:
        super().__init__(message)
        self.code = code
        status = code if isinstance(code, int) else int(code) if isinstance(code, str) and code.isdigit() else None
        self.status_code = status
        self.retryable = status is None or status in _RETRY_CODES or status >= 500


def provider_error(payload: Any) -> ProviderError | None:
    """The error a decoded payload carries, if it is one (``{"error": ...}``)."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if not error:
        return None
    if isinstance(error, dict):
        message = error.get("message") or error.get("msg") or json.dumps(error, ensure_ascii=False)[:500]
        code = error.get("code") if error.get("code") is not None else error.get("status")
        return ProviderError(str(message), code)
    return ProviderError(str(error), payload.get("code") or payload.get("status"))


class _Call:
    __slots__ = ("args", "extra", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args: list[str] = []
        self.extra: dict[str, Any] = {}


class Assembler:
    """Feed it payloads with :meth:`add`; :meth:`reply` gives the assembled turn."""

    __slots__ = (
        "_by_index",
        "_calls",
        "_on_text",
        "_on_thinking",
        "_refusal",
        "_text",
        "_thinking",
        "_thinking_field",
        "chunks",
        "finish",
        "model",
        "usage",
    )

    def __init__(self, model: str, on_delta: DeltaCallback | None = None) -> None:
        self.model = model
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._thinking_field = ""
        self._refusal: list[str] = []
        self._calls: list[_Call] = []
        self._by_index: dict[Any, _Call] = {}
        self.usage: Usage | None = None
        self.finish: str | None = None
        self.chunks = 0
        self._on_text = on_delta
        self._on_thinking: Callable[[str], None] | None = getattr(on_delta, "thinking", None)

    # -- input --------------------------------------------------------------------------------

    def add(self, payload: Any) -> None:
        if not isinstance(payload, dict):
            return
        get = payload.get
        if get("error"):  # the provider speaking (a falsy "error" is not one)
            err = provider_error(payload)
            if err is not None:
                raise err
        self.chunks += 1
        usage = get("usage")
        if not usage:
            groq = get("x_groq")
            if isinstance(groq, dict):
                usage = groq.get("usage")
        if isinstance(usage, dict):
            self.usage = Usage(usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0)
        model = get("model")
        if isinstance(model, str) and model:
            self.model = model
        for choice in get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) not in (0, None):
                continue  # only the first choice is the reply
            delta = choice.get("delta") or choice.get("message") or {}
            if isinstance(delta, dict):
                if delta.keys() <= _PLAIN:  # the usual delta: text, or nothing (a role, a last empty one)
                    content = delta.get("content")
                    if isinstance(content, str):
                        if content:
                            self._emit_text(content)
                    elif content is not None:
                        self._delta(delta)
                else:
                    self._delta(delta)
            reason = choice.get("finish_reason")
            if reason:
                if reason == "error":
                    raise ProviderError(
                        f"the provider ended the reply with finish_reason 'error': {json.dumps(choice)[:300]}")
                self.finish = str(reason)

    def _delta(self, delta: dict) -> None:
        content = delta.get("content")
        if isinstance(content, str):
            if content:
                self._emit_text(content)
        elif isinstance(content, list):
            for part in content:
                self._part(part)
        for key in ("reasoning_content", "reasoning", "thinking"):
            value = delta.get(key)
            if isinstance(value, str) and value:
                self._thinking_field = key
                self._emit_thinking(value)
                break
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for tc in calls:
                if isinstance(tc, dict):
                    self._tool_delta(tc)

    def _part(self, part: Any) -> None:
        if isinstance(part, str):
            if part:
                self._emit_text(part)
            return
        if not isinstance(part, dict):
            return
        kind = part.get("type")
        if kind in ("thinking", "reasoning"):
            inner = part.get(kind) if part.get(kind) is not None else part.get("text")
            for text in _texts(inner):
                self._emit_thinking(text)
        elif kind == "refusal":
            self._refusal.extend(_texts(part.get("refusal")))
        elif kind in ("text", "output_text", None):
            value = part.get("text")
            if isinstance(value, str) and value:
                self._emit_text(value)
        # other parts (images, audio, citations) are not text of the answer

    def _emit_text(self, text: str) -> None:
        self._text.append(text)
        if self._on_text is not None:
            self._on_text(text)

    def _emit_thinking(self, text: str) -> None:
        self._thinking.append(text)
        if self._on_thinking is not None:
            self._on_thinking(text)

    def _tool_delta(self, tc: dict) -> None:
        index = tc.get("index")
        cid = tc.get("id") if isinstance(tc.get("id"), str) else ""
        fn: dict = tc["function"] if isinstance(tc.get("function"), dict) else {}
        name = fn.get("name") if isinstance(fn.get("name"), str) else ""
        if isinstance(index, int):
            call = self._by_index.get(index)
            if call is not None and cid and call.id and cid != call.id:  # a new call reusing an index
                call = None
            if call is None:
                call = self._by_index[index] = self._new()
        else:
            call = self._calls[-1] if self._calls else None
            if (call is None or (cid and call.id and cid != call.id)
                    or (name and call.name and not (cid and cid == call.id))):
                call = self._new()
        if cid:
            call.id = cid
        if name and not call.name:
            call.name = name
        args = fn.get("arguments")
        if isinstance(args, str):
            if args:
                call.args.append(args)
        elif args is not None:  # some servers send the arguments as an object
            call.args.append(json.dumps(args, ensure_ascii=False))
        for key, value in tc.items():
            if key not in _CALL_KEYS:
                call.extra[key] = value

    def _new(self) -> _Call:
        call = _Call()
        self._calls.append(call)
        return call

    # -- output -------------------------------------------------------------------------------

    def reply(self) -> Reply:
        seen: set[str] = set()
        calls = []
        for i, c in enumerate(self._calls):
            cid = c.id or f"call_{i}"
            if cid in seen:
                cid = f"{cid}_{i}"
            seen.add(cid)
            calls.append(ToolCall(name=c.name, arguments="".join(c.args) or "{}", id=cid, extra=c.extra))
        refusal = "".join(self._refusal) or None
        finish = self.finish or ("tool_calls" if calls else "stop")
        if finish == "content_filter" and refusal is None and not self._text and not calls:
            refusal = "the provider's content filter withheld the reply"
        thinking = "".join(self._thinking) or None
        echo = {}
        if thinking and calls and self._thinking_field == "reasoning_content":
            # DeepSeek's thinking mode answers 400 unless the reasoning of a turn that called tools
            # is sent back with it; reasoning is otherwise never sent back (some providers reject it)
            echo["reasoning_content"] = thinking
        return Reply(
            content="".join(self._text) or None,
            tool_calls=calls,
            usage=self.usage or Usage(),
            model=self.model,
            finish_reason=finish,
            thinking=thinking,
            refusal=refusal,
            echo=echo,
        )


def _texts(value: Any) -> list[str]:
    """The text of a part's value: a string, a part, or a list of either."""
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, dict):
        return _texts(value.get("text") if value.get("text") is not None else value.get("thinking"))
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return []
