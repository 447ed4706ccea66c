"""Top-k: the k rows that best fit a question, with a bounded number of model calls.

The scheme, and why. Ranking by comparing every pair costs n(n-1)/2 calls (499,500 at n = 1,000); a
comparison sort n log2 n (about 10,000), in log n rounds that wait on each other, and a model's inconsistent
judgments (A over B, B over C, C over A) break a sort's assumptions. Instead, three rounds, each one map whose
questions are independent (so each runs at full concurrency):

1. **Score** every row once, 0 to 10, with a reason: n calls.
2. **Screen.** A score is coarse and noisy: many rows tie at the top, and a good row may be scored a point low.
   So the rows scored at least the ``candidates``-th best score minus one (at most ``screen``, 200, best scored
   first) meet head to head: every pair when that is at most ``max_comparisons`` (1,000), else each meets its
   nearest ``max_comparisons // rows`` on each side of a circle, so each plays as many games. The
   ``candidates`` (2k) with the best share of wins go on. Skipped when no row ties at the edge.
3. **Round robin** among the candidates: every pair (at most ``max_comparisons``). They are ranked by their
   share of wins, then by score. An inconsistent judgment moves one win, never the whole order.

So questions are at most n + min(C(screen, 2), max_comparisons) + min(C(2k, 2), max_comparisons): 2,190 at
n = 1,000, k = 10 (bench/bench_operators.py measured 2,078, with 9 of the true top 10 found from noisy
scores). ``h.questions`` counts the questions asked and ``h.bound`` is that bound; ``h.calls`` counts the
model calls they took (one each, unless an answer did not validate and was sent back).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal

import pydantic

from .._errors import UserError
from ._estimate import Estimate, combine, estimate_map
from ._operators import as_pandas, field_free, row_texts
from ._phased import Flow, Phase, PhasedHandle
from ._registry import Operator, Param, register_operator

__all__ = ("Choice", "Score", "TopKHandle", "comparison_pairs", "estimate_topk", "round_bound", "topk")


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


def round_bound(n: int, max_comparisons: int) -> int:
    """The most pairs :func:`comparison_pairs` gives for at most ``n`` candidates."""
    return min(n * (n - 1) // 2, max(max_comparisons, n))


class TopKHandle(PhasedHandle):
    """Top-k as one steerable operation: a scoring map, a screening round, then a round robin among the
    candidates (see the module's docstring). ``await h`` gives the k best rows of the input, best first, with
    their index; ``h.scores`` every row's score and reason; ``h.ranking`` the candidates' wins; ``h.calls`` model
    calls."""

    kind = "topk"

    def __init__(self, items: Any, k: int, question: str, *, candidates: int | None = None,
                 max_comparisons: int = 1000, screen: int = 200, **options: Any) -> None:
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
        if isinstance(screen, bool) or not isinstance(screen, int) or screen < 1:
            raise UserError(f"screen takes a whole number of at least 1, not {screen!r}")
        self.screen = screen
        """At most this many rows tied at the candidates' edge are screened head to head for their places."""
        self.scores: Any = None
        """Every row's ``score`` and ``reason`` (missing where its row failed), once scored."""
        self.ranking: Any = None
        """The candidates: ``score``, ``wins``, ``games``, ``share`` and ``rank``, best first."""
        options.setdefault("max_steps", 3)
        super().__init__(question, **options)

    @property
    def bound(self) -> int:
        """The most questions this top-k asks (``h.questions``): one per row, the screening round's and the final
        round robin's pairs."""
        n = len(self.items)
        screen = round_bound(min(n, self.screen), self.max_comparisons) if self.screen > self.pool else 0
        return n + screen + round_bound(self.pool, self.max_comparisons)

    def _round(self, phase: str, keys: list) -> Generator[Phase, Any, tuple[dict, dict]]:
        """One round of head-to-head comparisons among ``keys``: each one's wins and games decided."""
        wins, games = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0)
        pairs = comparison_pairs(len(keys), self.max_comparisons)
        if not pairs:
            return wins, games
        compare = yield Phase(phase, _pair_frame(self.items, self.question, keys, pairs), _template(self.question),
                              {"output": Choice})
        for (i, j), better in zip(pairs, compare.results()["better"]):
            if better in ("A", "B"):
                wins[keys[i] if better == "A" else keys[j]] += 1
                games[keys[i]] += 1
                games[keys[j]] += 1
        return wins, games

    def _ranked(self, keys: list, wins: dict, games: dict) -> Any:
        import pandas as pd

        ranking = pd.DataFrame(
            {"score": [int(self.scores.loc[key, "score"]) for key in keys], "wins": [wins[key] for key in keys],
             "games": [games[key] for key in keys]},
            index=pd.Index(keys, name=self.items.index.name),
        )
        ranking["share"] = (ranking["wins"] / ranking["games"].where(ranking["games"] > 0)).fillna(0.0)
        ranking["order"] = range(len(ranking))
        ranking = ranking.sort_values(["share", "score", "order"], ascending=[False, False, True]).drop(
            columns="order")
        ranking["rank"] = range(1, len(ranking) + 1)
        return ranking

    def flow(self) -> Flow:
        scoring = yield Phase("score", self.items, self.question + _SCORE, {"output": Score})
        self.scores = scoring.results()
        scored = self.scores.dropna(subset=["score"])
        values = [int(v) for v in scored["score"]]
        order = sorted(range(len(scored)), key=lambda i: (-values[i], i))
        pool = [scored.index[i] for i in order[: self.pool]]
        if pool and self.screen > self.pool:
            # a score is a coarse, noisy judgment: rows tied with the pool's last score, or one point below it,
            # compete head to head for its places (at most ``screen`` of them, the best scored first)
            edge = values[order[len(pool) - 1]] - 1
            wide = [scored.index[i] for i in order if values[i] >= edge][: self.screen]
            if len(wide) > len(pool):
                wins, games = yield from self._round("screen", wide)
                pool = list(self._ranked(wide, wins, games).index[: self.pool])
        wins, games = yield from self._round("compare", pool)
        self.ranking = self._ranked(pool, wins, games)
        best = self.items.loc[list(self.ranking.index[: self.k])].copy()
        best.attrs = {"reasons": dict(self.scores.attrs.get("reasons", {}))}
        return best

    def summary(self) -> str:
        return (f"top {self.k} of {len(self.items)} rows: {self.questions} questions (at most {self.bound}), "
                f"{self.calls} model calls")


