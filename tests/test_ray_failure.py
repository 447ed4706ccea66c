"""A batch on Ray that fails (a worker's run raised) keeps the rows that finished in the very poll that saw it fail:
each is settled with its answer before the failure is raised (a local Ray cluster of two worker processes, a
loopback OpenAI-compatible server).

How the test makes "the same poll" certain: the kernel reads the input as the workers lease rows, so an input
whose next item waits holds the kernel between two polls. While it is held, one worker finishes a row (reported to
the batch's control actor, which the kernel has not polled since) and the other worker's run raises; the item
comes once the kernel's Ray client knows of the failure. The kernel's next poll takes both."""

import asyncio
import os
import pickle
import socket
import struct
import threading

import pytest
from _ray_cluster import ray_cluster, serve, task_of  # noqa: F401 - fixtures
from fake_openai import Reply

import unity_nb as u

pytestmark = pytest.mark.timeout(300)


def _arrive(claim: str, port: int, kernel: int) -> "Gate":
    """A worker loading the rows' tools: the first goes on; the second sends the test a handle to its own actor,
    waits for the test's word, then fails to load them (its run raises)."""
    if os.getpid() == kernel:
        return Gate(claim, port, kernel)
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
        return Gate(claim, port, kernel)
    except FileExistsError:
        pass
    import ray

    me = pickle.dumps(ray.get_runtime_context().current_actor)
    with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
        conn.sendall(struct.pack("!I", len(me)) + me)
        conn.recv(1)  # the word
    raise RuntimeError("this worker cannot load the rows' tools (as the test made it)")


class Gate:
    def __init__(self, claim: str, port: int, kernel: int) -> None:
        self.args = (claim, port, kernel)

    def __reduce__(self):
        return _arrive, self.args


class Failing:
    """The second worker's end: its handle and a connection to it, taken in a thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.came = threading.Event()
        self.conn: socket.socket | None = None
        self.handle = None
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        size = struct.unpack("!I", _exactly(conn, 4))[0]
        self.handle = pickle.loads(_exactly(conn, size))
        self.conn = conn
        self.came.set()

    def fail_now(self, ray) -> None:
        """Tell the worker to fail, and wait until this process's Ray client knows its run ended: a call made to
        the actor after its run is answered after it."""
        assert self.came.wait(120), "the second worker never came"
        assert self.conn is not None
        self.conn.sendall(b"!")
        ray.get(self.handle.ping.remote(), timeout=120)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        piece = conn.recv(n - len(data))
        assert piece, "the connection closed early"
        data += piece
    return data


async def test_a_row_that_finished_in_the_poll_that_saw_a_worker_fail_is_kept(ray_cluster, serve, tmp_path):  # noqa: F811
    held, b_asked, release = threading.Event(), threading.Event(), threading.Event()
    failing = Failing()

    async def answer(body):
        task = task_of(body)
        if task == "Say row 0":  # answered once the kernel is held
            assert await asyncio.to_thread(held.wait, 120)
            return Reply(content="A")
        b_asked.set()  # its worker asked it: it reported row 0 at the same exchange, or before
        await asyncio.to_thread(release.wait, 120)
        return Reply(content="late")

    def items():
        for i in range(66):
            if i == 64:  # the kernel asks for it once a worker leased row 0 (it holds 64 rows not leased)
                held.set()
                assert b_asked.wait(120), "row 1 was never asked"
                failing.fail_now(ray_cluster)
            yield f"row {i}"

    gate = Gate(str(tmp_path / "first"), failing.port, os.getpid())

    def shout(text: str) -> str:
        """The text in capitals."""
        assert gate is not None
        return text.upper()

    s = serve(answer)
    model = u.OpenAIModel("ray-m", base_url=s.url)
    h = u.map(items(), "Say {value}", model=model, tools=[shout], backend="ray", concurrency=2, ray_workers=2)
    try:
        with pytest.raises(u.UnityError, match="a Ray worker of the batch failed"):
            await asyncio.wait_for(h.result(), 200)
    finally:
        release.set()
        held.set()
        failing.close()
    got = h.results()
    assert got.iloc[0] == "A" and h.rows.counts["finished"] == 1
    assert got.attrs["reasons"].get(0) is None
    await model.close()
