"""The OpenAI-compatible model: OpenAI, Azure, and any server speaking the Chat Completions API.

It always uses ``openai.AsyncOpenAI`` (a synchronous client would freeze the kernel's event
loop and every widget button with it). Requests go through the client's documented low-level
``post`` with the body as a plain dict: the client still supplies auth, base_url and headers,
but the per-call parameter transform of ``chat.completions.create`` (most of its CPU cost, and
growing with the transcript) is skipped. Streaming is always on; tool-call deltas are
assembled here. Retries are ours, so a stream dropped half-way is retried too.
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import json
import math
import os
import random
import time
from collections.abc import Callable
from typing import Any

from .._errors import ModelConfigError, ModelError
from ._base import DeltaCallback, ModelRequest, Reply, ToolCall, Usage
from ._http import HTTPStatusError, LeanHTTP, StreamError, TransportError, proxy_configured

__all__ = ("OpenAIModel", "retry_hook")

retry_hook: contextvars.ContextVar[Callable[[int, str, float], None] | None] = contextvars.ContextVar(
    "unity_nb_retry_hook", default=None
)
"""Set by the loop: called as ``hook(attempt, error, delay)`` before each retry (so partial
streamed text can be discarded and the retry shown)."""

_RETRY_STATUS = frozenset({408, 409, 429})


class _Incomplete(Exception):
    """A stream that closed cleanly but never gave a finish reason: retried like a dropped one."""


def _seconds(text: str, scale: float = 1.0) -> float | None:
    try:
        value = float(text) / scale
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None  # "nan" would make sleep() hang


def _retry_after(err: Exception) -> float | None:
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        delay = _seconds(ms, 1000)
        if delay is not None:
            return delay
    value = headers.get("retry-after")
    if not value:
        return None
    delay = _seconds(value)
    if delay is not None:
        return delay
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # unparseable: fall back to our own backoff, still retry
        return None
    return max(0.0, parsed.timestamp() - time.time())


class OpenAIModel:
    """A model served over the OpenAI Chat Completions API.

    ``OpenAIModel("gpt-4.1-mini")`` reads ``OPENAI_API_KEY`` (and ``OPENAI_BASE_URL``) from
    the environment; ``base_url="http://localhost:11434/v1"`` reaches a local server (a key
    is then optional); ``client=`` takes a ready ``openai.AsyncOpenAI`` or
    ``openai.AsyncAzureOpenAI``. ``options`` (temperature, ...) go into every request.

    Failures worth retrying (429, 5xx, 408, 409, timeouts, refused or dropped connections) are
    retried ``max_retries`` times with exponential backoff and jitter, honouring Retry-After.
    The key is never shown: not in the repr, not in errors.

    When it builds its own client (no ``client=``) and no proxy is configured, requests are
    streamed by a lean HTTP/1.1 client (``unity_nb.models._http``) configured from that
    ``AsyncOpenAI`` (base URL, auth and default headers): the generic HTTP stack costs more CPU
    per call than the rest of a tool loop together. ``fast_path=False``, a client handed in
    (Azure included) or a proxy use the client's documented ``post`` instead.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        max_retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        timeout: float = 600.0,
        options: dict | None = None,
        fast_path: bool = True,
    ) -> None:
        import openai  # imported here: the rest of the package works without a network client

        model = model or os.environ.get("UNITY_NB_MODEL")
        if not model:
            raise ModelConfigError(
                "OpenAIModel needs a model name: OpenAIModel('gpt-4.1-mini'), or set UNITY_NB_MODEL"
            )
        own_client = client is None
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            base = base_url or os.environ.get("OPENAI_BASE_URL")
            if not key and not base:
                raise ModelConfigError(
                    "OpenAIModel has no API key and no server: set OPENAI_API_KEY (and OPENAI_BASE_URL "
                    "for another server), or pass api_key=..., base_url=... (e.g. "
                    "'http://localhost:11434/v1' for Ollama) or client=openai.AsyncOpenAI(...)"
                )
            # a local server needs no key, but the client insists on one
            client = openai.AsyncOpenAI(api_key=key or "no-key", base_url=base, max_retries=0, timeout=timeout)
        elif not isinstance(client, openai.AsyncOpenAI):
            raise ModelConfigError(
                f"OpenAIModel(client=...) needs an openai.AsyncOpenAI (or AsyncAzureOpenAI), not "
                f"{type(client).__name__}: a synchronous client would block the event loop"
            )
        else:
            client = client.with_options(max_retries=0)
        self.name = model
        self.client = client
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.options = dict(options or {})
        self.usage = Usage()
        """Tokens used by every call of this model so far."""
        self._openai = openai
        self._lean: LeanHTTP | None = None
        if fast_path and own_client and not proxy_configured():
            headers = {k: v for k, v in client.default_headers.items() if isinstance(v, str)}
            headers.update(client.auth_headers)
            try:
                self._lean = LeanHTTP(str(client.base_url), headers=headers, timeout=timeout)
            except ValueError:
                self._lean = None

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, base_url={str(self.client.base_url)!r})"

    def _scrub(self, text: str) -> str:
        key = getattr(self.client, "api_key", None)
        if isinstance(key, str) and len(key) >= 8:
            text = text.replace(key, "***")
        return text

    def _body(self, request: ModelRequest) -> dict:
        body: dict[str, Any] = {
            "model": self.name,
            "messages": request.messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = request.tools
            body["tool_choice"] = request.tool_choice
        if self.options:
            body.update(self.options)
        if request.options:
            body.update(request.options)
        return body

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply:
        oa = self._openai
        body = self._body(request)
        attempt = 0
        while True:
            try:
                if self._lean is not None:
                    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
                    return await self._assemble(self._lean.stream("/chat/completions", data), on_delta)
                return await self._stream_once(body, on_delta)
            except (oa.APIError, _Incomplete, HTTPStatusError, TransportError, StreamError) as err:
                # status errors, timeouts, refused or dropped connections, an error event inside
                # the stream, or a stream that ended without saying it was finished
                status = getattr(err, "status_code", None)
                retryable = status is None or status in _RETRY_STATUS or status >= 500
                if not retryable or attempt >= self.max_retries:
                    what = f"HTTP {status}" if status else type(err).__name__
                    raise ModelError(
                        self._scrub(f"model {self.name!r} failed ({what}) after {attempt + 1} attempt(s): {err}")
                    ) from None
                delay = _retry_after(err)
                if delay is None:
                    delay = min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)
                delay = min(delay, 60.0)
                attempt += 1
                hook = retry_hook.get()
                if hook is not None:
                    hook(attempt, self._scrub(f"{type(err).__name__}: {err}"), delay)
                await asyncio.sleep(delay)

    async def _stream_once(self, body: dict, on_delta: DeltaCallback | None) -> Reply:
        oa = self._openai
        stream = await self.client.post(
            "/chat/completions", body=body, cast_to=object, stream=True, stream_cls=oa.AsyncStream[object]
        )

        async def chunks():
            try:
                async for chunk in stream:
                    yield chunk
            finally:
                await stream.close()  # also on cancellation: closes the HTTP stream

        return await self._assemble(chunks(), on_delta)

    async def _assemble(self, chunks: Any, on_delta: DeltaCallback | None) -> Reply:
        """A reply from streamed chunks (dicts in the Chat Completions format), tool-call deltas joined."""
        parts: list[str] = []
        calls: dict[int, list] = {}  # index -> [id, name, [argument pieces]]
        usage = Usage()
        finish = None
        model = self.name
        try:
            async for chunk in chunks:
                if not isinstance(chunk, dict):
                    continue
                u = chunk.get("usage")
                if u:
                    usage = Usage(u.get("prompt_tokens") or 0, u.get("completion_tokens") or 0)
                model = chunk.get("model") or model
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text = delta.get("content")
                    if text:
                        parts.append(text)
                        if on_delta is not None:
                            on_delta(text)
                    for tc in delta.get("tool_calls") or ():
                        slot = calls.get(tc.get("index", 0))
                        if slot is None:
                            slot = calls[tc.get("index", 0)] = ["", "", []]
                        if tc.get("id"):
                            slot[0] = tc["id"]
                        fn = tc.get("function") or {}
                        if fn.get("name"):
                            slot[1] += fn["name"]
                        if fn.get("arguments"):
                            slot[2].append(fn["arguments"])
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        finally:
            await chunks.aclose()  # also on cancellation: closes the HTTP stream
        if finish is None:
            raise _Incomplete(f"the stream from {self.name!r} ended before the reply was complete")
        tool_calls = [
            ToolCall(name=name, arguments="".join(args) or "{}", id=cid or f"call_{i}")
            for i, (cid, name, args) in sorted(calls.items())
        ]
        self.usage += usage
        return Reply(
            content="".join(parts) or None, tool_calls=tool_calls, usage=usage, model=model, finish_reason=finish
        )
