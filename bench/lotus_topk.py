"""LOTUS's own ``sem_topk`` (lotus-ai 1.2.4) over an OpenAI-compatible server, for ``bench_topk.py``.

Runs in LOTUS's venv, never the project's (lotus-ai is no dependency of unity_nb; bench only):

  python3 -m venv /tmp/lotus-venv && /tmp/lotus-venv/bin/pip install lotus-ai==1.2.4
  /tmp/lotus-venv/bin/python bench/lotus_topk.py --base-url URL --rows rows.json --k 10 --method quick --seed 0

``rows.json`` holds the rows' texts. Prints one JSON line: the rows it returned (their ``doc N`` numbers), best
first, and its ``total_llm_calls``.
"""

from __future__ import annotations

import argparse
import json
import os
import re

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches its price list otherwise


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--rows", required=True)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--method", default="quick")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import lotus
    import numpy as np
    import pandas as pd
    from lotus.models import LM

    with open(args.rows) as f:
        texts = json.load(f)
    frame = pd.DataFrame({"text": texts})
    lm = LM(model="openai/bench", api_base=args.base_url, api_key="sk-bench", max_batch_size=64)
    lotus.settings.configure(lm=lm, enable_cache=False)
    np.random.seed(args.seed)  # quick's pivots come from np.random
    top, stats = frame.sem_topk("Which {text} is worth most?", K=args.k, method=args.method, return_stats=True)
    found = [int(re.search(r"doc (\d+)", t).group(1)) for t in top["text"]]  # type: ignore[union-attr]
    print(json.dumps({"top": found, "calls": stats["total_llm_calls"]}))


if __name__ == "__main__":
    main()
