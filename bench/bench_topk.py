"""Top-k beside LOTUS on the same data (issue 34): requests made, and whether the true top k came back in order.

Data: n rows ``doc I worth W .``, W a shuffled 0..n-1 (seeded). One loopback OpenAI-compatible server
(tests/fake_openai.py) answers from that hidden worth: a score 0-10 as ``W * 11 // n`` (coarse: about 91 rows
share each score, the top one included, as a model's scores tie) and a comparison by the larger W (consistent).
The server counts the requests. The same server and rows for:

  A. unity_nb: ``u.topk`` over HTTP (``u.OpenAIModel``), concurrency 64; and with ``margin=0`` (the scores
     trusted: the rows a point below the k-th best score not compared).
  B. LOTUS 1.2.4's own ``sem_topk``, in its own venv (bench/lotus_topk.py), through litellm to the same server:
     ``method="quick"`` (its default: a quickselect; its pivots random, so several seeds) and ``"heap"``.
  C. LOTUS's quickselect reimplemented from its source (tests/test_topk_exact.py), over 200 seeds, without a
     model: the spread of its request count.
  Its ``"naive"`` method asks every pair, n(n-1)/2: counted, not run.

Run (LOTUS in a separate venv, bench only):
  python3 -m venv /tmp/lotus-venv && /tmp/lotus-venv/bin/pip install lotus-ai==1.2.4
  .venv/bin/python bench/bench_topk.py [--n 1000] [--k 10] [--lotus /tmp/lotus-venv/bin/python] [--seeds 5]
Without LOTUS's venv, B is skipped and C still runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:  # this tree's unity_nb and its test helpers
        sys.path.insert(0, str(path))

from fake_openai import FakeOpenAIServer, Reply  # noqa: E402
from test_topk_exact import lotus_quickselect  # noqa: E402

import unity_nb as u  # noqa: E402


class Oracle:
    """The server's handler: answers unity_nb (a tool call) and LOTUS (text) from the worth hidden in the rows,
    counting the requests."""

    def __init__(self, worth: list[int]) -> None:
        self.worth = worth
        self.n = len(worth)
        self.requests = 0

    def __call__(self, body: dict) -> Reply:
        self.requests += 1
        messages = body["messages"]
        if body.get("tools"):  # unity_nb: the row's task is its first user message
            text = next(m["content"] for m in messages if m["role"] == "user")
            if "\nA:\n" in text:
                a, b = (self._doc(text.split(f"\n{s}:\n")[1]) for s in "AB")
                args = {"better": "A" if self.worth[a] > self.worth[b] else "B", "reason": "worth more"}
            else:
                w = self.worth[int(re.findall(r"doc (\d+) worth", text)[-1])]  # the row (after the question)
                args = {"score": w * 11 // self.n, "reason": "its worth"}
            return Reply(tool_calls=[{"name": "submit_answer", "arguments": json.dumps(args)}], chunks=1)
        parts = messages[-1]["content"]  # LOTUS: "Document 1:\n..." and "Document 2:\n..." in text parts
        text = "".join(p["text"] for p in parts) if isinstance(parts, list) else parts
        one, two = (self._doc(text.split(f"Document {i}:")[1]) for i in (1, 2))
        return Reply(content="Document 1" if self.worth[one] > self.worth[two] else "Document 2", chunks=1)

    @staticmethod
    def _doc(text: str) -> int:
        """The first row named in ``text``."""
        return int(re.search(r"doc (\d+)", text).group(1))  # type: ignore[union-attr]


def rows(n: int, seed: int = 0) -> tuple[list[str], list[int]]:
    worth = list(range(n))
    random.Random(seed).shuffle(worth)
    return [f"doc {i} worth {w} ." for i, w in enumerate(worth)], worth


async def run_unity(server: FakeOpenAIServer, oracle: Oracle, texts: list[str], k: int, **options: object) -> dict:
    model = u.OpenAIModel("bench", base_url=server.base_url, api_key="sk-bench")
    oracle.requests = 0
    start = time.perf_counter()
    try:
        h = u.topk(texts, k, "Which document is worth most?", model=model, concurrency=64, **options)
        best = await h
    finally:
        await model.close()
    return {"requests": oracle.requests, "questions": h.questions, "calls": h.calls, "bound": h.bound,
            "rounds": len(h.phases) - 1, "top": [int(t.split()[1]) for t in best], "exact_said": h.exact,
            "inconsistent": h.inconsistent, "wall_s": round(time.perf_counter() - start, 1)}


def run_lotus(python: str, base_url: str, rows_file: str, k: int, method: str, seed: int, oracle: Oracle) -> dict:
    oracle.requests = 0
    start = time.perf_counter()
    done = subprocess.run([python, str(ROOT / "bench" / "lotus_topk.py"), "--base-url", base_url, "--rows", rows_file,
                           "--k", str(k), "--method", method, "--seed", str(seed)],
                          capture_output=True, text=True, timeout=1800, env={**os.environ, "TQDM_DISABLE": "1"})
    if done.returncode:
        raise RuntimeError(f"LOTUS failed: {done.stderr[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"requests": oracle.requests, "calls": out["calls"], "top": out["top"],
            "wall_s": round(time.perf_counter() - start, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--lotus", default="/tmp/lotus-venv/bin/python", help="LOTUS's venv's python")
    parser.add_argument("--seeds", type=int, default=5, help="runs of LOTUS's quick method (np.random seeds)")
    args = parser.parse_args()
    n, k = args.n, args.k
    texts, worth = rows(n)
    truth = sorted(range(n), key=lambda i: -worth[i])[:k]
    top_score = sum(w * 11 // n == 10 for w in worth)
    print(f"n={n} k={k}: {top_score} rows share the top score; comparisons consistent")

    oracle = Oracle(worth)
    server = FakeOpenAIServer(oracle).start_in_thread()
    try:
        ours = asyncio.run(run_unity(server, oracle, texts, k))
        print(f"A. unity_nb u.topk: {ours['requests']:,} requests ({n:,} scores + {ours['requests'] - n:,} "
              f"comparisons in {ours['rounds']} rounds; bound {ours['bound']:,}); true top {k} in order: "
              f"{ours['top'] == truth}; h.exact {ours['exact_said']}; wall {ours['wall_s']} s")
        trusting = asyncio.run(run_unity(server, oracle, texts, k, margin=0))
        print(f"   u.topk(margin=0), the scores trusted (no row scored below the k-th best compared): "
              f"{trusting['requests']:,} requests ({trusting['rounds']} rounds); true top {k} in order: "
              f"{trusting['top'] == truth}")
        if os.path.exists(args.lotus):
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(texts, f)
            try:
                url = server.base_url
                quick = [run_lotus(args.lotus, url, f.name, k, "quick", s, oracle) for s in range(args.seeds)]
                heap = run_lotus(args.lotus, url, f.name, k, "heap", 0, oracle)
            finally:
                os.unlink(f.name)
            counts = [r["requests"] for r in quick]
            print(f"B. LOTUS 1.2.4 sem_topk quick, seeds 0-{args.seeds - 1}: {counts} requests (median "
                  f"{statistics.median(counts):,.0f}; its own total_llm_calls {[r['calls'] for r in quick]}); true "
                  f"top {k} in order: {[r['top'] == truth for r in quick]}; wall {[r['wall_s'] for r in quick]} s")
            print(f"   LOTUS 1.2.4 sem_topk heap: {heap['requests']:,} requests, one at a time (its total_llm_calls "
                  f"{heap['calls']:,}); true top {k} in order: {heap['top'] == truth}; wall {heap['wall_s']} s")
        else:
            print(f"B. skipped: no LOTUS venv at {args.lotus} (see the docstring)")
    finally:
        server.stop_thread()
    sim = sorted(lotus_quickselect(worth, k, seed) for seed in range(200))
    print(f"C. LOTUS's quickselect reimplemented, 200 seeds: min {sim[0]:,}, median {statistics.median(sim):,.0f}, "
          f"mean {statistics.mean(sim):,.0f}, p90 {sim[179]:,}, max {sim[-1]:,} requests; unity_nb asked fewer "
          f"than {sum(c > ours['requests'] for c in sim)} of 200")
    print(f"   LOTUS naive (every pair): {n * (n - 1) // 2:,} requests")


if __name__ == "__main__":
    main()
