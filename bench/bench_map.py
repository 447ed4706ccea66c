"""Batch benchmark (not a test): u.map and many plain loops against a bare aiohttp floor, in one run.

The server (tests/fake_openai.py) runs in its own process and answers every chat completion with a
streamed "ok" after 50 ms, so only the client's CPU counts. Each measurement runs in a fresh Python
process (as bench_scale.py's B does), so one run's memory does not pollute the next; the bare aiohttp
floor and unity_nb alternate, so a burst of other load on the machine hits both.

  A. ``u.map`` over 1,000 rows at concurrency 100 with ``unity_nb.OpenAIModel`` pointed at the server,
     beside 100 bare aiohttp workers sending the same 1,000 requests (the same JSON body unity_nb sends,
     SSE split by hand). Ideal wall time: rows / concurrency x 50 ms. Also 100 rows at concurrency 100:
     every row live at once, so its RSS per live loop is not mixed with what finished rows keep.
  B. 200 and 1,000 concurrent plain loops (``u.start_loop``, one request each), beside as many
     concurrent bare aiohttp requests. Ideal wall time: 50 ms.
     For A and B: wall / ideal; client CPU (``time.process_time`` over the run, every thread of the
     process) against the floor's; peak RSS per live loop (peak RSS during the run minus RSS before
     it, over the loops alive at once: the concurrency for a batch, every loop for B); the garbage
     collector's share of that CPU (``gc.callbacks``).
     Targets: CPU within 2x the floor; below 100 KB per live loop.
  C. ``u.map`` over 10,000 rows with a ScriptedModel (no HTTP), with and without a Store attached to
     its bus: wall time and CPU, and a check that the store on disk (opened afresh) holds 10,000
     ``row_finished`` events (``unity_nb.finished_rows(store, name)`` has 10,000 entries).
  D. ``%unity map`` over 10,000 rows in a real IPython kernel (jupyter_client, as tests/_kernel.py) with the
     store on (``UNITY_NB_STORE``), a ScriptedModel answering each row after ``asyncio.sleep(0.001)``, at
     concurrency 100: the kernel is SIGKILLed once half the rows have finished (counted in the kernel from
     the handle's ``row_finished`` events), the store file is read (``unity_nb.finished_rows``) to count the
     committed rows, and a second kernel on the same store runs ``%unity resume labels`` with a ScriptedModel
     that records the rows it is asked for. Reports: rows committed before the kill, rows the resumed run
     computed, committed rows it redid (must be 0), whether the final Series has every answer in the input's
     order (a committed row's answer from the first kernel, the rest from the second), wall time of each part.

Run: .venv/bin/python bench/bench_map.py [--repeat 3] [--quick] [--only A|B|C|D]   (about 4 minutes on 2 cores)
Each figure is the median of ``--repeat`` runs; the runs' own values are listed beside the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this tree's unity_nb, whatever the venv has installed
    sys.path.insert(0, str(ROOT))

LATENCY = 0.05
TASK = "Label the method used: one of survey, experiment, theory."
HEADERS = {"Authorization": "Bearer x", "Content-Type": "application/json", "Accept": "text/event-stream"}


def rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


class GCTimer:
    """CPU time the garbage collector took while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started

    def __enter__(self) -> GCTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


class Server:
    """tests/fake_openai.py in a subprocess: a streamed "ok" after ``latency`` seconds."""

    def __init__(self, latency: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", str(latency)],
            stdout=subprocess.PIPE, text=True,
        )
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "READY", line
        self.base_url = line[1]

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def items(n: int) -> list[str]:
    return [f"abstract {i}: we measured something about topic {i % 97}" for i in range(n)]


