"""A lean HTTP/1.1 client for one job: POST JSON, read a server-sent event stream.

Why it exists: in a tool loop the HTTP stack under ``openai.AsyncOpenAI`` (httpx, httpcore,
h11, anyio) costs several milliseconds of CPU per streamed request, more than everything
else in the loop together; fifty concurrent loops then queue on the CPU instead of waiting on
the network. This client speaks just what Chat Completions streaming needs, on plain
``asyncio`` streams: keep-alive connections, chunked or sized bodies, TLS, a deadline. The
OpenAI client still supplies the configuration (base URL, auth and default headers);
anything unusual (a client handed in by the user, Azure, a proxy) uses the client itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import urllib.parse
from collections.abc import AsyncIterator
from types import SimpleNamespace

__all__ = ("LeanHTTP", "HTTPStatusError", "TransportError", "StreamError", "proxy_configured")


class TransportError(Exception):
    """The connection failed, was dropped, or the deadline passed."""


class StreamError(Exception):
    """The server sent an error event inside the stream."""


class HTTPStatusError(Exception):
    """An error status; shaped like openai's ``APIStatusError`` (``status_code``, ``response.headers``)."""

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status_code = status
        self.response = SimpleNamespace(headers=headers)
        try:
            detail = json.loads(body)["error"]["message"]
        except Exception:  # noqa: BLE001 - any body at all
            detail = body[:300].decode("utf-8", "replace")
        super().__init__(f"Error code: {status} - {detail}")


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


def proxy_configured() -> bool:
    return any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"))


class LeanHTTP:
    """POST to ``base_url + path`` and iterate the JSON payloads of the SSE response."""

    def __init__(self, base_url: str, *, headers: dict[str, str], timeout: float) -> None:
        url = urllib.parse.urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"unsupported base URL scheme: {url.scheme!r}")
        self.host = url.hostname
        self.tls = url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        self.prefix = url.path.rstrip("/")
        self.timeout = timeout
        host_header = self.host if url.port is None else f"{self.host}:{url.port}"
        self._head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Host": host_header}.items())
        self._ssl: ssl.SSLContext | None = None
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.tls and self._ssl is None:
            self._ssl = _tls_context()
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._ssl, limit=1 << 22), min(self.timeout, 30.0)
            )
        except (OSError, asyncio.TimeoutError) as err:
            raise TransportError(f"cannot connect to {self.host}:{self.port} ({type(err).__name__}: {err})") from None

    async def stream(self, path: str, body: bytes) -> AsyncIterator[dict]:
        request = (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head}Content-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        loop = asyncio.get_running_loop()
        reader = writer = None
        clean = False
        deadline = None
        expired = []

        def expire() -> None:  # the deadline aborts the socket, so a read in progress fails at once
            expired.append(True)
            if writer is not None:
                writer.transport.abort()

        try:
            deadline = loop.call_later(self.timeout, expire)
            for attempt in (0, 1):
                reused = bool(self._idle)
                reader, writer = self._idle.pop() if reused else await self._connect()
                try:
                    writer.write(request)
                    status_line = await reader.readuntil(b"\r\n")
                    break
                except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as err:
                    writer.transport.abort()
                    if reused and attempt == 0 and not expired:  # the server closed an idle connection: once more, fresh
                        continue
                    what = "timed out" if expired else "connection lost"
                    raise TransportError(f"{what} before a response ({type(err).__name__})") from None
            try:
                status = int(status_line.split(b" ", 2)[1])
                raw = await reader.readuntil(b"\r\n\r\n")
                headers = {}
                for line in raw.decode("latin-1").split("\r\n"):
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                chunked = "chunked" in headers.get("transfer-encoding", "").lower()
                length = None if chunked else int(headers.get("content-length", "-1"))
                if status >= 400:
                    data = b"".join([piece async for piece in _body(reader, chunked, length)])
                    clean = headers.get("connection", "").lower() != "close" and (chunked or length is not None and length >= 0)
                    raise HTTPStatusError(status, headers, data)
                buffer = b""
                finished = False
                async for piece in _body(reader, chunked, length):
                    buffer = (buffer + piece).replace(b"\r\n", b"\n")
                    while True:
                        end = buffer.find(b"\n\n")
                        if end < 0:
                            break
                        event, buffer = buffer[:end], buffer[end + 2 :]
                        if finished:
                            continue
                        for line in event.split(b"\n"):
                            if not line.startswith(b"data:"):
                                continue
                            payload = line[5:].strip()
                            if payload == b"[DONE]":
                                finished = True
                                break
                            chunk = json.loads(payload)
                            if isinstance(chunk, dict) and chunk.get("error"):
                                error = chunk["error"]
                                raise StreamError(error.get("message") if isinstance(error, dict) else str(error))
                            yield chunk
                clean = (chunked or length is not None and length >= 0) and headers.get("connection", "").lower() != "close"
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError, IndexError) as err:
                what = "timed out" if expired else "dropped"
                raise TransportError(f"the response stream {what} ({type(err).__name__})") from None
        finally:
            if deadline is not None:
                deadline.cancel()
            if writer is not None:
                if clean and not writer.transport.is_closing():
                    self._idle.append((reader, writer))
                else:  # cancelled, failed or not reusable: close now, which also ends the server's work
                    writer.transport.abort()


async def _body(reader: asyncio.StreamReader, chunked: bool, length: int | None) -> AsyncIterator[bytes]:
    if chunked:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers
                    pass
                return
            data = await reader.readexactly(size)
            await reader.readexactly(2)
            yield data
    elif length is not None and length >= 0:
        if length:
            yield await reader.readexactly(length)
    else:
        while data := await reader.read(65536):
            yield data
