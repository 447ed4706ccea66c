"""Client CPU per streamed Chat Completions request: aiohttp against other async HTTP clients.

Mirrors bench/bench_cost.py ``bare_row`` / ``child_row_cost`` (kind "bare aiohttp"): a semaphore
admits rows at ``--concurrency``, a task per running row, one shared pooled client per process (no connection
limit, keep-alive), the body unity_nb sends, the SSE stream read incrementally as chunks arrive, split on
b"\\n\\n", each ``data: {...}`` event json-decoded (stdlib json) and choices[].delta.content collected.

Each measurement runs in a fresh process (``--child LIB``): warm-up ``--warmup`` rows, then
``time.process_time()`` (whole process, all threads) and wall time over ``--rows`` rows. The parent starts
tests/fake_openai.py (latency 0) once per round, runs every library in turn (order rotated each round), and
reports medians and per-round ratios to aiohttp.

Run (in a venv of its own, with the libraries to compare installed: aiohttp, httpx, curl_cffi, pyreqwest, rnet,
aiosonic; none of them but aiohttp is a dependency of unity_nb):
``<venv>/bin/python bench/bench_http_clients.py [--rounds 3] [--rows 10000] [--libs ...]``. Issue 38, item 3: what
the HTTP part of a map row would cost with another client than aiohttp (bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

LIBS = ["aiohttp", "httpx", "curl_cffi", "pyreqwest", "rnet", "aiosonic"]
ROOT = Path(__file__).resolve().parent.parent
SERVER = [sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--latency", "0"]
sys.path.insert(0, str(ROOT / "bench"))

from bench_cost import E_HEADERS, Answer, admit, bare_row, e_body, e_items  # noqa: E402 - found by the path above

# ------------------------------------------------------------------------------------------- clients
# Each entry: an async context manager factory giving the shared client, and the row coroutine.


row_aiohttp = bare_row  # bench_cost.py's own baseline, as it is


def client_aiohttp():
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))


async def row_httpx(client, url: str, text: str) -> str:
    answer = Answer()
    async with client.stream("POST", url, content=e_body(text), headers=E_HEADERS) as r:
        async for piece in r.aiter_bytes():  # decoded (Content-Encoding) chunks as they arrive
            answer.feed(piece)
    return answer.text()


def client_httpx():
    import httpx

    return httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
                             timeout=httpx.Timeout(300.0))


async def row_curl_cffi(session, url: str, text: str) -> str:
    answer = Answer()
    async with session.stream("POST", url, data=e_body(text), headers=E_HEADERS) as r:
        async for piece in r.aiter_content():
            answer.feed(piece)
    return answer.text()


def client_curl_cffi(concurrency: int):
    from curl_cffi.requests import AsyncSession

    # max_clients: the number of curl easy handles (10 by default), i.e. the in-flight cap; the curl multi
    # handle's connection cache follows it. At least the concurrency, so the pool never gates a row.
    return AsyncSession(max_clients=max(concurrency, 256), timeout=300)


async def row_pyreqwest(client, url: str, text: str) -> str:
    answer = Answer()
    async with client.post(url).headers(E_HEADERS).body_bytes(e_body(text).encode()).build_streamed() as r:
        read = r.body_reader.read_chunk
        while True:
            piece = await read()
            if piece is None:
                break
            answer.feed(piece)  # pyreqwest.Bytes: a buffer (bytes + it is bytes)
    return answer.text()


def client_pyreqwest():
    from pyreqwest.client import ClientBuilder

    return ClientBuilder().max_connections(None).build()


async def row_rnet(client, url: str, text: str) -> str:
    answer = Answer()
    resp = await client.post(url, body=e_body(text), headers=E_HEADERS)
    async with resp:
        async for piece in resp.stream():
            answer.feed(piece)
    return answer.text()


class _Ctx:
    """An async context manager around a client that has none (or whose exit we do not need)."""

    def __init__(self, obj, close=None):
        self.obj, self.close = obj, close

    async def __aenter__(self):
        return self.obj

    async def __aexit__(self, *exc):
        if self.close is not None:
            await self.close()


def client_rnet():
    import rnet

    return _Ctx(rnet.Client())  # the pool has no total cap by default (pool_max_size None)


async def row_aiosonic(client, url: str, text: str) -> str:
    answer = Answer()
    # stream(): the body is left unread (post() reads a Content-Length body whole; a chunked one it streams)
    async with client.stream("POST", url, data=e_body(text), headers=E_HEADERS) as r:
        async for piece in r.iter_bytes():  # decoded chunks as they arrive (read_chunks: raw)
            answer.feed(piece)
    return answer.text()


def client_aiosonic(concurrency: int):
    import aiosonic
    from aiosonic.connectors import TCPConnector
    from aiosonic.pools import PoolConfig

    # pool size: the max connections (30 by default); max_conn_requests None: no recycling after 1000 requests
    conn = TCPConnector(pool_configs={":default": PoolConfig(size=max(concurrency, 256), max_conn_requests=None)})
    return aiosonic.HTTPClient(connector=conn)


def make(lib: str, concurrency: int):
    """The shared client (an async context manager) and the row coroutine of ``lib``."""
    clients = {
        "aiohttp": (client_aiohttp, row_aiohttp), "httpx": (client_httpx, row_httpx),
        "curl_cffi": (lambda: client_curl_cffi(concurrency), row_curl_cffi),
        "pyreqwest": (client_pyreqwest, row_pyreqwest), "rnet": (client_rnet, row_rnet),
        "aiosonic": (lambda: client_aiosonic(concurrency), row_aiosonic),
    }
    if lib in clients:
        factory, row = clients[lib]
        return factory(), row
    raise SystemExit(f"unknown lib {lib}")


# --------------------------------------------------------------------------------------------- child


async def child(lib: str, n: int, warmup: int, concurrency: int, base_url: str) -> dict:
    import gc

    url = base_url + "/chat/completions"
    cm, row = make(lib, concurrency)
    async with cm as client:

        def bare(texts: list[str]):
            return admit(texts, concurrency, lambda text: row(client, url, text))

        await bare(e_items(warmup))
        gc.collect()
        threads_before = threading.active_count()
        cpu, wall = time.process_time(), time.perf_counter()
        answers = await bare(e_items(n))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    ok = sum(a == "ok" for a in answers)
    # OS threads of this process (Rust/C runtimes start their own; threading.active_count sees Python's only)
    os_threads = len(os.listdir(f"/proc/{os.getpid()}/task"))
    return {"lib": lib, "cpu_s": cpu, "wall_s": wall, "n": n, "ok": ok, "os_threads": os_threads,
            "py_threads": threads_before, "bad": next((a for a in answers if a != "ok"), None)}


# -------------------------------------------------------------------------------------------- parent


def start_server():
    p = subprocess.Popen(SERVER, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("READY "), line
    return p, line.split()[1]


def versions(libs: list[str]) -> dict:
    from importlib.metadata import version

    dist = {"curl_cffi": "curl_cffi"}
    return {lib: version(dist.get(lib, lib)) for lib in libs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--base-url")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--libs", nargs="*", default=LIBS)
    ap.add_argument("--json", help="a file to write every measurement to")
    args = ap.parse_args()

    if args.child:
        res = asyncio.run(child(args.child, args.rows, args.warmup, args.concurrency, args.base_url))
        print(json.dumps(res), flush=True)
        return

    print(f"python {sys.version.split()[0]}; versions: {versions(args.libs)}; cores: {os.cpu_count()}")
    print(f"rows {args.rows}, warm-up {args.warmup}, concurrency {args.concurrency}, rounds {args.rounds}")
    results: dict[str, list[dict]] = {lib: [] for lib in args.libs}
    for rnd in range(args.rounds):
        server, base_url = start_server()
        try:
            k = rnd % len(args.libs)
            order = args.libs[k:] + args.libs[:k]
            for lib in order:
                cmd = [sys.executable, __file__, "--child", lib, "--base-url", base_url, "--rows", str(args.rows),
                       "--warmup", str(args.warmup), "--concurrency", str(args.concurrency)]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                if p.returncode != 0:
                    err = (p.stderr.strip().splitlines() or ["?"])[-1] + f" (exit code {p.returncode})"
                    print(f"=== round {rnd + 1} {lib} exit {p.returncode}\n{p.stderr}", file=sys.stderr)
                    print(f"round {rnd + 1} {lib:10s} FAILED: {err}", flush=True)
                    results[lib].append({"failed": err})
                    continue
                res = json.loads(p.stdout.strip().splitlines()[-1])
                res["round"] = rnd
                results[lib].append(res)
                flag = "" if res["ok"] == res["n"] else f"  NOT OK: {res['ok']}/{res['n']} ok, e.g. {res['bad']!r}"
                print(f"round {rnd + 1} {lib:10s} cpu {res['cpu_s'] * 1e6 / res['n']:7.1f} us/req  "
                      f"wall {res['wall_s']:6.2f} s  os threads {res['os_threads']}{flag}", flush=True)
        finally:
            server.terminate()
            server.wait(10)

    print()
    print(f"{'library':10s} {'cpu us/req (median)':>20s} {'per round':>26s} {'ratio to aiohttp':>18s} "
          f"{'per-round ratios':>24s} {'wall s (median)':>16s} {'all ok':>7s}")
    base = {r["round"]: r["cpu_s"] / r["n"] for r in results.get("aiohttp", []) if "cpu_s" in r}
    summary = {}
    for lib in args.libs:
        good = [r for r in results[lib] if "cpu_s" in r]
        if not good:
            print(f"{lib:10s} all runs failed")
            continue
        per = [r["cpu_s"] * 1e6 / r["n"] for r in good]
        ratios = [r["cpu_s"] / r["n"] / base[r["round"]] for r in good if r["round"] in base]
        wall = statistics.median(r["wall_s"] for r in good)
        all_ok = all(r["ok"] == r["n"] for r in good) and len(good) == len(results[lib])
        summary[lib] = {"cpu_us": statistics.median(per), "ratio": statistics.median(ratios) if ratios else None}
        print(f"{lib:10s} {statistics.median(per):20.1f} {' '.join(f'{x:.1f}' for x in per):>26s} "
              f"{statistics.median(ratios) if ratios else float('nan'):18.2f} "
              f"{' '.join(f'{x:.2f}' for x in ratios):>24s} {wall:16.2f} {all_ok!s:>7s}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
