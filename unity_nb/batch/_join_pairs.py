"""The pairs a join asks, made as they start: blocked pairs left row by left row, and the recall check's samples.

A :class:`PairPlan` holds the two sides (their values read by position, in a worker thread), the right side's
:class:`WordIndex`, and what the check has learnt so far; each round of the join is one stream of rows for a map
(:meth:`PairPlan.stream`), recorded in an :class:`Asked` (position -> left row, right row, why asked: 9 bytes a
pair) so its answers are read back as pairs. Nothing is made ahead but what the map takes: a 10,000,000-row left
side costs its first pair's scoring, not ten million.

One round's stream: the far sample first (round one only: pairs sharing no word, drawn before any pair is asked),
then each left row's candidates ranked ``[k_before, k)`` (round one ``[0, per_left)``), skipping pairs a sample
already asked, then the near sample (a reservoir over the candidates ranked past ``k``, filled as the rows go by),
then, in round one, more of the far sample if the near stratum was too small for its half.
"""

from __future__ import annotations

import collections
import random
from array import array
from collections.abc import Iterator
from typing import Any

from .._errors import UserError
from ._blocking import _INT, WordIndex
from ._recall import Reservoir, Stratum
from ._rows import Template, _missing, as_text

__all__ = ("ALL", "ASKED_AS", "BLOCKED", "FAR", "NEAR", "WIDENED", "Asked", "Listed", "PairPlan", "Side")

BLOCKED, WIDENED, NEAR, FAR, ALL = range(5)
ASKED_AS = ("blocked", "widened", "sample (near)", "sample (far)", "all pairs")
"""Why a pair was asked, by its kind (the verdicts' ``asked`` column)."""
_ENUMERATE = 200_000
"""Up to this many pairs in all, the pairs sharing no word are listed and sampled exactly; above, drawn at random
and kept if they share no word."""
_TRIES = 20
"""Draws per far pair wanted, at most (a join whose pairs nearly all share words has few far pairs to find)."""


class Listed:
    """A list (or a tuple) as a side: one column, ``value``, its positions the index (read as it is, not copied)."""

    def __init__(self, items: list | tuple) -> None:
        import pandas as pd

        self.items = items
        self.columns = ["value"]
        self.index = pd.RangeIndex(len(items))

    def __len__(self) -> int:
        return len(self.items)


class Side:
    """One side of a join: its rows' values by position (read by :meth:`load`), labels, and its text for
    blocking (the values of the columns the task names, or every column when it names none)."""

    def __init__(self, frame: Any, columns: list[str]) -> None:
        self.frame = frame
        self.n = len(frame)
        self.named = list(dict.fromkeys(columns))
        self.index = frame.index
        self._values: dict[str, Any] = {}
        self._texts: list[Any] = []
        self._text_columns = self.named or [str(c) for c in frame.columns]

    def load(self) -> None:
        """Read the columns' values into arrays (a copy only where pandas must convert: in the worker thread)."""
        if isinstance(self.frame, Listed):
            self._values["value"] = self.frame.items
        else:
            frame = self.frame.rename(columns=str)
            for col in dict.fromkeys([*self.named, *self._text_columns]):
                self._values[col] = frame[col].to_numpy(dtype=object)
        self._texts = [self._values[c] for c in self._text_columns]

    def text(self, i: int) -> str:
        """Row ``i``'s text for blocking: a missing value gives none (not 'nan' or 'None', a word rows would
        share)."""
        texts = self._texts
        if len(texts) == 1:
            return _blocked(texts[0][i])
        return " \n".join(_blocked(t[i]) for t in texts)

    def shown(self, i: int) -> str:
        """Row ``i``'s text as a prompt shows it (a task naming no column): a missing value said so, not 'nan'."""
        return " \n".join(as_text(t[i]) for t in self._texts)

    def value(self, column: str, i: int) -> Any:
        return self._values[column][i]