async def bare_request(session, url: str, text: str) -> str:
    """One request with the least work around it: the body unity_nb sends, the SSE body split by hand."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"{TASK}\n\n{text}"}],
                       "stream": True, "stream_options": {"include_usage": True}})
    async with session.post(url, data=body, headers=HEADERS) as r:
        data = await r.read()
    out = []
    for event in data.split(b"\n\n"):
        if event.startswith(b"data: {"):
            for choice in json.loads(event[6:])["choices"]:
                out.append(choice["delta"].get("content") or "")
    return "".join(out)


async def bare_batch(session, url: str, texts: list[str], concurrency: int) -> list[str]:
    """``concurrency`` workers over the rows: the floor for a batch."""
    results: list[str] = [""] * len(texts)
    todo = iter(range(len(texts)))

    async def worker() -> None:
        for i in todo:
            results[i] = await bare_request(session, url, texts[i])

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


# ------------------------------------------------------------------------------------ A and B (HTTP)


async def child_http(scenario: str, kind: str, n: int, concurrency: int) -> dict:
    """In a fresh process: one batch (A) or n loops (B) of ``kind``; wall, CPU and RSS of the run."""
    import aiohttp

    import unity_nb as u

    srv = Server(LATENCY)
    try:
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        bus = u.EventBus()
        texts = items(n)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            url = srv.base_url + "/chat/completions"

            def run(texts: list[str]):
                if kind == "bare aiohttp":
                    return bare_batch(session, url, texts, min(concurrency, len(texts)))
                if scenario == "map":
                    return u.map(texts, TASK, model=model, concurrency=concurrency, bus=bus)
                handles = [u.start_loop(f"{TASK}\n\n{t}", model=model, bus=bus) for t in texts]
                return asyncio.gather(*handles)

            await run(items(5))  # warm-up: what the run imports, the first connections; small, so the peak is the run's
            bus.clear()
            gc.collect()
            before = rss_kb()
            with GCTimer() as gc_time:
                cpu, wall = time.process_time(), time.perf_counter()
                held = run(texts)  # B: every loop's handle is alive until the end, so the peak holds them all
                result = await held
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            answers = list(result)
            del held, result
        await model.close()
        assert answers == ["ok"] * n, f"{sum(a == 'ok' for a in answers)} of {n} rows answered 'ok'"
        live = concurrency if scenario == "map" else n
        return {"unity_nb": u.__file__, "cpu_s": cpu, "gc_s": gc_time.seconds, "wall_s": wall,
                "rss_delta_kb": peak - before, "rss_per_live_kb": (peak - before) / live, "live": live,
                "ideal_s": math.ceil(n / concurrency) * LATENCY}
    finally:
        srv.close()


# ------------------------------------------------------------------------------------ C (store)


async def child_store(kind: str, n: int, concurrency: int) -> dict:
    """In a fresh process: a map over n rows with a ScriptedModel, with or without a Store on its bus."""
    import unity_nb as u

    def script(messages, tools):
        return "label " + messages[-1]["content"].split()[-1]

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        bus = u.EventBus()
        store = u.Store(path) if kind == "store" else None
        if store is not None:
            store.attach(bus)
        await u.map(items(5), "Label {value}", model=u.ScriptedModel(script), bus=bus, name="warm-up")
        bus.clear()
        gc.collect()
        before = rss_kb()
        with GCTimer() as gc_time:
            cpu, wall = time.process_time(), time.perf_counter()
            h = u.map(items(n), "Label {value}", model=u.ScriptedModel(script), concurrency=concurrency, bus=bus,
                      name="bench")
            result = await h
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert result.notna().all() and len(result) == n, h.failures
        finished = None
        if store is not None:
            store.close()
            fresh = u.Store(path)  # what a new kernel would read: committed rows only
            finished = len(u.finished_rows(fresh, "bench"))
            fresh.close()
            assert finished == n, f"the store holds {finished} finished rows of {n}"
    return {"unity_nb": u.__file__, "cpu_s": cpu, "gc_s": gc_time.seconds, "wall_s": wall,
            "rss_delta_kb": peak - before, "finished_rows": finished}


# ------------------------------------------------------------------------------------ D (kill and resume)

KERNEL_SETUP = """
%load_ext unity_nb
import asyncio, itertools, json, os, time, pandas as pd, unity_nb as u

