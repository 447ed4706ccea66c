"""Where issue 38's remaining costs go: the parts of an actor run over 100 DataFrames, and of a map row.

Not a benchmark with a goal (bench_cost.py measures those, as ratios): the figures that say why items 1 and 3 are
where they are. CPU time (``time.process_time``), medians; the machine's load changes them, so compare within one run.

  namespace: one watch pass, a new frame's fingerprint, a kept and a new frame's description, over the benchmark's
             100 frames of 100,000 x 6 (bench_cost.make_frames); then the parts of warm actor runs (the watch's
             passes, the system prompt, the carried state), timed in place.
  map-row:   u.map over 20,000 items with a ScriptedModel (no HTTP: the loop and the batch alone), CPU a row, and
             the functions taking the most of it (cProfile, its own share inflated by profiling).

Usage: python bench/bench_breakdown.py [namespace|map-row]
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_cost


def _median_us(fn: Any, setup: Any, n: int = 30, per: int = 1) -> float:
    """Median CPU µs of ``fn(setup())`` over ``n`` runs, divided by ``per``."""
    out = []
    for _ in range(n):
        arg = setup()
        t = time.process_time()
        fn(arg)
        out.append((time.process_time() - t) * 1e6 / per)
    return statistics.median(out)


def namespace() -> None:
    import unity_nb as u
    from unity_nb.actor import Executor, describe_value, fingerprint

    frames = bench_cost.make_frames(bench_cost.FRAMES)

    def copies() -> list:  # new objects over the same data
        return [f.copy(deep=False) for f in frames.values()]

    k = len(frames)
    print(f"over {k} frames of {bench_cost.ROWS:,} x 6 (µs, median of 30):")
    print(f"  a new frame's fingerprint: {_median_us(lambda fs: [fingerprint(f) for f in fs], copies, per=k):.1f}")
    for f in frames.values():
        describe_value(f)
    kept = list(frames.values())
    print(f"  a kept frame's description: "
          f"{_median_us(lambda fs: [describe_value(f) for f in fs], lambda: kept, per=k):.1f}")
    print(f"  a new frame's description (its data described before): "
          f"{_median_us(lambda fs: [describe_value(f) for f in fs[:19]], copies, per=19):.1f}")

    def first_pass(fs: list) -> None:
        Executor({f"f{i}": f for i, f in enumerate(fs)}).snapshot()

    print(f"  a first look at a namespace of new frames, a frame: {_median_us(first_pass, copies, per=k):.1f}")
    ex = Executor(dict(frames))
    ex.snapshot()
    print(f"  a look that finds nothing changed (all {k}): {_median_us(lambda _: ex.snapshot(), lambda: None):.1f}")

    from unity_nb.actor import _actor, _watch

    spent: dict[str, list[float]] = {}

    def timed(owner: Any, name: str) -> None:
        fn = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.setdefault(name, []).append(time.process_time() - t)

        setattr(owner, name, wrapper)

    for owner, name in ((_watch.Watch, "take"), (_watch.Watch, "leave"), (_watch.Watch, "variables"),
                        (_actor, "system_prompt")):
        timed(owner, name)

    def script(messages: list, tools: list) -> object:
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("execute_code", code="i = 1", intent="step")
        return "done"

    async def runs() -> list[float]:
        ns, out = dict(frames), []
        for rep in range(60):
            if rep == 20:
                spent.clear()
            t = time.process_time()
            await u.act("task", model=u.ScriptedModel(script), namespace=ns)
            if rep >= 20:
                out.append(time.process_time() - t)
        return out

    whole = asyncio.run(runs())
    print(f"warm actor runs (40, in place, timers included): {statistics.median(whole) * 1e3:.2f} ms a run")
    for name, times in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {name}: {len(times) / 40:.0f} a run, {sum(times) / 40 * 1e6:.0f} µs a run")


def map_row() -> None:
    import unity_nb as u

    task = bench_cost.E_TASK
    items = bench_cost.e_items(20_000)

    async def run(profile: cProfile.Profile | None) -> float:
        bus = u.EventBus()
        model = u.ScriptedModel(lambda m, t: "ok")
        await u.map(items[:500], task, model=model, concurrency=100, bus=bus)  # warm-up
        bus.clear()
        t = time.process_time()
        if profile is not None:
            profile.enable()
        await u.map(items, task, model=model, concurrency=100, bus=bus)
        if profile is not None:
            profile.disable()
        return (time.process_time() - t) / len(items) * 1e6

    print(f"u.map, 20,000 rows, ScriptedModel, concurrency 100: {asyncio.run(run(None)):.0f} µs CPU a row")
    profile = cProfile.Profile()
    asyncio.run(run(profile))
    stats = pstats.Stats(profile)
    total = stats.total_tt  # type: ignore[attr-defined]
    print("the functions taking the most of it, with what they call (cProfile: shares of the profiled time)")
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])  # type: ignore[attr-defined]
    shown = 0
    for (path, line, name), (_cc, _nc, _tt, ct, _callers) in rows:
        if "unity_nb" not in path or name.startswith("<"):
            continue
        print(f"  {ct / total:5.1%}  {name} ({Path(path).name}:{line})")
        shown += 1
        if shown == 15:
            break


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "namespace"
    {"namespace": namespace, "map-row": map_row}[what]()
