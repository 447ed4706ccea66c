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
- usage comes from ``usage`` or ``x_groq.usage``, the newest one counting; counts that are not whole numbers
  from 0 to ``MAX_TOKENS`` (negative, text, fractions, absurd) are ignored with a warning (``Reply.warnings``),
  and the reply's tokens are then estimated;
- a stream may end without a ``finish_reason``: it is inferred (``tool_calls`` or ``stop``), but a stream
  that said nothing at all (no text, call, refusal or ``finish_reason``) is no reply (:meth:`Assembler.said_anything`);
- text, reasoning and arguments past ``max_chars`` together raise :class:`ReplyTooLong`;
- an ``error`` object in a payload is the provider speaking: :class:`ProviderError`;
- ``choices`` that is not a list (nor absent, nor null) is no chunk of this format: :class:`MalformedChunk`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .._json import loads
from ._base import DeltaCallback, Reply, ToolCall, Usage, token_count

__all__ = (
    "Assembler", "MalformedChunk", "ProviderError", "ReplyTooLong", "bare_error", "error_words", "provider_error",
    "refused_code",
)

_RETRY_CODES = frozenset({408, 409, 429})
_CALL_KEYS = frozenset({"index", "id", "type", "function"})
_PLAIN = frozenset({"role", "content"})
"""A delta with no other keys carries at most text: no reasoning, refusal or tool calls to look for."""


class ReplyTooLong(Exception):
    """A reply's text, reasoning and tool-call arguments passed the assembler's ``max_chars``."""


class MalformedChunk(ValueError):
    """A payload whose shape is not a Chat Completions chunk's (``choices`` that is not a list): the response is
    not one this client can read."""


_REFUSED = frozenset({
    # OpenAI, Azure, DeepSeek, Groq, OpenRouter (type or code)
    "invalid_request_error", "context_length_exceeded", "invalid_api_key", "authentication_error",
    "permission_error", "not_found_error", "model_not_found", "request_too_large", "string_above_max_length",
    "unsupported_parameter", "unsupported_value", "tool_use_failed", "content_filter", "content_policy_violation",
    "insufficient_quota", "billing_hard_limit_reached", "bad_request",
    # Google's statuses (Gemini)
    "invalid_argument", "failed_precondition", "permission_denied", "unauthenticated", "not_found",
})
"""Text codes (an error's ``code``, ``type`` or ``status``, in any case; and any ``invalid_...``) that say the
request itself is refused: the same request would be refused again, so it is not retried. Any other text code
(``server_error``, ``rate_limit_exceeded``, ``overloaded_error``, ``UNAVAILABLE``...) is taken as passing."""


def refused_code(names: Any) -> str | None:
    """The first of ``names`` (an error's text codes) that says the request itself is refused, or None."""
    for name in names:
        if isinstance(name, str) and not name.isdigit():
            low = name.strip().lower()
            if low in _REFUSED or low.startswith("invalid_"):
                return name
    return None


