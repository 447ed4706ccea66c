"""An OpenAI-compatible Chat Completions server on 127.0.0.1, standard library only.

Tests and benchmarks point the real ``openai`` client at it, so the wire protocol is
exercised for real: streamed chunks with tool-call deltas, usage, error statuses with
Retry-After, slow first bytes, dropped connections. It runs on the current event loop
(``async with FakeOpenAIServer(handler) as server``), in a thread (``start_in_thread()``), or
as its own process (``python tests/fake_openai.py --port 0 --latency 0.05 --tool-steps 20``,
which prints ``READY <base_url>``).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ("Reply", "FakeOpenAIServer")


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict] = field(default_factory=list)  # {"name", "arguments" (JSON text), optional "id"}
    chunks: int = 4
    first_byte_delay: float = 0.0
    chunk_delay: float = 0.0
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    drop_after_chunks: int | None = None
    usage: tuple[int, int] | None = None
    model: str | None = None
    stream_error_after: int | None = None  # streaming: send an in-stream error event after this many chunks
    stream_error: dict | None = None  # that event's error object (default: a server_error, an overload)
    omit_finish: bool = False  # streaming: end cleanly ([DONE]) without any finish_reason
    omit_done: bool = False  # streaming: end the body cleanly without "data: [DONE]"
    drop_before_done: bool = False  # streaming: drop the connection after the last chunk (usage too), before [DONE]
    raw_usage: dict | None = None  # the usage object as sent, whatever it holds (in place of usage=)
    close_after: bool = False  # close the connection after this response, without saying so
    trickle: float | None = None  # streaming: send the body one byte at a time, this many seconds apart
    stall_body: bool = False  # an error status: send its head and half its body, then nothing until the client goes
    finish_reason: str | None = None  # the finish_reason sent (default: tool_calls with calls, else stop)


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 408: "Request Timeout",
            429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}
_ids = itertools.count(1)


def _split(text: str, n: int) -> list[str]:
    if not text:
        return []
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)]


class _Dropped(Exception):
    pass


class FakeOpenAIServer:
    def __init__(self, handler: Callable[[dict], Any] | None = None, *, ssl: Any = None) -> None:
        self.handler = handler or (lambda body: "ok")
        self.ssl = ssl  # an ssl.SSLContext: serve https
        self.requests: list[dict] = []
        self.request_headers: list[dict] = []
        self.disconnects = 0
        self.connections = 0
        """Connections accepted (whatever was asked on them)."""
        self.models: list[str] | None = None
        """What ``GET /v1/models`` lists (``None``: that route answers 404, as many servers' do)."""
        self.listings: list[dict] = []
        """The headers of each ``GET /v1/models``."""
        self.base_url = ""
        self._script: list[Reply | str] = []
        self._server: asyncio.AbstractServer | None = None
        self._changed: asyncio.Condition | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def script(self, replies: list[Reply | str]) -> FakeOpenAIServer:
        """Replies to give in order before falling back to the handler."""
        self._script.extend(replies)
        return self

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> FakeOpenAIServer:
        self._changed = asyncio.Condition()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"{'https' if self.ssl else 'http'}://127.0.0.1:{port}/v1"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()

    async def __aenter__(self) -> FakeOpenAIServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def start_in_thread(self) -> FakeOpenAIServer:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._thread_loop = loop
            loop.run_until_complete(self.start())
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True, name="fake-openai")
        self._thread.start()
        ready.wait(10)
        return self

    def stop_thread(self) -> None:
        loop = self._thread_loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(10)

    def _cond(self) -> asyncio.Condition:
        assert self._changed is not None, "the server is not started"
        return self._changed

    async def wait_for_requests(self, n: int, timeout: float = 10) -> None:
        async with self._cond():
            await asyncio.wait_for(self._cond().wait_for(lambda: len(self.requests) >= n), timeout)

    async def wait_for_disconnects(self, n: int, timeout: float = 10) -> None:
        async with self._cond():
            await asyncio.wait_for(self._cond().wait_for(lambda: self.disconnects >= n), timeout)

    async def _notify(self) -> None:
        async with self._cond():
            self._cond().notify_all()

    # -- HTTP ------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                path = urllib.parse.urlsplit(path).path  # a proxy's absolute-form target too
                if method == "GET" and path.rstrip("/") in ("/v1/models", "/models") and self.models is not None:
                    self.listings.append(headers)
                    self._send(writer, 200, {"object": "list", "data": [
                        {"id": m, "object": "model", "owned_by": "fake"} for m in self.models]})
                    await writer.drain()
                    continue
                if method != "POST" or path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(writer, 404,
                               {"error": {"message": f"no route {method} {path}", "type": "not_found", "code": None}})
                    await writer.drain()
                    continue
                request = json.loads(body or b"{}")
                self.requests.append(request)
                self.request_headers.append(headers)
                await self._notify()
                reply = await self._reply(request)
                await self._respond(reader, writer, request, reply)
                if reply.close_after:
                    writer.transport.abort()
                    return
        except (asyncio.IncompleteReadError, ConnectionError, _Dropped, asyncio.CancelledError):
            pass  # the client went away, or the server is shutting down
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _reply(self, request: dict) -> Reply:
        out = self._script.pop(0) if self._script else self.handler(request)
        if inspect.isawaitable(out):
            out = await out
        return Reply(content=out) if isinstance(out, str) else out

    def _send(self, writer: asyncio.StreamWriter, status: int, payload: dict, extra: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "content-type: application/json",
                f"content-length: {len(data)}"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)

    async def _gone(self, reader: asyncio.StreamReader, delay: float) -> bool:
        """Wait ``delay`` seconds; True if the client hung up meanwhile."""
        if delay <= 0:
            return False
        try:
            data = await asyncio.wait_for(reader.read(1), delay)
        except TimeoutError:
            return False
        return data == b""

    async def _respond(self, reader, writer, request: dict, reply: Reply) -> None:
        if await self._gone(reader, reply.first_byte_delay):
            self.disconnects += 1
            await self._notify()
            raise _Dropped
        model = reply.model or request.get("model", "fake")
        if reply.status != 200:
            kind = ("rate_limit_exceeded" if reply.status == 429
                    else "server_error" if reply.status >= 500 else "invalid_request_error")
            error = {"error": {"message": f"fake error {reply.status}", "type": kind, "code": kind}}
            if reply.stall_body:
                data = json.dumps(error).encode()
                head = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}",
                        "content-type: application/json", f"content-length: {len(data)}"]
                head += [f"{k}: {v}" for k, v in reply.headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data[: len(data) // 2])
                await writer.drain()
                while await reader.read(65536):  # the rest never comes: wait for the client to hang up
                    pass
                self.disconnects += 1
                await self._notify()
                raise _Dropped
            self._send(writer, reply.status, error, reply.headers)
            await writer.drain()
            return
        prompt = sum(len(str(m.get("content") or "")) for m in request.get("messages", [])) // 4 + 1
        completion = (len(reply.content or "") + sum(len(c["arguments"]) for c in reply.tool_calls)) // 4 + 1
        usage = reply.usage or (prompt, completion)
        usage_obj = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
        if reply.raw_usage is not None:
            usage_obj = reply.raw_usage
        calls = [dict(c, id=c.get("id") or f"call_{next(_ids)}") for c in reply.tool_calls]
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        cid, created = f"chatcmpl-{next(_ids)}", int(time.time())
        if not request.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if calls:
                message["tool_calls"] = [{"id": c["id"], "type": "function",
                                          "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
            self._send(writer, 200, {"id": cid, "object": "chat.completion", "created": created, "model": model,
                                     "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                     "usage": usage_obj}, reply.headers)
            await writer.drain()
            return
        deltas: list[dict] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in _split(reply.content or "", reply.chunks)]
        for i, c in enumerate(calls):
            deltas.append({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                           "function": {"name": c["name"], "arguments": ""}}]})
            pieces = _split(c["arguments"], reply.chunks)
            deltas += [{"tool_calls": [{"index": i, "function": {"arguments": p}}]} for p in pieces]
        chunks = [{"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        if not reply.omit_finish:
            chunks.append({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        if reply.stream_error_after is not None:
            error = reply.stream_error or {"message": "fake overload in stream", "type": "server_error", "code": None}
            chunks[reply.stream_error_after:] = [{"error": error}]
        if (request.get("stream_options") or {}).get("include_usage"):
            chunks.append({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [], "usage": usage_obj})
        head = ["HTTP/1.1 200 OK", "content-type: text/event-stream", "transfer-encoding: chunked",
                "cache-control: no-cache"]
        head += [f"{k}: {v}" for k, v in reply.headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if reply.trickle is not None:  # one byte per write, each its own HTTP chunk
            body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
            for i in range(len(body)):
                self._write_chunk(writer, body[i : i + 1])
                await writer.drain()
                if await self._gone(reader, reply.trickle):
                    self.disconnects += 1
                    await self._notify()
                    raise _Dropped
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return
        for n, chunk in enumerate(chunks):
            if reply.drop_after_chunks is not None and n >= reply.drop_after_chunks:
                writer.transport.abort()
                raise _Dropped
            self._write_chunk(writer, b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if reply.chunk_delay:
                await writer.drain()
                if await self._gone(reader, reply.chunk_delay):
                    self.disconnects += 1
                    await self._notify()
                    raise _Dropped
        if reply.drop_before_done:
            await writer.drain()
            writer.transport.abort()
            raise _Dropped
        if not reply.omit_done:
            self._write_chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    @staticmethod
    def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))


def main() -> None:
    ap = argparse.ArgumentParser(description="A fake OpenAI-compatible server on 127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.0, help="seconds before the first byte")
    ap.add_argument("--reply", default="ok")
    ap.add_argument("--tool-steps", type=int, default=0,
                    help="answer with a tool call until the request holds this many tool results")
    args = ap.parse_args()

    def handler(body: dict) -> Reply:
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        if done < args.tool_steps and body.get("tools"):
            return Reply(tool_calls=[{"name": "step", "arguments": json.dumps({"i": done})}],
                         first_byte_delay=args.latency)
        return Reply(content=args.reply if not args.tool_steps else "done", first_byte_delay=args.latency)

    async def serve() -> None:
        server = FakeOpenAIServer(handler)
        server._changed = asyncio.Condition()
        server._server = await asyncio.start_server(server._serve, "127.0.0.1", args.port)
        port = server._server.sockets[0].getsockname()[1]
        print(f"READY http://127.0.0.1:{port}/v1", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
