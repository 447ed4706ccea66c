"""Provider Batch API benchmark (not a test): memory and CPU of ``u.map(..., via="batch")`` over 100,000 rows.

The loopback server (tests/batch_server.py) runs in another process, so only the client's CPU and memory count:
it takes the files, completes each batch at the first look and serves the output file (lines shuffled). The map
runs with ``batch_poll=0.05`` and the default split (50,000 requests a file: two files). Reported: wall time,
client CPU (``time.process_time``), CPU per row, peak RSS over the RSS before the map (``ru_maxrss``), and bytes
per row; and whether every row came back on the input's index with no live call.

    PYTHONPATH=. .venv/bin/python bench/bench_batch_api.py [ROWS]
"""

from __future__ import annotations

import asyncio
import multiprocessing
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def serve(port_out: multiprocessing.Queue) -> None:
    from batch_server import BatchServer

    async def main() -> None:
        server = await BatchServer().start()
        port_out.put(server.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def run(rows: int, url: str) -> dict:
    import pandas as pd

    import unity_nb as u

    items = pd.Series([f"item number {i}" for i in range(rows)], index=[f"k{i}" for i in range(rows)], name="text")
    model = u.OpenAIModel("gpt-4.1-mini", base_url=url, api_key="sk-bench")
    before = rss_kb()
    cpu, wall = time.process_time(), time.perf_counter()
    h = u.map(items, "Say {text}", model=model, via="batch", batch_poll=0.05, bus=u.EventBus())
    result = await h.result()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = rss_kb() - before
    ok = list(result.index) == list(items.index) and result.iloc[-1] == f"answer to: Say item number {rows - 1}"
    return {"rows": rows, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "cpu_us_per_row": round(cpu / rows * 1e6),
            "peak_rss_mb": round(peak / 1024, 1), "bytes_per_row": round(peak * 1024 / rows),
            "files": h.progress["provider_batch"]["files"], "all_rows_on_index": ok, "done": h.progress["done"]}


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    q: multiprocessing.Queue = multiprocessing.Queue()
    proc = multiprocessing.Process(target=serve, args=(q,), daemon=True)
    proc.start()
    try:
        port = q.get(timeout=30)
        print(asyncio.run(run(rows, f"http://127.0.0.1:{port}/v1")))
    finally:
        proc.terminate()


if __name__ == "__main__":
    main()
