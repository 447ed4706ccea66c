"""Sending a Chat Completions request and handing back the response's bytes, on two paths.

- :class:`AioHTTPTransport`, the default: ``aiohttp`` with one connection pool per model. In a tool
  loop the HTTP stack under ``openai.AsyncOpenAI`` costs more CPU per streamed request than the rest
  of the loop together; aiohttp costs a fraction of it (``bench/bench_loop.py``) and does what a
  well-kept client does: keep-alive, gzip and deflate, redirects (307 and 308 resend the body; within
  the base URL's origin only, :func:`follow_redirects`: the key, the person's headers and the request go to no
  other host), proxies from the environment (``HTTPS_PROXY``, ``NO_PROXY``), TLS and a connect timeout. Every header
  (the API key's above all) is the request's own, never the session's: aiohttp copies a session's
  default headers into what it sends the proxy (the CONNECT, and ``Proxy-Authorization``), and a proxy
  must never see the key. A proxy URL's own credentials (``http://user:pass@proxy``) are its Basic auth. Silence
  is bounded by the caller (:class:`Silence`, ``read_timeout`` seconds without a complete line), not by
  aiohttp's ``sock_read``, which would cancel and push a timer on every read. The OpenAI client still
  supplies base URL, auth and default headers.
- ``ClientTransport`` (``_client_path``): a client the user handed in (Azure, a custom transport), or the one
  ``fast_path=False`` makes, goes through its own documented ``post``.

Both raise :class:`TransportError` (no response: refused, dropped, timed out) and
:class:`HTTPStatusError` (a status that is not success), and hand back a :class:`Response`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import os
import ssl
import threading
import urllib.parse
import urllib.request
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from types import SimpleNamespace
from typing import Any, Protocol

from .._json import loads
from ._assemble import error_words
from ._silence import Deadline, Silence
from ._urls import shown_url

__all__ = (
    "ERROR_BODY_LIMIT", "AioHTTPTransport", "Deadline", "HTTPStatusError", "RequestBody", "Response",
    "Silence", "Transport", "TransportError", "base_url_text", "check_base_url", "error_body_text", "follow_redirects",
    "stalled_status",
)

ERROR_BODY_LIMIT = 65536
"""The most of an error response's body that is read (its start; the rest is dropped)."""


class TransportError(Exception):
    """No usable response: the connection was refused or dropped, or a timeout passed."""


class HTTPStatusError(Exception):
    """A status that is not success; shaped like openai's ``APIStatusError`` (``status_code``,
    ``response.headers``), with the provider's words from its body (:func:`error_body_text`)."""

    def __init__(
        self, status: int, headers: Mapping[str, str], body: bytes | str, url: str = "", *, cut: bool = False,
        stalled: float | None = None, refused: str = "",
    ) -> None:
        self.status_code = status
        self.response = SimpleNamespace(headers=headers)
        detail = error_body_text(body, cut=cut) if body or stalled is None else "(none of its body came)"
        if stalled is not None:
            detail += f" (then its body stalled: no more of it within timeout={stalled:g} s)"
        if status in (404, 405) and url:  # most often a base URL that misses its path (/v1): say where was asked
            detail += f" (the request went to {url})"
        if 300 <= status < 400:
            location = headers.get("location") or headers.get("Location")
            detail = f"redirect not followed{f' to {location}' if location else ' (no Location header)'} from {url}"
            if refused:
                detail += f": {refused}"
        super().__init__(f"Error code: {status} - {detail}")


def stalled_status(timeout: BaseException) -> HTTPStatusError | None:
    """The error status whose body was being read when the attempt's deadline came (``timeout``: the
    ``TimeoutError`` its :class:`Deadline` raised), or None when no status had come."""
    return getattr(timeout.__cause__, "status_error", None)


