"""Actor benchmark (not a test): what the model is sent when the data is large, beside pasting it.

The task is the same in every run: "Which three regions fell most quarter on quarter? Put
them in `worst`." over a sales DataFrame (region, quarter, product, channel, units, price,
sales) of 10 rows, and of 1,000,000 rows (the 10-row frame is the first 10 rows of the big
one, built with numpy in one vectorised pass).

The server is tests/fake_openai.py, in a thread of this process on 127.0.0.1, and the client is
unity_nb.OpenAIModel over real HTTP; every size below is the Content-Length of the POST to
/v1/chat/completions as the server received it (messages plus tool schemas, as JSON). The
server answers the actor's first request with one execute_code plan that creates `worst`,
and the next with text.

  A. Request bytes, 10 rows against 1,000,000 rows: the actor's first request and its request
     after one plan (over the lean HTTP path and over the openai client's own `post`), beside
     a baseline that puts `df.to_json(orient="records")` in the task of a plain start_loop.
  B. How that inline baseline grows with rows (10, 10k, 100k and 1M rows all sent for real;
     with --no-send-1m the 1M body is computed instead, from the measured 10-row body plus the
     JSON-escaped length of the extra text, the method checked exactly against 10k and 100k).
  C. CPU time to build the first request, 10 rows against 1M: describing the namespace (what
     the system prompt lists), and act() to the end of a run whose ScriptedModel answers at
     once (no HTTP); beside the baseline's df.to_json plus JSON encoding of the task.

  D. The namespace's cost per step: CPU per plan step of an actor run (ScriptedModel, a one-line
     plan each step, no HTTP) with 0, 1 and 100 DataFrames of 100,000 rows in the namespace, and
     its ratio to the empty namespace, measured in the same run, the three taken in turn. A step's
     cost is (a run of 22 plan steps - a run of 2) / 20, so starting a run (the system prompt's
     description of the namespace) is not counted; median of 25 such differences.

Run: .venv/bin/python bench/bench_actor.py   (about 20 s on 2 cores, 1.3 GB peak memory)
     .venv/bin/python bench/bench_actor.py --steps-only   (D alone, about 15 s)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import openai
import pandas as pd

import unity_nb as u
from unity_nb.actor import describe_namespace
from unity_nb.actor._describe import user_variables

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from fake_openai import FakeOpenAIServer, Reply  # noqa: E402

TASK = "Which three regions fell most quarter on quarter? Put them in `worst`."
PLAN = (
    'worst = sales.groupby(["region", "quarter"])["sales"].sum().unstack().diff(axis=1)'
    ".iloc[:, -1].nsmallest(3).index.tolist()\nworst"
)
BIG = 1_000_000
REGIONS = np.array(["North", "South", "East", "West", "Central"])
QUARTERS = np.array([f"{y}Q{q}" for y in (2024, 2025) for q in (1, 2, 3, 4)])


def make_sales(n: int, seed: int = 7) -> pd.DataFrame:
    """n sales rows: regions cycle fastest, then quarters. Each region has its own trend and
    the noise is small, so 10 rows and 1M rows give the same answer (West, South, East) and
    the request after the plan differs only by what the data's size changes."""
    rng = np.random.default_rng(seed)
    i = np.arange(n)
    r, q = i % len(REGIONS), (i // len(REGIONS)) % len(QUARTERS)
    trend = np.array([0.06, -0.05, -0.02, -0.09, 0.03])[r]
    sales = np.round(1000 * (1 + trend * q) * rng.uniform(0.99, 1.01, n), 2)
    units = rng.integers(1, 50, n)
    return pd.DataFrame({
        "region": REGIONS[r],
        "quarter": QUARTERS[q],
        "product": np.array(["widget", "gadget", "gizmo", "doohickey"])[rng.integers(0, 4, n)],
        "channel": np.array(["online", "retail", "partner"])[rng.integers(0, 3, n)],
        "units": units,
        "price": np.round(sales / units, 2),
        "sales": sales,
    })


STEP_ROWS = 100_000


def step_frames(k: int, rows: int = STEP_ROWS) -> dict[str, pd.DataFrame]:
    """k DataFrames of ``rows`` rows, three blocks each (int64, float64, category)."""
    rng = np.random.default_rng(3)
    return {
        f"frame{i:03d}": pd.DataFrame({
            "id": np.arange(rows), "value": rng.random(rows),
            "kind": pd.Categorical(np.array(["a", "b", "c"])[np.arange(rows) % 3]),
        })
        for i in range(k)
    }


def plan_steps(n: int):
    """A script that runs n one-line plans, then answers."""

    def script(messages, tools):
        done = sum(1 for m in messages if m["role"] == "tool")
        return u.call_tool("execute_code", code=f"i = {done}", intent="step") if done < n else "done"

    return script


def total(frame: pd.DataFrame, column: str) -> float:
    """The sum of one column of a frame (a JSON tool taking a DataFrame by reference)."""
    return float(frame[column].sum())


async def step_costs(reps: int = 25) -> list[tuple[str, float, float]]:
    """(arm, CPU ms per plan step, ratio to the empty namespace with the same tools) for 0, 1 and 100 frames,
    then 0 and 100 with a JSON tool offered (its compatible variables worked out each step), taken in turn."""
    spaces = {k: step_frames(k) for k in (0, 1, 100)}
    arms = [(k, []) for k in spaces] + [(k, [total]) for k in (0, 100)]

    async def run(ns: dict, n: int, tools: list) -> float:
        t = time.process_time()
        await u.act(TASK, model=u.ScriptedModel(plan_steps(n)), namespace=dict(ns), tools=tools)
        return time.process_time() - t

    per: list[list[float]] = [[] for _ in arms]
    for rep in range(reps + 1):
        for i, (k, tools) in enumerate(arms):
            short, long = await run(spaces[k], 2, tools), await run(spaces[k], 22, tools)
            if rep:  # the first round warms up
                per[i].append((long - short) / 20 * 1000)
    ms = [statistics.median(v) for v in per]
    out = []
    for (k, tools), m in zip(arms, ms):
        base = ms[0] if not tools else ms[3]
        label = f"{k} DataFrame{'s' if k != 1 else ''}" + (", a JSON tool offered" if tools else "")
        out.append((label, m, m / base))
    return out


def step_table(costs: list[tuple[str, float, float]]) -> list[str]:
    return [
        f"| D. namespace cost per plan step (DataFrames of {STEP_ROWS:,} rows) | CPU ms per step (median) "
        "| vs empty (same tools) |",
        "| --- | --- | --- |",
        *[f"| {label} | {ms:.3f} | {ratio:.2f}x |" for label, ms, ratio in costs],
    ]


def handler(body: dict) -> Reply:
    """The actor's first request gets one plan; every other request an answer."""
    messages = body.get("messages", [])
    if body.get("tools") and not any(m.get("role") == "tool" for m in messages):
        args = {"code": PLAN, "intent": "worst three regions, last quarter on the one before"}
        # a fixed call id: the server's own ids count up, and call_9 -> call_10 would be a byte
        return Reply(tool_calls=[{"id": "call_plan", "name": "execute_code", "arguments": json.dumps(args)}])
    return Reply(content="The three regions that fell most are in `worst`.")


def inline_task(df: pd.DataFrame) -> str:
    return f"{TASK}\n\nThe DataFrame `sales`, as JSON records:\n{df.to_json(orient='records')}"


def escaped_len(text: str) -> int:
    """Bytes `text` takes inside the lean path's JSON body (ensure_ascii=False, UTF-8)."""
    return len(json.dumps(text, ensure_ascii=False).encode())


class Wire:
    """The fake server in a thread; the Content-Length of each POST, in order."""

    def __init__(self) -> None:
        self.srv = FakeOpenAIServer(handler).start_in_thread()

    def sizes_since(self, n: int) -> list[int]:
        return [int(h["content-length"]) for h in self.srv.request_headers[n:]]

    def mark(self) -> int:
        self.srv.requests.clear()  # the parsed bodies (the 1M-row one is large); headers stay
        return len(self.srv.request_headers)

    def close(self) -> None:
        self.srv.stop_thread()


async def actor_sizes(wire: Wire, model: u.OpenAIModel, df: pd.DataFrame) -> list[int]:
    ns = {"sales": df}
    n = wire.mark()
    h = u.act(TASK, model=model, namespace=ns)
    await h
    assert ns.get("worst") == ["West", "South", "East"], ns.get("worst")
    sizes = wire.sizes_since(n)
    assert len(sizes) == 2, sizes  # the first request, and the one after the plan
    return sizes


async def inline_size(wire: Wire, model: u.OpenAIModel, task: str) -> int:
    n = wire.mark()
    await u.start_loop(task, model=model)
    sizes = wire.sizes_since(n)
    assert len(sizes) == 1, sizes
    return sizes[0]


def cpu_pair(fns, reps: int, most: list[int] | None = None) -> list[float]:
    """Median CPU milliseconds of each fn() over reps runs, the fns taken in turn (so drift and
    garbage collection fall on both alike), after one warm-up run of each; ``most[k]`` caps
    the runs of fns[k] (for a slow one)."""
    times: list[list[float]] = [[] for _ in fns]
    for rep in range(reps + 1):
        for k, fn in enumerate(fns):
            if most is not None and rep > most[k]:
                continue
            t = time.process_time()
            fn()
            if rep:
                times[k].append((time.process_time() - t) * 1000)
    return [statistics.median(ts) for ts in times]


async def acpu_pair(makes, reps: int) -> list[float]:
    times: list[list[float]] = [[] for _ in makes]
    for rep in range(reps + 1):
        for k, make in enumerate(makes):
            t = time.process_time()
            await make()
            if rep:
                times[k].append((time.process_time() - t) * 1000)
    return [statistics.median(ts) for ts in times]


async def main(send_big: bool) -> None:
    t0 = time.perf_counter()
    steps = step_table(await step_costs())  # D first: nothing else in memory yet
    big = make_sales(BIG)
    frames = {n: big.iloc[:n].copy() for n in (10, 10_000, 100_000)}
    frames[BIG] = big
    small = frames[10]

    # C first, with nothing else running in the process
    scripted = u.ScriptedModel(lambda messages, tools: "done")

    async def act_once(df: pd.DataFrame) -> None:
        await u.act(TASK, model=scripted, namespace={"sales": df})

    cpu = {
        "describe the namespace (the system prompt's variable listing)":
            cpu_pair([lambda df=df: describe_namespace(user_variables({"sales": df})) for df in (small, big)], 200),
        "act() to the end of a one-call run (ScriptedModel, no HTTP)":
            await acpu_pair([lambda df=df: act_once(df) for df in (small, big)], 100),
        "inline baseline: df.to_json + JSON-encode the task":
            cpu_pair([lambda df=df: escaped_len(inline_task(df)) for df in (small, big)], 200, most=[200, 2]),
    }

    wire = Wire()
    try:
        lean = u.OpenAIModel("m", base_url=wire.srv.base_url, api_key="x")
        post = u.OpenAIModel("m", base_url=wire.srv.base_url, api_key="x", fast_path=False)
        actor = {}
        for label, model in (("lean HTTP, the default", lean), ("openai client.post", post)):
            await actor_sizes(wire, model, small)  # warm-up: connection, imports
            actor[label] = [await actor_sizes(wire, model, df) for df in (small, big)]
        await post.client.close()

        inline: dict[int, int] = {}
        sent: dict[int, bool] = {}
        for n in (10, 10_000, 100_000) + ((BIG,) if send_big else ()):
            inline[n] = await inline_size(wire, lean, inline_task(frames[n]))
            sent[n] = True
        base10 = escaped_len(inline_task(small))

        def computed(n: int) -> int:
            return inline[10] + escaped_len(inline_task(frames[n])) - base10

        checks = {n: computed(n) == inline[n] for n in inline if n != 10}
        big_computed = computed(BIG)
        if not send_big:
            inline[BIG], sent[BIG] = big_computed, False
        await lean.client.close()
    finally:
        wire.close()
    wall = time.perf_counter() - t0

    def ratio(a: float, b: float) -> str:
        return f"{b / a:.3f}x" if b / a < 10 else f"{b / a:,.0f}x"

    rows = []
    for label, (s, b) in actor.items():
        rows.append(f"| actor, first request; {label} | {s[0]:,} | {b[0]:,} | {ratio(s[0], b[0])} |")
        rows.append(f"| actor, request after one plan; {label} | {s[1]:,} | {b[1]:,} | {ratio(s[1], b[1])} |")
    how = "" if sent[BIG] else " (1M computed, not sent)"
    rows.append(
        f"| inline JSON baseline, first request{how} | {inline[10]:,} | {inline[BIG]:,} "
        f"| {ratio(inline[10], inline[BIG])} |"
    )
    worst = max(b[i] / s[i] for s, b in actor.values() for i in (0, 1))
    within = "yes" if worst <= 1.05 else "NO"

    lines = [
        f"unity_nb actor benchmark, {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, "
        f"openai {openai.__version__}, pandas {pd.__version__}, numpy {np.__version__}; "
        f"command: .venv/bin/python bench/bench_actor.py{'' if send_big else ' --no-send-1m'}",
        f"task: {TASK!r}; DataFrame `sales`, {big.shape[1]} columns",
        "",
        "| A. request body sent to the model (bytes, Content-Length of the POST) "
        "| 10 rows | 1,000,000 rows | 1M / 10 |",
        "| --- | --- | --- | --- |",
        *rows,
        "",
        f"actor requests at 1M rows within 5% of 10 rows: {within} (largest ratio {worst:.4f}x)",
        "",
        "| B. inline JSON baseline: request body by rows | bytes | bytes per row | vs 10 rows | how |",
        "| --- | --- | --- | --- | --- |",
        *[f"| {n:,} rows | {inline[n]:,} | {inline[n] / n:,.1f} | {ratio(inline[10], inline[n])} | "
          f"{'sent' if sent[n] else 'computed'} |" for n in sorted(inline)],
        "",
        "computing the body (10-row body + JSON-escaped length of the extra text) matches the bytes sent: "
        + ", ".join(f"{n:,} rows {'exact' if ok else 'MISMATCH'}" for n, ok in sorted(checks.items()))
        + ("" if send_big else f"; 1M rows computed: {big_computed:,}"),
        "",
        "| C. CPU to build the first request (median) | 10 rows ms | 1,000,000 rows ms | 1M / 10 |",
        "| --- | --- | --- | --- |",
        *[f"| {k} | {a:.3f} | {b:.3f} | {ratio(a, b)} |" for k, (a, b) in cpu.items()],
        "",
        *steps,
        "",
        f"wall time of the whole run: {wall:.1f} s",
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--no-send-1m", action="store_true",
                    help="compute the 1M-row inline baseline's body size instead of sending ~140 MB")
    ap.add_argument("--steps-only", action="store_true", help="only D, the namespace's cost per step")
    args = ap.parse_args()
    if args.steps_only:
        print(f"unity_nb actor benchmark D, {time.strftime('%Y-%m-%d')}: {os.cpu_count()} cores, "
              f"Python {platform.python_version()}, pandas {pd.__version__}; "
              "command: .venv/bin/python bench/bench_actor.py --steps-only\n")
        print("\n".join(step_table(asyncio.run(step_costs()))))
    else:
        asyncio.run(main(send_big=not args.no_send_1m))