N = {n}
papers = pd.DataFrame({{"abstract": [f"paper {{i}}" for i in range(N)]}}, index=[f"p{{i}}" for i in range(N)])
seen = []

async def answer(messages, tools):
    text = messages[-1]["content"]
    seen.append(text)
    await asyncio.sleep(0.001)
    return "{word} " + text.split()[-1]

m = u.ScriptedModel(answer)
%unity model --var m
print(json.dumps({{"unity_nb": u.__file__, "pid": os.getpid()}}))
"""

KERNEL_FIRST = """
_seen_rows = itertools.count(1)
_t = time.perf_counter()
labels = %unity map papers --concurrency {conc} --name labels Label {{abstract}}
await labels.wait_for("row_finished", lambda e: next(_seen_rows) >= {half}, timeout=120)
print(json.dumps({{"wall_s": time.perf_counter() - _t}}))
"""

KERNEL_SECOND = """
_t = time.perf_counter()
labels = %unity resume labels
_result = await labels
_wall = time.perf_counter() - _t
print(json.dumps({"wall_s": _wall, "answers": _result.tolist(), "index": list(_result.index), "seen": seen,
                  "notice": get_ipython().magics_manager.registry["UnityMagics"].widgets["labels"].notice}))
"""


def kernel_resume(n: int, concurrency: int) -> dict:
    """Two real kernels on one store: the first SIGKILLed at about half of an n-row ``%unity map``, the second
    resuming it. Wall times of each part, committed and recomputed rows, and the checks."""
    import signal

    sys.path.insert(0, str(ROOT / "tests"))
    from _kernel import Kernel

    import unity_nb as u

    def last_json(out: str) -> dict:
        return json.loads(out.strip().splitlines()[-1])

    walls: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.db")
        env = {"UNITY_NB_STORE": path, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        t = time.perf_counter()
        first = Kernel(env=env)
        info = {"pid": None}
        try:
            info = last_json(first.run(KERNEL_SETUP.format(n=n, word="label")))
            walls["start 1"] = time.perf_counter() - t
            assert info["unity_nb"].startswith(str(ROOT)), info["unity_nb"]
            walls["map 1"] = last_json(first.run(KERNEL_FIRST.format(conc=concurrency, half=n // 2),
                                                 timeout=180))["wall_s"]
        finally:  # as Kernel.kill, with the pid known beforehand: no cell runs between the wait and the kill
            t = time.perf_counter()
            if info["pid"] is None:
                first.close()
                raise RuntimeError("kernel 1 did not run its setup")
            os.kill(info["pid"], signal.SIGKILL)
            first.km.provisioner.process.wait(timeout=30)
            walls["kill"] = time.perf_counter() - t
            first.kc.stop_channels()
            first.km.cleanup_resources()

        t = time.perf_counter()
        store = u.Store(path)
        committed = set(u.finished_rows(store, "labels"))
        status = store.find("labels")["status"]
        store.close()
        walls["read store"] = time.perf_counter() - t

        t = time.perf_counter()
        second = Kernel(env=env)
        try:
            second.run(KERNEL_SETUP.format(n=n, word="again"))
            walls["start 2"] = time.perf_counter() - t
            got = last_json(second.run(KERNEL_SECOND, timeout=180))
        finally:
            second.close()
        walls["resume 2"] = got["wall_s"]

    computed = [int(text.split()[-1]) for text in got["seen"]]
    redone = sum(json.dumps(f"p{i}") in committed for i in computed)
    answers, index = got["answers"], got["index"]
    in_order = (len(answers) == n and index == [f"p{i}" for i in range(n)]
                and all(isinstance(a, str) and a.split()[-1] == str(i) for i, a in enumerate(answers)))
    kept = sum(isinstance(a, str) and a.startswith("label ") for a in answers)
    return {"walls": walls, "committed": len(committed), "status_after_kill": status, "computed": len(computed),
            "computed_twice": len(computed) - len(set(computed)), "redone": redone, "in_order": in_order,
            "kept_from_first": kept, "notice": got["notice"]}


# ------------------------------------------------------------------------------------ main


def measure(*args: object) -> dict:
    """One measurement in a fresh process, importing this tree's unity_nb."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, __file__, "--child", *map(str, args)], capture_output=True, text=True,
                         env=env, cwd="/")
    if out.returncode:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["unity_nb"].startswith(str(ROOT)), result["unity_nb"]
    return result


