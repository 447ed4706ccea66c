"""Exact top-k by pairwise comparisons, planned in rounds of independent questions: top-k's plan (``_topk.py``)
asks each round as one map, so every round runs at full concurrency.

The rows come ranked by a coarse score (0 to 10, many tied). The scores cut: rows scored below the edge (the
``candidates``-th best score) minus ``margin`` are out, never compared. The rest go to a quickselect, LOTUS's
(``sem_topk``, method ``quick``) with better pivots:

- A **task** wants the ``want`` best of its rows, in order. A task of at most :data:`ROUND_ROBIN` rows is
  settled by a round robin: every pair in one round, ordered by wins (exact for a consistent judge).
- A larger task **partitions**: one pivot, picked among the rows tied at the task's edge score, meets every
  other row in one round. If at least ``want`` rows beat it, the top is among them (one task); else they are all
  in (a task that sorts them), then the pivot, then a task choosing the places left among the rows it beat.
- When the task is large, the pivot is the ``j``-th best of a small round robin sample of those tied rows, ``j``
  chosen so that about ``2 * want`` rows beat it (and at least the sample's second): the next task is small,
  and the pivot rarely lands inside the top, where every row it beat would have to meet another.
- Tasks go on side by side: a round asks every task's pairs at once.
- **Scores checked at the margin.** A row scored at the lowest score compared that reaches the top says the
  scores run that far off: the next score's rows meet the k-th row found, and those that beat it are chosen
  among with the top (again while rows of the lowest score compared reach the top).

So the result is the true top k, in order, whenever the comparisons are consistent (a total order) and the
scores are never further off than the checks reach. At n = 1,000 and k = 10, with about 90 rows tied at the top
score and 90 a point below: about 300 comparisons in 5 to 8 rounds, besides the 1,000 scores.

**Inconsistency is counted, never hidden.** A pair is never asked twice. A partition cannot show a cycle (each
row meets the pivot once), but a round robin asks every pair among its rows, and the pivots' samples and the
final order of the top are round robins: :attr:`Selection.inconsistent` counts the 3-cycles (A over B, B over C,
C over A) among all the comparisons made.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ("ROUND_ROBIN", "Selection", "expected_comparisons")

ROUND_ROBIN = 10
"""A task of at most this many rows is settled by a round robin (every pair: 45 at 10 rows), in one round."""


@dataclass(eq=False)
class _Task:
    """The ``want`` best of ``rows`` (best scored first), in order."""

    rows: list
    want: int
    stage: str = "new"
    sample: list = field(default_factory=list)
    pivot: Any = None
    j: int = 0
    """Which of the sample (1 = its best) becomes the pivot."""
    top: list = field(default_factory=list)
    """A check's top k, in order (its last row the pivot the next score's rows meet)."""


class Selection:
    """The plan's state: which pairs to ask next (:meth:`next_round`), their answers (:meth:`record`), and the k
    best once no pair is left (:meth:`order`). ``ranked``: the rows' keys best scored first (ties in input order);
    ``scores`` theirs. Deterministic: the same answers give the same rounds (a resumed run asks the same)."""

    def __init__(self, ranked: Sequence[Hashable], scores: Sequence[int], k: int, *, candidates: int | None = None,
                 margin: int = 1, max_comparisons: int, seed: str = "unity_nb.topk",
                 label: Any = None) -> None:
        self.label = label if label is not None else (lambda key: key)
        """How a reason names a row (``key -> label``: top-k's rows are positions, named by the input's index)."""
        self.score = dict(zip(ranked, scores))
        self.pos = {key: i for i, key in enumerate(ranked)}
        self.k = min(k, len(ranked))
        self.cap = max_comparisons
        self.rng = random.Random(seed)
        self.won: dict[tuple[Any, Any], bool | None] = {}
        """``(a, b)``: whether ``a`` beat ``b`` (``None``: asked, no answer)."""
        self.beats: dict[Any, set] = defaultdict(set)
        self.beaten_by: dict[Any, set] = defaultdict(set)
        self.asked = 0
        self.rounds = 0
        self.stopped: str | None = None
        """Why the plan stopped before its end (its bound reached), else ``None``."""
        self.failed: dict[Any, str] = {}
        """Rows out of the running because a comparison they needed got no answer: why."""
        self.no_answer = 0
        """Comparisons asked that got no answer (each row of :attr:`failed` names one; :attr:`unsure` others)."""
        self.unsure: list[tuple[Any, Any]] = []
        """Pairs of rows a round robin gave whose order (which comes first, or which is in) comparisons without an
        answer could still swap: ``(given ahead, the other)``. A missing answer that could change nothing (between
        rows whose places the other answers fix, or in a pivot's sample) is in neither."""
        self.checked: list[int] = []
        """Scores below the margin whose rows were compared because rows scored at the margin reached the top."""
        self._reasons: dict[tuple[Any, Any], str] = {}
        self._counted = (0, 0)
        self.margin = margin
        self.floor: int | None = None
        self._rest: list = []
        first: list = []
        if self.k:
            edge = scores[min(len(ranked), max(candidates or k, k)) - 1]
            self.floor = edge - margin
            first = [key for key, s in zip(ranked, scores) if s >= self.floor]
            self._rest = [key for key, s in zip(ranked, scores) if s < self.floor]
        self.segments: list = [_Task(first, self.k)] if self.k else []

    # -- the rounds -----------------------------------------------------------------------------------------

    def next_round(self) -> list[tuple[Any, Any]]:
        """The pairs to ask next, each ``(shown first, shown second)``; empty once the k best are known (or the
        plan stopped at its bound: :attr:`stopped` says so)."""
        if self.stopped:
            return []
        while True:
            pairs: list[tuple[Any, Any]] = []
            out: list = []
            for seg in self.segments:
                out.extend(self._advance(seg, pairs) if isinstance(seg, _Task) else [seg])
            self.segments = out
            if pairs or not self._extend():
                break
        if not pairs:
            return []
        if self.asked + len(pairs) > self.cap:
            self.stopped = (f"stopped at its bound of {self.cap:,} comparisons ({self.asked:,} asked; this round "
                            f"needed {len(pairs):,} more): the order is partly the scores'")
            return []
        self.rounds += 1
        return [(a, b) if i % 2 == 0 else (b, a) for i, (a, b) in enumerate(pairs)]  # who is shown first alternates

    def record(self, pairs: Sequence[tuple[Any, Any]], better: Sequence[Any],
               reasons: Sequence[str | None] = ()) -> None:
        """The answers to a round's ``pairs``: ``"A"`` (the first shown is better), ``"B"``, or anything else (no
        answer; ``reasons`` says why)."""
        why = list(reasons) + [None] * (len(pairs) - len(reasons))
        for (a, b), answer, reason in zip(pairs, better, why):
            self.asked += 1
            if answer not in ("A", "B"):
                self.won[(a, b)] = self.won[(b, a)] = None
                self.no_answer += 1
                if reason:
                    self._reasons[(a, b)] = reason
                continue
            winner, loser = (a, b) if answer == "A" else (b, a)
            self.won[(winner, loser)], self.won[(loser, winner)] = True, False
            self.beats[winner].add(loser)
            self.beaten_by[loser].add(winner)

    def order(self) -> list:
        """The k best, best first (once :meth:`next_round` is empty). A plan stopped at its bound fills the places
        it did not settle from the scores."""
        out: list = []
        for seg in self.segments:
            if isinstance(seg, _Task):
                rows = seg.top if seg.stage == "check" else seg.rows
                out.extend(sorted(rows, key=self.pos.__getitem__)[: seg.want if seg.stage != "check" else self.k])
            else:
                out.append(seg)
        return out[: self.k]

    @property
    def done(self) -> bool:
        return all(not isinstance(seg, _Task) for seg in self.segments)

    @property
    def exact(self) -> bool:
        """True when the comparisons were consistent, the plan ran to its end, and no comparison without an answer
        could change which rows it gives or their order (:attr:`failed`, :attr:`unsure`): the true top k, in order,
        among the rows scored :attr:`floor` or more (the rows scored lower, :attr:`uncompared`, the scores put out
        without a comparison)."""
        return (self.done and not self.stopped and not self.failed and not self.unsure
                and not self.inconsistent)

    @property
    def uncompared(self) -> int:
        """Rows never compared: scored below :attr:`floor`, the lowest score whose rows were (their scores were
        trusted; a true top row scored that far off is not found)."""
        return len(self._rest)

    # -- inconsistency ----------------------------------------------------------------------------------------

    @property
    def inconsistent(self) -> int:
        """The 3-cycles among the comparisons made (A over B, B over C, C over A): 0 for a consistent judge."""
        if self._counted[0] != self.asked:  # counted again only once more answers came (progress reads it often)
            found = 0
            for a, beaten in self.beats.items():
                above = self.beaten_by.get(a)
                if above:
                    found += sum(len(self.beats[b] & above) for b in beaten if b in self.beats)
            self._counted = (self.asked, found // 3)
        return self._counted[1]

    def cycles(self, limit: int = 5) -> list[tuple[Any, Any, Any]]:
        """Up to ``limit`` of those cycles, each ``(a, b, c)``: a beat b, b beat c, c beat a."""
        out: list[tuple[Any, Any, Any]] = []
        seen: set[frozenset] = set()
        for a in sorted(self.beats, key=self.pos.__getitem__):
            above = self.beaten_by.get(a, set())
            for b in sorted(self.beats[a], key=self.pos.__getitem__):
                for c in sorted(self.beats.get(b, set()) & above, key=self.pos.__getitem__):
                    trio = frozenset((a, b, c))
                    if trio not in seen:
                        seen.add(trio)
                        out.append((a, b, c))
                        if len(out) >= limit:
                            return out
        return out

    # -- one task, as far as it goes without asking --------------------------------------------------------

    def _advance(self, task: _Task, pairs: list) -> list:
        """``task`` moved on until it needs answers (its pairs added to ``pairs``): what stands in its place."""
        while True:
            need = self._needed(task)
            if need:
                pairs.extend(need)
                return [task]
            settled = self._settle(task)
            if settled is not None:
                out: list = []
                for seg in settled:
                    out.extend(self._advance(seg, pairs) if isinstance(seg, _Task) else [seg])
                return out

    def _needed(self, task: _Task) -> list[tuple[Any, Any]]:
        if task.stage == "round robin":
            return self._unasked(task.rows)
        if task.stage == "sample":
            return self._unasked(task.sample)
        if task.stage in ("partition", "check"):
            p = task.pivot
            return [(row, p) for row in task.rows if row != p and (row, p) not in self.won]
        return []

    def _unasked(self, rows: list) -> list[tuple[Any, Any]]:
        return [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if (a, b) not in self.won]

    def _settle(self, task: _Task) -> list | None:
        """The task's answers are in: what replaces it (``None``: the same task, at its next stage)."""
        rows, want = task.rows, task.want
        if task.stage == "new":
            if want <= 0 or not rows:
                return []
            if len(rows) == 1:
                return list(rows)
            if len(rows) <= ROUND_ROBIN:
                task.stage = "round robin"
                return None
            self._pick_pivot(task)
            return None
        if task.stage == "round robin":
            ranked = self._by_wins(rows)
            self._undecided(ranked, want)
            self._unsure(ranked, want)
            return ranked[:want]
        if task.stage == "sample":
            task.pivot = self._by_wins(task.sample)[task.j - 1]
            task.stage = "partition"
            return None
        if task.stage == "check":
            return self._checked(task)
        return self._partitioned(task)

    def _by_wins(self, rows: list) -> list:
        wins = {a: sum(1 for b in rows if self.won.get((a, b))) for a in rows}
        return sorted(rows, key=lambda a: (-wins[a], self.pos[a]))

    def _undecided(self, ranked: list, want: int) -> None:
        """A round robin's rows left out (past ``want`` in ``ranked``, by wins) that comparisons without an answer
        could still have put in: each goes to :attr:`failed`, naming such a comparison (one with a row kept
        first). A row left out is undecided unless fewer than ``want`` rows are sure to rank above it: each
        winning at least as often as it could (its wins and every comparison of its without an answer), and
        ahead of it in the tie."""
        wins = {a: sum(1 for b in ranked if self.won.get((a, b))) for a in ranked}
        kept = set(ranked[:want])
        for row in ranked[want:]:
            open_ = [b for b in ranked if b != row and (row, b) in self.won and self.won[(row, b)] is None]
            if not open_:
                continue
            most = wins[row] + len(open_)
            sure = sum(1 for b in ranked if b != row and (wins[b] > most or (wins[b] == most
                                                                             and self.pos[b] < self.pos[row])))
            if sure < want:
                other = next((b for b in open_ if b in kept), open_[0])
                self.failed[row] = self._failure(row, other)

    def _unsure(self, ranked: list, want: int) -> None:
        """Each of a round robin's first ``want`` rows (by wins) whose place ahead of a later row comparisons without
        an answer could still change goes to :attr:`unsure` (with the first such row). ``a`` stays ahead of ``b``
        whatever they say when its wins beat ``b``'s wins with every open comparison of ``b`` won (ties go to the
        row first in the input). A sample's round robin only picks a pivot: its open comparisons change nothing."""
        wins = {a: sum(1 for b in ranked if self.won.get((a, b))) for a in ranked}
        open_ = {a: sum(1 for b in ranked if b != a and (a, b) in self.won and self.won[(a, b)] is None)
                 for a in ranked}
        if not any(open_.values()):
            return
        for i, a in enumerate(ranked[:want]):
            for b in ranked[i + 1:]:
                most = wins[b] + open_[b]
                if wins[a] < most or (wins[a] == most and self.pos[a] > self.pos[b]):
                    self.unsure.append((a, b))
                    break

    def _pick_pivot(self, task: _Task) -> None:
        """A pivot among the rows tied at the task's edge score: at random, or the ``j``-th of a round robin
        sample when they are many (see the module's docstring)."""
        rows, want = task.rows, task.want
        sorting = want >= len(rows)
        edge = self.score[rows[len(rows) // 2 if sorting else want - 1]]
        pool = [row for row in rows if self.score[row] == edge]
        size = len(rows)
        if not sorting and size >= 30 and size > 4 * want and len(pool) >= 3:
            above = sum(1 for row in rows if self.score[row] > edge)
            s = min(len(pool), max(3, round((6 * size) ** (1 / 3))))
            target = 2 * max(1, want - above) + 2
            task.j = min(s - 1, max(2, round(target * (s + 1) / (len(pool) + 1))))
            task.sample = sorted(self.rng.sample(pool, s), key=self.pos.__getitem__)
            task.stage = "sample"
            return
        task.pivot = pool[self.rng.randrange(len(pool))]
        task.stage = "partition"

    def _partitioned(self, task: _Task) -> list:
        p, want = task.pivot, task.want
        above, below = [], []
        for row in task.rows:
            if row == p:
                continue
            result = self.won[(row, p)]
            if result is None:
                self.failed[row] = self._failure(row, p)
            elif result:
                above.append(row)
            else:
                below.append(row)
        if len(above) >= want:
            return [_Task(above, want)]
        return [_Task(above, len(above)), p, _Task(below, want - len(above) - 1)]

    def _checked(self, task: _Task) -> list:
        """The next score's rows met the k-th row found: those that beat it are chosen among with the top."""
        p, top = task.pivot, task.top
        winners = []
        for row in task.rows:
            result = self.won[(row, p)]
            if result is None:
                self.failed[row] = self._failure(row, p)
            elif result:
                winners.append(row)
        if not winners:
            return list(top)
        return [_Task(sorted(top[:-1] + winners, key=self.pos.__getitem__), self.k)]

    def _extend(self) -> bool:
        """Every task settled: if a row scored at the lowest score compared reached the top, the next score's
        rows meet the k-th row (a check task); ``True`` when one was planned."""
        if self.margin <= 0 or not self._rest or not self.done:
            return False
        top = list(self.segments)
        if not any(self.score[row] == self.floor for row in top):
            return False
        self.floor = self.score[self._rest[0]]
        band = [row for row in self._rest if self.score[row] == self.floor]
        self._rest = self._rest[len(band):]
        self.checked.append(self.floor)
        self.segments = [_Task(band, self.k, stage="check", pivot=top[-1], top=top)]
        return True

    def _failure(self, row: Any, other: Any) -> str:
        why = self._reasons.get((row, other)) or self._reasons.get((other, row))
        return f"its comparison with row {self.label(other)!r} got no answer" + (f" ({why})" if why else "")


def expected_comparisons(n: int, k: int, *, candidates: int | None = None, margin: int = 1, levels: int = 11,
                         trials: int = 3, seed: str = "unity_nb.topk.estimate") -> int:
    """The comparisons :class:`Selection` makes on ``n`` rows whose scores spread evenly over ``levels`` values and
    whose comparisons are consistent: the mean of ``trials`` simulated runs (at most 20,000 rows simulated, the
    count scaled beyond)."""
    if n < 2 or k < 1:
        return 0
    m = min(n, 20_000)
    rng = random.Random(seed)
    total = 0
    for _ in range(trials):
        truth = list(range(m))
        rng.shuffle(truth)  # row i's hidden worth
        scores = [truth[i] * levels // m for i in range(m)]
        ranked = sorted(range(m), key=lambda i: (-scores[i], i))  # ties in input order, as rows come
        sel = Selection(ranked, [scores[i] for i in ranked], min(k, m), candidates=candidates, margin=margin,
                        max_comparisons=m * m)
        while pairs := sel.next_round():
            sel.record(pairs, ["A" if truth[a] > truth[b] else "B" for a, b in pairs])
        total += sel.asked
    return round(total / trials * n / m)
