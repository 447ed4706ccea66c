"""The fixed cost of one small call of each verb (not a test): CPU per call, against a one-step loop in the same run.

Each verb is called with a ScriptedModel (no HTTP, the model answers at once) on one row or an empty namespace, so
what is measured is what a call costs besides its rows and its model: checking its options, building its tools and
schemas, its handle, its events. A cost made once per call that should be made once per process (a pydantic model
or schema built again for every call, as ``execute_code``'s was for every actor run) shows here as a verb far above
the loop. The verbs in turn, ``--rounds`` rounds of ``--calls`` calls each after a warm-up round; per verb the
median of its rounds, and the ratio to the loop's median.

Run: .venv/bin/python bench/bench_calls.py [--rounds 7] [--calls 200]   (about 30 s on 2 cores)
Before and after: PYTHONPATH=<an older checkout> .venv/bin/python bench/bench_calls.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pandas as pd

import unity_nb as u


def _tool_done(messages: list) -> bool:
    return any(m["role"] == "tool" for m in messages)


def answering(**fields: Any) -> u.ScriptedModel:
    """A model that answers a row through submit_answer with ``fields``, then in text."""
    return u.ScriptedModel(lambda m, t: "ok" if _tool_done(m) else u.call_tool("submit_answer", **fields))


async def lookup(query: str) -> str:
    """Look a word up."""
    return query


def plan(messages: list, tools: list) -> Any:
    return "done" if _tool_done(messages) else u.call_tool("execute_code", code="i = 1", intent="step")


ROW = pd.DataFrame({"text": ["a short row"]})
VERBS: dict[str, Callable[[], Awaitable[Any]]] = {
    "start_loop, one step (baseline)": lambda: u.start_loop("x", model=u.ScriptedModel(lambda m, t: "done")),
    "start_loop with a tool": lambda: u.start_loop("x", model=u.ScriptedModel(lambda m, t: "done"), tools=[lookup]),
    "act, empty namespace, one plan": lambda: u.act("x", model=u.ScriptedModel(plan), namespace={}),
    "map, 1 row": lambda: u.map(["a"], "Say {value}", model=u.ScriptedModel(lambda m, t: "yes")),
    "map, 1 row, columns=": lambda: u.map(["a"], "Say {value}", model=answering(n=1, why="w"), columns="n:int,why"),
    "filter, 1 row": lambda: u.filter(ROW, "Is {text} short?", model=answering(keep=True, reason="it is")),
    "extract, 1 row": lambda: u.extract(ROW, "From {text}", columns=["a", "b"], model=answering(a="x", b="y")),
}


async def measure(rounds: int, calls: int) -> dict[str, list[float]]:
    """CPU ms per call of each verb, per round (the first round a warm-up, not kept)."""
    out: dict[str, list[float]] = {name: [] for name in VERBS}
    for r in range(rounds + 1):
        for name, call in VERBS.items():
            t = time.process_time()
            for _ in range(calls):
                await call()
            if r:
                out[name].append((time.process_time() - t) / calls * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    got = asyncio.run(measure(args.rounds, args.calls))
    med = statistics.median
    base = med(got["start_loop, one step (baseline)"])
    lines = [
        f"unity_nb fixed cost per call, {time.strftime('%Y-%m-%d %H:%M')}: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, unity_nb from {os.path.dirname(os.path.dirname(u.__file__))}; command: "
        f"bench/bench_calls.py --rounds {args.rounds} --calls {args.calls}; load average {os.getloadavg()[0]:.2f}",
        "",
        f"| verb (ScriptedModel, no HTTP) | CPU ms per call (median of {args.rounds} rounds) | vs the loop | "
        "rounds (min-max) |",
        "| --- | --- | --- | --- |",
    ]
    for name, ms in got.items():
        lines.append(f"| {name} | {med(ms):.3f} | {med(ms) / base:.2f}x | {min(ms):.3f}-{max(ms):.3f} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