class ProviderError(Exception):
    """The provider reported an error: in the stream, or as a JSON body with a success status.

    ``retryable``: a numeric code decides as an HTTP status would (429, 408, 409 and 5xx are retried); else a
    text code that says the request itself is refused (``context_length_exceeded``, ``invalid_request_error``,
    ``invalid_api_key``: :data:`_REFUSED`) is not retried, and ``refused`` names it; anything else is."""

    def __init__(self, message: str, code: Any = None, names: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        status = code if isinstance(code, int) else int(code) if isinstance(code, str) and code.isdigit() else None
        self.status_code = status
        self.refused = refused_code((code, *names)) if status is None else None
        """The text code that says the request itself is refused (then it is not retried), or None."""
        if status is not None:
            self.retryable = status in _RETRY_CODES or status >= 500
        else:
            self.retryable = self.refused is None


def provider_error(payload: Any) -> ProviderError | None:
    """The error a decoded payload carries, if it is one (``{"error": ...}``)."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if not error:
        return None
    message = error_words(payload) or json.dumps(error, ensure_ascii=False)[:500]
    if isinstance(error, dict):
        return _coded(message, error)
    return _coded(message, payload)


def bare_error(payload: Any) -> ProviderError:
    """An error said outside the ``{"error": ...}`` shape (an ``error`` event, a bare JSON line): the payload, with
    its own ``code``, ``type`` and ``status`` if it has them."""
    message = json.dumps(payload, ensure_ascii=False)[:500]
    return _coded(message, payload) if isinstance(payload, dict) else ProviderError(message)


def _coded(message: str, error: dict) -> ProviderError:
    code = error.get("code") if error.get("code") is not None else error.get("status")
    return ProviderError(message, code, (error.get("type"), error.get("status")))


def error_words(payload: Any) -> str | None:
    """The provider's own words in a decoded error body, whatever its shape; None when it has none.

    Read from every shape seen: ``{"error": {"message", "code", "failed_generation", "metadata":
    {"raw"}}}`` (OpenAI, Azure, DeepSeek, Groq, OpenRouter, Perplexity), ``{"error": "..."}`` (Ollama),
    a top-level ``message`` (Mistral, vLLM), ``detail`` as a string or FastAPI's list of ``{"loc", "msg"}``,
    and a list of such bodies (Gemini's OpenAI endpoint). Used for HTTP error bodies on both request
    paths and for errors inside a stream.
    """
    if isinstance(payload, list):
        found = [w for p in payload[:8] if (w := error_words(p))]
        return "; ".join(found) or None
    if not isinstance(payload, dict):
        return None
    parts: list[str] = []

    def add(value: Any) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str):
            value = value.strip()
            if value and not any(value in p for p in parts):
                parts.append(value)

    def details(value: Any) -> None:
        if isinstance(value, str):
            add(value)
        elif isinstance(value, dict):  # Mistral: {"message": {"detail": [...]}}
            details(value.get("message") or value.get("msg"))
            details(value.get("detail"))
        elif isinstance(value, list):  # FastAPI's validation errors: [{"loc": [...], "msg": ...}]
            for item in value[:20]:
                if isinstance(item, dict) and item.get("msg"):
                    loc = item.get("loc")
                    where = ".".join(str(x) for x in loc) if isinstance(loc, list) else ""
                    add(f"{where}: {item['msg']}" if where else item["msg"])
                else:
                    details(item)

    error = payload.get("error")
    code = None
    if isinstance(error, dict):
        details(error.get("message") or error.get("msg"))
        details(error.get("detail"))
        meta = error.get("metadata")
        if isinstance(meta, dict):  # OpenRouter: the upstream provider's own error
            raw = meta.get("raw")
            if isinstance(raw, str):
                try:
                    inner = error_words(loads(raw))
                except ValueError:
                    inner = None
                add(inner or raw)
            elif raw is not None:
                add(error_words(raw) or json.dumps(raw, ensure_ascii=False)[:2000])
            if isinstance(meta.get("provider_name"), str) and parts:
                parts[-1] = f"{parts[-1]} (from {meta['provider_name']})"
        generation = error.get("failed_generation")
        if generation:
            add(f"failed_generation: {generation}")
        code = error.get("code") or error.get("type")
    elif isinstance(error, str):
        add(error)
    elif isinstance(error, list):
        add(error_words(error))
    details(payload.get("message"))
    details(payload.get("detail"))
    generation = payload.get("failed_generation")
    if generation:
        add(f"failed_generation: {generation}")
    if not parts and isinstance(error, dict) and error:
        add(json.dumps(error, ensure_ascii=False)[:2000])
    if not parts:
        return None
    text = "; ".join(parts)
    if isinstance(code, str) and code and not code.isdigit() and code not in text:
        text = f"{text} ({code})"
    return text


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
        "_max",
        "_on_text",
        "_on_thinking",
        "_refusal",
        "_size",
        "_text",
        "_thinking",
        "_thinking_field",
        "chunks",
        "finish",
        "id",
        "model",
        "usage",
        "warnings",
    )

    def __init__(self, model: str, on_delta: DeltaCallback | None = None, *, max_chars: int | None = None) -> None:
        self.model = model
        self._size = 0
        self._max = max_chars if max_chars is not None else 1 << 62
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._thinking_field = ""
        self._refusal: list[str] = []
        self._calls: list[_Call] = []
        self._by_index: dict[Any, _Call] = {}
        self.usage: Usage | None = None
        self.warnings: list[str] = []
        """Usage ignored because it was not a count of tokens (said once each)."""
        self.finish: str | None = None
        self.id: str | None = None
        """The provider's id of the reply (the first a chunk gives)."""
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
            self._usage(usage)
        model = get("model")
        if isinstance(model, str) and model:
            self.model = model
        if self.id is None:
            rid = get("id")
            if isinstance(rid, str) and rid:
                self.id = rid
        choices = get("choices")
        if choices is not None and not isinstance(choices, list):
            raise MalformedChunk(f"a chunk whose choices is not a list but {type(choices).__name__} {choices!r:.100}")
        for choice in choices or ():
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

    def _usage(self, usage: dict) -> None:
        raw_in, raw_out = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
        tokens_in, tokens_out = token_count(raw_in), token_count(raw_out)
        if tokens_in is not None and tokens_out is not None:
            self.usage = Usage(tokens_in, tokens_out)
            return
        said = (f"the provider reported usage prompt_tokens={raw_in!r:.40}, completion_tokens={raw_out!r:.40}, "
                "which is not a count of tokens: ignored (the tokens are estimated)")
        if said not in self.warnings:
            self.warnings.append(said)

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
            self._grow(len(refusal))
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
            for text in _texts(part.get("refusal")):
                self._grow(len(text))
                self._refusal.append(text)
        elif kind in ("text", "output_text", None):
            value = part.get("text")
            if isinstance(value, str) and value:
                self._emit_text(value)
        # other parts (images, audio, citations) are not text of the answer

    def _grow(self, n: int) -> None:
        self._size += n
        if self._size > self._max:
            raise ReplyTooLong(f"more than {self._max} characters of text, reasoning and arguments")

    def _emit_text(self, text: str) -> None:
        self._size += len(text)
        if self._size > self._max:
            self._grow(0)
        self._text.append(text)
        if self._on_text is not None:
            self._on_text(text)

    def _emit_thinking(self, text: str) -> None:
        self._grow(len(text))
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
                self._grow(len(args))
                call.args.append(args)
        elif args is not None:  # some servers send the arguments as an object
            text = json.dumps(args, ensure_ascii=False)
            self._grow(len(text))
            call.args.append(text)
        for key, value in tc.items():
            if key not in _CALL_KEYS:
                call.extra[key] = value

    def _new(self) -> _Call:
        call = _Call()
        self._calls.append(call)
        return call

    # -- output -------------------------------------------------------------------------------

    def said_anything(self) -> bool:
        """Whether the payloads so far make a reply: some text, a tool call, a refusal or a ``finish_reason``
        (reasoning alone, or a role chunk alone, is a stream that broke off before it answered)."""
        return bool(self._text or self._calls or self._refusal or self.finish)

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
        # by position, in the order of its fields (a class called with keywords packs and unpacks a dict per call)
        return Reply(
            "".join(self._text) or None,  # content
            calls,  # tool_calls
            self.usage or Usage(),  # usage
            self.model,  # model
            finish,  # finish_reason
            thinking,  # thinking
            refusal,  # refusal
            echo,  # echo
            False,  # truncated
            list(self.warnings),  # warnings
            self.id,  # id
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
