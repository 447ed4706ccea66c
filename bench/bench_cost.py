"""Cost at the floor (issue 38, not a test): four figures, each a ratio against its baseline measured in the same run.

  A. The actor with a big namespace: CPU of one actor run (ScriptedModel, no HTTP: the system prompt, one plan
     ``i = 1``, the answer) with 100 DataFrames of 100,000 rows x 6 columns (int64, float64, category, str) in
     the namespace, against the same run in an empty namespace. Three ways, taken in turn in the same process:
     warm (the frames as the last run saw them), changed (one cell of the first rows of every frame rewritten
     before each run, so every description shown must be made anew; the run checks that the new value is in
     the system prompt), new (every frame replaced by a new object over the same data before each run, as
     after loading them again: nothing known about any of these objects), unseen (the same, and each frame's rows
     labelled anew: no frame described before showed what they show). Median of ``--runs`` runs
     each.
  B. A sync tool: CPU per model round trip of a K=20 tool loop over HTTP (tests/fake_openai.py in its own
     process, zero latency) whose tool is a plain ``def``, against the same loop with the tool as
     ``async def``; in turn, ``--rounds`` rounds of 5 loops each, the median of the rounds' ratios. Also the
     engine alone (ScriptedModel, no HTTP, 100 tool steps), CPU per tool step, sync against async.
  C. The first model: in a fresh interpreter, ``import unity_nb`` and ``unity_nb.OpenAIModel(...)``, against
     ``import openai`` and ``openai.AsyncOpenAI(...)``: the time of those statements inside the process, and
     the wall time of the whole process (start to exit); the two alternated, ``--procs`` processes each.
     C'. The first calls: the same, each followed by three answers from tests/fake_openai.py (a ``u.map`` of
     three rows; three streamed ``chat.completions.create`` calls at once).
  D. 50 agents: 50 concurrent loops at 50 ms server latency (K=20), wall time against the ideal (K+1) x 50 ms,
     beside 50 bare aiohttp loops; each run in a fresh process (``bench_scale.py --child``), alternated. Also
     the CPU of the run against the bare loops', and the collector's share of it (less moved by other load
     on the machine than the wall time).
  E. A map row: client CPU per row (``time.process_time``: the server, tests/fake_openai.py, runs in its own
     process, zero latency, a streamed "ok") of ``u.map`` over ``--rows`` rows (5,000) with ``OpenAIModel``,
     against a bare aiohttp client sending the same requests at the same concurrency (a semaphore, one pooled
     session, the body unity_nb sends, the stream read as it arrives with ``readany`` and decoded event by
     event, as unity_nb's default path does), at concurrency 8, 64, 100 and 200. Each measurement in a fresh
     process, the two kinds in turn, ``--repeat`` rounds: per concurrency the median of the rounds' paired
     ratios, and for each kind a row's cost at 8 over its cost at 64.

Run: .venv/bin/python bench/bench_cost.py [--only A|B|C|D|E] [--repeat 3] [--rows 10000]   (A-D: about two
minutes on 2 cores; E: about three)
Before and after: PYTHONPATH=<an older checkout> .venv/bin/python bench/bench_cost.py (the first line names
the unity_nb imported; children inherit PYTHONPATH).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

FRAMES, ROWS = 100, 100_000
K = 20


# ------------------------------------------------------------------------------------ A. namespace


def make_frames(k: int, seed: int = 3) -> dict:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n = np.arange(ROWS)
    return {
        f"frame{i:03d}": pd.DataFrame({
            "id": n, "value": rng.random(ROWS), "kind": pd.Categorical(np.array(["a", "b", "c"])[n % 3]),
            "name": np.array(["x", "yy", "zzz"])[n % 3], "n2": n * 2, "f2": rng.random(ROWS),
        })
        for i in range(k)
    }


async def namespace_costs(runs: int) -> dict[str, list[float]]:
    """CPU ms of a one-plan actor run per arm; the arms in turn, the first round a warm-up."""
    import pandas as pd

    import unity_nb as u

    frames = make_frames(FRAMES)
    # warm runs right after changed, over the same frames (as that run left them); new has frames of its own
    # (a frame whose data another shares is copied when a cell is written, which would change more than a cell)
    spaces = {"empty": {}, "changed": dict(frames), "warm": dict(frames), "cell": dict(frames),
              "new": make_frames(FRAMES, seed=4), "unseen": make_frames(FRAMES, seed=5)}
    seen: list[str] = []

    def script(messages: list, tools: list) -> object:
        if not any(m["role"] == "tool" for m in messages):
            seen.append(messages[0]["content"])
            return u.call_tool("execute_code", code="i = 1", intent="step")
        return "done"

    out: dict[str, list[float]] = {arm: [] for arm in spaces}
    for rep in range(runs + 1):
        for arm, ns in spaces.items():
            mark: float | str | None = None
            if arm == "changed":  # a cell of the first rows of every frame rewritten: each description is stale
                for j, df in enumerate(frames.values()):
                    df.iat[1, 1] = 1000 + rep + j / 1000
                mark = 1000 + rep
            elif arm == "cell":  # as a notebook's: IPython's names for the cell run since (never variables) added
                ns[f"_i{rep + 1}"] = "x = 1"
                ns["_"] = ns["_i"] = rep
            elif arm == "new":  # new objects over the same data: nothing about them known
                for name in frames:
                    ns[name] = ns[name].copy(deep=False)
            elif arm == "unseen":  # new objects, each showing what no frame showed before: rows labelled anew
                for j, name in enumerate(frames):  # (not a cell written: that copies a block, 160 MB a round)
                    df = ns[name].copy(deep=False)
                    df.index = pd.RangeIndex(ROWS * (rep * FRAMES + j + 1), ROWS * (rep * FRAMES + j + 2))
                    ns[name] = df
                mark = f"\n{ROWS * (rep * FRAMES + 1)}  "
            t = time.process_time()
            await u.act("task", model=u.ScriptedModel(script), namespace=ns)
            cpu = (time.process_time() - t) * 1000
            if mark is not None:  # the first frame's description shows its new value, or its new rows
                shows = mark if isinstance(mark, str) else f"{mark:.6f}".rstrip("0")
                assert shows in seen[-1], "a changed frame's description is stale"
            if rep:
                out[arm].append(cpu)
    return out


# ------------------------------------------------------------------------------------ B. sync tool


def step_sync(i: int) -> str:
    """One unit of work."""
    return "ok"


async def step_async(i: int) -> str:
    """One unit of work."""
    return "ok"


async def tool_costs(rounds: int, loops: int = 5) -> dict[str, list[float]]:
    """CPU ms per round trip (HTTP) and per tool step (ScriptedModel) in each round, sync and async in turn."""
    from bench_loop import Server

    import unity_nb as u

    tools = {"sync": u.as_tool(step_sync, name="step"), "async": u.as_tool(step_async, name="step")}
    srv = Server(0.0, steps=K)

    def scripted(messages: list, tools: list) -> object:
        done = sum(1 for m in messages if m["role"] == "tool")
        return u.call_tool("step", i=done) if done < 100 else "done"

    out: dict[str, list[float]] = {}
    try:
        model = u.OpenAIModel("m", base_url=srv.base_url, api_key="x")
        bus = u.EventBus()
        for tool in tools.values():  # warm-up: connections, caches, threads
            await u.start_loop("go", model=model, tools=[tool], max_steps=K + 5, bus=bus)
        for _ in range(rounds):
            for kind, tool in tools.items():
                t = time.process_time()
                for _ in range(loops):
                    await u.start_loop("go", model=model, tools=[tool], max_steps=K + 5, bus=bus)
                out.setdefault(f"http {kind}", []).append((time.process_time() - t) / (loops * (K + 1)) * 1000)
                bus.clear()
                t = time.process_time()
                await u.start_loop("go", model=u.ScriptedModel(scripted), tools=[tool], max_steps=105, bus=bus)
                out.setdefault(f"engine {kind}", []).append((time.process_time() - t) / 100 * 1000)
                bus.clear()
        await model.close()
    finally:
        srv.close()
    return out


# ------------------------------------------------------------------------------------ C. first model

FIRST = {
    "unity_nb": "import unity_nb\nm = unity_nb.OpenAIModel('m', base_url='http://127.0.0.1:9/v1', api_key='x')",
    "openai": "import openai\nc = openai.AsyncOpenAI(base_url='http://127.0.0.1:9/v1', api_key='x')",
}
FIRST_CALLS = {  # URL: a tests/fake_openai.py server's, answering "ok"
    "unity_nb": """import asyncio, unity_nb