def error_body_text(body: bytes | str, *, cut: bool = False) -> str:
    """What an error response's body says, for a person: the provider's words (:func:`error_words`) when
    it is JSON of a known shape, else its text (whitespace collapsed, at most 2,000 characters).
    ``cut``: the body was longer than :data:`ERROR_BODY_LIMIT` and only its start was read."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    words = None
    if text.lstrip()[:1] in ("{", "["):
        try:
            words = error_words(loads(text))
        except ValueError:
            words = None
    if words is None:
        plain = " ".join(text.split())
        words = (plain[:2000] + " ...") if len(plain) > 2000 else plain or "(no body)"
    if cut:
        words += f" (the error body was longer than {ERROR_BODY_LIMIT // 1024} KiB and was cut there)"
    return words


def check_base_url(url: str) -> urllib.parse.SplitResult:
    """The parsed URL if it is http(s) with a host, and neither credentials nor a query that requests could not
    carry; else a ValueError naming it (its credentials left out)."""
    parts = urllib.parse.urlsplit(url)
    shown = shown_url(url)  # never said back whole: a password, a key in the query
    if "@" in parts.netloc and parts.password is None:  # a user alone may be a token (``https://TOKEN@host``)
        shown = urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"base URL {shown!r} is not an http:// or https:// URL with a host (e.g. 'http://localhost:11434/v1')")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"base URL {shown!r} has a port that is not a number") from None
    if "@" in parts.netloc:
        # every request carries the key as "Authorization: Bearer ..."; credentials in the URL would be a second
        # Authorization (aiohttp refuses the request, the openai client sends them instead of the key)
        raise ValueError(
            f"base URL {shown!r} carries credentials (user:password@): they cannot go with the API key's "
            "Authorization header; give the key as api_key=... (or OPENAI_API_KEY) and the URL without them")
    if parts.query:
        # a request's path is added after the base URL: '/v1?x=1' + '/chat/completions' would ask '/v1/?x=1/chat/...'
        raise ValueError(
            f"base URL {shown!r} has a query: requests add their path after the base URL, so "
            "the query would swallow it; give the URL without it (for Azure's api-version, pass "
            "client=openai.AsyncAzureOpenAI(...))")
    return parts


def base_url_text(url: str) -> str:
    """``url`` (checked by :func:`check_base_url`) as the openai client writes a base URL: scheme and host in
    lower case, a host that is not ASCII in IDNA, no default port, the path percent-encoded and ending in ``/``."""
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    netloc = f"[{host}]" if ":" in host else host
    port = parts.port
    if port is not None and port != {"http": 80, "https": 443}.get(scheme):
        netloc += f":{port}"
    if "@" in parts.netloc:
        netloc = parts.netloc.rpartition("@")[0] + "@" + netloc
    path = urllib.parse.quote(parts.path, safe="!$&'()*+,;=:@/%~")
    return urllib.parse.urlunsplit((scheme, netloc, path if path.endswith("/") else path + "/", parts.query, ""))


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, in
    either case), or None when there is none or ``NO_PROXY`` exempts its host."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()  # as aiohttp's trust_env reads them
    if not proxies or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return None
    return proxies.get(parts.scheme) or proxies.get("all") or None


def _where(parts: urllib.parse.SplitResult) -> str:
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _tls_context() -> ssl.SSLContext:
    """Verify servers: ``SSL_CERT_FILE`` if set, else certifi's bundle if installed, else the system's store."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if not cafile:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            cafile = None
    return ssl.create_default_context(cafile=cafile)


class RequestBody:
    """One request's JSON body: the dict, and its bytes, encoded once when a transport first needs them
    (``encode``: the model's wire cache, which reuses the encoding of the conversation's earlier messages)."""

    __slots__ = ("_bytes", "_encode", "data")

    def __init__(self, data: dict, encode: Callable[[], bytes] | None = None) -> None:
        self.data = data
        self._encode = encode
        self._bytes: bytes | None = None

    def encoded(self) -> bytes:
        if self._bytes is None:
            encode = self._encode
            self._bytes = encode() if encode is not None else json.dumps(self.data, ensure_ascii=False).encode()
        return self._bytes

    def size(self) -> int:
        """Bytes of its JSON (counted from the dict when no transport encoded it: nothing is cached)."""
        if self._bytes is not None:
            return len(self._bytes)
        return len(json.dumps(self.data, ensure_ascii=False).encode())


class Transport(Protocol):
    """How a model's request reaches the server: ``open`` POSTs a body to a path and gives the response;
    ``close`` and ``close_now`` release what the transport owns (never a client a person handed in).

    A transport may also say it is not ``ready`` (a library still to import): its caller then awaits
    ``prepare()`` before the request takes its turn (:class:`RateLimit`), so that the time spent making ready
    is not taken out of the spacing between requests."""

    async def open(self, path: str, body: RequestBody) -> Response: ...

    async def close(self) -> None: ...

    def close_now(self) -> None: ...


