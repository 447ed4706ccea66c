"""Loop benchmark (not a test): unity_nb against a bare openai loop, side by side in one run.

The server (tests/fake_openai.py) runs in its own process, so only the client's CPU counts.
It answers with a tool call `step` until the request holds K tool results, then "done".

  A. CPU per model round trip at zero latency, K=20: a bare loop on
     `AsyncOpenAI().chat.completions.create(stream=True)`, a bare HTTP loop on the same
     client's httpx pool with minimal SSE parsing, a bare aiohttp loop (the floor: one pooled
     session, the whole body JSON-encoded each step, SSE split by hand), and unity_nb's loop on
     its default path (aiohttp) and on the client.post path (a client handed in).
  B. 50 concurrent loops at 50 ms server latency: wall time against the ideal (K+1) x 50 ms.
  C. Steering latency while a 5 s model call is in flight: stop() until it returns; an
     interrupting interject() until the re-issued request is sent.
  D. Decoding one streamed reply's SSE bytes: unity_nb's decoder against openai's own (why the
     project has its own: it must serve both request paths, and it may not cost more).

Run: .venv/bin/python bench/bench_loop.py   (about a minute on 2 cores)
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai

import unity_nb as u

ROOT = Path(__file__).resolve().parent.parent
K = 20


class Server:
    """tests/fake_openai.py in a subprocess."""

    def __init__(self, latency: float = 0.0, steps: int = K) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--tool-steps", str(steps),
             "--latency", str(latency)],
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "READY", line
        self.base_url = line[1]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


async def step(i: int) -> str:
    """One unit of work."""
    return "ok"


STEP_SCHEMA = u.as_tool(step).schema()


async def bare_create_loop(client: openai.AsyncOpenAI) -> None:
    messages: list[dict] = [{"role": "user", "content": "go"}]
    while True:
        stream: Any = await client.chat.completions.create(
            model="m", messages=messages, tools=[STEP_SCHEMA], stream=True  # type: ignore[arg-type, list-item]
        )
        calls: dict[int, dict] = {}
        async for chunk in stream:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.id or slot["id"]
                    slot["name"] += (tc.function and tc.function.name) or ""
                    slot["arguments"] += (tc.function and tc.function.arguments) or ""
        if not calls:
            return
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()]})
        for c in calls.values():
            result = await step(**json.loads(c["arguments"]))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})


def _hand_step(data: bytes, messages: list[dict]) -> bool:
    """One reply's SSE body split by hand, its tool calls answered "ok"; False when it called none."""
    calls: dict[int, dict] = {}
    for event in data.split(b"\n\n"):
        if not event.startswith(b"data: {"):
            continue
        for choice in json.loads(event[6:])["choices"]:
            for tc in choice["delta"].get("tool_calls") or []:
                slot = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                slot["id"] = tc.get("id") or slot["id"]
                slot["name"] += tc.get("function", {}).get("name") or ""
                slot["arguments"] += tc.get("function", {}).get("arguments") or ""
    if not calls:
        return False
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls.values()]})
    for c in calls.values():
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": "ok"})
    return True


HAND_HEADERS = {"Authorization": "Bearer x", "Content-Type": "application/json"}


async def bare_http_loop(client: openai.AsyncOpenAI) -> None:
    """The same client's httpx pool, JSON in, SSE split by hand: what httpx alone costs."""
    http, url = client._client, str(client.base_url).rstrip("/") + "/chat/completions"
    messages: list[dict] = [{"role": "user", "content": "go"}]
    while True:
        body = json.dumps({"model": "m", "messages": messages, "tools": [STEP_SCHEMA], "stream": True})
        async with http.stream("POST", url, content=body, headers=HAND_HEADERS) as r:
            data = b"".join([b async for b in r.aiter_bytes()])
        if not _hand_step(data, messages):
            return


async def bare_aiohttp_loop(session, url: str) -> None:
    """aiohttp alone: what the default path's HTTP client costs, with the least work around it."""
    messages: list[dict] = [{"role": "user", "content": "go"}]
    while True:
        body = json.dumps({"model": "m", "messages": messages, "tools": [STEP_SCHEMA], "stream": True})
        async with session.post(url, data=body, headers=HAND_HEADERS) as r:
            data = await r.read()
        if not _hand_step(data, messages):
            return


async def unity_loop(model: u.OpenAIModel, bus: u.EventBus) -> None:
    await u.start_loop("go", model=model, tools=[step], max_steps=K + 5, bus=bus)


async def cpu_per_round_trip(run, loops: int) -> float:
    await run()  # warm-up: connections, caches
    t = time.process_time()
    for _ in range(loops):
        await run()
    return (time.process_time() - t) / (loops * (K + 1)) * 1000


async def bench_cpu(loops: int) -> dict:
    srv = Server(0.0)
    try:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        post_model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x", fast_path=False)
        bus = u.EventBus()
        async with aiohttp.ClientSession() as session:
            url = srv.base_url + "/chat/completions"
            return {
                "bare create() loop": await cpu_per_round_trip(lambda: bare_create_loop(client), loops),
                "bare httpx loop (the client's own pool, SSE split by hand)":
                    await cpu_per_round_trip(lambda: bare_http_loop(client), loops),
                "bare aiohttp loop (one session, SSE split by hand)":
                    await cpu_per_round_trip(lambda: bare_aiohttp_loop(session, url), loops),
                "unity_nb loop (default: aiohttp)": await cpu_per_round_trip(lambda: unity_loop(model, bus), loops),
                "unity_nb loop (client.post path)":
                    await cpu_per_round_trip(lambda: unity_loop(post_model, bus), loops),
            }
    finally:
        await model.close()
        await post_model.close()
        srv.close()