def version() -> str:
    """The commit measured, and whether unity_nb/ had changes not committed yet."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    dirty = git("status", "--porcelain", "--", "unity_nb")
    return f"unity_nb at {git('rev-parse', '--short', 'HEAD')}" + (" + uncommitted changes" if dirty else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true",
                    help="smaller runs: 200 rows at concurrency 50, 50 and 200 loops, 1,000 rows with the store")
    ap.add_argument("--only", choices=("A", "B", "C", "D"))
    ap.add_argument("--child", nargs="+")
    args = ap.parse_args()
    if args.child:
        what, kind, n, conc = args.child
        if what == "store":
            print(json.dumps(asyncio.run(child_store(kind, int(n), int(conc)))))
        else:
            print(json.dumps(asyncio.run(child_http(what, kind, int(n), int(conc)))))
        return

    map_rows, map_conc = (200, 50) if args.quick else (1000, 100)
    loop_counts = (50, 200) if args.quick else (200, 1000)
    store_rows = 1000 if args.quick else 10_000
    med = statistics.median
    load = os.getloadavg()
    command = (".venv/bin/python bench/bench_map.py" + (" --quick" if args.quick else "")
               + (f" --only {args.only}" if args.only else "") + f" --repeat {args.repeat}")
    lines = [
        f"unity_nb batch benchmark, {time.strftime('%Y-%m-%d %H:%M %Z')}: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {version()}; command: {command}; median of {args.repeat} runs, each in a "
        f"fresh process; load average at the start {load[0]:.2f}",
    ]
    if args.only in (None, "A", "B"):
        lines += ["", f"| A/B ({LATENCY * 1000:.0f} ms latency) | client | wall s | wall / ideal | CPU s | "
                  "CPU / bare aiohttp (runs) | GC share of CPU | RSS delta MB | RSS per live loop KB (live) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        scenarios = []
        if args.only in (None, "A"):
            scenarios += [("map", map_conc, map_conc, f"A. {map_conc} rows, concurrency {map_conc}"),
                          ("map", map_rows, map_conc, f"A. {map_rows} rows, concurrency {map_conc}")]
        if args.only in (None, "B"):
            scenarios += [("loops", n, n, f"B. {n} concurrent loops, 1 request each") for n in loop_counts]
        for scenario, n, conc, title in scenarios:
            label = "unity_nb u.map" if scenario == "map" else "unity_nb start_loop"
            runs: dict[str, list[dict]] = {"bare aiohttp": [], "unity_nb": []}
            for _ in range(args.repeat):
                for kind in runs:
                    runs[kind].append(measure(scenario, kind, n, conc))
            bare_cpu = med(r["cpu_s"] for r in runs["bare aiohttp"])
            for kind, got in runs.items():
                ratios = [r["cpu_s"] / b["cpu_s"] for r, b in zip(got, runs["bare aiohttp"])]
                cpu = med(r["cpu_s"] for r in got)
                lines.append(
                    f"| {title} (ideal {got[0]['ideal_s']:.2f} s) | {label if kind == 'unity_nb' else kind} | "
                    f"{med(r['wall_s'] for r in got):.2f} | {med(r['wall_s'] / r['ideal_s'] for r in got):.2f}x | "
                    f"{cpu:.3f} | {cpu / bare_cpu:.2f}x ({', '.join(f'{x:.2f}' for x in ratios)}) | "
                    f"{med(r['gc_s'] / r['cpu_s'] for r in got) * 100:.0f}% | "
                    f"{med(r['rss_delta_kb'] for r in got) / 1024:.1f} | "
                    f"{med(r['rss_per_live_kb'] for r in got):.1f} ({got[0]['live']}) |"
                )
                print(lines[-1], file=sys.stderr)
    if args.only in (None, "C"):
        lines += ["", f"| C. u.map over {store_rows:,} rows, ScriptedModel, concurrency 100 | wall s | CPU s | "
                  "ms CPU per row | GC share of CPU | RSS delta MB | row_finished events in the store (runs) |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        runs = {"no store": [], "store": []}
        for _ in range(args.repeat):
            for kind in runs:
                runs[kind].append(measure("store", kind, store_rows, 100))
        for kind, got in runs.items():
            finished = ", ".join(f"{r['finished_rows']:,}" for r in got) if kind == "store" else "-"
            cpu = med(r["cpu_s"] for r in got)
            lines.append(
                f"| {'Store attached (SQLite on disk)' if kind == 'store' else 'no store'} | "
                f"{med(r['wall_s'] for r in got):.2f} | {cpu:.2f} | {cpu / store_rows * 1000:.3f} | "
                f"{med(r['gc_s'] / r['cpu_s'] for r in got) * 100:.0f}% | "
                f"{med(r['rss_delta_kb'] for r in got) / 1024:.1f} | {finished} |"
            )
            print(lines[-1], file=sys.stderr)
    if args.only in (None, "D"):
        runs_d = [kernel_resume(store_rows, 100) for _ in range(args.repeat)]
        lines += ["", f"| D. %unity map over {store_rows:,} rows in a real kernel, store on, concurrency 100, "
                  "SIGKILL at half, %unity resume in a second kernel | wall s | wall s (runs) | rows (runs) |",
                  "| --- | --- | --- | --- |"]

        def each(fn) -> str:
            return ", ".join(str(fn(r)) for r in runs_d)

        parts = [
            ("start 1", f"kernel 1: start, %load_ext, {store_rows:,}-row DataFrame, model", "-"),
            ("map 1", f"kernel 1: %unity map until {store_rows // 2:,} row_finished events in the kernel",
             "committed in the store after the kill: " + each(lambda r: f"{r['committed']:,}")),
            ("kill", "SIGKILL, process reaped", "status in the store: " + each(lambda r: r["status_after_kill"])),
            ("read store", "Store(path) + finished_rows(store, 'labels') from the bench process", "-"),
            ("start 2", "kernel 2: start, %load_ext, same DataFrame, recording model", "-"),
            ("resume 2", "kernel 2: %unity resume labels until its Series",
             "computed: " + each(lambda r: f"{r['computed']:,}") + "; committed rows redone: "
             + each(lambda r: r["redone"]) + "; rows asked twice: " + each(lambda r: r["computed_twice"])),
        ]
        for key, title, rows in parts:
            got = [r["walls"][key] for r in runs_d]
            lines.append(f"| {title} | {med(got):.2f} | {', '.join(f'{x:.2f}' for x in got)} | {rows} |")
            print(lines[-1], file=sys.stderr)
        totals = [sum(r["walls"].values()) for r in runs_d]
        lines.append(
            f"| total | {med(totals):.2f} | {', '.join(f'{x:.2f}' for x in totals)} | final Series: "
            f"{store_rows:,} answers in the input's order: " + each(lambda r: "yes" if r["in_order"] else "NO")
            + "; answers kept from kernel 1 = committed: "
            + each(lambda r: "yes" if r["kept_from_first"] == r["committed"] else f"NO ({r['kept_from_first']})")
            + " |")
        print(lines[-1], file=sys.stderr)
        lines.append(f"notice of the resumed batch (run 1): {runs_d[0]['notice']}")
        bad = [r for r in runs_d if r["redone"] or not r["in_order"] or r["computed"] + r["committed"] != store_rows]
        if bad:
            lines.append(f"D FAILED in {len(bad)} of {len(runs_d)} runs: a committed row redone, a row missing or "
                         "out of order, or committed + computed != rows")
    load = os.getloadavg()
    lines += ["", f"load average at the end {load[0]:.2f} (2 cores: above ~1 another process shared the machine)"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
