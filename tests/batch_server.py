"""A loopback server implementing the OpenAI Batch API's documented endpoints and states, for tests.

Endpoints (the shapes of the OpenAI API reference; the ``openai`` package's own ``files`` and ``batches``
methods read them, so its types check the wire):

- ``POST /v1/files`` (multipart: ``file``, ``purpose=batch``) gives a File object;
- ``GET /v1/files/{id}/content`` gives a file's bytes (an input, output or error file);
- ``POST /v1/batches`` (``input_file_id``, ``endpoint`` ``/v1/chat/completions``, ``completion_window`` ``24h``);
- ``GET /v1/batches/{id}``: ``validating`` -> ``in_progress`` -> ``finalizing`` -> ``completed``; ``failed``,
  ``expired``, ``cancelling``, ``cancelled``; ``request_counts``; ``output_file_id``, ``error_file_id``;
- ``GET /v1/batches`` (``limit``, ``after``): the batches, newest first, a page of a cursor list;
- ``POST /v1/batches/{id}/cancel``;
- ``POST /v1/chat/completions``: a live call, counted (a test of a batch asserts there was none).

Knobs (attributes, read when a batch is looked at): ``durations`` (seconds in validating, in_progress and
finalizing), ``hold`` (batches stay in_progress, ``finish_while_held`` of their rows done, until it is False),
``fail_row`` (a function of a row's custom_id and body giving an error message: the row goes to the error file),
``expire`` (the batch expires after ``expire_after`` rows: the rest go to the error file, code ``batch_expired``),
``fail_validation`` (a message: the batch fails validation), ``no_batch_api`` (404 on /v1/files and /v1/batches),
``shuffle`` (output lines in another order than the input's), ``cancel_finishes`` (rows done when a cancel takes
effect: written to the output file of the cancelled batch), ``answer`` (a function of a request body giving the
chat completion's message; a ``finish_reason`` key in it is the choice's), ``completion_tokens`` (the tokens out
each reply's usage reports), ``content_status``
(an HTTP status every ``GET /v1/files/{id}/content`` answers with, an error), ``forget`` (batches are forgotten
once created: a look at one is a 404), ``upload_delay`` (seconds an upload takes;
``uploading`` is set as one starts), ``expires_in`` (a new batch's ``expires_at``, in seconds from now; None: null),
``created_ago`` (seconds before now a new batch says it was created),
``look_status`` (an HTTP status every ``GET /v1/batches/{id}`` answers with, an error), ``twice`` (a function of
a row's custom_id: True puts a second, other answer for it in the output file), ``stranger`` (an output line for
a custom_id no request had), ``garbled_counts`` (what every look says its ``request_counts`` are),
``garbled_errors`` (what every look says its ``errors`` are), ``cancel_hold`` (an asyncio.Event every cancel
waits for before it is answered: a provider that does not answer a cancel), ``files_late`` (a batch that ended
names no output or error file on its first ``files_late`` looks: its files attached after its status said so),
``content_gzip`` (bytes every ``GET /v1/files/{id}/content`` answers with instead, gzip-compressed: a gzip bomb),
``look_gzip`` (the same for every ``GET /v1/batches/{id}``), ``content_piece`` (a file's bytes are written in pieces
of this many bytes, each flushed), ``crlf`` (a file's lines end with CRLF), ``moved_to`` (a base URL: every request
is answered 307 to the same path there), ``lose_creates`` (the first this many creates are recorded, then their
connection is closed with no answer: a create whose answer was lost), ``list_status`` (an HTTP status every
``GET /v1/batches`` answers with, an error).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ("BatchServer", "default_answer")


def default_answer(body: dict) -> dict:
    """The message a request gets: a call of the tool it forces (its arguments from the task), else text."""
    task = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
    if isinstance(task, list):
        task = " ".join(p.get("text", "") for p in task)
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        schema = next(t["function"]["parameters"] for t in body["tools"] if t["function"]["name"] == name)
        args = {k: (len(task) if v.get("type") == "integer" else f"{k} of {task}")
                for k, v in schema.get("properties", {}).items()}
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    return {"role": "assistant", "content": f"answer to: {task}"}


class BatchServer:
    """See the module's docstring. ``await BatchServer().start()`` (or :meth:`start_in_thread`); ``url`` is the
    base URL (``.../v1``)."""

    def __init__(self) -> None:
        self.durations = {"validating": 0.0, "in_progress": 0.0, "finalizing": 0.0}
        self.hold = False
        self.hold_after: int | None = None
        """Batches created after the first ``hold_after`` stay in_progress (as ``hold`` holds them all)."""
        self.finish_while_held = 0
        self.fail_row: Callable[[str, dict], str | None] | None = None
        self.expire = False
        self.expire_after = 0
        self.fail_validation: str | None = None
        self.no_batch_api = False
        self.shuffle = True
        self.cancel_finishes = 0
        self.answer: Callable[[dict], dict] = default_answer
        self.completion_tokens = 7
        self.content_status: int | None = None
        self.content_gzip: bytes | None = None
        self.look_gzip: bytes | None = None
        self.content_piece = 0
        self.crlf = False
        self.forget = False
        self.upload_delay = 0.0
        self.uploading = asyncio.Event()
        self.expires_in: int | None = 86400
        self.created_ago = 0
        self.look_status: int | None = None
        self.twice: Callable[[str], bool] | None = None
        self.stranger = False
        self.garbled_counts: object = None
        self.garbled_errors: object = None
        self.cancel_hold: asyncio.Event | None = None
        self.files_late = 0
        self.moved_to: str | None = None
        self.lose_creates = 0
        self.list_status: int | None = None
        self.files: dict[str, dict] = {}
        self.batches: dict[str, dict] = {}
        self.uploads = 0
        self.creates = 0
        self.cancels = 0
        self.live_calls = 0
        self.requests: list[tuple[str, str]] = []
        self._n = 0
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> BatchServer:
        @web.middleware
        async def moved(request: web.Request, handler: Any) -> web.StreamResponse:
            if self.moved_to is not None:
                raise web.HTTPTemporaryRedirect(self.moved_to.rstrip("/") + request.path_qs.removeprefix("/v1"))
            return await handler(request)

        app = web.Application(client_max_size=1 << 30, middlewares=[moved])
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files/{id}/content", self._content)
        app.router.add_get("/v1/files/{id}", self._file)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches", self._list)
        app.router.add_get("/v1/batches/{id}", self._get)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel)
        app.router.add_post("/v1/chat/completions", self._live)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> BatchServer:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def start_in_thread(self) -> BatchServer:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop_thread(self) -> None:
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)

    # -- files ------------------------------------------------------------------------------------

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:06d}"

    def _put(self, content: bytes, purpose: str, filename: str) -> dict:
        fid = self._id("file")
        self.files[fid] = {"id": fid, "object": "file", "bytes": len(content), "created_at": int(time.time()),
                           "filename": filename, "purpose": purpose, "status": "processed", "_content": content}
        return self.files[fid]

    @staticmethod
    def _public(obj: dict) -> dict:
        return {k: v for k, v in obj.items() if not k.startswith("_")}

    @staticmethod
    def _error(status: int, message: str, code: str | None = None) -> web.Response:
        return web.json_response({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                            "code": code}}, status=status)

    async def _upload(self, request: web.Request) -> web.Response:
        self.requests.append(("POST", "/v1/files"))
        if self.no_batch_api:
            return self._error(404, "Not Found: this server has no /v1/files")
        form = await request.post()
        self.uploading.set()
        await asyncio.sleep(self.upload_delay)
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose != "batch":
            return self._error(400, f"purpose must be 'batch', not {purpose!r}")
        if not isinstance(upload, web.FileField):
            return self._error(400, "a multipart 'file' field is required")
        content = upload.file.read()
        for n, line in enumerate(content.splitlines(), 1):
            try:
                row = json.loads(line)
                assert isinstance(row["custom_id"], str) and row["method"] == "POST"
                assert row["url"] == "/v1/chat/completions" and isinstance(row["body"]["messages"], list)
            except (ValueError, KeyError, AssertionError, TypeError):
                return self._error(400, f"line {n} of the file is not a batch request: {line[:200]!r}")
        self.uploads += 1
        return web.json_response(self._public(self._put(content, "batch", upload.filename or "input.jsonl")))

    async def _file(self, request: web.Request) -> web.Response:
        f = self.files.get(request.match_info["id"])
        return web.json_response(self._public(f)) if f else self._error(404, "No such file")

    async def _content(self, request: web.Request) -> web.Response:
        self.requests.append(("GET", "/v1/files/content"))
        if self.content_status is not None:
            return self._error(self.content_status, "the file cannot be read now")
        f = self.files.get(request.match_info["id"])
        if f is None:
            return self._error(404, "No such file")
        if self.content_gzip is not None:  # whatever file is asked for: these bytes, gzip-compressed
            body = gzip.compress(self.content_gzip, compresslevel=9)
            return web.Response(body=body, content_type="application/octet-stream",
                                headers={"Content-Encoding": "gzip"})
        content = f["_content"].replace(b"\n", b"\r\n") if self.crlf else f["_content"]
        if not self.content_piece:
            return web.Response(body=content, content_type="application/octet-stream")
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        await resp.prepare(request)
        for at in range(0, len(content), self.content_piece):  # each piece its own write, flushed
            await resp.write(content[at:at + self.content_piece])
        await resp.write_eof()
        return resp

    # -- batches ----------------------------------------------------------------------------------

    async def _create(self, request: web.Request) -> web.Response:
        self.requests.append(("POST", "/v1/batches"))
        if self.no_batch_api:
            return self._error(404, "Not Found: this server has no /v1/batches")
        body = await request.json()
        fid = body.get("input_file_id")
        if fid not in self.files:
            return self._error(400, f"no file {fid!r}")
        if body.get("endpoint") != "/v1/chat/completions" or body.get("completion_window") != "24h":
            return self._error(400, "endpoint must be /v1/chat/completions and completion_window 24h")
        self.creates += 1
        bid = self._id("batch")
        now = int(time.time())
        rows = [json.loads(line) for line in self.files[fid]["_content"].splitlines()]
        self.batches[bid] = {
            "id": bid, "object": "batch", "endpoint": body["endpoint"], "errors": None, "input_file_id": fid,
            "completion_window": "24h", "status": "validating", "output_file_id": None, "error_file_id": None,
            "created_at": now - self.created_ago, "in_progress_at": None,
            "expires_at": now + self.expires_in if self.expires_in is not None else None, "finalizing_at": None,
            "completed_at": None, "failed_at": None, "expired_at": None, "cancelling_at": None, "cancelled_at": None,
            "request_counts": {"total": len(rows), "completed": 0, "failed": 0},
            "metadata": body.get("metadata"), "_rows": rows, "_t": time.monotonic(), "_done": 0,
            "_seq": self.creates - 1,
        }
        if self.lose_creates > 0:  # recorded, and its answer lost: the connection closes with none
            self.lose_creates -= 1
            assert request.transport is not None
            request.transport.close()
            raise ConnectionResetError("the answer to this create is lost")
        return web.json_response(self._public(self.batches[bid]))

    async def _list(self, request: web.Request) -> web.Response:
        self.requests.append(("GET", "/v1/batches (list)"))
        if self.list_status is not None:
            return self._error(self.list_status, "the batches cannot be listed now")
        limit = int(request.query.get("limit", "20"))
        newest = list(reversed(self.batches))
        after = request.query.get("after")
        if after in newest:
            newest = newest[newest.index(after) + 1:]
        page = [self._public(self.batches[b]) for b in newest[:limit]]
        return web.json_response({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                                  "last_id": page[-1]["id"] if page else None, "has_more": len(newest) > limit})

    async def _get(self, request: web.Request) -> web.Response:
        self.requests.append(("GET", "/v1/batches"))
        if self.look_status is not None:
            return self._error(self.look_status, "the batch cannot be looked at now")
        b = None if self.forget else self.batches.get(request.match_info["id"])
        if b is None:
            return self._error(404, "No such batch")
        if self.look_gzip is not None:  # these bytes, gzip-compressed, instead of the Batch object
            return web.Response(body=gzip.compress(self.look_gzip, compresslevel=9), content_type="application/json",
                                headers={"Content-Encoding": "gzip"})
        self._advance(b)
        public = self._public(b)
        if self.garbled_counts is not None:
            public["request_counts"] = self.garbled_counts
        if self.garbled_errors is not None:
            public["errors"] = self.garbled_errors
        if b["status"] in ("completed", "failed", "expired", "cancelled") and b.setdefault("_late", self.files_late):
            b["_late"] -= 1
            public["output_file_id"] = public["error_file_id"] = None
        return web.json_response(public)

    async def _cancel(self, request: web.Request) -> web.Response:
        self.requests.append(("POST", "/v1/batches/cancel"))
        if self.cancel_hold is not None:
            await self.cancel_hold.wait()
        b = None if self.forget else self.batches.get(request.match_info["id"])
        if b is None:
            return self._error(404, "No such batch")
        self._advance(b)
        if b["status"] in ("completed", "failed", "expired", "cancelled"):
            return self._error(409, f"cannot cancel a batch that is {b['status']}")
        self.cancels += 1
        b["status"], b["cancelling_at"] = "cancelling", int(time.time())
        b["_t"] = time.monotonic()
        return web.json_response(self._public(b))

    def _advance(self, b: dict) -> None:
        """Move a batch along its states by the time spent in each (and the knobs)."""
        now = time.monotonic()
        d = self.durations
        status = b["status"]
        if status == "validating" and now - b["_t"] >= d["validating"]:
            if self.fail_validation:
                b["status"], b["failed_at"] = "failed", int(time.time())
                b["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": self.fail_validation,
                                                          "line": 1, "param": None}]}
                return
            b["status"], b["in_progress_at"], b["_t"] = "in_progress", int(time.time()), now
            status = "in_progress"
        if status == "in_progress":
            if self.hold or (self.hold_after is not None and b["_seq"] >= self.hold_after):
                b["_done"] = min(self.finish_while_held, len(b["_rows"]))
                b["request_counts"]["completed"] = b["_done"]
                return
            if now - b["_t"] >= d["in_progress"]:
                if self.expire:
                    self._finish(b, self.expire_after, "expired")
                    return
                b["status"], b["finalizing_at"], b["_t"] = "finalizing", int(time.time()), now
                status = "finalizing"
        if status == "finalizing" and now - b["_t"] >= d["finalizing"]:
            self._finish(b, len(b["_rows"]), "completed")
        if status == "cancelling" and now - b["_t"] >= d["finalizing"]:
            self._finish(b, max(b["_done"], self.cancel_finishes), "cancelled")

    def _finish(self, b: dict, done: int, status: str) -> None:
        """Write the output and error files for the first ``done`` rows (the rest expired or were cancelled)."""
        out, err = [], []
        for n, row in enumerate(b["_rows"]):
            rid = f"batch_req_{b['id']}_{n}"
            if n >= done:
                if status == "expired":
                    err.append({"id": rid, "custom_id": row["custom_id"], "response": None, "error": {
                        "code": "batch_expired", "message": "This request could not be executed before the "
                        "completion window expired."}})
                continue
            problem = self.fail_row(row["custom_id"], row["body"]) if self.fail_row else None
            if problem:
                err.append({"id": rid, "custom_id": row["custom_id"], "response": {
                    "status_code": 400, "request_id": f"req_{n}", "body": {"error": {
                        "message": problem, "type": "invalid_request_error", "param": None, "code": None}}},
                    "error": None})
                continue
            message = dict(self.answer(row["body"]))
            finish = message.pop("finish_reason", None) or ("tool_calls" if message.get("tool_calls") else "stop")
            tokens_in = sum(len(str(m.get("content") or "")) for m in row["body"]["messages"]) // 4 + 1
            body = {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                    "model": row["body"]["model"], "choices": [{"index": 0, "message": message, "logprobs": None,
                    "finish_reason": finish}],
                    "usage": {"prompt_tokens": tokens_in, "completion_tokens": self.completion_tokens,
                              "total_tokens": tokens_in + self.completion_tokens}}
            out.append({"id": rid, "custom_id": row["custom_id"], "response": {
                "status_code": 200, "request_id": f"req_{n}", "body": body}, "error": None})
            if self.twice is not None and self.twice(row["custom_id"]):
                other = json.loads(json.dumps(out[-1]))
                other["response"]["body"]["choices"][0]["message"] = {"role": "assistant", "content": "another"}
                out.append(other)
        if self.stranger and out:
            other = json.loads(json.dumps(out[-1]))
            other["custom_id"] = "row-that-was-never-sent"
            out.append(other)
        if self.shuffle:
            random.Random(7).shuffle(out)
            random.Random(8).shuffle(err)
        if out:
            b["output_file_id"] = self._put(_jsonl(out), "batch_output", "output.jsonl")["id"]
        if err:
            b["error_file_id"] = self._put(_jsonl(err), "batch_output", "errors.jsonl")["id"]
        failed = sum(1 for e in err if e["error"] is None or e["error"].get("code") != "batch_expired")
        b["request_counts"] = {"total": len(b["_rows"]), "completed": len(out), "failed": failed}
        b["status"] = status
        stamp = {"completed": "completed_at", "expired": "expired_at", "cancelled": "cancelled_at"}[status]
        b[stamp] = int(time.time())
        b["_rows"] = []

    async def _live(self, request: web.Request) -> web.Response:
        self.live_calls += 1
        body = await request.json()
        message = self.answer(body)
        return web.json_response({"id": "live", "object": "chat.completion", "created": 0, "model": body["model"],
                                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)
