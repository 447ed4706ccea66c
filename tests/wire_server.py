"""A Chat Completions test server on 127.0.0.1 that serves a chosen stream under a chosen framing.

It is built on ``aiohttp.web``: an HTTP implementation independent of the clients under test
and strict about what it accepts (it refuses, for example, a request with two Content-Type
headers). Two framings HTTP/1.1 servers do not produce, a body delimited only by the closing
of the connection (``eof``) and an HTTP/1.0 answer (``http10``), come from a few lines of raw
``asyncio`` beside it; :meth:`WireServer.url` gives the base URL for a framing.

Every request is recorded (method, path, headers in order, body); a header sent twice, or an
Authorization other than ``Bearer <key>``, is noted in :attr:`WireServer.problems`. A check
can be attached to the n-th request (:meth:`WireServer.check`): when it fails the request is
answered 400 with the failure, and the failure is noted too.

Framings (:data:`FRAMINGS`):

``plain``           one chunk (chunked transfer encoding) per SSE event
``one_byte``        one byte per chunk
``utf8_cut``        chunk boundaries inside every multi-byte UTF-8 character
``one_chunk``       the whole body in one chunk
``crlf``            CRLF line endings
``bare_cr``         CR-only line endings
``comments``        ``: keep-alive`` comments between events; ``id:``, ``event: message`` and
                    ``retry:`` fields inside events; some JSON payloads over several ``data:`` lines
``gzip_asked``      gzip Content-Encoding when the request accepted gzip (identity otherwise)
``gzip_unasked``    gzip Content-Encoding whatever the request accepted
``content_length``  no chunked encoding: Content-Length
``eof``             HTTP/1.1, neither Content-Length nor chunked: the body ends when the connection closes
``http10``          an HTTP/1.0 status line, body delimited by the close
``redirect307``     the first answer is 307 to another path, where the same request (body re-posted) streams
``no_final_blank``  the last event has no blank line (nor newline) before the end of the body
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

from aiohttp import web

__all__ = ("FRAMINGS", "KEY", "MOVED", "PATH", "Request", "Serve", "WireServer", "frame_events", "frame_writes")

KEY = "sk-test-123456789"
PATH = "/v1/chat/completions"
MOVED = "/v1/moved/chat/completions"

FRAMINGS = (
    "plain",
    "one_byte",
    "utf8_cut",
    "one_chunk",
    "crlf",
    "bare_cr",
    "comments",
    "gzip_asked",
    "gzip_unasked",
    "content_length",
    "eof",
    "http10",
    "redirect307",
    "no_final_blank",
)
RAW_FRAMINGS = frozenset({"eof", "http10"})

_REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 303: "See Other", 307: "Temporary Redirect",
            308: "Permanent Redirect", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


@dataclass
class Serve:
    """One answer. ``events`` are SSE event strings (see ``provider_streams``); ``body`` instead
    sends those bytes as they are (a JSON error, say) with ``content_type``."""

    events: Sequence[str] = ()
    framing: str = "plain"
    status: int = 200
    content_type: str = "text/event-stream"
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    event_delay: float = 0.0  # seconds between writes (a slow stream)
    location: str | None = None  # the Location of a 3xx answer (None: no Location header)

    def __post_init__(self) -> None:
        if self.framing not in FRAMINGS:
            raise ValueError(f"unknown framing {self.framing!r}")

    @classmethod
    def of(cls, stream, framing: str = "plain", **kw) -> Serve:
        """Serve a ``provider_streams.ProviderStream`` (its events and response headers)."""
        return cls(events=stream.events, framing=framing, headers={**dict(stream.headers), **kw.pop("headers", {})},
                   **kw)


@dataclass
class Request:
    method: str
    path: str
    headers: list[tuple[str, str]]
    raw: bytes
    via: str  # "aiohttp" or "raw"

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    @property
    def json(self) -> dict:
        return json.loads(self.raw) if self.raw else {}


# ------------------------------------------------------------------------------------ framings


def _multiline(event: str) -> str:
    """The same JSON payload over several ``data:`` lines (joined with newlines, it parses the same)."""
    payload = event[len("data: ") : -2]
    lines = json.dumps(json.loads(payload), ensure_ascii=False, indent=1).split("\n")
    return "".join(f"data: {line}\n" for line in lines) + "\n"


def frame_events(events: Sequence[str], framing: str) -> list[str]:
    """The event strings as this framing writes them (line endings, interspersed fields)."""
    out = list(events)
    if framing == "comments":
        framed: list[str] = [": keep-alive\n\n"]
        for i, ev in enumerate(out):
            is_json = ev.startswith("data: {") and ev.endswith("}\n\n") and "\n" not in ev[:-2]
            if i % 2 == 0:
                framed.append(": keep-alive\n\n")
            if is_json and i % 4 == 1:
                ev = _multiline(ev)
            if ev.startswith("data: ") and i % 3 == 0:
                ev = f"id: {i}\n" + ev
            elif ev.startswith("data: ") and i % 3 == 1:
                ev = "event: message\n" + ev
            elif ev.startswith("data: ") and i % 3 == 2:
                ev = ": inside an event\nretry: 3000\n" + ev
            framed.append(ev)
        out = framed
    elif framing == "crlf":
        out = [ev.replace("\n", "\r\n") for ev in out]
    elif framing == "bare_cr":
        out = [ev.replace("\n", "\r") for ev in out]
    elif framing == "no_final_blank" and out:
        out[-1] = out[-1].rstrip("\n")
    return out


def _utf8_cuts(body: bytes) -> list[bytes]:
    """Split after the first byte of every multi-byte UTF-8 character."""
    text = body.decode("utf-8")
    cuts, offset = [], 0
    for ch in text:
        size = len(ch.encode("utf-8"))
        if size > 1:
            cuts.append(offset + 1)
        offset += size
    if not cuts:
        raise ValueError("utf8_cut needs a stream with non-ASCII text in it")
    pieces, last = [], 0
    for cut in cuts:
        pieces.append(body[last:cut])
        last = cut
    pieces.append(body[last:])
    return [p for p in pieces if p]


def frame_writes(events: Sequence[str], framing: str) -> list[bytes]:
    """The socket writes (each one HTTP chunk where the encoding is chunked) for this framing."""
    framed = frame_events(events, framing)
    body = "".join(framed).encode("utf-8")
    if framing == "one_byte":
        return [body[i : i + 1] for i in range(len(body))]
    if framing == "utf8_cut":
        return _utf8_cuts(body)
    if framing == "one_chunk":
        return [body]
    return [ev.encode("utf-8") for ev in framed if ev]


def _gzip(writes: list[bytes]) -> list[bytes]:
    """gzip-compress as a stream: each write flushed so it can be decoded as it arrives."""
    z = zlib.compressobj(wbits=31)
    out = [z.compress(w) + z.flush(zlib.Z_SYNC_FLUSH) for w in writes]
    out.append(z.flush())
    return [w for w in out if w]


# ------------------------------------------------------------------------------------ the server


@dataclass
class _Plan:
    status: int
    headers: dict[str, str]
    writes: list[bytes]
    framing: str = "plain"
    delay: float = 0.0
    sized: bool = False  # Content-Length rather than chunked


def _json_plan(status: int, payload: dict) -> _Plan:
    body = json.dumps(payload).encode()
    return _Plan(status, {"Content-Type": "application/json"}, [body], sized=True)


class WireServer:
    """``async with WireServer() as srv: srv.serve(Serve(...)); model(base_url=srv.url(framing))``."""

    def __init__(self, api_key: str = KEY) -> None:
        self.api_key = api_key
        self.requests: list[Request] = []
        self.problems: list[str] = []
        self.checks: dict[int, Callable[[Request], None]] = {}
        self.base_url = ""
        self.raw_base_url = ""
        self._script: list[Serve] = []
        self._runner: web.AppRunner | None = None
        self._raw: asyncio.AbstractServer | None = None
        self._raw_writers: set[asyncio.StreamWriter] = set()
        self._changed: asyncio.Condition | None = None

    # -- scripting -----------------------------------------------------------------------------

    def serve(self, *answers: Serve) -> WireServer:
        """Answers to give, in order, one per request (a redirect307 answer spans two requests)."""
        self._script.extend(answers)
        return self

    def check(self, n: int, fn: Callable[[Request], None]) -> WireServer:
        """Run ``fn`` on the n-th request (1-based) before answering it; when it raises (an
        AssertionError, or anything else) the request is answered 400 with the failure in the
        error message, and the failure is noted in ``problems``."""
        self.checks[n] = fn
        return self

    def reset(self) -> None:
        self.requests.clear()
        self.problems.clear()
        self.checks.clear()
        self._script.clear()

    def url(self, framing: str = "plain") -> str:
        return self.raw_base_url if framing in RAW_FRAMINGS else self.base_url

    def assert_clean(self) -> None:
        assert self.problems == [], "\n".join(self.problems)

    def _cond(self) -> asyncio.Condition:
        assert self._changed is not None, "the server is not started"
        return self._changed

    async def wait_for_requests(self, n: int, timeout: float = 10.0) -> None:
        async with self._cond():
            await asyncio.wait_for(self._cond().wait_for(lambda: len(self.requests) >= n), timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> Self:
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._aiohttp_handler)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._raw = await asyncio.start_server(self._raw_connection, "127.0.0.1", 0)
        raw_port = self._raw.sockets[0].getsockname()[1]
        self.raw_base_url = f"http://127.0.0.1:{raw_port}/v1"
        return self

    async def stop(self) -> None:
        if self._raw is not None:
            self._raw.close()
            for w in list(self._raw_writers):
                w.transport.abort()
            self._raw = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # -- deciding an answer ----------------------------------------------------------------------

    def _inspect(self, req: Request) -> None:
        n = len(self.requests)
        seen: dict[str, int] = {}
        for k, _ in req.headers:
            seen[k.lower()] = seen.get(k.lower(), 0) + 1
        twice = sorted(k for k, c in seen.items() if c > 1)
        if twice:
            self.problems.append(f"request {n} ({req.path}): header(s) sent more than once: {twice}")
        auth = [v for k, v in req.headers if k.lower() == "authorization"]
        if auth != [f"Bearer {self.api_key}"]:
            shown = ["Bearer <the key>" if a == f"Bearer {self.api_key}" else "<another value>" for a in auth]
            self.problems.append(f"request {n} ({req.path}): Authorization {shown}, expected one 'Bearer <the key>'")

    async def _plan(self, req: Request) -> _Plan:
        self.requests.append(req)
        async with self._cond():
            self._cond().notify_all()
        self._inspect(req)
        n = len(self.requests)
        if req.method != "POST" or req.path.split("?", 1)[0] not in (PATH, MOVED):
            self.problems.append(f"request {n}: unexpected {req.method} {req.path}")
            return _json_plan(404, {"error": {"message": f"no route {req.method} {req.path}", "type": "not_found"}})
        check = self.checks.get(n)
        if check is not None:
            try:
                check(req)
            except Exception as err:  # an assertion, or a check that could not even look
                what = str(err) if isinstance(err, AssertionError) else f"{type(err).__name__}: {err}"
                self.problems.append(f"request {n}: check failed: {what}")
                return _json_plan(400, {"error": {"message": f"wire_server check of request {n} failed: {what}",
                                                  "type": "invalid_request_error"}})
        if not self._script:
            self.problems.append(f"request {n}: no answer was scripted")
            return _json_plan(500, {"error": {"message": "wire_server: no answer scripted", "type": "server_error"}})
        spec = self._script[0]
        if spec.framing == "redirect307" and req.path.split("?", 1)[0] == PATH:
            return _Plan(307, {"Location": MOVED, "Content-Type": "text/plain"}, [b"Temporary Redirect"], sized=True)
        self._script.pop(0)
        if spec.body is not None:
            return _Plan(spec.status, {"Content-Type": spec.content_type, **spec.headers}, [spec.body], sized=True)
        if 300 <= spec.status < 400:
            headers = dict(spec.headers)
            if spec.location is not None:
                headers["Location"] = spec.location
            return _Plan(spec.status, headers, [], sized=True)
        headers = {"Content-Type": spec.content_type, "Cache-Control": "no-cache", **spec.headers}
        writes = frame_writes(spec.events, spec.framing)
        accepted = (req.header("accept-encoding") or "").lower()
        if spec.framing == "gzip_unasked" or (spec.framing == "gzip_asked" and "gzip" in accepted):
            writes = _gzip(writes)
            headers["Content-Encoding"] = "gzip"
        return _Plan(spec.status, headers, writes, spec.framing, spec.event_delay,
                     sized=spec.framing == "content_length")

    async def _pace(self, plan: _Plan, i: int) -> None:
        if i == 0:
            return
        # yield between writes so the client reads them one at a time (server and client share the loop)
        await asyncio.sleep(plan.delay)

    # -- aiohttp ---------------------------------------------------------------------------------

    async def _aiohttp_handler(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        req = Request(request.method, request.path_qs, headers, raw, "aiohttp")
        plan = await self._plan(req)
        if plan.framing in RAW_FRAMINGS:
            self.problems.append(
                f"a {plan.framing!r} answer was asked of the aiohttp server: use srv.url({plan.framing!r})")
            return web.json_response({"error": {"message": "wrong server for this framing"}}, status=500)
        resp = web.StreamResponse(status=plan.status, headers=plan.headers)
        if plan.sized:
            resp.content_length = sum(len(w) for w in plan.writes)
        else:
            resp.enable_chunked_encoding()
        try:
            await resp.prepare(request)
            for i, w in enumerate(plan.writes):
                await self._pace(plan, i)
                await resp.write(w)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away
        return resp

    # -- raw asyncio (eof, http10) -----------------------------------------------------------------

    async def _raw_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._raw_writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _version = lines[0].split(" ", 2)
            headers = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:] if line)]
            req = Request(method, target, headers, b"", "raw")
            if "chunked" in (req.header("transfer-encoding") or "").lower():
                body = b""
                while True:
                    size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass
                        break
                    body += await reader.readexactly(size)
                    await reader.readexactly(2)
            else:
                body = await reader.readexactly(int(req.header("content-length") or 0))
            req.raw = body
            plan = await self._plan(req)
            if plan.framing == "http10":
                head_lines = [f"HTTP/1.0 {plan.status} {_REASONS.get(plan.status, 'Status')}"]
            else:
                head_lines = [f"HTTP/1.1 {plan.status} {_REASONS.get(plan.status, 'Status')}", "Connection: close"]
            head_lines += [f"{k}: {v}" for k, v in plan.headers.items()]
            if plan.sized or plan.framing not in RAW_FRAMINGS:
                head_lines.append(f"Content-Length: {sum(len(w) for w in plan.writes)}")
            writer.write(("\r\n".join(head_lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            for i, w in enumerate(plan.writes):
                await self._pace(plan, i)
                writer.write(w)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError, ValueError):
            pass
        finally:
            self._raw_writers.discard(writer)
            writer.close()