def _blocked(value: Any) -> str:
    """A value as blocking reads it: its text, or nothing when it is missing."""
    return "" if _missing(value) else str(value)


class Asked:
    """The pairs one phase asked, by position: left row, right row and kind (why it was asked)."""

    __slots__ = ("kind", "left", "right")

    def __init__(self) -> None:
        self.left = array(_INT)
        self.right = array(_INT)
        self.kind = bytearray()

    def __len__(self) -> int:
        return len(self.kind)

    def count(self, *kinds: int) -> int:
        return sum(self.kind.count(k) for k in kinds)


class PairPlan:
    """The pairs of a join and the check of its recall (see the module's docstring)."""

    def __init__(self, left: Side, right: Side, names: tuple[str, str], *, per_left: int, common: float,
                 sample: int, seed: int) -> None:
        self.left, self.right, self.names = left, right, names
        self.index = WordIndex(common)
        self.k = per_left
        """Right rows asked per left row (widened by later rounds)."""
        self.sample = sample
        self.seed = seed
        self.samples: dict[int, set[int]] = collections.defaultdict(set)
        """Pairs asked as samples, by left row: never asked again, and left out of later samples."""
        self.far: list[tuple[int, int]] = []
        """The far sample in the order it is asked (its first half before any pair, the rest after the stream)."""
        self.far_asked = 0
        self.far_total: int | None = None
        """Pairs sharing no word (known once the first stream ended, or when listed)."""
        self.candidates: collections.Counter[int] = collections.Counter()
        """Left rows by their number of candidates (what widening to ``k`` would add is read from it)."""
        self.near_total = 0
        """The near stratum of the last round: candidates ranked past ``k``, not asked as samples."""
        self.near_asked = 0
        self.rounds = 0

    @property
    def pairs(self) -> int:
        return self.left.n * self.right.n

    # -- the worker thread's part --------------------------------------------------------------------

    def prepare(self, stop: Any) -> bool:
        """Read both sides and index the right one; then draw the far sample. False if stopped."""
        self.left.load()
        self.right.load()
        if not self.index.build((self.right.text(j) for j in range(self.right.n)), self.right.n, stop):
            return False
        if self.sample:
            self.far = self._draw_far(self.sample)
        return True

    def _draw_far(self, size: int) -> list[tuple[int, int]]:
        """Up to ``size`` pairs sharing no word with each other, in a seeded random order."""
        rng = random.Random(f"{self.seed}:far")
        n, m = self.left.n, self.right.n
        if n * m <= _ENUMERATE:
            far: list[tuple[int, int]] = []
            for i in range(n):
                shared = self.index.scores(self.left.text(i))
                far.extend((i, j) for j in range(m) if j not in shared)
            self.far_total = len(far)
            return rng.sample(far, min(size, len(far)))
        picked: dict[tuple[int, int], None] = {}
        for _ in range(_TRIES * size):
            if len(picked) >= size:
                break
            i, j = rng.randrange(n), rng.randrange(m)
            if (i, j) not in picked and j not in self.index.scores(self.left.text(i)):
                picked[(i, j)] = None
        return list(picked)

    # -- the rows of a round ---------------------------------------------------------------------------

    def row(self, asked: Asked, i: int, j: int, kind: int) -> dict[str, Any]:
        """The map's row for pair ``(i, j)``: the values its task names (``{papers.abstract}``), recorded."""
        asked.left.append(i)
        asked.right.append(j)
        asked.kind.append(kind)
        (a, b), left, right = self.names, self.left, self.right
        if not left.named and not right.named:  # the task names no column: each side's text follows it
            return {a: left.shown(i), b: right.shown(j)}
        out = {f"{a}.{c}": left.value(c, i) for c in left.named}
        out.update({f"{b}.{c}": right.value(c, j) for c in right.named})
        return out

    def stream(self, asked: Asked, k_before: int, k: int) -> Iterator[dict[str, Any]]:
        """One round's rows (see the module's docstring): ``[k_before, k)`` of each left row's candidates."""
        self.rounds += 1
        first = self.rounds == 1
        kind = BLOCKED if first else WIDENED
        index, left, samples = self.index, self.left, self.samples
        half = min(len(self.far), self.sample // 2) if first else 0  # the far sample's half, asked first
        for i, j in self.far[:half]:
            samples[i].add(j)
            self.far_asked += 1
            yield self.row(asked, i, j, FAR)
        near_size = self.sample - half
        reservoir = Reservoir(near_size, random.Random(f"{self.seed}:near:{self.rounds}"))
        shared_total = 0
        for i in range(left.n):
            score = index.scores(left.text(i))
            c = len(score)
            if first:
                self.candidates[c] += 1
                shared_total += c
            if c <= k_before:
                continue
            top = index.ranked(score, k)
            taken = samples.get(i, ())
            for j in top[k_before:]:
                if j not in taken:
                    yield self.row(asked, i, j, kind)
            if c > k and near_size:
                topset = set(top)
                before = [j for j in taken if j in score and j not in topset] if taken else []
                reservoir.offer(c - len(top) - len(before),
                                lambda i=i, score=score, topset=topset, taken=taken: [
                                    (i, j) for j in score if j not in topset and j not in taken])
        if first:
            self.far_total = self.pairs - shared_total
        self.near_total, self.near_asked = reservoir.seen, len(reservoir.items)
        for i, j in reservoir.items:
            samples[i].add(j)
            yield self.row(asked, i, j, NEAR)
        if first and self.sample:  # the near stratum was smaller than its half: the far sample takes the rest
            for i, j in self.far[half: half + near_size - len(reservoir.items)]:
                samples[i].add(j)
                self.far_asked += 1
                yield self.row(asked, i, j, FAR)

    def every_pair(self, asked: Asked) -> Iterator[dict[str, Any]]:
        """Every pair not asked yet, left row by left row (the fallback; ``blocking=None`` from the start)."""
        index, left, m = self.index, self.left, self.right.n
        for i in range(left.n):
            skip: set[int] = set(self.samples.get(i, ()))
            if self.rounds:
                skip.update(index.ranked(index.scores(left.text(i)), self.k))
            for j in range(m):
                if j not in skip:
                    yield self.row(asked, i, j, ALL)

    # -- what the samples say ------------------------------------------------------------------------

    def strata(self, far_hits: int, far_ok: int, near_hits: int, near_ok: int) -> list[Stratum]:
        far_total = self.far_total or 0
        return [Stratum("far", max(0, far_total - self.far_asked), far_ok, far_hits),
                Stratum("near", max(0, self.near_total - self.near_asked), near_ok, near_hits)]

    def added(self, k: int) -> int:
        """Pairs widening every left row from ``self.k`` to ``k`` candidates would ask."""
        return sum(n * (min(c, k) - min(c, self.k)) for c, n in self.candidates.items())

    def widest(self) -> int:
        return max(self.candidates, default=0)

    def rank(self, i: int, j: int) -> int:
        """Where right row ``j`` ranks among left row ``i``'s candidates."""
        return self.index.rank_of(self.index.scores(self.left.text(i)), j)


def sides_of(template: str, names: tuple[str, str], left: Any, right: Any) -> tuple[list[str], list[str]]:
    """The columns of each side the template names (``{papers.abstract}``), checked."""
    said: tuple[list[str], list[str]] = ([], [])
    for field in Template(template).fields:
        side, dot, column = field.partition(".")
        if not dot or side not in names:
            raise UserError(f"the join's task names {{{field}}}: a join's fields name a side and a column, "
                            f"{{{names[0]}.column}} or {{{names[1]}.column}}")
        frame = left if side == names[0] else right
        if column not in [str(c) for c in frame.columns]:
            raise UserError(f"the join's task names {{{field}}}, and {side} has no column {column!r}; columns: "
                            f"{[str(c) for c in frame.columns]}")
        said[names.index(side)].append(column)
    return said
