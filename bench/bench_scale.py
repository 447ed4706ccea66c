"""Scaling benchmark (not a test): cost against the length of the history and the number of loops.

The server (tests/fake_openai.py) runs in its own process, so only the client's CPU counts. It
answers with a tool call ``step`` until the request holds K tool results, then "done".

  A. CPU per model round trip at K = 10, 20, 50, 200, 500 tool steps (zero latency): unity_nb's
     loop on its default path beside a bare aiohttp loop that JSON-encodes its whole body every
     step (one pooled session, SSE split by hand). The history grows by two messages a step, so
     a cost proportional to the history shows as a ratio that grows with K.
  B. 50, 200 and 1,000 concurrent loops (K=20, 50 ms server latency), each count in a fresh
     process: RSS per live loop (peak RSS during the run minus RSS before it, over the number
     of loops; every loop and its handle is alive at the peak) and the garbage collector's share
     of the process's CPU time (from ``gc.callbacks``), beside the same number of bare aiohttp loops.
  C. Import cost, each in a fresh interpreter: ``import unity_nb``, ``%load_ext unity_nb`` in an
     IPython shell, ``import openai``.

Run: .venv/bin/python bench/bench_scale.py [--repeat 3] [--only A|B|C]   (a few minutes on 2 cores)
Each figure is the median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

KS = (10, 20, 50, 200, 500)
COUNTS = (50, 200, 1000)
CONC_K = 20
CONC_LATENCY = 0.05


def rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


# ------------------------------------------------------------------------------------ A. history


async def cpu_at(k: int, trips: int) -> dict[str, float]:
    """CPU ms per round trip at K=k: unity_nb's loop and the bare aiohttp loop, alternated."""
    import aiohttp
    from bench_loop import Server, bare_aiohttp_loop, step

    import unity_nb as u

    srv = Server(0.0, steps=k)
    try:
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        bus = u.EventBus()
        loops = max(1, trips // (k + 1))
        async with aiohttp.ClientSession() as session:
            url = srv.base_url + "/chat/completions"
            runs = {
                "bare aiohttp": lambda: bare_aiohttp_loop(session, url),
                "unity_nb": lambda: u.start_loop("go", model=model, tools=[step], max_steps=k + 5, bus=bus),
            }
            out: dict[str, list[float]] = {name: [] for name in runs}
            for run in runs.values():
                await run()  # warm-up: connections, caches
            for _ in range(2):  # alternate, so a burst of other load hits both
                for name, run in runs.items():
                    t = time.process_time()
                    for _ in range(loops):
                        await run()
                    out[name].append((time.process_time() - t) / (loops * (k + 1)) * 1000)
                    bus.clear()
            await model.close()
        return {name: min(v) for name, v in out.items()}
    finally:
        srv.close()


# ------------------------------------------------------------------------------------ B. loops


async def child_concurrency(kind: str, n: int) -> dict:
    """In a fresh process: n concurrent loops of ``kind``; RSS per live loop and GC share of CPU."""
    if os.environ.get("BENCH_GC_THRESHOLD"):  # an experiment: another first-generation threshold
        gc.set_threshold(int(os.environ["BENCH_GC_THRESHOLD"]), *gc.get_threshold()[1:])
    import aiohttp
    from bench_loop import Server, bare_aiohttp_loop, step

    import unity_nb as u

    srv = Server(CONC_LATENCY, steps=CONC_K)
    gc_time = [0.0, 0.0, 0.0]
    gc_runs = [0, 0, 0]
    started = 0.0

    def on_gc(phase: str, info: dict) -> None:
        nonlocal started
        if phase == "start":
            started = time.process_time()
        else:
            gc_time[info["generation"]] += time.process_time() - started
            gc_runs[info["generation"]] += 1

    try:
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        bus = u.EventBus()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            url = srv.base_url + "/chat/completions"
            if kind == "unity_nb":
                def make():
                    return u.start_loop("go", model=model, tools=[step], max_steps=CONC_K + 5, bus=bus)
            else:
                def make():
                    return bare_aiohttp_loop(session, url)
            # warm-up: what the loops import, the first connections; small, so the run's peak is its own
            await asyncio.gather(*(make() for _ in range(5)))
            bus.clear()
            gc.collect()
            before = rss_kb()
            gc.callbacks.append(on_gc)
            cpu, wall = time.process_time(), time.perf_counter()
            handles = [make() for _ in range(n)]  # all alive until the end: the peak holds them all
            await asyncio.gather(*handles)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            gc.callbacks.remove(on_gc)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            tracked = len(gc.get_objects())
            del handles
        await model.close()
        return {"unity_nb": u.__file__, "rss_per_loop_kb": (peak - before) / n, "gc_share": sum(gc_time) / cpu,
                "cpu_s": cpu, "wall_s": wall, "gc_runs": gc_runs, "gc_s": gc_time, "tracked_objects": tracked,
                "ideal_s": (CONC_K + 1) * CONC_LATENCY}
    finally:
        srv.close()


def concurrency(kind: str, n: int, tree: str | None = None) -> dict:
    """One measurement in a fresh process; ``tree``: import unity_nb from that source tree instead."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(n)], capture_output=True, text=True,
                         check=True, env=env, cwd="/")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if tree:
        assert result["unity_nb"].startswith(tree), result["unity_nb"]
    return result


# ------------------------------------------------------------------------------------ C. import

IMPORTS = {
    "import unity_nb": ("", "import unity_nb"),
    "%load_ext unity_nb (IPython imported before)": (
        "from IPython.core.interactiveshell import InteractiveShell; sh = InteractiveShell.instance()",
        "sh.run_line_magic('load_ext', 'unity_nb')",
    ),
    "import openai": ("", "import openai"),
}


def import_ms(setup: str, stmt: str) -> float:
    code = f"import time\n{setup}\nt = time.perf_counter()\n{stmt}\nprint((time.perf_counter() - t) * 1000)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("A", "B", "C"))
    ap.add_argument("--child", nargs=2, metavar=("KIND", "N"))
    ap.add_argument("--trips", type=int, default=1500, help="round trips per measurement in A")
    ap.add_argument("--before", metavar="DIR", help="B also runs unity_nb from this source tree "
                    "(e.g. `git archive <commit> unity_nb | tar -x -C DIR`)")
    ap.add_argument("--counts", default=",".join(map(str, COUNTS)), help="B's numbers of loops")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child_concurrency(args.child[0], int(args.child[1])))))
        return
    med = statistics.median
    lines = [
        f"unity_nb scaling benchmark, {time.strftime('%Y-%m-%d %H:%M')}: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; command: .venv/bin/python bench/bench_scale.py --repeat {args.repeat}; "
        f"median of {args.repeat} runs",
    ]
    if args.only in (None, "A"):
        lines += ["", "| A. K tool steps | bare aiohttp ms/trip | unity_nb ms/trip | unity_nb / bare |",
                  "| --- | --- | --- | --- |"]
        for k in KS:
            runs = [asyncio.run(cpu_at(k, args.trips)) for _ in range(args.repeat)]
            bare, unity = med(r["bare aiohttp"] for r in runs), med(r["unity_nb"] for r in runs)
            ratios = ", ".join(f"{r['unity_nb'] / r['bare aiohttp']:.2f}" for r in runs)
            lines.append(f"| {k} | {bare:.3f} | {unity:.3f} | {unity / bare:.2f}x (runs: {ratios}) |")
            print(lines[-1], file=sys.stderr)
    if args.only in (None, "B"):
        lines += ["", f"| B. concurrent loops (K={CONC_K}, {CONC_LATENCY * 1000:.0f} ms latency) | loop | "
                  "RSS per live loop KB | GC share of CPU | gen2 collections | wall / ideal |",
                  "| --- | --- | --- | --- | --- | --- |"]
        variants = [("bare aiohttp", "bare aiohttp", None), ("unity_nb", "unity_nb", None)]
        if args.before:
            variants.insert(1, ("unity_nb", f"unity_nb from {args.before}", args.before))
        for n in map(int, args.counts.split(",")):
            for kind, label, tree in variants:
                got = [concurrency(kind, n, tree) for _ in range(args.repeat)]
                lines.append(
                    f"| {n} | {label} | {med(r['rss_per_loop_kb'] for r in got):.0f} | "
                    f"{med(r['gc_share'] for r in got) * 100:.1f}% | {med(r['gc_runs'][2] for r in got):.0f} | "
                    f"{med(r['wall_s'] / r['ideal_s'] for r in got):.2f}x |"
                )
                print(lines[-1], file=sys.stderr)
    if args.only in (None, "C"):
        lines += ["", "| C. import cost (fresh interpreter) | ms | vs import openai |", "| --- | --- | --- |"]
        ms = {label: med(import_ms(*spec) for _ in range(args.repeat)) for label, spec in IMPORTS.items()}
        for label, value in ms.items():
            lines.append(f"| {label} | {value:.0f} | {value / ms['import openai']:.2f}x |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
