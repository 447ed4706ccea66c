"""Top-k: the k rows that best fit a question, with a bounded number of model calls.

The scheme, and why. Ranking by comparing every pair costs n(n-1)/2 calls (499,500 at n = 1,000); a
comparison sort n log2 n (about 10,000), in log n rounds that wait on each other, and a model's inconsistent
judgments (A over B, B over C, C over A) break a sort's assumptions. Instead:

1. **Score** every row once, 0 to 10, with a reason: n calls, all independent (one map at full concurrency).
2. **Round robin** among the ``candidates`` best scored (2k by default): each candidate meets others in
   head-to-head comparisons (every other one when that is at most ``max_comparisons`` pairs, else the nearest
   ``max_comparisons // candidates`` on each side of a circle, so each meets the same number), all in one
   map. Candidates are ranked by their share of comparisons won, then by score. An inconsistent judgment
   moves one win, never the whole order.

So calls are n + min(C(candidates, 2), max(candidates, max_comparisons)): 1,190 at n = 1,000, k = 10.
``h.calls`` counts the model calls made; ``h.bound`` is that bound.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from .._errors import UserError
from ._operators import PhasedHandle, as_pandas, field_free, row_texts

__all__ = ("Choice", "Score", "TopKHandle", "comparison_pairs", "topk")


class Score(pydantic.BaseModel):
    """score: 0 (does not fit the question at all) to 10 (fits it exactly); reason: one sentence."""

    score: int = pydantic.Field(ge=0, le=10)
    reason: str


class Choice(pydantic.BaseModel):
    """better: "A" or "B", the one that fits the question better; reason: one sentence."""

    better: Literal["A", "B"]
    reason: str


_SCORE = ("\n\nRate this row against the question with submit_answer: a score from 0 (not at all) to 10 (exactly) "
          "and a reason.")
_COMPARE = ("{question}\n\nWhich of these two fits the question better? Answer with submit_answer: better A or B, "
            "and a reason.\n\nA:\n{a}\n\nB:\n{b}")


def comparison_pairs(n: int, max_comparisons: int) -> list[tuple[int, int]]:
    """The head-to-head pairs among ``n`` candidates: all of them if that is at most ``max_comparisons``, else
    each candidate against its nearest ``max(1, max_comparisons // n)`` on each side of a circle."""
    if n < 2:
        return []
    full = n * (n - 1) // 2
    reach = n // 2 if full <= max_comparisons else max(1, min(n // 2, max_comparisons // n))
    seen: set[tuple[int, int]] = set()
    pairs = []
    for d in range(1, reach + 1):
        for i in range(n):
            j = (i + d) % n
            key = (min(i, j), max(i, j))
            if key not in seen:
                seen.add(key)
                pairs.append((i, j) if (i + d) % 2 else (j, i))  # who is shown first alternates
    return pairs


class TopKHandle(PhasedHandle):
    """Top-k as one steerable operation: a scoring map, then a round robin among the candidates (see the
    module's docstring). ``await h`` gives the k best rows of the input, best first, with their index;
    ``h.scores`` every row's score and reason; ``h.ranking`` the candidates' wins; ``h.calls`` model calls."""

    kind = "topk"

    def __init__(self, items: Any, k: int, question: str, *, candidates: int | None = None,
                 max_comparisons: int = 1000, **options: Any) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise UserError(f"topk takes k, a whole number of at least 1, not {k!r}")
        if not isinstance(question, str) or not question.strip():
            raise UserError("topk needs a question each row is rated against, e.g. "
                            "'Which abstract is most relevant to sleep and memory?'")
        if candidates is not None and (isinstance(candidates, bool) or not isinstance(candidates, int)
                                       or candidates < k):
            raise UserError(f"candidates takes a whole number of at least k ({k}), not {candidates!r}")
        if isinstance(max_comparisons, bool) or not isinstance(max_comparisons, int) or max_comparisons < 1:
            raise UserError(f"max_comparisons takes a whole number of at least 1, not {max_comparisons!r}")
        self.items = as_pandas(items, "topk")
        self.k = k
        self.question = question
        field_free(question)  # a template mistake said now, not in a phase
        self.pool = min(len(self.items), candidates if candidates is not None else 2 * k)
        self.max_comparisons = max_comparisons
        self.scores: Any = None
        """Every row's ``score`` and ``reason`` (missing where its row failed), once scored."""
        self.ranking: Any = None
        """The candidates: ``score``, ``wins``, ``games``, ``share`` and ``rank``, best first."""
        options.setdefault("max_steps", 3)
        super().__init__(f"[topk {k}] {question}", **options)

    @property
    def bound(self) -> int:
        """The most model questions this top-k asks: one per row, and the round robin's pairs."""
        return len(self.items) + len(comparison_pairs(self.pool, self.max_comparisons))

    async def run_phases(self) -> Any:
        import pandas as pd

        scoring = await self.run_map("score", self.items, self.question + _SCORE, output=Score)
        self.scores = scoring.results()
        scored = self.scores.dropna(subset=["score"])
        order = sorted(range(len(scored)), key=lambda i: (-int(scored["score"].iloc[i]), i))
        pool = [scored.index[i] for i in order[: self.pool]]
        texts = dict(row_texts(self.items.loc[pool] if pool else self.items.iloc[:0], self.question))
        pairs = comparison_pairs(len(pool), self.max_comparisons)
        wins = dict.fromkeys(pool, 0)
        games = dict.fromkeys(pool, 0)
        if pairs:
            q = field_free(self.question)
            frame = pd.DataFrame({"a": [texts[pool[i]] for i, _ in pairs], "b": [texts[pool[j]] for _, j in pairs]})
            compare = await self.run_map("compare", frame, _COMPARE.replace("{question}", q), output=Choice)
            for (i, j), better in zip(pairs, compare.results()["better"]):
                if better in ("A", "B"):
                    winner = pool[i] if better == "A" else pool[j]
                    wins[winner] += 1
                    games[pool[i]] += 1
                    games[pool[j]] += 1
        ranking = pd.DataFrame(
            {"score": [int(self.scores.loc[key, "score"]) for key in pool], "wins": [wins[key] for key in pool],
             "games": [games[key] for key in pool]},
            index=pd.Index(pool, name=self.items.index.name),
        )
        ranking["share"] = (ranking["wins"] / ranking["games"].where(ranking["games"] > 0)).fillna(0.0)
        ranking["order"] = range(len(ranking))
        ranking = ranking.sort_values(["share", "score", "order"], ascending=[False, False, True]).drop(
            columns="order")
        ranking["rank"] = range(1, len(ranking) + 1)
        self.ranking = ranking
        best = self.items.loc[list(ranking.index[: self.k])].copy()
        reasons = dict(self.scores.attrs.get("reasons", {}))
        best.attrs = {"reasons": reasons}
        return best

    def summary(self) -> str:
        return f"top {self.k} of {len(self.items)} rows in {self.calls} model calls (at most {self.bound})"


def topk(items: Any, k: int, question: str, **options: Any) -> TopKHandle:
    """The ``k`` rows of ``items`` (a DataFrame, a Series or a list) that best fit ``question``, as one steerable
    operation; ``await h`` gives them best first, with the input's index.

    Bounded: every row is scored once (0-10), then the ``candidates`` best (2k by default) meet head to head
    (at most ``max_comparisons`` pairs, default 1,000), ranked by wins, then score. ``h.calls`` counts model
    calls; ``h.bound`` is the most it can ask (n + 190 at k = 10). Rows whose scoring failed are left out,
    with ``.attrs["reasons"]``. Other options are the map's (``model``, ``concurrency``, ``rate``, ``name``,
    ``max_steps``, ...), for both phases."""
    return TopKHandle(items, k, question, **options)
