"""Operator benchmark (not a test): how many model calls top-k and join make at n = 1,000, against the naive counts.

A ScriptedModel answers (no HTTP: what is counted is questions, not time). The data are synthetic and seeded.

  A. ``u.topk`` of 1,000 rows, k = 10. Each row has a hidden relevance (a float); the model scores a row 0-10
     as round(relevance) with noise (so the scores tie and err, as a model's do) and answers a comparison by
     the true relevance. Reported: model calls made (``h.calls``) and the bound (``h.bound``), beside every pair
     (n(n-1)/2) and a comparison sort (n log2 n); how many of the true top 10 it returned, and whether in order.
     (bench_topk.py sets it beside LOTUS's top-k on coarse, noiseless scores.)
  B. ``u.join`` of 1,000 x 1,000 rows. Left row i and right row i share two of three rare topic words (a true
     pair); every row also holds 20 words drawn from 150 common ones, and its topic words come from a vocabulary
     of 3,000, so rows share rare words by chance too. The model says "match" for true pairs. Reported: pairs
     asked (``h.pairs_asked``) beside n x m, the true pairs found (recall), and the CPU of the blocking step
     beside the CPU of the whole run.

Run: .venv/bin/python bench/bench_operators.py [--n 1000] [--k 10]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import re
import time

import pandas as pd

import unity_nb as u
from unity_nb.batch._join import block_pairs


def task_of(messages: list[dict]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


async def bench_topk(n: int, k: int) -> dict:
    rng = random.Random(0)
    relevance = [rng.uniform(0, 10) for _ in range(n)]
    items = pd.Series([f"doc {i} ." for i in range(n)], name="text")
    noise = random.Random(1)

    def script(messages: list[dict], tools: list[dict]) -> object:
        text = task_of(messages)
        if "\nA:\n" in text:
            a, b = (int(re.search(rf"\n{s}:\ndoc (\d+)", text).group(1)) for s in "AB")  # type: ignore[union-attr]
            return u.call_tool("submit_answer", better="A" if relevance[a] > relevance[b] else "B", reason="r")
        i = int(text.rsplit("doc ", 1)[1].split()[0])
        score = min(10, max(0, round(relevance[i] + noise.gauss(0, 0.7))))
        return u.call_tool("submit_answer", score=score, reason="r")

    model = u.ScriptedModel(script)
    start = time.perf_counter()
    h = u.topk(items, k, "Which document is most relevant?", model=model, concurrency=100)
    best = await h
    wall = time.perf_counter() - start
    truth = sorted(range(n), key=lambda i: -relevance[i])[:k]
    found = [int(t.split()[1]) for t in best]
    return {"n": n, "k": k, "calls": h.calls, "questions": h.questions, "requests": len(model.requests),
            "bound": h.bound, "all_pairs": math.comb(n, 2), "n_log2_n": round(n * math.log2(n)),
            "true_top_found": len(set(truth) & set(found)), "in_order": found == truth, "wall_s": round(wall, 2)}


async def bench_join(n: int) -> dict:
    rng = random.Random(2)
    common = [f"common{c}" for c in range(150)]
    vocab = [f"topic{t}" for t in range(3000)]
    topics = [rng.sample(vocab, 3) for _ in range(n)]

    def text(i: int, own: list[str]) -> str:
        return " ".join(rng.sample(common, 20) + own)

    left = pd.DataFrame({"abstract": [f"id L{i} " + text(i, topics[i]) for i in range(n)]})
    right = pd.DataFrame({"aims": [f"id R{i} " + text(i, rng.sample(topics[i], 2)) for i in range(n)]})

    def script(messages: list[dict], tools: list[dict]) -> object:
        found = re.findall(r"id [LR](\d+)", task_of(messages))
        return u.call_tool("submit_answer", match=len(found) == 2 and found[0] == found[1], reason="r")

    cpu = time.process_time()
    block_pairs(list(left["abstract"]), list(right["aims"]))
    blocking_cpu = time.process_time() - cpu
    model = u.ScriptedModel(script)
    cpu, start = time.process_time(), time.perf_counter()
    h = u.join(left, right, "On {papers.abstract} and {grants.aims}: is this grant funding this work?",
               names=("papers", "grants"), model=model, concurrency=100)
    pairs = await h
    return {"n": n, "m": n, "pairs_asked": h.pairs_asked, "pairs_total": h.pairs_total,
            "requests": len(model.requests), "true_pairs_found": int((pairs["left"] == pairs["right"]).sum()),
            "blocking_cpu_s": round(blocking_cpu, 2), "run_cpu_s": round(time.process_time() - cpu, 2),
            "wall_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    top = asyncio.run(bench_topk(args.n, args.k))
    print("A. top-k")
    print(f"  n={top['n']} k={top['k']}: {top['questions']} questions (bound {top['bound']}), "
          f"{top['calls']} model calls")
    print(f"  every pair: {top['all_pairs']:,} ({top['all_pairs'] / top['calls']:.0f}x more); "
          f"n log2 n: {top['n_log2_n']:,} ({top['n_log2_n'] / top['calls']:.1f}x more)")
    print(f"  true top {top['k']} returned: {top['true_top_found']} of {top['k']} (in order: {top['in_order']}); "
          f"wall {top['wall_s']} s")
    join = asyncio.run(bench_join(args.n))
    print("B. join")
    print(f"  {join['n']} x {join['m']}: {join['pairs_asked']:,} pairs asked of {join['pairs_total']:,} "
          f"({join['pairs_total'] / join['pairs_asked']:.0f}x fewer); {join['requests']:,} requests")
    print(f"  true pairs found: {join['true_pairs_found']} of {join['n']}; blocking CPU {join['blocking_cpu_s']} s, "
          f"whole run CPU {join['run_cpu_s']} s (blocking included), wall {join['wall_s']} s")


if __name__ == "__main__":
    main()