class Response:
    """A successful response: its content type, its headers, and its body as bytes arrive."""

    __slots__ = ("_chunks", "_close", "content_type", "headers")

    def __init__(
        self, content_type: str, chunks: AsyncIterator[bytes], close: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self.content_type = content_type
        self.headers: Mapping[str, str] = headers if headers is not None else {}
        self._chunks = chunks
        self._close = close

    def chunks(self) -> AsyncIterator[bytes]:
        return self._chunks

    async def close(self) -> None:
        """Release the connection (closed, not pooled, when the body was not read to its end)."""
        await self._close()


_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10


_ELSEWHERE = ("it leads to another host (scheme, host and port) than the base URL's, where neither the request "
              "nor its key and headers are sent; if the server has moved, give its new address as base_url=")


def _origin(url: Any) -> tuple[str, str | None, int | None]:
    return url.scheme, url.host, url.port  # yarl: the host in lower case, the scheme's port when none is written


async def follow_redirects(
    session: Any, resp: Any, method: str, *, headers: Any, proxy: str | None, payload: Callable[[], dict],
) -> tuple[Any, str]:
    """Follow the redirects ``resp`` (an aiohttp response to a request sent with ``allow_redirects=False``) asks,
    as aiohttp would (307 and 308 send the request again with its body, ``payload()`` giving the keywords that
    carry it; 301 and 302 of a POST, and 303, ask a GET without a body), but within the first request's origin
    (scheme, host and port) only: the request, its key and every header the person set go to no other host
    (aiohttp drops only Authorization and cookies on the way to another host, and sends the rest, body included).

    Gives the last response, and, when it is a redirect not followed, why (``""`` otherwise)."""
    import yarl

    origin = _origin(resp.url)
    for _ in range(_MAX_REDIRECTS):
        location = resp.headers.get("Location") or resp.headers.get("URI")
        if resp.status not in _REDIRECTS or not location:
            return resp, ""
        try:
            target = resp.url.join(yarl.URL(location))
        except ValueError:
            return resp, "its Location is not a URL"
        if _origin(target) != origin:
            return resp, _ELSEWHERE
        asks_get = resp.status == 303 or (resp.status in (301, 302) and method == "POST")
        method = "GET" if asks_get else method
        resp.release()
        resp = await session.request(method, target, headers=headers, proxy=proxy, allow_redirects=False,
                                     **({} if asks_get else payload()))
    if resp.status in _REDIRECTS:
        return resp, f"more than {_MAX_REDIRECTS} redirects"
    return resp, ""


class AioHTTPTransport:
    """POST JSON with aiohttp; one pool per model, made on first use in the running event loop."""

    def __init__(
        self, base_url: str, *, headers: Mapping[str, str], connect_timeout: float, read_timeout: float
    ) -> None:
        self._parts = check_base_url(base_url)
        self.base_url = base_url.rstrip("/")
        merged: dict[str, tuple[str, str]] = {}  # each header once, whatever its case
        for k, v in headers.items():
            merged[k.lower()] = (k, v)
        merged["content-type"] = ("Content-Type", "application/json")
        merged["accept"] = ("Accept", "text/event-stream")
        self.headers = dict(merged.values())
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        """Seconds of silence the caller allows (:class:`Silence`, as ``OpenAIModel`` does): not aiohttp's own."""
        self._session: Any = None
        self._headers: Any = None
        """``headers`` as the CIMultiDict each request carries (made once per pool)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finalizer: weakref.finalize | None = None
        self._proxy: str | None = None

    @property
    def ready(self) -> bool:
        """Whether aiohttp is imported in this process (:meth:`prepare` imports it)."""
        return _READY

    async def prepare(self) -> None:
        """Import aiohttp, once a process, in a thread of its own: the first request waits for it, the event
        loop does not (an import takes 50-100 ms). An import that fails raises here, as ``import`` would."""
        global _IMPORTED, _READY
        if _READY:
            return
        if _IMPORTED is None or (_IMPORTED.done() and _IMPORTED.exception() is not None):
            _IMPORTED = concurrent.futures.Future()
            _IMPORTED.set_running_or_notify_cancel()  # a waiter cancelled (a stop) cannot cancel the import
            threading.Thread(target=_import_aiohttp, args=(_IMPORTED,), name="unity_nb-import", daemon=True).start()
        await asyncio.wrap_future(_IMPORTED)
        _READY = True
        # let the future go: it keeps each waiter's callback, and with it the event loop that waited
        _IMPORTED = None

    def _pool(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self.close_now()  # a pool made in another (finished) event loop cannot serve this one
            connector = aiohttp.TCPConnector(limit=0, ssl=_tls_context() if self._parts.scheme == "https" else True)
            # no sock_read: the caller's Silence bounds silence (read_timeout seconds without a complete line,
            # the request's whole wait included); sock_read would move a timer on every read, and fire a moment
            # before Silence with another message when a server stopped sending
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout)
            # the proxy is looked up once per pool: aiohttp's trust_env looks it up (and .netrc) in a
            # worker thread on every request, two thread hops per model call
            self._proxy = env_proxy(self.base_url)
            # the headers are each request's, not the session's defaults: aiohttp merges a session's headers
            # into the proxy's too (the key would reach the proxy); a CIMultiDict made once is not copied again
            from multidict import CIMultiDict

            self._headers = CIMultiDict(self.headers)
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
            self._loop = loop
            # a transport dropped unclosed (or left open at exit) closes its sockets, without warnings
            self._finalizer = weakref.finalize(self, _close_pool, self._session)
        return self._session

    async def open(self, path: str, body: RequestBody) -> Response:
        import aiohttp

        url = self.base_url + path
        session = self._pool()
        refused = ""
        try:
            data = body.encoded()
            resp = await session.post(url, data=data, headers=self._headers, proxy=self._proxy, allow_redirects=False)
            if resp.status in _REDIRECTS:  # followed within the base URL's origin only
                resp, refused = await follow_redirects(session, resp, "POST", headers=self._headers,
                                                       proxy=self._proxy, payload=lambda: {"data": data})
                url = str(resp.url)
        except aiohttp.ClientConnectorError as err:
            reason = err.os_error.strerror if getattr(err.os_error, "strerror", None) else err.os_error
            raise TransportError(f"cannot connect to {err.host}:{err.port} ({url}): {reason}") from None
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            raise TransportError(f"no response from {_where(self._parts)} ({url}): {_describe(err)}") from None
        if resp.status >= 300:
            # the whole body, bounded: read() gives only what is buffered, often the first TCP piece
            pieces: list[bytes] = []
            size = 0
            cut = False
            try:
                while size <= ERROR_BODY_LIMIT:
                    piece = await resp.content.read(ERROR_BODY_LIMIT + 1 - size)
                    if not piece:
                        break
                    pieces.append(piece)
                    size += len(piece)
            except (TimeoutError, aiohttp.ClientError, OSError):
                pass  # what arrived before the body broke off is still the provider's
            except asyncio.CancelledError as cancelled:
                # a stop, or the caller's deadline (the body stalled): the status goes with the cancellation, and
                # the deadline's TimeoutError is said as the status (stalled_status), not as "no progress"
                cancelled.status_error = HTTPStatusError(  # type: ignore[attr-defined]
                    resp.status, resp.headers, b"".join(pieces)[:ERROR_BODY_LIMIT], url, stalled=self.read_timeout)
                raise
            finally:
                resp.close()
            said = b"".join(pieces)
            if len(said) > ERROR_BODY_LIMIT:
                said, cut = said[:ERROR_BODY_LIMIT], True
            raise HTTPStatusError(resp.status, resp.headers, said, url, cut=cut, refused=refused)

        async def close() -> None:
            if resp.content.is_eof():
                resp.release()
            else:
                resp.close()

        return Response(resp.content_type or "", _AioChunks(resp.content, self._parts), close, resp.headers)

    def _forget(self) -> Any:
        session, self._session = self._session, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return session

    async def close(self) -> None:
        session = self._forget()
        if session is not None and not session.closed:
            await session.close()

    def close_now(self) -> None:
        """Close the pool without awaiting (a finished event loop, an exit hook)."""
        _close_pool(self._forget())


class _AioChunks:
    """An aiohttp body's bytes as they arrive, its errors as :class:`TransportError`.

    A plain async iterator, not an async generator: a reader stops at ``[DONE]``, before the body's end,
    and an async generator left unfinished is closed by the event loop's finaliser hook, a thread-safe
    wake-up (a write to the loop's self-pipe) and a task per request.
    """

    __slots__ = ("_parts", "_read")

    def __init__(self, content: Any, parts: urllib.parse.SplitResult) -> None:
        self._read = content.readany
        self._parts = parts

    def __aiter__(self) -> _AioChunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            data = await self._read()
        except Exception as err:
            import aiohttp

            if isinstance(err, aiohttp.EofStream):
                raise StopAsyncIteration from None
            if isinstance(err, (TimeoutError, aiohttp.ClientError, OSError)):
                where = _where(self._parts)
                raise TransportError(f"the response stream from {where} broke off: {_describe(err)}") from None
            raise
        if not data:
            raise StopAsyncIteration
        return data


_IMPORTED: concurrent.futures.Future | None = None
"""aiohttp's import in a thread (:meth:`AioHTTPTransport.prepare`), once a process."""
_READY = False
"""True once a request saw that import done (a flag: every model call reads it)."""


def _import_aiohttp(done: concurrent.futures.Future) -> None:
    try:
        importlib.import_module("aiohttp")
        importlib.import_module("multidict")
    except BaseException as err:  # noqa: BLE001 - handed to whoever waits for it
        done.set_exception(err)
    else:
        done.set_result(None)


def _close_pool(session: Any) -> None:
    if session is None or session.closed:
        return
    import aiohttp

    connector = session.connector
    session.detach()  # the session counts as closed: no "Unclosed client session"
    if connector is not None and not connector.closed:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the returned waiter is not awaited: the sockets are closed already
            # the base class's close() closes every socket at once (TCPConnector's own is a coroutine,
            # which cannot run when the event loop has finished)
            aiohttp.BaseConnector.close(connector)


def _describe(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