async def main():
    async with unity_nb.OpenAIModel('m', base_url=URL, api_key='x') as m:
        return list(await unity_nb.map(['a', 'b', 'c'], 'Label {value}', model=m, bus=unity_nb.EventBus()))
assert asyncio.run(main()) == ['ok'] * 3""",
    "openai": """import asyncio, openai
async def main():
    async with openai.AsyncOpenAI(base_url=URL, api_key='x', max_retries=0) as c:
        async def one(v):
            s = await c.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'Label ' + v}],
                                                stream=True)
            return ''.join([k.choices[0].delta.content or '' async for k in s if k.choices])
        return await asyncio.gather(*(one(v) for v in 'abc'))
assert asyncio.run(main()) == ['ok'] * 3""",
}


def first_model(kind: str, url: str | None = None) -> tuple[float, float, bool]:
    """(ms of the statements inside the process, ms of the whole process, openai imported) in a fresh interpreter:
    ``FIRST[kind]``, or with ``url`` (a server's) ``FIRST_CALLS[kind]``."""
    statements = FIRST[kind] if url is None else f"URL = {url!r}\n" + FIRST_CALLS[kind]
    code = (f"import sys, time\nt = time.perf_counter()\n{statements}\n"
            "print((time.perf_counter() - t) * 1000, 'openai' in sys.modules)")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    wall = (time.perf_counter() - t) * 1000
    inner, imported = out.stdout.split()
    return float(inner), wall, imported == "True"


def first_models(procs: int, url: str | None = None) -> dict[str, list[tuple[float, float, bool]]]:
    """:func:`first_model` of each kind in turn, ``procs`` times (with ``url``: the first calls)."""
    kinds = FIRST if url is None else FIRST_CALLS
    res: dict[str, list[tuple[float, float, bool]]] = {k: [] for k in kinds}
    for _ in range(procs):
        for kind in kinds:
            res[kind].append(first_model(kind, url))
    return res


# ------------------------------------------------------------------------------------ E. a map row

E_CONCURRENCY = (8, 64, 100, 200)
E_TASK = "Label the method used: one of survey, experiment, theory."
E_HEADERS = {"Authorization": "Bearer x", "Content-Type": "application/json", "Accept": "text/event-stream"}


def e_items(n: int) -> list[str]:
    return [f"abstract {i}: we measured something about topic {i % 97}" for i in range(n)]


class Answer:
    """A streamed reply's text, from its SSE bytes as they come: split into events, each ``data: {...}`` decoded
    and its choices' content kept (what every bare client row here does with what it reads)."""

    __slots__ = ("buf", "out")

    def __init__(self) -> None:
        self.out: list[str] = []
        self.buf = b""

    def feed(self, piece: bytes) -> None:
        self.buf += piece
        *events, self.buf = self.buf.split(b"\n\n")
        for event in events:
            if event.startswith(b"data: {"):
                for choice in json.loads(event[6:])["choices"]:
                    self.out.append(choice["delta"].get("content") or "")

    def text(self) -> str:
        return "".join(self.out)


def e_body(text: str) -> str:
    """The body unity_nb sends for a row of E."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": f"{E_TASK}\n\n{text}"}],
                       "stream": True, "stream_options": {"include_usage": True}})


async def bare_row(session, url: str, text: str) -> str:
    """One row with the least work around it: the body unity_nb sends, the stream read as it comes and its
    events decoded one by one (the default path reads with ``readany`` too)."""
    answer = Answer()
    async with session.post(url, data=e_body(text), headers=E_HEADERS) as r:
        read = r.content.readany
        while True:
            piece = await read()
            if not piece:
                break
            answer.feed(piece)
    return answer.text()


async def admit(texts: list[str], concurrency: int, row) -> list[str]:
    """``await row(text)`` for each text, at most ``concurrency`` at once: a semaphore admits each row as a slot
    frees (a task per running row, as u.map makes them, not one per row waiting from the start); the answers
    in order. A row that raised fails the whole."""
    gate = asyncio.Semaphore(concurrency)
    answers = [""] * len(texts)
    running: set[asyncio.Task] = set()
    errors: list[BaseException] = []

    async def one(i: int, text: str) -> None:
        try:
            answers[i] = await row(text)
        except Exception as err:  # noqa: BLE001 - said below, for the whole
            errors.append(err)
        finally:
            gate.release()

    for i, text in enumerate(texts):
        await gate.acquire()
        task = asyncio.ensure_future(one(i, text))
        running.add(task)
        task.add_done_callback(running.discard)
    for _ in range(concurrency):  # every slot free again: every row ended
        await gate.acquire()
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(texts)} rows failed; the first: {errors[0]!r}")
    return answers


async def child_row_cost(kind: str, n: int, concurrency: int, base_url: str) -> dict:
    """In a fresh process: n rows of ``kind`` at ``concurrency`` against the server at ``base_url``; the client's
    CPU and the collector's share."""
    import gc

    import aiohttp

    import unity_nb as u

    gc_s = [0.0, 0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_s[1] = time.process_time()
        else:
            gc_s[0] += time.process_time() - gc_s[1]

    model = u.OpenAIModel("m", base_url=base_url, api_key="x")
    bus = u.EventBus()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        url = base_url + "/chat/completions"

        from unity_nb.models import ModelRequest

        async def completes(text: str) -> str:
            # the model's call alone, a row's request as u.map sends it: no loop around it, no batch (what the
            # model layer costs over the bare client)
            request = ModelRequest([{"role": "user", "content": f"{E_TASK}\n\n{text}"}], once=True)
            return (await model.complete(request)).content or ""

        def run(texts: list[str]):
            if kind == "bare aiohttp":
                return admit(texts, concurrency, lambda text: bare_row(session, url, text))
            if kind == "model.complete":
                return admit(texts, concurrency, completes)
            return u.map(texts, E_TASK, model=model, concurrency=concurrency, bus=bus)

        await run(e_items(concurrency))  # warm-up: imports, the first connections
        bus.clear()
        gc.collect()
        gc.callbacks.append(on_gc)
        cpu, wall = time.process_time(), time.perf_counter()
        result = await run(e_items(n))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.callbacks.remove(on_gc)
        answers = list(result)
    await model.close()
    assert answers == ["ok"] * n, f"{sum(a == 'ok' for a in answers)} of {n} rows answered 'ok'"
    return {"unity_nb": u.__file__, "cpu_s": cpu, "wall_s": wall, "gc_s": gc_s[0]}


def row_cost(kind: str, n: int, concurrency: int) -> dict:
    """One measurement of E in a fresh process (PYTHONPATH inherited: the unity_nb this run imports)."""
    import json

    out = subprocess.run([sys.executable, __file__, "--child-e", kind, str(n), str(concurrency)],
                         capture_output=True, text=True, cwd="/")
    if out.returncode:
        raise RuntimeError(f"child {kind} {n} {concurrency} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--only", choices=("A", "B", "C", "D", "E"))
    ap.add_argument("--repeat", type=int, default=3, help="runs of each arm in D")
    ap.add_argument("--rounds", type=int, default=15, help="rounds of B")
    ap.add_argument("--runs", type=int, default=15, help="runs of each arm in A")
    ap.add_argument("--procs", type=int, default=12, help="fresh processes of each kind in C")
    ap.add_argument("--rows", type=int, default=5000, help="rows of each measurement in E")
    ap.add_argument("--layers", action="store_true",
                    help="E also measures OpenAIModel.complete alone (the model layer without loop or batch)")
    ap.add_argument("--child-e", nargs=3, metavar=("KIND", "ROWS", "CONCURRENCY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_e:
        import json

        kind, n, conc = args.child_e
        srv = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0"],
                               stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout is not None
            ready = srv.stdout.readline().split()
            assert ready and ready[0] == "READY", ready
            print(json.dumps(asyncio.run(child_row_cost(kind, int(n), int(conc), ready[1]))))
        finally:
            srv.kill()
            srv.wait()
        return
    import unity_nb as u

    med = statistics.median
    lines = [
        f"unity_nb cost benchmark, {time.strftime('%Y-%m-%d %H:%M')}: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, unity_nb from {Path(u.__file__).parent.parent}; "
        f"command: bench/bench_cost.py{' --only ' + args.only if args.only else ''} --repeat {args.repeat}"
        + (f" --rows {args.rows}" if args.only in (None, "E") else "") + f"; load average {os.getloadavg()[0]:.2f}",
    ]
    if args.only in (None, "A"):
        got = asyncio.run(namespace_costs(args.runs))
        base = med(got["empty"])
        lines += ["", f"| A. one actor run, {FRAMES} DataFrames of {ROWS:,} x 6 | CPU ms (median of {args.runs}) "
                  "| vs empty namespace | spread (quartiles) |", "| --- | --- | --- | --- |"]
        for arm, label in (("empty", "empty namespace (baseline)"),
                           ("warm", "warm: frames unchanged since the last run"),
                           ("cell", "cell: warm, IPython's names for a cell run added since (_i7, _)"),
                           ("changed", "changed: a cell of each frame's first rows rewritten before the run"),
                           ("new", "new: each frame a new object over the same data"),
                           ("unseen", "unseen: each frame a new object, its rows labelled anew")):
            q = statistics.quantiles(got[arm], n=4)
            lines.append(f"| {label} | {med(got[arm]):.3f} | {med(got[arm]) / base:.2f}x | "
                         f"{q[0] / base:.2f}x-{q[2] / base:.2f}x |")
        print("\n".join(lines[-8:]), file=sys.stderr)
    if args.only in (None, "B"):
        got_b = asyncio.run(tool_costs(args.rounds))
        lines += ["", f"| B. a sync tool against the same tool as async def ({args.rounds} rounds, in turn) | sync ms "
                  "| async ms | sync / async (median of the rounds' ratios) | spread (quartiles) |",
                  "| --- | --- | --- | --- | --- |"]
        for kind, label in (("http", f"CPU per round trip, HTTP loop K={K}"),
                            ("engine", "CPU per tool step, ScriptedModel")):
            sync, asy = got_b[f"{kind} sync"], got_b[f"{kind} async"]
            ratios = [a / b for a, b in zip(sync, asy)]
            q = statistics.quantiles(ratios, n=4)
            lines.append(f"| {label} | {med(sync):.3f} | {med(asy):.3f} | {med(ratios):.2f}x "
                         f"| {q[0]:.2f}x-{q[2]:.2f}x |")
        print("\n".join(lines[-4:]), file=sys.stderr)
    if args.only in (None, "C"):
        srv = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0"],
                               stdout=subprocess.PIPE, text=True)
        try:
            assert srv.stdout is not None
            url = srv.stdout.readline().split()[1]
            tables = [
                (f"C. first model, fresh interpreter ({args.procs} each, alternated)", first_models(args.procs),
                 ("`import unity_nb` + `OpenAIModel(...)`", "`import openai` + `AsyncOpenAI(...)` (baseline)")),
                (f"C'. the first calls, fresh interpreter ({args.procs} each, alternated)",
                 first_models(args.procs, url),
                 ("`import unity_nb`, `OpenAIModel(...)`, a `u.map` of 3 rows",
                  "`import openai`, `AsyncOpenAI(...)`, 3 streamed calls (baseline)")),
            ]
        finally:
            srv.kill()
            srv.wait()
        for title, res, labels in tables:
            inner = {k: [r[0] for r in v] for k, v in res.items()}
            wall = {k: [r[1] for r in v] for k, v in res.items()}
            ratios = sorted(a / b for a, b in zip(inner["unity_nb"], inner["openai"]))
            lines += ["", f"| {title} | statements ms (median) | whole process ms (median) | openai imported |",
                      "| --- | --- | --- | --- |"]
            for kind, label in zip(("unity_nb", "openai"), labels):
                lines.append(f"| {label} | {med(inner[kind]):.1f} | {med(wall[kind]):.1f} | "
                             f"{'yes' if res[kind][0][2] else 'no'} |")
            lines.append(f"| ratio unity_nb / openai | {med(inner['unity_nb']) / med(inner['openai']):.2f}x "
                         f"(pairs {ratios[0]:.2f}-{ratios[-1]:.2f}) | "
                         f"{med(wall['unity_nb']) / med(wall['openai']):.2f}x | |")
        print("\n".join(lines[-10:]), file=sys.stderr)
    if args.only in (None, "D"):
        from bench_scale import concurrency

        runs: dict[str, list[dict]] = {"bare aiohttp": [], "unity_nb": []}
        for _ in range(args.repeat):
            for kind in runs:
                runs[kind].append(concurrency(kind, 50))
        lines += ["", f"| D. 50 loops, 50 ms latency, K={K} (each a fresh process, in turn) | wall / ideal (median) "
                  "| runs | CPU s (median) | CPU / bare aiohttp | GC share of CPU |",
                  "| --- | --- | --- | --- | --- | --- |"]
        bare_cpu = med(r["cpu_s"] for r in runs["bare aiohttp"])
        for kind, got_d in runs.items():
            walls = [r["wall_s"] / r["ideal_s"] for r in got_d]
            cpu = med(r["cpu_s"] for r in got_d)
            lines.append(f"| {kind} | {med(walls):.3f}x | {', '.join(f'{x:.3f}' for x in walls)} | {cpu:.3f} | "
                         f"{cpu / bare_cpu:.2f}x | {med(r['gc_share'] for r in got_d) * 100:.1f}% |")
        print("\n".join(lines[-4:]), file=sys.stderr)
    if args.only in (None, "E"):
        kinds: tuple[str, ...] = ("bare aiohttp", "unity_nb") + (("model.complete",) if args.layers else ())
        got_e: dict[tuple[str, int], list[dict]] = {(k, c): [] for k in kinds for c in E_CONCURRENCY}
        for _ in range(args.repeat):
            for conc in E_CONCURRENCY:
                for kind in kinds:
                    got_e[kind, conc].append(row_cost(kind, args.rows, conc))
        assert all(r["unity_nb"].startswith(str(Path(u.__file__).parent)) for r in got_e["unity_nb", 8])

        def per_row(kind: str, conc: int) -> list[float]:
            return [r["cpu_s"] / args.rows * 1e6 for r in got_e[kind, conc]]

        lines += ["", f"| E. a map row, {args.rows:,} rows, zero latency (fresh processes, in turn, {args.repeat} "
                  "rounds) | bare aiohttp µs CPU/row | u.map µs CPU/row | u.map / bare (median of the rounds' "
                  "ratios; runs) | GC share bare, u.map | u.map rows/s |", "| --- | --- | --- | --- | --- | --- |"]
        for conc in E_CONCURRENCY:
            bare, uni = per_row("bare aiohttp", conc), per_row("unity_nb", conc)
            ratios = [a / b for a, b in zip(uni, bare)]
            gcs = [med(r["gc_s"] / r["cpu_s"] for r in got_e[k, conc]) * 100 for k in kinds]
            rate = med(args.rows / r["wall_s"] for r in got_e["unity_nb", conc])
            lines.append(f"| concurrency {conc} | {med(bare):.0f} | {med(uni):.0f} | {med(ratios):.2f}x "
                         f"({', '.join(f'{x:.2f}' for x in ratios)}) | {gcs[0]:.0f}%, {gcs[1]:.0f}% | {rate:,.0f} |")
        for kind in kinds:
            eights = [a / b for a, b in zip(per_row(kind, 8), per_row(kind, 64))]
            lines.append(f"| {kind}: a row's cost at 8 / at 64 | | | {med(eights):.2f}x "
                         f"({', '.join(f'{x:.2f}' for x in eights)}) | | |")
        if args.layers:  # how much of u.map's ratio is the model's call alone
            for conc in E_CONCURRENCY:
                ratios = [a / b for a, b in zip(per_row("model.complete", conc), per_row("bare aiohttp", conc))]
                lines.append(f"| OpenAIModel.complete alone, concurrency {conc} | | "
                             f"{med(per_row('model.complete', conc)):.0f} | {med(ratios):.2f}x "
                             f"({', '.join(f'{x:.2f}' for x in ratios)}) | | |")
        print("\n".join(lines[-(len(E_CONCURRENCY) * (1 + args.layers) + len(kinds) + 2):]), file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
