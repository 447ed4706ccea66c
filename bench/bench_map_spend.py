"""Spending benchmark (not a test): the map's result cache and its streamed rows (issue 27), in one run.

  A. The cache's hit path against a call. The server (tests/fake_openai.py) runs in its own process and answers
     at once (0 ms latency), so only the client's CPU counts. ``u.map`` over N distinct rows at concurrency 8
     with ``unity_nb.OpenAIModel`` pointed at it and a Store recording the bus (as in a notebook), three runs in
     one process: ``cache=False`` (every row a call: the baseline), ``cache=store`` once (calls, answers
     written to the cache), ``cache=store`` again (every row a hit: no call). Reports CPU and wall per row,
     and the call's cost over the hit's (target: at least 20x).
  B. Rows streamed. In a fresh process each: ``u.map`` over a 10,000,000-row generator with a model answering
     every row at once (keeping nothing), at concurrency 10, 100 and 1,000: time from ``u.map`` to the first row's
     model call; RSS once 20,000 and 100,000 rows have ended (minus RSS before ``u.map``), so what grows with
     the concurrency and what each finished row keeps (its answer) can be told apart. Beside it, the same
     first-row time and RSS for a 1,000,000-row list on the tree before rows were streamed (``--before DIR``,
     default: that commit checked out into a temporary folder with ``git archive``).

Run: .venv/bin/python bench/bench_map_spend.py [--rows 2000] [--only A|B]   (about 2 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "2162799"  # the last commit before rows were streamed
if str(ROOT) not in sys.path and "--child" not in sys.argv:  # a child imports the tree PYTHONPATH names
    sys.path.insert(0, str(ROOT))


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# -- A: the cache ------------------------------------------------------------------------------------


async def cache_runs(rows: int, url: str) -> dict:
    import unity_nb as u
    from unity_nb.store import Store

    if True:
        tmp = tempfile.mkdtemp(prefix="bench_cache_")
        store = Store(os.path.join(tmp, "state.db"))
        bus = u.EventBus(history=100)
        store.attach(bus)
        model = u.OpenAIModel("gpt-4.1-mini", base_url=url, api_key="sk-bench")
        items = [f"paper {i}: an abstract about topic {i % 97}" for i in range(rows)]
        out = {}
        # a warm-up (imports, the connection pool), not measured
        await u.map(items[:50], "Warm {value}", model=model, cache=False, bus=bus)
        for label, cache in (("call (cache=False)", False), ("fill (cache=store, misses)", store),
                             ("hit (cache=store, every row)", store)):
            cpu, wall = time.process_time(), time.perf_counter()
            h = u.map(items, "Label the method used: {value}", model=model, cache=cache, concurrency=8, bus=bus)
            await h
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            out[label] = {"cpu_ms_per_row": 1000 * cpu / rows, "wall_ms_per_row": 1000 * wall / rows,
                          "cached": h.progress["cached"], "steps": h.steps}
        store.close()
        return out


# -- B: rows streamed ---------------------------------------------------------------------------------


def child_stream(concurrency: int, total: int, checkpoints: list[int], generator: bool) -> dict:
    import pandas  # noqa: F401 - imported before the clock starts, as a notebook has it

    import unity_nb as u

    class Quick:
        """A model that answers at once and keeps nothing (a ScriptedModel keeps every request)."""

        name = "quick"

        async def complete(self, request, on_delta=None):
            if not first:
                first.append(time.perf_counter())
            return u.Reply(content="ok", usage=u.Usage(10, 1))

    first: list[float] = []

    async def main() -> dict:
        ended = {"n": 0}
        marks: dict[int, int] = {}
        done = asyncio.Event()
        stop_at = checkpoints[-1]

        def rows():
            for i in range(total):
                yield f"item {i}"

        bus = u.EventBus(history=10)
        base = rss_kb()
        t0 = time.perf_counter()
        h = u.map(rows() if generator else [f"item {i}" for i in range(total)], "Label {value}",
                  model=Quick(), concurrency=concurrency, bus=bus)
        returned = time.perf_counter() - t0

        def on_event(e):
            if e.kind == "row_finished":
                ended["n"] += 1
                if ended["n"] in checkpoints:
                    marks[ended["n"]] = rss_kb() - base
                if ended["n"] >= stop_at:
                    done.set()

        bus.subscribe(on_event)
        await done.wait()
        await h.stop("enough")
        return {"returned_s": returned, "first_call_s": first[0] - t0, "rss_kb": marks}

    return asyncio.run(main())


def run_child(args: list[str], tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "UNITY_NB_TUNE_GC": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                         cwd=str(tree), timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def before_tree(given: str | None) -> Path:
    if given:
        return Path(given)
    tmp = Path(tempfile.mkdtemp(prefix="bench_before_"))
    archive = subprocess.run(["git", "archive", BEFORE, "unity_nb", "widgets"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--only", choices=["A", "B"])
    ap.add_argument("--before")
    ap.add_argument("--child", nargs=4)
    args = ap.parse_args()
    if args.child:
        concurrency, total, checkpoints, gen = args.child
        print(json.dumps(child_stream(int(concurrency), int(total), [int(c) for c in checkpoints.split(",")],
                                      gen == "gen")))
        return
    if args.only in (None, "A"):
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0"],
                                  stdout=subprocess.PIPE, text=True)
        try:
            res = asyncio.run(cache_runs(args.rows, server.stdout.readline().split()[1]))  # type: ignore[union-attr]
        finally:
            server.terminate()
            server.wait()
        call = res["call (cache=False)"]["cpu_ms_per_row"]
        print(f"\nA. the result cache: {args.rows} rows, server at 0 ms latency in its own process, a store on the bus")
        print("| run | CPU ms a row | wall ms a row | rows from cache | model calls | call CPU / this |")
        print("| --- | --- | --- | --- | --- | --- |")
        for label, r in res.items():
            print(f"| {label} | {r['cpu_ms_per_row']:.3f} | {r['wall_ms_per_row']:.3f} | {r['cached']} | {r['steps']} "
                  f"| {call / r['cpu_ms_per_row']:.1f}x |")
    if args.only in (None, "B"):
        print("\nB. rows streamed: a 10,000,000-row generator (this tree) and a 1,000,000-row list (before)")
        print("| input | concurrency | u.map returned (s) | first model call (s) | RSS at 20,000 rows ended (MB) "
              "| at 100,000 (MB) | per finished row (B) |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        runs = [("10,000,000 from a generator", c, ROOT, "10000000", "gen") for c in (10, 100, 1000)]
        runs.append(("1,000,000 in a list, before", 100, before_tree(args.before), "1000000", "list"))
        runs.append(("1,000,000 in a list, now", 100, ROOT, "1000000", "list"))
        for label, c, tree, total, kind in runs:
            r = run_child([str(c), total, "20000,100000", kind], tree)
            m = {int(k): v for k, v in r["rss_kb"].items()}
            per_row = (m[100000] - m[20000]) * 1024 / 80000
            print(f"| {label} | {c} | {r['returned_s']:.3f} | {r['first_call_s']:.3f} | {m[20000] / 1024:.1f} "
                  f"| {m[100000] / 1024:.1f} | {per_row:.0f} |")


if __name__ == "__main__":
    main()
