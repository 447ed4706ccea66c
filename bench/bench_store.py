"""What recording costs: the loop with and without the SQLite store attached, in one run.

  A. A ScriptedModel loop of K tool steps (no HTTP, so the store's cost is not hidden behind the
     network): CPU time per step with no store (baseline) and with a store on disk (WAL, every
     event committed before the next model call), the events written per step, and the
     transcript rebuild time. The script and the model do O(1) work per step, so the baseline
     is the loop's own cost, not a walk over a growing history.
  B. The real loop over HTTP against the fake OpenAI-compatible server (tests/fake_openai.py in
     its own process, zero latency, 20 tool steps): CPU per model round trip with no store and
     with a store attached to the loop's bus. This is the figure a person sees in a real loop.

Each table also has a floor: the same loop with a bus subscriber that only commits 5 rows made beforehand at
each model call (sqlite3 alone, no event encoded). No store that commits before every model call costs less.

The arms of each table alternate, run after run, and the medians are compared (drift hits all alike).

Run: .venv/bin/python bench/bench_store.py [--steps 200] [--repeat 7] [--http-loops 5] [--http-repeat 11]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench_loop import Server, step  # bench/ is the script's folder: on sys.path when run as a script

import unity_nb as u
from unity_nb.store import Store

HTTP_STEPS = 20


async def tick(n: int) -> int:
    """One step of work."""
    return n + 1


def script(k: int):
    """Call ``tick`` k times, then answer: O(1) per step (a counter, not a walk over the messages)."""
    calls = 0

    def fn(messages, tools):
        nonlocal calls
        if calls < k:
            calls += 1
            return u.call_tool("tick", n=calls - 1)
        return "done"

    return fn


async def run_once(k: int, store: Store | Floor | None) -> tuple[float, int]:
    bus = u.EventBus()
    if store is not None:
        store.attach(bus)
    t0 = time.process_time()
    h = u.start_loop("count", model=u.ScriptedModel(script(k)), tools=[tick], bus=bus, max_steps=k + 2, name="bench")
    await h
    cpu = time.process_time() - t0
    return cpu / k, sum(1 for e in h.events if e.kind != "model_delta")


class Floor:
    """The least a store that commits before each model call can cost: a bus subscriber that, at each
    ``model_request``, commits 5 rows made beforehand (a 33-character loop key, ~200 bytes of JSON each: the
    store's) with one multi-row INSERT in autocommit, to a file in WAL mode (synchronous NORMAL). sqlite3 only:
    no event is looked at or encoded."""

    def __init__(self, tmp: str, name: str = "floor.db") -> None:
        self.db = sqlite3.connect(Path(tmp) / name, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, loop_uid TEXT, kind TEXT, ts REAL, data TEXT)")
        self.sql = "INSERT INTO events (loop_uid, kind, ts, data) VALUES " + ", ".join(["(?, ?, ?, ?)"] * 5)
        self.rows = ["0" * 16 + "-" + "1" * 16, "tool_finished", time.time(), json.dumps({"text": "x" * 180})] * 5

    def attach(self, bus: u.EventBus) -> None:
        bus.subscribe(self.record)

    def record(self, event) -> None:
        if event.kind == "model_request":
            self.db.execute(self.sql, self.rows)


async def scripted(k: int, repeat: int, tmp: str) -> dict:
    base, stored, floor, events = [], [], [], 0
    store, least = Store(Path(tmp) / "bench.db"), Floor(tmp)
    await run_once(10, None)  # warm up
    await run_once(10, store)
    await run_once(10, least)
    for _ in range(repeat):  # alternate, so drift hits all alike
        base.append((await run_once(k, None))[0])
        per, events = await run_once(k, store)
        stored.append(per)
        floor.append((await run_once(k, least))[0])
    t0 = time.perf_counter()
    transcript = store.transcript("bench")
    rebuild = time.perf_counter() - t0
    store.close()
    return {"base": statistics.median(base) * 1000, "store": statistics.median(stored) * 1000, "events": events,
            "transcript": len(transcript), "rebuild": rebuild * 1000, "floor": statistics.median(floor) * 1000}


async def http(loops: int, repeat: int, tmp: str) -> dict:
    """CPU per model round trip of u.start_loop over HTTP, K tool steps, with and without a store."""
    srv = Server(0.0, steps=HTTP_STEPS)
    model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
    store = Store(Path(tmp) / "http.db")
    plain, recorded = u.EventBus(), u.EventBus()
    store.attach(recorded)
    try:
        async def arm(bus: u.EventBus) -> float:
            t = time.process_time()
            for _ in range(loops):
                await u.start_loop("go", model=model, tools=[step], max_steps=HTTP_STEPS + 5, bus=bus)
            return (time.process_time() - t) / (loops * (HTTP_STEPS + 1)) * 1000

        least = u.EventBus()
        Floor(tmp, "http-floor.db").attach(least)
        await arm(plain)  # warm up: the connection, caches
        await arm(recorded)
        await arm(least)
        base, stored, floor = [], [], []
        for _ in range(repeat):
            base.append(await arm(plain))
            stored.append(await arm(recorded))
            floor.append(await arm(least))
        return {"base": statistics.median(base), "store": statistics.median(stored), "floor": statistics.median(floor)}
    finally:
        store.close()
        await model.close()
        srv.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--http-loops", type=int, default=5, help="loops per HTTP arm")
    ap.add_argument("--http-repeat", type=int, default=11, help="runs of each HTTP arm (alternating)")
    args = ap.parse_args()
    k = args.steps
    with tempfile.TemporaryDirectory() as tmp:
        a = await scripted(k, args.repeat, tmp)
        b = await http(args.http_loops, args.http_repeat, tmp)
    print(f"unity_nb store benchmark, {time.strftime('%Y-%m-%d')}; command: .venv/bin/python bench/bench_store.py")
    print()
    print(f"| A. CPU per tool step, ScriptedModel, {k} steps per loop, median of {args.repeat} | ms | ratio |")
    print("| --- | --- | --- |")
    print(f"| no store (baseline) | {a['base']:.3f} | 1.00x |")
    print(f"| store on disk (committed before each model call) | {a['store']:.3f} | {a['store'] / a['base']:.2f}x |")
    print(f"| the floor: sqlite3 alone committing 5 rows made beforehand at each model call | {a['floor']:.3f} | "
          f"{a['floor'] / a['base']:.2f}x |")
    print()
    print(f"| B. CPU per model round trip, HTTP (fake server), K={HTTP_STEPS}, median of {args.http_repeat} x "
          f"{args.http_loops} loops "
          "| ms | ratio |")
    print("| --- | --- | --- |")
    print(f"| no store (baseline) | {b['base']:.3f} | 1.00x |")
    print(f"| store on disk (committed before each model call) | {b['store']:.3f} | {b['store'] / b['base']:.2f}x |")
    print(f"| the floor: sqlite3 alone committing 5 rows made beforehand at each model call | {b['floor']:.3f} | "
          f"{b['floor'] / b['base']:.2f}x |")
    print(f"\nevents recorded per ScriptedModel loop: {a['events']} ({a['events'] / k:.1f} per step)")
    print(f"transcript rebuilt from the store: {a['transcript']} entries in {a['rebuild']:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