async def bench_concurrency(n: int, latency: float) -> dict:
    srv = Server(latency)
    try:
        ideal = (K + 1) * latency
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        bus = u.EventBus(history=100)
        out = {}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            url = srv.base_url + "/chat/completions"
            for label, make in (
                ("bare create()", lambda: bare_create_loop(client)),
                ("bare aiohttp", lambda: bare_aiohttp_loop(session, url)),
                ("unity_nb", lambda: unity_loop(model, bus)),
            ):
                await asyncio.gather(*(make() for _ in range(5)))  # warm the connection pool
                t = time.perf_counter()
                await asyncio.gather(*(make() for _ in range(n)))
                out[label] = (time.perf_counter() - t) / ideal
        return {"ideal_s": ideal, **out}
    finally:
        await model.close()
        srv.close()


async def bench_steering(reps: int) -> dict:
    srv = Server(5.0, steps=0)  # every call takes 5 s to its first byte
    try:
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        bus = u.EventBus(history=100)
        stop_ms, interject_ms = [], []
        for _ in range(reps):
            h = u.start_loop("go", model=model, bus=bus)
            await h.wait_for("model_request")
            await asyncio.sleep(0.05)  # let the request reach the server
            t = time.perf_counter()
            await h.stop("bench")
            stop_ms.append((time.perf_counter() - t) * 1000)

            h = u.start_loop("go", model=model, bus=bus)
            await h.wait_for("model_request")
            await asyncio.sleep(0.05)
            t = time.perf_counter()
            await h.interject("change of plan")
            await h.wait_for("model_request", lambda e: getattr(e, "step", 0) == 2)
            interject_ms.append((time.perf_counter() - t) * 1000)
            await h.stop("bench")
        return {"stop": stop_ms, "interject": interject_ms}
    finally:
        srv.close()


def bench_sse(reps: int) -> dict:
    """Microseconds to decode one reply's SSE body (20 tool-call chunks and [DONE]), fed in 4 KB pieces."""
    from openai._streaming import SSEDecoder as OpenAIDecoder

    from unity_nb.models._sse import SSEDecoder

    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"i": 1}'}}]},
         "finish_reason": None}]}
    body = b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for _ in range(20)) + b"data: [DONE]\n\n"
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]

    def ours() -> int:
        d = SSEDecoder()
        return sum(len(d.feed(p)) for p in pieces) + len(d.end())

    def theirs() -> int:
        return sum(1 for _ in OpenAIDecoder().iter_bytes(iter(pieces)))

    out = {}
    for label, fn in (("unity_nb SSEDecoder (bytes)", ours), ("openai SSEDecoder.iter_bytes", theirs)):
        assert fn() == 21
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        out[label] = (time.perf_counter() - t) / reps * 1e6
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


async def main() -> None:
    cpu = await bench_cpu(loops=8)
    conc = await bench_concurrency(50, 0.05)
    steer = await bench_steering(20)
    sse = bench_sse(2000)
    base = cpu["bare create() loop"]
    floor = cpu["bare aiohttp loop (one session, SSE split by hand)"]
    lines = [
        f"unity_nb loop benchmark, {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, "
        f"openai {openai.__version__}; command: .venv/bin/python bench/bench_loop.py",
        "",
        f"| A. CPU per model round trip (K={K} tool steps, zero latency) | ms | ratio to bare create() "
        "| ratio to bare aiohttp |",
        "| --- | --- | --- | --- |",
        *[f"| {k} | {v:.3f} | {v / base:.3f}x | {v / floor:.2f}x |" for k, v in cpu.items()],
        "",
        f"| B. 50 concurrent loops, 50 ms server latency, K={K} (ideal {conc['ideal_s']:.2f} s) | wall / ideal |",
        "| --- | --- |",
        f"| bare create() loops | {conc['bare create()']:.2f}x |",
        f"| bare aiohttp loops | {conc['bare aiohttp']:.2f}x |",
        f"| unity_nb loops | {conc['unity_nb']:.2f}x |",
        "",
        "| C. steering while a 5 s model call is in flight (20 runs) | median ms | p90 ms |",
        "| --- | --- | --- |",
        f"| stop() until it returns (loop ended, HTTP stream closed) | {statistics.median(steer['stop']):.1f} "
        f"| {pct(steer['stop'], 0.9):.1f} |",
        f"| interrupting interject() until the re-issued request is sent "
        f"| {statistics.median(steer['interject']):.1f} | {pct(steer['interject'], 0.9):.1f} |",
        "",
        "| D. decoding one reply's SSE body (21 events, 4 KB pieces) | us |",
        "| --- | --- |",
        *[f"| {k} | {v:.1f} |" for k, v in sse.items()],
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    asyncio.run(main())
