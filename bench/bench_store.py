"""What recording costs: the loop with and without the SQLite store attached, in one run.

A ScriptedModel loop of K tool steps (no HTTP, so the store's cost is not hidden behind the
network); CPU time per step with no store (baseline), with a store on disk (WAL, each event
committed as published), and the events written per step. Also the transcript rebuild time.

Run: .venv/bin/python bench/bench_store.py [--steps 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import unity_nb as u
from unity_nb.store import Store


async def tick(n: int) -> int:
    """One step of work."""
    return n + 1


def script(k: int):
    def fn(messages, tools):
        done = sum(1 for m in messages if m["role"] == "tool")
        return u.call_tool("tick", n=done) if done < k else "done"

    return fn


async def run_once(k: int, store: Store | None) -> tuple[float, int]:
    bus = u.EventBus()
    if store is not None:
        store.attach(bus)
    t0 = time.process_time()
    h = u.start_loop("count", model=u.ScriptedModel(script(k)), tools=[tick], bus=bus, max_steps=k + 2, name="bench")
    await h
    cpu = time.process_time() - t0
    return cpu / k, sum(1 for e in h.events if e.kind != "model_delta")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    k = args.steps
    base, stored, events = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.db")
        await run_once(10, None)  # warm up
        await run_once(10, store)
        for _ in range(args.repeat):  # alternate, so drift hits both alike
            base.append((await run_once(k, None))[0])
            per, events = await run_once(k, store)
            stored.append(per)
        t0 = time.perf_counter()
        transcript = store.transcript("bench")
        rebuild = time.perf_counter() - t0
        store.close()
    b, s = statistics.median(base) * 1000, statistics.median(stored) * 1000
    print(f"unity_nb store benchmark: {k} tool steps per loop, median of {args.repeat} runs")
    print("| CPU per tool step (model call + tool + events) | ms | ratio |")
    print("| --- | --- | --- |")
    print(f"| no store (baseline) | {b:.3f} | 1.00x |")
    print(f"| store on disk (batched; committed before each model call) | {s:.3f} | {s / b:.2f}x |")
    print(f"\nevents recorded per loop: {events} ({events / k:.1f} per step)")
    print(f"transcript rebuilt from the store: {len(transcript)} entries in {rebuild * 1000:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
