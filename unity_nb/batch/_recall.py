"""A join's recall, checked: how many true pairs blocking left out, estimated from a sample of them, with a bound.

The pairs blocking leaves out fall in two strata. **Near**: a right row that shares a word with the left row but
ranked past ``per_left`` (crowded out). **Far**: a right row sharing no word with it (blocking cannot reach
these at any width). A random sample of each (seeded: a resumed join asks the same) is asked like any pair;
``x`` matches among ``s`` answered estimate the stratum's rate, so the matches missed are

    missed ≈ Σ x / s × (pairs of the stratum not asked)

and, for a bound, each stratum's rate at its one-sided Clopper-Pearson upper limit (exact binomial, at
``1 - 0.05 / strata``, so the sum holds at 95% or more). Recall is ``found / (found + missed)``; its bound is the
same with the missed pairs at their bound. A sample that found no match says so: missed 0, recall 1, and the
bound says how many it could still have missed (about ``3 / s`` of the pairs left out).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ("CONFIDENCE", "Recall", "Reservoir", "Stratum", "estimate_recall", "upper_rate")

CONFIDENCE = 0.95
METHOD = "Clopper-Pearson upper limit of each stratum's match rate (one-sided, 95% over the strata together)"


def _binom_cdf(x: int, n: int, p: float) -> float:
    """P(X <= x) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if x >= n else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for k in range(x + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lp + (n - k) * lq)
    return min(1.0, total)


def upper_rate(hits: int, n: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson upper limit of a rate seen as ``hits`` in ``n`` draws: the rate at which
    ``hits`` or fewer would be seen with probability ``1 - confidence``."""
    if n <= 0 or hits >= n:
        return 1.0
    alpha = 1.0 - confidence
    if hits == 0:
        return 1.0 - alpha ** (1.0 / n)
    lo, hi = hits / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _binom_cdf(hits, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


class Reservoir:
    """A uniform random sample of ``size`` items of a stream whose length is known only at its end (Li's algorithm
    L: a few random draws per item taken, none per item passed). Items come in runs: :meth:`offer` says how many a
    run holds, and makes the run's items (a list) only if one of them is taken."""

    __slots__ = ("items", "next", "rng", "seen", "size", "w")

    def __init__(self, size: int, rng: random.Random) -> None:
        self.size = size
        self.rng = rng
        self.items: list[Any] = []
        self.seen = 0
        """Items offered so far (the population, once the stream ended)."""
        self.next = 0
        self.w = 1.0

    def _u(self) -> float:
        return 1.0 - self.rng.random()  # in (0, 1]: its log is finite

    def _skip(self) -> None:
        self.w *= math.exp(math.log(self._u()) / self.size)
        gap = math.log(self._u()) / math.log1p(-self.w) if self.w < 1.0 else 0.0
        self.next += int(gap) + 1

    def offer(self, count: int, make: Any) -> None:
        """A run of ``count`` items; ``make()`` gives them (called at most once, only if one is taken)."""
        if self.size <= 0 or count <= 0:
            self.seen += max(0, count)
            return
        end = self.seen + count
        run = None
        while self.next < end:
            if run is None:
                run = make()
            item = run[self.next - self.seen]
            if len(self.items) < self.size:
                self.items.append(item)
                self.next += 1
                if len(self.items) == self.size:
                    self.next -= 1
                    self._skip()
            else:
                self.items[self.rng.randrange(self.size)] = item
                self._skip()
        self.seen = end


@dataclass(frozen=True, slots=True)
class Stratum:
    """Pairs blocking left out of one kind, and the sample asked of them."""

    name: str
    """``near`` (shares a word, ranked past ``per_left``) or ``far`` (shares none)."""
    unasked: int
    """Pairs of the stratum never asked."""
    sampled: int
    """Sampled pairs answered."""
    hits: int
    """Of them, matches."""


@dataclass(frozen=True)
class Recall:
    """How many of the true pairs a join found (``h.recall``, ``progress["recall"]``, the result's
    ``.attrs["recall"]``). ``as_dict()`` gives it as a plain dict."""

    status: str
    """``checking`` (not yet known), ``checked`` (estimated from a sample), ``exact`` (every pair asked: recall 1.0
    when every one answered, else unknown with its bound), ``not checked`` (``sample=0``, or no sampled pair
    answered)."""
    estimate: float | None
    """Recall: matches found over matches found and estimated missed (``None`` while checking, when nothing
    matched and nothing was estimated missed, when pairs never asked had no sampled pair answered, or when every
    pair was asked and some got no answer: unknown, and ``text`` says so, with the bound)."""
    bound: float | None
    """Recall at the bound (95%): at least this."""
    missed: float
    """Matches estimated missed among the pairs never asked."""
    missed_bound: float
    """At most this many missed (95%); every pair asked: the pairs that got no answer (each may be a match)."""
    found: int
    """Pairs matched, everything asked counted."""
    sampled: int
    """Left-out pairs sampled (and answered) behind the estimate."""
    sample_found: int
    """Of them, matches (each one a true pair blocking had left out: it is in the result)."""
    left_out: int
    """Pairs never asked."""
    unanswered: int
    """Pairs asked whose answer did not come (failed or stopped: ``h.verdicts`` says why); not counted either way."""
    target: float
    """The recall wanted (``recall=``): below it the join widens its blocks or asks every pair."""
    per_left: int
    """Right rows asked per left row in the end (``per_left``, or wider)."""
    widened: bool
    fallback: bool
    """Every pair was asked (the sample found matches blocking cannot reach)."""
    refused: str | None
    """Why the join did not widen or ask every pair though recall was below the target (a bound it would pass)."""
    method: str
    text: str
    """One line saying it (the widget shows it)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return self.text


def estimate_recall(found: int, strata: list[Stratum]) -> tuple[float, float, float | None, float | None]:
    """``(missed, missed_bound, recall, recall_bound)`` from the strata's samples (see the module's docstring). A
    stratum with pairs never asked and no sampled pair answered (none drawn, or every one failed) says nothing of
    its misses: the recall is then ``None`` (unknown), and only its bound, which counts every such pair missed, is
    given."""
    open_ = [s for s in strata if s.unasked > 0]
    confidence = 1.0 - (1.0 - CONFIDENCE) / max(1, len(open_))
    missed = sum(s.hits / s.sampled * s.unasked for s in open_ if s.sampled)
    bound = sum(upper_rate(s.hits, s.sampled, confidence) * s.unasked for s in open_)

    def recall(lost: float) -> float | None:
        if found + lost <= 0:
            return None
        return found / (found + lost)

    unseen = any(not s.sampled for s in open_)
    return missed, bound, None if unseen else recall(missed), recall(bound)
