"""The process :class:`~unity_nb.models.LocalServer` starts: llama-cpp-python's OpenAI-compatible server on a socket
the kernel bound and handed over. Run as a script (``python -P _llama_serve.py``), never imported by the package.

Its settings come as one JSON line on stdin, not on its command line (which any local user can read):

- ``fd``: a TCP socket bound to 127.0.0.1 by the kernel before this process started. It is served as it is
  (uvicorn never binds), so the port the kernel announces was never free for another process to take.
- ``api_key``: the key every request must carry (a random one the kernel made; llama-cpp-python's ``api_key``).
- ``parent``: the kernel's process id. A thread watches it and ends this process the moment the kernel is gone,
  however it ended (SIGKILL included), whichever of its threads started this one: ``PR_SET_PDEATHSIG``, used
  before, fires when the *thread* that forked the server exits, so a server started from a thread died with it.
- ``model``, ``model_alias``, ``n_ctx``, ``chat_format``: llama-cpp-python's own settings.

What it adds to llama-cpp-python's server (which generates on in a thread after its client has gone, and whose
``chatml-function-calling`` format, offered tools in its automatic mode, generates with no limit at all):

- **a request's ``max_tokens`` bounds everything it generates**, across the several completions a reply with
  tools is made of (the tool's name, its arguments, the look for another call): each is given what is left, and
  one with nothing left is not run. The reply's ``usage.completion_tokens`` counts all of them, and a reply
  cut by the bound says ``finish_reason: "length"``.
- **a client that goes away stops its generation** at the next token (or the next batch of its prompt): the
  connection is watched for the whole request, streamed or not, so the next request is served at once.
- **it ends at once when asked** (SIGTERM, SIGINT): nothing it holds needs a graceful shutdown, and uvicorn's
  waits for the generation under way (minutes, for a rambling reply).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any


class _Request:
    """One HTTP request's bound and stop, read by the generation it starts (in llama-cpp-python's threads)."""

    __slots__ = ("budget", "cut", "gone", "used")

    def __init__(self) -> None:
        self.gone = threading.Event()
        """Set when the client has gone away: the generation stops."""
        self.budget: int | None = None
        """The request's ``max_tokens`` (``None``: no bound asked for)."""
        self.used = 0
        """Tokens generated so far for the request, over all its completions."""
        self.cut = False
        """A completion was cut (or not run) because the budget was spent."""

    def left(self) -> int | None:
        return None if self.budget is None else self.budget - self.used

    def spent(self) -> bool:
        """The request's budget is used up."""
        return self.budget is not None and self.used >= self.budget


_REQUEST: contextvars.ContextVar[_Request | None] = contextvars.ContextVar("unity_nb_request", default=None)


class _Aborted(Exception):
    """The client went away while its prompt was being read: nothing more is done for it."""


