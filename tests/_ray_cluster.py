"""One local Ray cluster (two CPUs: two worker processes) for the tests of ``backend="ray"``, and a loopback
OpenAI-compatible server the workers reach at 127.0.0.1 that records when each request came."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer

_STARTED: list[Any] = []


@pytest.fixture(scope="session")
def ray_cluster():
    """The cluster, started once per test session (workers inherit this process's environment, PYTHONPATH too)."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        _STARTED.append(ray)
    yield ray
    if _STARTED:
        _STARTED.clear()
        ray.shutdown()


class Served:
    """A handler for :class:`FakeOpenAIServer` that records each request (its body and when it came) before
    answering it with ``answer(body)``; :meth:`reach` waits (in a thread, with a timeout) for the n-th request."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.times: list[float] = []
        self.bodies: list[dict] = []
        self.cond = threading.Condition()
        self.url = ""

    def __call__(self, body: dict) -> Any:
        with self.cond:
            self.times.append(time.monotonic())
            self.bodies.append(body)
            self.cond.notify_all()
        return self.answer(body)

    @property
    def count(self) -> int:
        with self.cond:
            return len(self.times)

    async def reach(self, n: int, timeout: float = 90.0) -> None:
        def wait() -> bool:
            with self.cond:
                return self.cond.wait_for(lambda: len(self.times) >= n, timeout)

        assert await asyncio.to_thread(wait), f"the server saw {self.count} request(s), not {n}, in {timeout} s"


@pytest.fixture
def serve():
    """``serve(answer)``: a loopback server in a thread answering with ``answer(body)``; its :class:`Served`."""
    servers: list[FakeOpenAIServer] = []

    def start(answer: Any) -> Served:
        served = Served(answer)
        server = FakeOpenAIServer(served).start_in_thread()
        servers.append(server)
        served.url = server.base_url
        return served

    yield start
    for server in servers:
        server.stop_thread()


def task_of(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")
