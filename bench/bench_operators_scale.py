"""Operators at scale (not a test): seconds until each operator's handle returns, and the memory it grows, over an
input of ``--rows`` rows (10,000,000 by default). Issue 34: every operator returns its handle within a second
whatever the input's size, memory bounded by what is in flight.

Each operator runs in a fresh process (so one's memory never counts in another's): the child builds its input (a
DataFrame of ``text``, e.g. "paper 17: an abstract about topic 17", and ``g``, 1,000 groups), then, in a running
event loop, calls the operator with a ScriptedModel that holds every request open (nothing ends: only the start
is measured) and reports

- **handle s**: seconds the call took to return its handle;
- **first call s**: seconds from the call until the model was first asked (the first phase started);
- **stall ms**: the longest the event loop was held (a 10 ms ticker's worst lateness) from the call until
  ``--wait`` seconds after the first request (or the time limit);
- **RSS +MB at handle** and **peak RSS +MB**: growth over the RSS before the call (the input built), at the handle
  and at most, sampled by the parent from ``/proc/PID/statm`` every 50 ms until the end of the wait.

The baselines, each in its own process: **build** (the input itself: its seconds and RSS over the interpreter's with
pandas and unity_nb imported), and **one pass** (``df.text.str.len().sum()``: what reading every row once costs; a
handle that reads the input cannot come back sooner). A child without its handle after ``--limit`` seconds, or past
``--max-gb`` of growth, is killed and reported as such. join's right side has ``--right`` rows (``--rows`` by
default).

Run: .venv/bin/python bench/bench_operators_scale.py [--rows 10000000] [--only agg,join] [--wait 2] [--limit 60]
[--tree DIR] (``--tree`` runs the children on another source tree, e.g. an older checkout, for figures before a change)
(about 2 minutes a process at 10,000,000 rows on 2 cores: building the input takes most of it)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPERATORS = ("build", "one pass", "filter", "extract", "topk", "map", "agg", "agg all", "join")
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb(pid: int | str = "self") -> float:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE / 1e6
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0


# -- the child: one operator ---------------------------------------------------------------------------------------


def build(rows: int) -> object:
    import numpy as np
    import pandas as pd

    i = pd.Series(np.arange(rows))
    topic = (i % 9973).astype(str)
    text = "paper " + i.astype(str) + ": an abstract about topic " + topic
    return pd.DataFrame({"text": text, "g": (i % 1000).to_numpy()})


def say(what: str, **fields: object) -> None:
    print(json.dumps({"at": what, "t": time.perf_counter(), "rss": rss_mb(), **fields}), flush=True)


def child(op: str, rows: int, right_rows: int, wait: float) -> None:
    import asyncio

    import unity_nb as u

    say("imported")
    started = time.perf_counter()
    frame = build(rows)
    right = build(right_rows).rename(columns={"text": "aims"}) if op == "join" else None
    say("built", seconds=time.perf_counter() - started)
    if op == "build":
        return
    if op == "one pass":
        t = time.perf_counter()
        frame["text"].str.len().sum()  # type: ignore[index]
        say("handle", seconds=time.perf_counter() - t)
        return

    async def main() -> None:
        asked = asyncio.Event()

        async def held(messages: list, tools: list) -> str:
            asked.set()
            await asyncio.Event().wait()
            return "never"

        model = u.ScriptedModel(held)
        bus = u.EventBus(history=100)
        starts = {
            "filter": lambda: u.filter(frame, "Is {text} about topic 7?", model=model, bus=bus),
            "extract": lambda: u.extract(frame, "From {text}", columns="topic", model=model, bus=bus),
            "topk": lambda: u.topk(frame, 10, "Which {text} is most about sleep?", model=model, bus=bus),
            "map": lambda: u.map(frame, "Label {text}", model=model, bus=bus),
            "agg": lambda: u.agg(frame, "Summarise {text}", by="g", model=model, bus=bus),
            "agg all": lambda: u.agg(frame, "Summarise {text}", model=model, bus=bus),  # one group: no sort
            "join": lambda: u.join(frame, right, "On {left.text} and {right.aims}: same topic?", model=model,
                                   bus=bus),
        }
        worst = 0.0
        last = time.perf_counter()

        async def tick() -> None:
            nonlocal worst, last
            while True:
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                worst = max(worst, now - last - 0.01)
                last = now

        say("calling")
        t = time.perf_counter()
        h = starts[op]()
        say("handle", seconds=time.perf_counter() - t)
        last = time.perf_counter()
        ticker = asyncio.create_task(tick())
        try:
            await asyncio.wait_for(asked.wait(), 600)
            say("first call", seconds=time.perf_counter() - t)
            await asyncio.sleep(wait)
        finally:
            ticker.cancel()
            say("waited", stall_ms=worst * 1000)
            await h.stop("benchmark over")
            try:
                await asyncio.wait_for(h.result(), 60)
            except (TimeoutError, u.Stopped):
                pass
            say("stopped")

    asyncio.run(main())


# -- the parent -----------------------------------------------------------------------------------------------------


def run(op: str, rows: int, right_rows: int, wait: float, limit: float, max_gb: float, tree: Path = ROOT) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", op, "--rows", str(rows), "--right", str(right_rows), "--wait", str(wait)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    said: dict[str, dict] = {}

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                said[event["at"]] = event

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    peak, killed = 0.0, None
    while proc.poll() is None:
        time.sleep(0.05)
        if "calling" in said or (op in ("build", "one pass") and "built" in said):
            rss = rss_mb(proc.pid)
            if "stopped" not in said and "waited" not in said:
                peak = max(peak, rss)
            base = said.get("calling", said.get("built", {})).get("rss", 0.0)
            since = time.perf_counter() - said.get("calling", said.get("built", {})).get("t", time.perf_counter())
            if "handle" not in said and since > limit:
                killed = f"no handle after {limit:.0f} s"
            elif rss - base > max_gb * 1000:
                killed = f"killed at +{rss - base:,.0f} MB"
            if killed:
                proc.kill()
                break
    proc.wait()
    reader.join(5)
    err = proc.stderr.read() if proc.stderr is not None else ""
    out: dict = {"op": op, "killed": killed}
    built = said.get("built", {})
    out["build_s"] = built.get("seconds")
    out["input_mb"] = built.get("rss", 0.0) - said.get("imported", {}).get("rss", 0.0) if built else None
    base = said.get("calling", built).get("rss", 0.0) if built else 0.0
    if "handle" in said:
        out["handle_s"] = said["handle"]["seconds"]
        out["handle_mb"] = said["handle"]["rss"] - base
    if "first call" in said:
        out["first_s"] = said["first call"]["seconds"]
    if "waited" in said:
        out["stall_ms"] = said["waited"]["stall_ms"]
    out["peak_mb"] = peak - base if peak else None
    if proc.returncode not in (0, -9) and not killed:
        out["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {proc.returncode}"
    return out


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--right", type=int, default=None, help="join's right side (default: --rows)")
    parser.add_argument("--only", default=",".join(OPERATORS))
    parser.add_argument("--wait", type=float, default=2.0, help="seconds to run after the first request")
    parser.add_argument("--limit", type=float, default=60.0, help="seconds to wait for a handle")
    parser.add_argument("--max-gb", type=float, default=6.0, help="growth at which a child is killed")
    parser.add_argument("--tree", default=str(ROOT), help="the source tree the children import (an older checkout)")
    parser.add_argument("--child", default=None)
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args()
    right = args.right if args.right is not None else args.rows
    if args.child:
        child(args.child, args.rows, right, args.wait)
        return
    ops = [o.strip() for o in args.only.split(",") if o.strip()]
    print(f"{args.rows:,} rows (join's right side {right:,}) on {args.tree}; each in a fresh process; a model that "
          f"holds every request; growth over the RSS with the input built\n")
    head = ("operator", "handle s", "first call s", "stall ms", "RSS +MB at handle", "peak RSS +MB", "note")
    print("| " + " | ".join(head) + " |\n|" + " --- |" * len(head), flush=True)
    results = []
    for op in ops:
        r = run(op, args.rows, right, args.wait, args.limit, args.max_gb, Path(args.tree))
        results.append(r)
        if op == "build":
            note = f"built in {fmt(r['build_s'], '.1f')} s, input {fmt(r['input_mb'], ',.0f')} MB"
            cells = ("-", "-", "-", "-", "-")
        else:
            note = r.get("killed") or r.get("error") or ""
            cells = (fmt(r.get("handle_s"), ".3f"), fmt(r.get("first_s"), ".3f"), fmt(r.get("stall_ms"), ".0f"),
                     fmt(r.get("handle_mb"), ",.1f"), fmt(r.get("peak_mb"), ",.1f"))
        print(f"| {op} | " + " | ".join(cells) + f" | {note} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": args.rows, "right": right, "results": results}, indent=1))


if __name__ == "__main__":
    main()
