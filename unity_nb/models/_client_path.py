"""The openai package's request path: :class:`ClientTransport` sends a model's requests through an
``openai.AsyncOpenAI`` (or Azure) client's documented ``post``, and :func:`own_http_client` is the HTTP client of
the one this package makes (``fast_path=False``, ``model.client``).

- A client the user handed in (Azure, a custom transport) goes through its own ``post``; the raw response's
  bytes are read, so both paths share one SSE decoder and one assembler.
- A client this package makes has the openai package's own HTTP client, which follows no redirect to another
  origin, as the aiohttp path follows none (:func:`own_http_client`).
- A client handed in is the person's, configured as they chose, and is left as it is: its HTTP client follows
  redirects as it was made to (the openai package's default follows them to any host, dropping only
  Authorization there); to keep its headers at its host, give it
  ``http_client=openai.DefaultAsyncHttpxClient(follow_redirects=False)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

from ._transport import (
    _ELSEWHERE,
    _REDIRECTS,
    ERROR_BODY_LIMIT,
    HTTPStatusError,
    RequestBody,
    Response,
    TransportError,
    _describe,
    _where,
)

__all__ = ("ClientTransport", "own_http_client")


def _url_origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower(), parts.hostname, parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())


def own_http_client(base_url: str, timeout: Any) -> Any:
    """The HTTP client of an ``openai.AsyncOpenAI`` this package makes (``fast_path=False``, ``model.client``):
    the openai package's own (``openai.DefaultAsyncHttpxClient``: its timeout, pool limits, redirects followed),
    which follows no redirect out of ``base_url``'s origin. httpx drops only Authorization on the way to another
    origin (and keeps it from http to https): the person's other headers (``OPENAI_CUSTOM_HEADERS``, such as a
    gateway's key; ``OpenAI-Organization``) and the request's body went along. Such a redirect is refused as
    :func:`follow_redirects` refuses it: an :class:`HTTPStatusError` saying where it led and why (raised through
    the client as it is: it is not the client's to wrap), before anything is sent there."""
    global _OWN_CLIENT
    origin = _url_origin(base_url)

    async def same_origin_only(response: Any) -> None:
        location = response.headers.get("location")
        if response.status_code not in _REDIRECTS or not location:
            return
        url = str(response.request.url)
        try:
            allowed, why = _url_origin(urllib.parse.urljoin(url, location)) == origin, _ELSEWHERE
        except ValueError:
            allowed, why = False, "its Location is not a URL"
        if not allowed:
            raise HTTPStatusError(response.status_code, response.headers, b"", url, refused=why)

    async def hook(response: Any) -> None:
        if response.status_code in _REDIRECTS:
            await same_origin_only(response)
        elif response.status_code >= 400 and (stalled := _ERRORS_READ_HERE.get()) is not None:
            raise await _status_error(response, stalled)

    if _OWN_CLIENT is None:
        import openai

        class _Client(openai.DefaultAsyncHttpxClient):
            def __del__(self) -> None:  # as the openai package's own: one dropped unclosed closes its pool
                if self.is_closed:
                    return
                try:
                    asyncio.get_running_loop().create_task(self.aclose())
                except RuntimeError:  # no event loop runs: its sockets close as they are collected
                    pass

        _OWN_CLIENT = _Client
    return _OWN_CLIENT(base_url=base_url, timeout=timeout, event_hooks={"response": [hook]})


_OWN_CLIENT: Any = None
"""The class of :func:`own_http_client`'s clients (made when the first is: it needs openai)."""

_ERRORS_READ_HERE: contextvars.ContextVar[float | None] = contextvars.ContextVar("unity_nb_errors_read_here",
                                                                                 default=None)
"""Set (to the model's ``timeout``) while :class:`ClientTransport` sends a model's request: an error status is then
read by :func:`own_http_client`'s hook, not by the openai client (whose other callers keep its own errors)."""


async def _status_error(response: Any, stalled: float) -> HTTPStatusError:
    """An error status as the aiohttp path reads it: its body's start (at most :data:`ERROR_BODY_LIMIT` bytes),
    what came of it when it broke off; a cancellation while it comes (the attempt's deadline: the body stalled)
    carries the status (``stalled_status``). The openai client reads such a body whole before it raises, and a
    body that stalled lost its status: the deadline ended the attempt as "no progress" (a 400 retried)."""
    url = str(response.request.url)
    pieces: list[bytes] = []
    size = 0
    try:
        async with contextlib.aclosing(response.aiter_bytes()) as body:
            async for piece in body:
                pieces.append(piece)
                size += len(piece)
                if size > ERROR_BODY_LIMIT:
                    break
    except asyncio.CancelledError as cancelled:
        cancelled.status_error = HTTPStatusError(  # type: ignore[attr-defined]
            response.status_code, response.headers, b"".join(pieces)[:ERROR_BODY_LIMIT], url, stalled=stalled)
        raise
    except Exception:  # noqa: BLE001, S110 - the HTTP library's own: what came before the body broke off is said
        pass
    said = b"".join(pieces)
    return HTTPStatusError(response.status_code, response.headers, said[:ERROR_BODY_LIMIT], url,
                           cut=len(said) > ERROR_BODY_LIMIT)


class ClientTransport:
    """POST through a ready ``openai.AsyncOpenAI`` (or Azure) client's documented ``post``.

    ``read_timeout`` (the model's ``timeout``) is said of an error status whose body stalls; through a client
    :func:`own_http_client` made, that status is read and said (not "no progress"). A client handed in reads an
    error's body itself before it raises: one that stalls there ends as no progress, its status unknown."""

    def __init__(self, client: Any, read_timeout: float | None = None) -> None:
        import openai

        self.client = client
        self.read_timeout = read_timeout
        self._openai = openai
        self._parts = urllib.parse.urlsplit(str(client.base_url))

    async def open(self, path: str, body: RequestBody) -> Response:
        oa = self._openai
        reading = _ERRORS_READ_HERE.set(self.read_timeout)  # an error status is read by own_http_client's hook
        try:
            stream = await self.client.post(
                path, body=body.data, cast_to=object, stream=True, stream_cls=oa.AsyncStream[object]
            )
        except oa.APIStatusError as err:
            url = str(self.client.base_url).rstrip("/") + path  # the client joins them with one slash
            try:  # the client has read the body (it does before raising): the same reading as the aiohttp path
                data: bytes | str = err.response.content
            except Exception:  # noqa: BLE001 - a body that was not read: the client's own summary
                data = getattr(err, "message", None) or str(err)
            cut = len(data) > ERROR_BODY_LIMIT
            raise HTTPStatusError(
                err.status_code, err.response.headers, data[:ERROR_BODY_LIMIT], url, cut=cut
            ) from None
        except (oa.APIConnectionError, oa.APITimeoutError) as err:  # APITimeoutError is a connection error too
            cause = err.__cause__ or err
            where = f"{_where(self._parts)} ({self.client.base_url})"
            raise TransportError(f"no response from {where}: {_describe(cause)}") from None
        finally:
            _ERRORS_READ_HERE.reset(reading)
        raw = stream.response

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for data in raw.aiter_bytes():
                    yield data
            except Exception as err:  # noqa: BLE001 - the HTTP library's own errors: the stream broke off
                where = _where(self._parts)
                raise TransportError(f"the response stream from {where} broke off: {_describe(err)}") from None

        ctype = raw.headers.get("content-type", "").split(";")[0].strip().lower()
        return Response(ctype, chunks(), stream.close, raw.headers)

    async def close(self) -> None:
        pass  # the client is the person's (or the model's, which closes it): not the transport's

    def close_now(self) -> None:
        pass  # the client is the user's; they close it
