"""The OpenAI-compatible model: OpenAI, Azure, and any server speaking the Chat Completions API.

It is configured as ``openai.AsyncOpenAI`` would be (key, base URL, the headers its environment sets),
without importing openai unless its own request path is asked for (a client handed in,
``fast_path=False``, or ``model.client``), and it never takes a synchronous client (that would freeze
the kernel's event loop and every widget button with it). The request body is built here as a plain
dict: the per-call parameter transform of ``chat.completions.create`` is most of its CPU cost and
grows with the transcript. It is sent by
``aiohttp`` (``_transport``), or by the client's own documented ``post`` (``_client_path``) for a client handed in.
Both paths hand raw bytes to one SSE decoder (``_sse``) and one assembler (``_assemble``), so every
provider's dialect is read the same way on both. Streaming is always on. Retries are ours, so a
stream dropped half-way is retried too.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import time
from typing import Any

from .._errors import ModelConfigError, ModelError
from .._json import loads
from ._assemble import Assembler, MalformedChunk, ProviderError, ReplyTooLong, bare_error, provider_error
from ._base import DeltaCallback, ModelRequest, Reply, Usage, retry_hook
from ._client_path import ClientTransport, own_http_client
from ._limits import RateLimit, rate_limit_of
from ._prices import prefetch as prefetch_prices
from ._sse import LineTooLong, SSEDecoder
from ._transport import (
    AioHTTPTransport,
    Deadline,
    HTTPStatusError,
    RequestBody,
    Response,
    Silence,
    Transport,
    TransportError,
    base_url_text,
    check_base_url,
    stalled_status,
)
from ._wirecache import WireCache

__all__ = ("OpenAIModel", "retry_hook")

_RETRY_STATUS = frozenset({408, 409, 429})
_MAX_RETRY_WAIT = 60.0
"""The longest wait before a retry, whatever a Retry-After asks (a longer ask is said in the retry's message)."""


class _Incomplete(Exception):
    """A stream that ended without a reply (no text, no tool call, no refusal, no finish_reason): retried
    like a dropped one. A server out of slots answers so (llama.cpp's: a role chunk, ``[DONE]``, then a
    broken body)."""


class _BadStream(Exception):
    """A response that is not a Chat Completions stream (a data line that is not JSON, an HTML page)."""


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


def _headers(key: str) -> dict[str, str]:
    """The headers the openai client would send from its configuration: the key, and what its environment sets
    (``OPENAI_ORG_ID``, ``OPENAI_PROJECT_ID``, ``OPENAI_CUSTOM_HEADERS``: one ``Name: value`` a line)."""
    from .._version import __version__

    headers = {"User-Agent": f"unity_nb/{__version__}", "Authorization": f"Bearer {key}"}
    for name, env in (("OpenAI-Organization", "OPENAI_ORG_ID"), ("OpenAI-Project", "OPENAI_PROJECT_ID")):
        value = os.environ.get(env)
        if value is not None:
            headers[name] = value
    custom = os.environ.get("OPENAI_CUSTOM_HEADERS")
    for line in (custom or "").split("\n"):
        name, colon, value = line.partition(":")
        if colon and name.strip():
            headers[name.strip()] = value.strip()
    return headers


class OpenAIModel:
    """A model served over the OpenAI Chat Completions API.

    ``OpenAIModel("gpt-4.1-mini")`` reads ``OPENAI_API_KEY`` (and ``OPENAI_BASE_URL``) from
    the environment; ``base_url="http://localhost:11434/v1"`` reaches a local server (a key
    is then optional); ``client=`` takes a ready ``openai.AsyncOpenAI`` or
    ``openai.AsyncAzureOpenAI``. ``options`` (temperature, ...) go into every request.

    ``max_line_bytes`` bounds one line of the stream (8 MiB) and ``max_reply_chars`` one reply's text,
    reasoning and tool-call arguments together (4 million characters): a response past either fails
    with a :class:`ModelError` naming the limit, and memory stays bounded whatever a server sends
    (a gzip bomb included). When the provider reports no usage, it is estimated (about 4 bytes of the
    request's JSON, and 4 characters of the reply, a token) and marked ``Usage.estimated``.

    ``timeout`` bounds silence, not length: an attempt that receives no complete line of the stream
    for ``timeout`` seconds (nothing at all, or a trickle that never finishes a line) is abandoned
    and retried, while a long generation that keeps sending is never cut. ``connect_timeout``
    bounds opening a connection. Failures worth retrying (429, 5xx, 408, 409, timeouts, refused or
    dropped connections, a provider's error event) are retried ``max_retries`` times with
    exponential backoff and jitter, honouring Retry-After; each retry is announced through
    ``retry_hook`` (the loop shows it). The key is never shown: not in the repr, not in errors.

    Requests go through aiohttp with one connection pool per model (``fast_path=False``, or a
    client handed in, uses the client's own ``post`` instead). A redirect to another host than the base URL's is
    not followed (a client handed in follows its own settings: ``_client_path``). Close the pool with
    ``await model.close()`` or ``async with OpenAIModel(...) as model``; a model that is dropped
    unclosed closes its sockets when it is collected.
    """

    limits_itself = True
    """Its :class:`RateLimit` is taken per attempt (retries included), and learned from response headers."""

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
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        options: dict | None = None,
        fast_path: bool = True,
        max_line_bytes: int = 8 * 1024 * 1024,
        max_reply_chars: int = 4_000_000,
    ) -> None:
        model = model or os.environ.get("UNITY_NB_MODEL")
        if not model:
            raise ModelConfigError(
                "OpenAIModel needs a model name: OpenAIModel('gpt-4.1-mini'), or set UNITY_NB_MODEL"
            )
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
                raise ModelConfigError(f"OpenAIModel({name}=...) takes a positive number of seconds, not {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ModelConfigError(f"OpenAIModel(max_retries=...) takes a whole number >= 0, not {max_retries!r}")
        for name, value in (("max_line_bytes", max_line_bytes), ("max_reply_chars", max_reply_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
                raise ModelConfigError(f"OpenAIModel({name}=...) takes a whole number >= 1024, not {value!r}")
        self._owns_client = client is None
        self._client: Any = None
        self._connect_timeout = float(connect_timeout)
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            base = base_url or os.environ.get("OPENAI_BASE_URL")
            if not key and not base:
                raise ModelConfigError(
                    "OpenAIModel has no API key and no server: set OPENAI_API_KEY (and OPENAI_BASE_URL "
                    "for another server), or pass api_key=..., base_url=... (e.g. "
                    "'http://localhost:11434/v1' for Ollama) or client=openai.AsyncOpenAI(...)"
                )
            if base:
                try:
                    check_base_url(base)
                except ValueError as err:
                    raise ModelConfigError(f"OpenAIModel: {err}") from None
            self._key: str | None = key or "no-key"  # a local server needs no key; the openai client insists on one
            self.base_url = base_url_text(base or "https://api.openai.com/v1")
            """The server's base URL, as the openai client writes it (``str(model.client.base_url)``)."""
        else:
            import openai

            if not isinstance(client, openai.AsyncOpenAI):
                raise ModelConfigError(
                    f"OpenAIModel(client=...) needs an openai.AsyncOpenAI (or AsyncAzureOpenAI), not "
                    f"{type(client).__name__}: a synchronous client would block the event loop"
                )
            self._client = client.with_options(max_retries=0)
            self._key = getattr(client, "api_key", None)
            self.base_url = str(client.base_url)
        self.name = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = float(timeout)
        self.max_line_bytes = max_line_bytes
        """The longest line of a stream accepted, in bytes."""
        self.max_reply_chars = max_reply_chars
        """The most characters of text, reasoning and tool-call arguments one reply may carry."""
        self.options = dict(options or {})
        self.usage = Usage()
        self._last_tokens = 0
        """Tokens used by every call of this model so far."""
        self.wire_cache = WireCache()
        """The JSON of recent requests' messages, reused by the next request of the same conversation
        (its ``hits`` and ``misses`` count requests); used on the aiohttp path."""
        self._transport: Transport
        if fast_path and self._owns_client:
            # configured as the openai client would be (its key, base URL and the headers its environment sets),
            # without importing it: the SDK is imported only when its own path is asked for
            self._transport = AioHTTPTransport(
                self.base_url, headers=_headers(self._key or "no-key"), connect_timeout=connect_timeout,
                read_timeout=timeout,
            )
        else:
            self._transport = ClientTransport(self.client, read_timeout=self.timeout)

    @property
    def client(self) -> Any:
        """The ``openai.AsyncOpenAI`` behind this model: the one handed in, else one made (and openai imported)
        when first asked for, configured as the model is. The default request path does not use it."""
        if self._client is None:
            import openai

            timeout = openai.Timeout(self.timeout, connect=self._connect_timeout)  # redirects: own_http_client
            self._client = openai.AsyncOpenAI(api_key=self._key, base_url=self.base_url, max_retries=0,
                                              timeout=timeout, http_client=own_http_client(self.base_url, timeout))
        return self._client

    def __repr__(self) -> str:
        return f"OpenAIModel({self.name!r}, base_url={self.base_url!r})"

    def __reduce__(self) -> tuple:
        """Pickled (for another process: a Ray worker) as its settings, never its connections nor its key: the
        other process reads ``OPENAI_API_KEY`` from its own environment. A key given in code (``api_key=``), or a
        client handed in, is refused: neither is sent elsewhere."""
        from .._errors import UserError

        env = os.environ.get("OPENAI_API_KEY")
        if not self._owns_client:
            raise UserError(f"{self!r} was made with client=...: a client is not sent to other processes; make it "
                            "with base_url= (and OPENAI_API_KEY in every process's environment)")
        if self._key not in (None, "no-key", env):
            raise UserError(f"{self!r} holds a key given in code (api_key=...), which is never sent to other "
                            "processes: set OPENAI_API_KEY in the environment of the kernel and of every worker "
                            "instead (on Ray: the environment its nodes start with)")
        settings = {
            "base_url": self.base_url, "max_retries": self.max_retries, "backoff": self.backoff,
            "max_backoff": self.max_backoff, "timeout": self.timeout, "connect_timeout": self._connect_timeout,
            "options": dict(self.options), "max_line_bytes": self.max_line_bytes,
            "max_reply_chars": self.max_reply_chars,
        }
        return _rebuilt, (self.name, settings, self._key == env and env is not None)

    # -- lifecycle ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Close this model's connections (and its client, if it made it). It can be used again after."""
        await self._transport.close()
        if self._owns_client and self._client is not None:
            await self._client.close()

    def close_now(self) -> None:
        """Close the connection pool without awaiting: for exit hooks, where no event loop may run."""
        self._transport.close_now()

    async def __aenter__(self) -> OpenAIModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def available_models(self, timeout: float = 5.0) -> list[str]:
        """The model names this model's server lists (``GET {base_url}/models``, with this model's key): blocking,
        at most ``timeout`` seconds. A :class:`ModelError` says why when the server gives no list."""
        from ._listing import listed_models

        headers = {k: v for k, v in self.client.default_headers.items() if isinstance(v, str)}
        headers.update(self.client.auth_headers)
        return listed_models(str(self.client.base_url), headers, timeout=timeout, scrub=self._scrub)

    # -- requests -----------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        key = self._key
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

    def batch_api(self) -> Any:
        """This model's provider Batch API (``models._batch_api``): on the client's own methods for a client
        handed in (or ``fast_path=False``), else on aiohttp; made once."""
        api = getattr(self, "_batch", None)
        if api is None:
            from ._batch_api import BatchAPI

            api = self._batch = BatchAPI(self, client_path=not isinstance(self._transport, AioHTTPTransport))
        return api

    def forget_conversation(self, messages: list) -> None:
        """The loop that sent ``messages`` ended: what was kept to encode its next request goes."""
        self.wire_cache.forget(messages)

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply:
        prefetch_prices(self)  # a provider's model: its price is read (in a thread) while the reply comes
        body = self._body(request)
        cache = self.wire_cache
        keep = not request.once  # a request nothing is expected to continue (a map row's): its encoding is not kept
        payload = RequestBody(body, lambda: cache.body(body, request.messages, request.continues, keep=keep))
        attempt = 0
        limit = rate_limit_of(self, create=True)  # shared by every loop calling this model
        assert limit is not None
        transport: Any = self._transport
        if not getattr(transport, "ready", True):  # made ready before its turn (the turn's time is the send's)
            await transport.prepare()
        failed, wasted = 0, Usage()  # attempts that failed after the provider counted them, and their tokens
        while True:
            try:
                await limit.acquire(self._last_tokens)  # each attempt, retries too, takes its turn
                try:
                    reply = await self._attempt(payload, on_delta, limit)
                except Exception as lost:
                    spent = getattr(lost, "spent", None)
                    if isinstance(spent, Usage):  # the provider said what it counted before the attempt failed
                        failed += 1
                        wasted += spent
                        self.usage += spent
                    raise
                self._last_tokens = reply.usage.input_tokens + reply.usage.output_tokens
                self.usage += reply.usage
                if failed:  # spent on this reply: counted with it (the loop's spending, budgets)
                    own = reply.usage
                    reply.usage = Usage(own.input_tokens, own.output_tokens, own.estimated)
                    reply.usage += wasted
                    reply.warnings.append(
                        f"the provider counted {wasted.input_tokens} tokens in and {wasted.output_tokens} out for "
                        f"{failed} failed attempt(s) before this reply: they are in its usage")
                return reply
            except (_BadStream, MalformedChunk) as err:  # not a protocol this client speaks: retrying cannot help
                raise ModelError(
                    self._scrub(f"model {self.name!r} sent a response that is not a Chat Completions stream: {err}")
                ) from None
            except LineTooLong as err:  # the same request would meet the same line: not retried
                raise ModelError(self._scrub(
                    f"model {self.name!r} sent a line of its stream longer than max_line_bytes={self.max_line_bytes} "
                    f"({err}); the response was abandoned. If the server really sends such lines, raise the limit: "
                    f"OpenAIModel(..., max_line_bytes=...)"
                )) from None
            except ReplyTooLong as err:
                raise ModelError(self._scrub(
                    f"model {self.name!r} sent a reply longer than max_reply_chars={self.max_reply_chars} ({err}); "
                    f"the response was abandoned. To accept longer replies, raise the limit: "
                    f"OpenAIModel(..., max_reply_chars=...)"
                )) from None
            except (HTTPStatusError, TransportError, ProviderError, _Incomplete, TimeoutError) as caught:
                failure: Exception = caught
                if isinstance(caught, TimeoutError):  # no progress; an error status whose body stalled says its status
                    failure = stalled_status(caught) or TransportError(
                        f"no progress for {self.timeout:g} s (timeout={self.timeout:g})")
                status = getattr(failure, "status_code", None)
                retryable = getattr(failure, "retryable", None)
                if retryable is None:
                    retryable = status is None or status in _RETRY_STATUS or status >= 500
                asked = _retry_after(failure)
                if not retryable or attempt >= self.max_retries:
                    refused = getattr(failure, "refused", None)
                    what = f"HTTP {status}" if status else (
                        f"the provider's error {refused!r}, which says the request itself is refused: not retried"
                        if refused else "incomplete stream" if isinstance(failure, _Incomplete)
                        else type(failure).__name__)
                    wait = f" (the provider asked to wait {asked:g} s before trying again)" if asked else ""
                    if failed:  # no reply to count them with: the model's usage has them
                        wait += (f" (the provider counted {wasted.input_tokens} tokens in and {wasted.output_tokens} "
                                 f"out for {failed} of the failed attempts: they are in the model's usage)")
                    said = f"model {self.name!r} failed ({what}) after {attempt + 1} attempt(s): {failure}{wait}"
                    raise ModelError(
                        self._scrub(said),
                        status=status if isinstance(status, int) else None,
                    ) from None
                delay = asked
                if delay is None:
                    delay = min(self.max_backoff, self.backoff * 2**attempt) * random.uniform(0.5, 1.0)
                capped = ""
                if delay > _MAX_RETRY_WAIT:  # said, not silently shortened: the provider may mean hours
                    capped = f" (the provider asked to wait {delay:g} s: waiting at most {_MAX_RETRY_WAIT:g} s)"
                    delay = _MAX_RETRY_WAIT
                if status == 429:  # the provider's limit: every caller of this model waits, not only this one
                    limit.cooldown(delay, f"a 429 from {self.name!r}: every caller of it waits {delay:.3g} s")
                attempt += 1
                hook = retry_hook.get()
                if hook is not None:
                    hook(attempt, self._scrub(f"{type(failure).__name__}: {failure}{capped}"), delay)
                await asyncio.sleep(delay)

    async def _attempt(
        self, payload: RequestBody, on_delta: DeltaCallback | None, limit: RateLimit | None = None
    ) -> Reply:
        """One request, bounded by ``timeout`` of silence (each complete line of the stream resets it). An attempt
        that fails after the provider reported its usage raises with that usage as the error's ``spent``."""
        asm = Assembler(self.name, on_delta, max_chars=self.max_reply_chars)
        confirmed, broke = False, None
        try:
            with Deadline() as deadline:
                silence = Silence(self.timeout, deadline)
                try:
                    response = await self._transport.open("/chat/completions", payload)
                    if limit is not None:
                        limit.learn(response.headers)  # x-ratelimit-limit-* when the person set no limit
                    confirmed = True  # a whole JSON body, or a stream that said it ended
                    try:
                        ctype = response.content_type
                        if ctype in ("application/json", "text/json") or ctype.endswith("+json"):
                            await self._whole(response, asm)
                        else:
                            confirmed = await self._stream(response, asm, silence.alive)
                    finally:
                        await response.close()
                finally:
                    silence.cancel()
            if not asm.said_anything():
                raise _Incomplete(
                    f"the stream from {self.name!r} ended without a reply: no text, no tool call, no refusal and no "
                    "finish_reason (a server out of slots answers so)"
                )
        except (TransportError, TimeoutError) as err:
            if asm.finish is None or not asm.said_anything():
                if asm.usage is not None:
                    err.spent = asm.usage  # type: ignore[union-attr]
                raise
            broke = err  # the reply had ended (its finish_reason came): asked again, it would be paid for twice
        except Exception as err:
            if asm.usage is not None:
                err.spent = asm.usage  # type: ignore[attr-defined]
            raise
        reply = asm.reply()
        if broke is not None:
            what = "no progress" if isinstance(broke, TimeoutError) else f"{type(broke).__name__}: {broke}"
            reply.warnings.append(self._scrub(
                f"the stream from {self.name!r} broke off after its finish_reason, before [DONE] ({what}): the reply "
                "had ended, and is used as it is"))
        if asm.usage is None:  # the provider reported none: estimated, and marked so
            reply.usage = _estimate(payload, reply)
        if not confirmed and asm.finish is None:  # the body just ended: perhaps cut off (finish_reason inferred)
            reply.truncated = True
            reply.warnings.append(
                f"the stream from {self.name!r} ended with neither a finish_reason nor [DONE]: the reply may be cut "
                "off (it is used as it is, and never cached)")
        return reply

    async def _whole(self, response: Response, asm: Assembler) -> None:
        """A JSON body instead of a stream: an error said with a success status, or a whole reply."""
        pieces, size = [], 0
        async for piece in response.chunks():
            size += len(piece)
            if size > self.max_line_bytes:  # one JSON text: a line, as far as limits go
                raise LineTooLong(f"a JSON body of more than {size} bytes")
            pieces.append(piece)
        raw = b"".join(pieces)
        try:
            body = loads(raw)
        except ValueError:
            raise _BadStream(f"a JSON content type with a body that is not JSON: {raw[:200]!r}") from None
        err = provider_error(body)
        if err is not None:
            raise err
        asm.add(body)
        if not asm.chunks or not (isinstance(body, dict) and body.get("choices")):
            raise _BadStream(f"a JSON body that is neither a reply nor an error: {raw[:200]!r}")

    async def _stream(self, response: Response, asm: Assembler, alive: Any) -> bool:
        """Read a stream into ``asm``; True if it said it ended (``[DONE]``), False if the body just ended."""
        decoder = SSEDecoder(max_line=self.max_line_bytes)
        lines = 0
        head = b""
        done = False
        async for piece in response.chunks():
            if len(head) < 200:
                head += piece[:200]
            events = decoder.feed_raw(piece)
            if decoder.lines != lines:
                lines = decoder.lines
                alive()
                if decoder.stray:
                    _stray(decoder)
            for data, kind, _id, _retry in events:
                if _event(kind, data, asm):
                    done = True
                    break
            if done:
                break
        else:
            for data, kind, _id, _retry in decoder.end_raw():
                if _event(kind, data, asm):
                    done = True
                    break
            if decoder.stray:
                _stray(decoder)
        if not asm.chunks:
            if head.strip() and not done:
                raise _BadStream(f"no events in {head[:200]!r}")
            raise _Incomplete(f"the stream from {self.name!r} ended before any reply")
        return done


def _estimate(payload: RequestBody, reply: Reply) -> Usage:
    """Usage the provider did not report: about 4 bytes of the request's JSON (messages, tools and the
    framing the model reads too) a token, and 4 characters of the reply's text, reasoning and calls."""
    sent = payload.size()
    said = len(reply.content or "") + len(reply.thinking or "") + len(reply.refusal or "")
    said += sum(len(c.name) + len(c.arguments) for c in reply.tool_calls)
    return Usage(-(-sent // 4), -(-said // 4), estimated=True)


def _stray(decoder: SSEDecoder) -> None:
    """An error said outside the format (``error: {...}``, or a bare JSON line) is still an error."""
    lines, decoder.stray = decoder.stray, []
    for line in lines:
        name, colon, value = line.partition(b":")
        text = value.strip() if name == b"error" and colon else line
        try:
            payload = loads(text)
        except ValueError:
            if name == b"error":
                raise ProviderError(text.decode("utf-8", "replace")[:500]) from None
            continue
        err = provider_error(payload)
        if err is None and name == b"error":
            err = bare_error(payload)
        if err is not None:
            raise err


def _event(kind: str, data: bytes, asm: Assembler) -> bool:
    """Add one event's payload to the reply; True at ``[DONE]``."""
    if kind == "message" and data[:1] == b"{":  # the usual event: one chunk of the reply
        try:
            payload = loads(data)
        except ValueError:
            pass  # the general path below says what is wrong with it
        else:
            asm.add(payload)
            return False
    if data.strip() == b"[DONE]":
        return True
    try:
        payload = loads(data)
    except ValueError as err:
        if isinstance(err, UnicodeDecodeError):  # JSON perhaps, but not in UTF-8 (Latin-1 text): not "not JSON"
            said = f"a data line that is not UTF-8 ({err.reason} at byte {err.start}): {data[:200]!r}"
            raise _BadStream(said) from None
        if kind == "error":
            raise ProviderError(data.decode("utf-8", "replace")[:500]) from None
        if kind != "message":
            return False  # a named event of another protocol (ping, keep-alive): not ours
        raise _BadStream(f"a data line that is not JSON: {data[:200]!r}") from None
    if kind == "error" and provider_error(payload) is None:
        raise bare_error(payload)
    if kind not in ("message", "error") and not (
        isinstance(payload, dict) and ("choices" in payload or "error" in payload)
    ):
        return False
    asm.add(payload)
    return False


def _rebuilt(name: str, settings: dict[str, Any], key_from_env: bool) -> OpenAIModel:
    """An :class:`OpenAIModel` made again from what ``__reduce__`` sent (its key from this process's environment)."""
    return OpenAIModel(name, api_key=None if key_from_env else "no-key", **settings)
