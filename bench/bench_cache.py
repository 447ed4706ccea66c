"""CachedModel at scale (issue 28): how long the event loop is blocked each second while recording.

A recording file of ``--recordings`` replies (100,000 by default, about 94 MB; each reply about 900
characters) is written first, then replies are recorded at ``--rate`` a second for ``--seconds``
while a heartbeat coroutine wakes every millisecond: the time it wakes late by more than 2 ms is time
the event loop was blocked. Variants, each in a fresh process and all in one run:

- ``bare``: the inner model alone (the baseline: what the loop does without any cache),
- ``before``: ``unity_nb/models/_cache.py`` of ``--before REV`` (one JSON object rewritten whole),
- ``after``: today's CachedModel appending to a JSON-lines file,
- ``after-converting``: today's CachedModel recording into an older single-object file (converted once).

    .venv/bin/python bench/bench_cache.py [--before 2162799] [--recordings 100000] [--seconds 5] [--rate 200]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = "x" * 800


def _entry(i: int) -> dict:
    return {"content": f"{i} {TEXT}", "tool_calls": [], "usage": [100, 20], "model": "m", "finish_reason": "stop"}


def _write_file(path: Path, n: int, lines: bool) -> None:
    keys = [f"{i:064x}" for i in range(n)]
    if lines:
        with open(path, "w", encoding="utf-8") as f:
            f.write('{"unity_nb_cache":2}\n')
            for i, k in enumerate(keys):
                f.write(json.dumps({"key": k, "entry": _entry(i)}, sort_keys=True, separators=(",", ":")) + "\n")
    else:
        path.write_text(json.dumps({k: _entry(i) for i, k in enumerate(keys)}, indent=1, sort_keys=True))


def _load(kind: str, before: str | None):
    if kind == "bare":
        return None
    if kind == "before":
        assert before is not None
        spec = importlib.util.spec_from_file_location("unity_nb.models._cache_before", before)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module.CachedModel
    from unity_nb.models._cache import CachedModel

    return CachedModel


async def _run(kind: str, path: Path, before: str | None, seconds: float, rate: int) -> dict:
    from unity_nb.models._base import ModelRequest, Reply, Usage

    class Inner:
        name = "m"

        async def complete(self, request, on_delta=None):
            return Reply(content=f"reply {TEXT}", usage=Usage(100, 20), model="m", finish_reason="stop")

    cls = _load(kind, before)
    model = Inner() if cls is None else cls(Inner(), path, mode="auto")
    late: list[float] = []
    stop = False

    async def heartbeat():
        while not stop:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            late.append(time.perf_counter() - t - 0.001)

    beat = asyncio.create_task(heartbeat())
    start = time.perf_counter()
    sent = 0
    while (now := time.perf_counter()) - start < seconds:
        due = int((now - start) * rate)
        while sent < due:
            await model.complete(ModelRequest(messages=[{"role": "user", "content": f"request {sent} {kind}"}]))
            sent += 1
        await asyncio.sleep(0.002)
    elapsed = time.perf_counter() - start
    stop = True
    await beat
    if cls is not None:
        model.save()
    blocked = sum(x for x in late if x > 0.002)
    return {
        "kind": kind,
        "recorded": sent,
        "blocked_ms_per_s": 1000 * blocked / elapsed,
        "max_stall_ms": 1000 * max(late, default=0.0),
    }


def _child(args: argparse.Namespace) -> None:
    path = Path(args.path)
    _write_file(path, args.recordings, lines=args.kind == "after")
    result = asyncio.run(_run(args.kind, path, args.source, args.seconds, args.rate))
    result["file_mb"] = path.stat().st_size / 1e6
    print(json.dumps(result))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="2162799", help="the commit whose _cache.py is 'before'")
    ap.add_argument("--recordings", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=int, default=200, help="replies recorded a second")
    ap.add_argument("--kind", help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--source", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.kind:
        _child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "cache_before.py"
        source.write_text(
            subprocess.run(
                ["git", "show", f"{args.before}:unity_nb/models/_cache.py"],
                cwd=ROOT, check=True, capture_output=True, text=True,
            ).stdout
        )
        rows = []
        for kind in ("bare", "before", "after", "after-converting"):
            path = Path(tmp) / f"{kind}.json"
            out = subprocess.run(
                [sys.executable, __file__, "--kind", kind, "--path", str(path), "--source", str(source),
                 "--recordings", str(args.recordings), "--seconds", str(args.seconds), "--rate", str(args.rate)],
                cwd=ROOT, check=True, capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), **os.environ},
            ).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            os.unlink(path)
    base = rows[0]["blocked_ms_per_s"] or 1e-9
    print(f"{args.recordings:,} recordings, {args.rate} replies/s for {args.seconds:g} s (before = {args.before})")
    print(f"{'variant':18} {'recorded':>9} {'blocked ms/s':>13} {'x bare':>8} {'max stall ms':>13} {'file MB':>8}")
    for r in rows:
        print(
            f"{r['kind']:18} {r['recorded']:>9} {r['blocked_ms_per_s']:>13.1f} {r['blocked_ms_per_s'] / base:>8.1f}"
            f" {r['max_stall_ms']:>13.1f} {r['file_mb']:>8.1f}"
        )


if __name__ == "__main__":
    main()