def _empty_completion(llama: Any, stream: bool) -> Any:
    """What a completion that is not run returns: no text, ended by its length."""
    body = {
        "id": f"cmpl-unity-nb-{time.monotonic_ns()}", "object": "text_completion", "created": int(time.time()),
        "model": getattr(llama, "model_path", "local"),
        "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }
    return iter([body]) if stream else body


def _counted(chunks: Any, request: _Request) -> Any:
    for chunk in chunks:
        request.used += 1  # a streamed chunk is a token (or, rarely, the few bytes of one character)
        choice = (chunk.get("choices") or [{}])[0] if isinstance(chunk, dict) else {}
        if choice.get("finish_reason") == "length" and request.spent():
            request.cut = True
        yield chunk


def bound_generation(llama_class: Any, stopping: Any) -> None:
    """Make every completion of a request (llama-cpp-python's ``Llama``) keep to the request's budget and stop
    when its client has gone. ``stopping`` is llama-cpp-python's ``StoppingCriteriaList``."""
    complete = llama_class.create_completion
    chat = llama_class.create_chat_completion
    evaluate = llama_class.eval

    def create_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = _REQUEST.get()
        if request is None or args:  # not from a request this process serves (or called positionally)
            return complete(self, *args, **kwargs)
        left = request.left()
        stream = bool(kwargs.get("stream"))
        if request.gone.is_set():
            return _empty_completion(self, stream)
        if left is not None:
            if left <= 0:
                request.cut = True
                return _empty_completion(self, stream)
            asked = kwargs.get("max_tokens")
            if asked is None or asked <= 0 or asked > left:  # None and 0 mean "to the end of the context"
                kwargs["max_tokens"] = left
        kwargs["stopping_criteria"] = stopping(
            [*(kwargs.get("stopping_criteria") or ()), lambda _ids, _logits: request.gone.is_set()]
        )
        result = complete(self, **kwargs)
        if not isinstance(result, dict):
            return _counted(result, request)
        usage = result.get("usage") or {}
        request.used += int(usage.get("completion_tokens") or 0)
        choice = (result.get("choices") or [{}])[0]
        if choice.get("finish_reason") == "length" and request.spent():
            request.cut = True
        return result

    def create_chat_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = _REQUEST.get()
        if request is not None:
            asked = kwargs.get("max_tokens")
            request.budget = asked if isinstance(asked, int) and asked > 0 else None
            request.used = 0
            request.cut = False
        result = chat(self, *args, **kwargs)
        if request is not None and isinstance(result, dict):
            usage = result.get("usage")
            if isinstance(usage, dict):  # every token generated for it, not only a tool call's arguments
                usage["completion_tokens"] = request.used
                usage["total_tokens"] = int(usage.get("prompt_tokens") or 0) + request.used
            if request.cut:
                for choice in result.get("choices") or ():
                    choice["finish_reason"] = "length"
        return result

    def eval_tokens(self: Any, tokens: Any) -> None:
        request = _REQUEST.get()
        if request is None:
            return evaluate(self, tokens)
        step = max(1, int(getattr(self, "n_batch", 512) or 512))
        for start in range(0, len(tokens), step):  # a long prompt is read a batch at a time: stoppable between
            if request.gone.is_set():
                raise _Aborted("the client went away")
            evaluate(self, tokens[start:start + step])
        return None

    llama_class.create_completion = create_completion
    llama_class.create_chat_completion = create_chat_completion
    llama_class.eval = eval_tokens


KEEPALIVE = 5.0
"""Seconds an unstreamed reply may take before its response turns into a stream of keep-alive comments."""


class WatchClient:
    """ASGI middleware: each request gets its :class:`_Request`, and its client's leaving sets ``gone``.

    The body is read here first; then the connection is watched for its end for the whole request (uvicorn's
    ``receive`` says ``http.disconnect``), and the app gets the body, then that disconnect, from here.

    An unstreamed chat completion (one that offers tools: this server streams none) that takes longer than
    :data:`KEEPALIVE` seconds is answered as a stream instead: a comment line every :data:`KEEPALIVE` seconds
    while it is generated (a client's silence timeout measures a server that stopped answering, not a long
    reply), then the whole reply as one event and ``[DONE]`` (an error as an ``error`` event)."""

    def __init__(self, app: Any, keepalive: float = KEEPALIVE) -> None:
        self.app = app
        self.keepalive = keepalive

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        request = _Request()
        token = _REQUEST.set(request)
        body: list[dict] = []
        try:
            while True:
                message = await receive()
                body.append(message)
                if message.get("type") != "http.request" or not message.get("more_body"):
                    break
            gone = asyncio.Event()

            async def watch() -> None:
                while (await receive()).get("type") != "http.disconnect":
                    pass
                request.gone.set()
                gone.set()

            watcher = asyncio.ensure_future(watch())

            async def replay() -> dict:
                if body:
                    return body.pop(0)
                await gone.wait()
                return {"type": "http.disconnect"}

            try:
                if _unstreamed_chat(scope, body):
                    await _kept_alive(self.app, scope, replay, send, self.keepalive)
                else:
                    await self.app(scope, replay, send)
            finally:
                watcher.cancel()
        finally:
            _REQUEST.reset(token)


def _unstreamed_chat(scope: dict, body: list[dict]) -> bool:
    if scope.get("method") != "POST" or not str(scope.get("path", "")).endswith("/chat/completions"):
        return False
    try:
        sent = json.loads(b"".join(m.get("body", b"") for m in body if m.get("type") == "http.request"))
    except ValueError:
        return False
    return isinstance(sent, dict) and not sent.get("stream")


async def _kept_alive(app: Any, scope: dict, receive: Any, send: Any, every: float) -> None:
    """Run ``app``; if it has not started its response within ``every`` seconds, answer as a stream meanwhile."""
    lock = asyncio.Lock()
    state = {"streaming": False, "started": False, "status": 200}
    held: list[bytes] = []

    async def app_send(message: dict) -> None:
        async with lock:
            if not state["streaming"]:
                state["started"] = True
                await send(message)
                return
            if message["type"] == "http.response.start":
                state["status"] = int(message.get("status", 200))
                return
            if message["type"] == "http.response.body":
                held.append(message.get("body", b""))
                if not message.get("more_body"):
                    await send({"type": "http.response.body", "body": _as_events(state["status"], b"".join(held))})

    async def keep_alive() -> None:
        await asyncio.sleep(every)
        async with lock:
            if state["started"]:
                return
            state["streaming"] = True
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]})
            await send({"type": "http.response.body", "body": b": generating\n\n", "more_body": True})
        while True:
            await asyncio.sleep(every)
            async with lock:
                await send({"type": "http.response.body", "body": b": generating\n\n", "more_body": True})

    alive = asyncio.ensure_future(keep_alive())
    try:
        await app(scope, receive, app_send)
    finally:
        alive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await alive


