"""The SSE decoder against one long line (issue 24.6): time and memory for 10, 30 and 100 MB lines.

Each line arrives in 64 KiB chunks, as a socket hands it over. The baseline, in the same run, is
``bytes.split`` on the same data joined once (the least any decoder must do); ``--before REV`` adds
the decoder of an older commit (``git show REV:unity_nb/models/_sse.py``), whose cost grew with the
square of the line. Each measurement runs in a fresh process, so its RSS growth (peak RSS minus RSS
before the feed, the data itself excluded) is its own.

    .venv/bin/python bench/bench_sse_lines.py [--before 0d0cd1a] [--sizes 10,30,100]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

CHUNK = 1 << 16


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _one(kind: str, mb: int, source: str | None) -> dict:
    data = b'data: {"choices":[{"delta":{"content":"' + b"a" * (mb * 1_000_000) + b'"}}]}\n\n'
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
    if kind == "decoder":
        from unity_nb.models._sse import SSEDecoder  # imported before the clock starts
    before = _rss_kib()
    start = time.process_time()
    if kind == "split":
        n = len(b"".join(chunks).split(b"\n"))
        assert n == 3
    else:
        if kind == "before":
            assert source is not None
            spec = importlib.util.spec_from_file_location("sse_before", source)
            assert spec and spec.loader
            module = importlib.util.module_from_spec(spec)
            sys.modules["sse_before"] = module  # dataclasses look their module up
            spec.loader.exec_module(module)
            decoder = module.SSEDecoder()
        else:
            decoder = SSEDecoder(max_line=1 << 40)
        events = []
        for c in chunks:
            events.extend(decoder.feed_raw(c))
        assert len(events) == 1 and len(events[0][0]) == len(data) - 8
    cpu = time.process_time() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"cpu": cpu, "rss_mb": max(0, peak - before) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="a git revision whose decoder to measure beside")
    parser.add_argument("--sizes", default="10,30,100")
    parser.add_argument("--child", nargs=3, metavar=("KIND", "MB", "SOURCE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, mb, source = args.child
        print(json.dumps(_one(kind, int(mb), None if source == "-" else source)))
        return
    source = None
    if args.before:
        text = subprocess.run(["git", "show", f"{args.before}:unity_nb/models/_sse.py"], check=True,
                              capture_output=True, text=True).stdout
        fd, source = tempfile.mkstemp(suffix="_sse_before.py")
        with os.fdopen(fd, "w") as f:
            f.write(text)
    kinds = ["split", "decoder"] + (["before"] if source else [])
    print(f"SSE decoder, one line in 64 KiB chunks; Python {sys.version.split()[0]}; command: "
          f"{' '.join(['.venv/bin/python', *sys.argv])}\n")
    print("| line | " + " | ".join(f"{k} CPU s | {k} RSS growth MB" for k in kinds) + " | decoder / split |")
    print("| --- |" + " --- | --- |" * len(kinds) + " --- |")
    for mb in (int(s) for s in args.sizes.split(",")):
        row = {}
        for kind in kinds:
            out = subprocess.run([sys.executable, __file__, "--child", kind, str(mb), source or "-"],
                                 check=True, capture_output=True, text=True).stdout
            row[kind] = json.loads(out)
        cells = " | ".join(f"{row[k]['cpu']:.3f} | {row[k]['rss_mb']:.0f}" for k in kinds)
        ratio = row["decoder"]["cpu"] / max(row["split"]["cpu"], 1e-6)
        print(f"| {mb} MB | {cells} | {ratio:.1f}x |")
    if source:
        os.unlink(source)


if __name__ == "__main__":
    main()