def _template(question: str) -> str:
    return _COMPARE.replace("{question}", field_free(question))


def _pair_frame(items: Any, question: str, keys: list, pairs: list[tuple[int, int]]) -> Any:
    """The rows of a round: each pair's two texts (``a`` and ``b``)."""
    import pandas as pd

    texts = dict(row_texts(items.loc[keys], question))
    return pd.DataFrame({"a": [texts[keys[i]] for i, _ in pairs], "b": [texts[keys[j]] for _, j in pairs]})


_SAMPLE_PAIRS = 50
"""Pairs of the first rows an estimate reads for the comparison rounds' prompts (scaled to their number)."""


def estimate_topk(items: Any, k: int, question: str, *, candidates: int | None = None,
                  max_comparisons: int = 1000, screen: int = 200, **options: Any) -> Estimate:
    """What :func:`topk` would cost, without running anything: the scoring map exactly (one question a row), and
    the comparison rounds at their bound (the screening round's and the final round robin's pairs), their prompts
    from pairs of the first rows."""
    frame = as_pandas(items, "topk")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"topk takes k, a whole number of at least 1, not {k!r}")
    field_free(question)
    n = len(frame)
    pool = min(n, candidates if candidates is not None else 2 * k)
    screened = round_bound(min(n, screen), max_comparisons) if screen > pool else 0
    final = round_bound(pool, max_comparisons)
    options.pop("max_steps", None)
    parts = [estimate_map(frame, question + _SCORE, output=Score, **options)]
    keys = list(frame.index[: min(n, 11)])
    pairs = comparison_pairs(len(keys), _SAMPLE_PAIRS)[:_SAMPLE_PAIRS]
    if pairs and screened + final:
        sample = estimate_map(_pair_frame(frame, question, keys, pairs), _template(question), output=Choice,
                              **options)
        parts.append(_scaled(sample, screened + final))
    return combine(parts, f"Top-k projected at its bound: {n:,} scores, then at most {screened:,} screening and "
                          f"{final:,} final comparisons (their prompts from pairs of the first rows).")


def _scaled(est: Estimate, rows: int) -> Estimate:
    """``est`` (of a sample of rows) for ``rows`` rows like them."""
    f = rows / est.rows
    return Estimate(
        rows=rows, input_tokens=round(est.input_tokens * f), output_tokens=est.output_per_row * rows,
        output_per_row=est.output_per_row, output_assumed=est.output_assumed, model=est.model, price=est.price,
        dollars=None if est.dollars is None else est.dollars * f,
        minutes=None if est.minutes is None else est.minutes * f, limit=est.limit, prompts=est.prompts,
    )


def topk(items: Any, k: int, question: str, *, estimate: bool = False, **options: Any) -> Any:
    """The ``k`` rows of ``items`` (a DataFrame, a Series or a list) that best fit ``question``, as one steerable
    operation; ``await h`` gives them best first, with the input's index.

    Bounded: every row is scored once (0-10); the rows near the top score (at most ``screen``, 200) are screened
    head to head for the ``candidates`` places (2k by default); the candidates meet in a round robin, ranked by
    wins, then score. Each round asks at most ``max_comparisons`` pairs (1,000). ``h.questions`` counts the
    questions asked, at most ``h.bound`` (n + 1,190 at k = 10); ``h.calls`` the model calls they took. Rows whose
    scoring failed are left out, with ``.attrs["reasons"]``. ``resume_from=store`` keeps the rows an earlier run
    of the same ``name`` finished (each phase's map, ``NAME.score``, ``NAME.screen``, ``NAME.compare``, where asked
    the same). Other options are the map's (``model``, ``concurrency``, ``rate``, ``max_steps``, ...), for every
    phase. ``estimate=True`` runs nothing and returns what it would cost, projected at its bound."""
    if estimate:
        return estimate_topk(items, k, question, **options)
    return TopKHandle(items, k, question, **options)


def _start(items: Any, question: str, *, k: int, **options: Any) -> Any:
    """The registry's form of :func:`topk` (its text second, like every operator's)."""
    return topk(items, k, question, **options)


register_operator(Operator(
    "topk", _start,
    "The K rows that best fit QUESTION, best first: every row scored once (0-10), then the best compared head to "
    "head. h.calls counts model calls.",
    text="QUESTION", phased=True,
    params=(
        Param("k", "count", "K, the number of rows to keep (a whole number of at least 1), after the items", "K",
              positional=True, required=True),
        Param("candidates", "count", "rows compared head to head (default 2K)."),
        Param("max_comparisons", "count", "pairs compared at most (default 1000)."),
    ),
))