def _as_events(status: int, body: bytes) -> bytes:
    """A whole response as the end of a stream: the reply as one event and ``[DONE]``, or an ``error`` event."""
    if status == 200:
        return b"data: " + body.replace(b"\n", b" ") + b"\n\ndata: [DONE]\n\n"
    try:
        said = json.loads(body)
    except ValueError:
        said = body.decode("utf-8", "replace")[:2000]
    error = {"message": said if isinstance(said, str) else json.dumps(said)[:2000], "code": status}
    return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"


def _watch(parent: int) -> None:
    """End this process when ``parent`` (the kernel) is gone: it is then no longer this process's parent."""
    try:
        pidfd: int | None = os.pidfd_open(parent)  # Linux 5.3+: readable once the process has ended
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None and os.getppid() == parent:  # still our parent: the pidfd is the kernel's, not a reused pid's
        select.select([pidfd], [], [])
    while os.getppid() == parent:  # elsewhere (or on a spurious wake-up): asked five times a second
        time.sleep(0.2)
    os._exit(0)  # no graceful shutdown: nobody is left to answer


def _end_now(signum: int, frame: Any) -> None:
    os._exit(0)


def main() -> None:
    config = json.loads(sys.stdin.readline())
    threading.Thread(target=_watch, args=(int(config["parent"]),), name="unity_nb-kernel-watch", daemon=True).start()
    listener = socket.socket(fileno=int(config["fd"]))
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # the log is whole up to the moment the process ends

    import llama_cpp
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    bound_generation(llama_cpp.Llama, llama_cpp.StoppingCriteriaList)
    app = create_app(
        server_settings=ServerSettings(host="127.0.0.1", port=listener.getsockname()[1], api_key=config["api_key"]),
        model_settings=[ModelSettings(
            model=config["model"], model_alias=config["model_alias"], n_ctx=int(config["n_ctx"]),
            chat_format=config["chat_format"],
        )],
    )

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:  # uvicorn's waits for the generation under way: not here
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, _end_now)
            yield

    Server(uvicorn.Config(WatchClient(app), log_level="info")).run(sockets=[listener])


if __name__ == "__main__":
    main()
