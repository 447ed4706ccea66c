"""Join at scale (not a test): time until ``u.join`` returns its handle, and memory, whatever the sides' sizes.

In a fresh process each: two DataFrames of ``--rows`` rows (left) and ``--right`` rows (default the same), each
row a short text of rare words (``paper 17 on w17x and q119z``, so every left row has a few candidates), built
before the clock starts. Then ``u.join(left, right, ...)`` with a model that answers every pair at once ("no
match") and keeps nothing (a ScriptedModel keeps every request), at concurrency 100. Reported:

- ``u.join`` returned: seconds from the call to the handle;
- RSS growth when the handle is back (minus RSS before the call: the input is not counted);
- the first question: seconds until the model is first called (the right side indexed in a worker thread first);
- RSS growth once ``--asked`` pairs were answered (the index, the answers kept, 9 bytes a pair made), then the
  operation is stopped.

Beside it, ``--before DIR`` (default: the branch's base commit checked out with ``git archive``) runs the tree
before join was streamed at ``--before-rows`` (1,000,000: at 10,000,000 it had not returned in minutes), with a
timeout.

Run: .venv/bin/python bench/bench_join_scale.py [--rows 10000000] [--right N] [--asked 20000] [--before DIR]
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
BEFORE = "e776f77"  # the commit the streamed join started from
if str(ROOT) not in sys.path and "--child" not in sys.argv:
    sys.path.insert(0, str(ROOT))


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(rows: int, right_rows: int, asked: int) -> dict:
    import pandas as pd

    import unity_nb as u

    vocab = max(1000, rows // 4)
    left = pd.DataFrame({"t": [f"paper {i} on w{i % vocab}x and q{(i * 7) % vocab}z" for i in range(rows)]})
    rvocab = max(1000, right_rows // 4)
    right = pd.DataFrame({"t": [f"grant {j} on w{j % rvocab}x and r{(j * 3) % rvocab}y" for j in range(right_rows)]})
    answer = u.call_tool("submit_answer", match=False, reason="not the same")
    calls: list[float] = []
    marks: dict[str, float] = {}
    done = asyncio.Event()

    class Quick:
        """Answers every pair at once ("no match") and keeps nothing."""

        name = "quick"

        async def complete(self, request, on_delta=None):
            calls.append(time.perf_counter()) if not calls else None
            marks["n"] = marks.get("n", 0) + 1
            if marks["n"] == asked:
                marks["rss_asked"] = rss_kb()
                done.set()
            return u.Reply(tool_calls=[answer], usage=u.Usage(30, 5))

    async def main() -> dict:
        bus = u.EventBus(history=10)
        base = rss_kb()
        t0 = time.perf_counter()
        h = u.join(left, right, "On {left.t} and {right.t}: the same work?", model=Quick(), concurrency=100,
                   bus=bus, cache=False)
        returned = time.perf_counter() - t0
        at_handle = rss_kb() - base
        try:
            await asyncio.wait_for(done.wait(), 1800)
        finally:
            asked_now = getattr(h, "pairs_asked", None)
            await h.stop("enough")
        return {"returned_s": returned, "rss_handle_mb": at_handle / 1024, "first_call_s": calls[0] - t0,
                "rss_asked_mb": (marks["rss_asked"] - base) / 1024, "pairs_made": asked_now}

    return asyncio.run(main())


def before_child(rows: int, timeout: float) -> dict:
    """The tree before: only the time to the handle and RSS then (its join built every pair first)."""
    import pandas as pd

    import unity_nb as u

    vocab = max(1000, rows // 4)
    left = pd.DataFrame({"t": [f"paper {i} on w{i % vocab}x and q{(i * 7) % vocab}z" for i in range(rows)]})
    right = pd.DataFrame({"t": [f"grant {j} on w{j % vocab}x and r{(j * 3) % vocab}y" for j in range(rows)]})

    async def main() -> dict:
        base = rss_kb()
        t0 = time.perf_counter()
        h = u.join(left, right, "On {left.t} and {right.t}: the same work?", model=u.ScriptedModel(["x"]),
                   concurrency=100, cache=False)
        returned = time.perf_counter() - t0
        at_handle = rss_kb() - base
        await h.stop("enough")
        return {"returned_s": returned, "rss_handle_mb": at_handle / 1024}

    return asyncio.run(main())


def run_child(args: list[str], tree: Path, timeout: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    try:
        out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env,
                             cwd=str(tree), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
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
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--right", type=int, default=None, help="right rows (default: --rows)")
    ap.add_argument("--asked", type=int, default=20_000)
    ap.add_argument("--before")
    ap.add_argument("--before-rows", type=int, default=1_000_000)
    ap.add_argument("--no-before", action="store_true")
    ap.add_argument("--child", nargs=4)
    args = ap.parse_args()
    if args.child:
        kind, rows, right, asked = args.child
        out = before_child(int(rows), 0) if kind == "before" else child(int(rows), int(right), int(asked))
        print(json.dumps(out))
        return
    right = args.right if args.right is not None else args.rows
    print(f"join of {args.rows:,} x {right:,} rows; {args.asked:,} pairs answered, then stopped")
    print("| tree | rows (left x right) | u.join returned (s) | RSS at the handle (MB) | first question (s) "
          f"| RSS at {args.asked:,} answered (MB) |")
    print("| --- | --- | --- | --- | --- | --- |")
    r = run_child(["now", str(args.rows), str(right), str(args.asked)], ROOT, 3600)
    print(f"| now | {args.rows:,} x {right:,} | {r['returned_s']:.4f} | {r['rss_handle_mb']:.1f} "
          f"| {r['first_call_s']:.1f} | {r['rss_asked_mb']:.1f} |")
    if not args.no_before:
        b = run_child(["before", str(args.before_rows), "0", "0"], before_tree(args.before), 600)
        if "timeout" in b:
            print(f"| before | {args.before_rows:,} x {args.before_rows:,} | no handle within {b['timeout']:.0f} s "
                  "| | | |")
        else:
            print(f"| before | {args.before_rows:,} x {args.before_rows:,} | {b['returned_s']:.2f} "
                  f"| {b['rss_handle_mb']:.1f} | | |")


if __name__ == "__main__":
    main()
