"""Ray benchmark (not a test): ``u.map`` over N rows with ``backend="ray"`` against the local backend, same loopback
server, same run.

The server (tests/fake_openai.py) runs in its own process and answers every chat completion with a streamed "ok"
after ``--latency`` seconds. A local Ray cluster (``--cpus`` CPUs: that many worker processes) is started once,
before anything is measured. Each backend maps the same N rows at the same concurrency, alternating ``--repeat``
times. For each: wall seconds (from ``u.map`` to ``await``; for Ray that includes starting its worker processes),
rows a second over the middle 80% of the rows (past the start), the kernel process's CPU seconds over the run
(``time.process_time``: every thread of this process, not the Ray workers'), and its peak RSS growth (RSS sampled
every 20 ms in a thread, minus RSS before).

Run: .venv/bin/python bench/bench_ray.py [--rows 2000] [--concurrency 32] [--latency 0.05] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this tree's unity_nb, whatever the venv has installed
    sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))  # the workers'

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class Peak:
    """The highest RSS seen while it runs (sampled in a thread)."""

    def __init__(self) -> None:
        self.base = rss()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
        return self.peak - self.base


async def one(u, items, model, concurrency: int, backend: str) -> dict:
    import gc

    gc.collect()
    ends: list[float] = []
    peak = Peak()
    cpu0, t0 = time.process_time(), time.perf_counter()
    options = {"backend": "ray"} if backend == "ray" else {}
    h = u.map(items, "Label {value}", model=model, concurrency=concurrency, cache=False, **options)
    h.run.bus.subscribe(lambda e: ends.append(time.perf_counter()) if e.kind == "row_finished" else None)
    result = await h
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    grown = peak.stop()
    assert result.notna().all(), result.attrs.get("reasons")
    n = len(ends)
    lo, hi = ends[n // 10], ends[n * 9 // 10]
    return {"wall": wall, "rate": (n * 8 // 10) / (hi - lo) if hi > lo else float("nan"), "cpu": cpu,
            "rss_mb": grown / 2**20, "processes": (h.progress.get("ray") or {}).get("processes", 1)}


async def main(args: argparse.Namespace, url: str) -> None:
    import ray

    import unity_nb as u

    try:
        t = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        print(f"ray.init (a local cluster of {args.cpus} CPUs): {time.perf_counter() - t:.1f} s (not counted below)")
        items = [f"row {i}" for i in range(args.rows)]
        model = u.OpenAIModel("bench-ray", base_url=url)
        runs: dict[str, list[dict]] = {"local": [], "ray": []}
        for _ in range(args.repeat):
            for backend in ("local", "ray"):
                runs[backend].append(await one(u, items, model, args.concurrency, backend))
        await model.close()
        print(f"{args.rows:,} rows, concurrency {args.concurrency}, {args.latency * 1000:g} ms a reply; median of "
              f"{args.repeat} run(s)")
        print(f"{'backend':8} {'wall s':>8} {'rows/s':>8} {'kernel CPU s':>13} {'kernel peak RSS +MB':>20} "
              f"{'processes':>9}")
        for backend, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            print(f"{backend:8} {med['wall']:8.2f} {med['rate']:8.1f} {med['cpu']:13.2f} {med['rss_mb']:20.1f} "
                  f"{int(med['processes']):9d}")
            print("         runs: " + "; ".join(f"{r['wall']:.2f} s, {r['rate']:.0f} rows/s, {r['cpu']:.2f} CPU s, "
                                           f"+{r['rss_mb']:.1f} MB" for r in rs))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=2)
    parsed = ap.parse_args()
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--port", "0", "--latency",
                               str(parsed.latency)], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        asyncio.run(main(parsed, line.split()[1]))
    finally:
        server.terminate()
