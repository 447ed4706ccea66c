"""Blocking for a join: which right rows each left row is asked about, without comparing every pair.

Each side's text (the values the task names of it) is cut into words: three letters or more, lower case, common
English words left out; a missing value (None, NaN, NA, NaT) gives none, so rows missing a value are not blocked
together by it. A word in more than ``common`` of the right rows (10% by default, at least 5) is too
common to say anything and is ignored; every other word weighs its rarity, ``idf = log(m / rows having it)``.

A pair is scored by the cosine of the two rows' words, each weighing its idf: the shared words' idf² over the
right row's length (``sqrt`` of the sum of its words' idf²; the left row's length is the same for every right row
it meets, so it does not change the order). A right row stuffed with other rows' words shares many words with
many left rows, but its length grows with them: it does not crowd out a short right row that shares the rarest
words. Each left row's right rows sharing at least one word are its **candidates**, ranked by that score (ties by
position); blocking asks about the first ``per_left``.

The right side's index (:class:`WordIndex`) is built row by row, in a worker thread for a join (``indexed`` says
how far it is): sorted arrays of 4 bytes a posting and 24 a word, so ten million right rows of ten words hold
about 400 MB, and each left row is scored when its pairs are made, so nothing grows with the left side.
"""

from __future__ import annotations

import heapq
import re
import threading
from array import array
from collections.abc import Iterable
from typing import Any

from ._rows import _missing

__all__ = ("WordIndex", "block_pairs", "words")

_WORD = re.compile(r"[^\W_]{3,}")
_STOP = frozenset(
    "the and for are but not you all any can had her was one our out has have this that with from they will "
    "would there their what which when who how its into than then them these those were been being also such "
    "only over more most other some very about after before between both each few under while where why use "
    "used using our may might shall should could does did doing".split()
)
_INT = "i" if array("i").itemsize == 4 else "l"
_NP_INT = "int32" if array(_INT).itemsize == 4 else "int64"
_CHECK_EVERY = 4096
"""Right rows indexed between two looks at ``stop``."""


def words(text: Any) -> set[str]:
    """The words blocking compares: three letters or more, lower case, common English words left out; none of a
    missing value (None, NaN, NA, NaT: not the word 'nan' or 'none')."""
    if _missing(text):
        return set()
    found = set(_WORD.findall(str(text).lower()))
    found -= _STOP
    return found


class WordIndex:
    """The right side's words: for each word not too common, the right rows holding it; each right row's length.
    Built once (:meth:`build`), then read by :meth:`scores` and :meth:`ranked` for each left row.

    Held as sorted arrays, not a dict of words: each word is its 64-bit hash (two words whose hashes collide count
    as one), the postings one array of right rows grouped by word, so a word costs 24 bytes and a posting 4, where
    a dict of word to list costs about 200 bytes a word (a column of distinct codes is a word a row)."""

    def __init__(self, common: float = 0.1) -> None:
        self.common = common
        self.m = 0
        """Right rows."""
        self.indexed = 0
        """Right rows indexed so far (``m`` once built)."""
        self.ready = False
        self.keys: Any = None  # the words' hashes, sorted (numpy int64)
        self.starts: Any = None  # where each word's rows start in ``rows``
        self.counts: Any = None  # how many rows hold it
        self.w2: Any = None  # its idf, squared
        self.rows: Any = None  # the right rows of every word, word after word, each word's in order
        self.norm: Any = array("d")

    def build(self, texts: Iterable[str], m: int, stop: threading.Event | None = None) -> bool:
        """Index the ``m`` right ``texts``; False if ``stop`` was set before the end (the index is then unusable)."""
        import numpy as np

        self.m = m
        hashes, rows = array("q"), array(_INT)
        add_hash, add_row = hashes.append, rows.append
        for j, text in enumerate(texts):
            if not j % _CHECK_EVERY:
                self.indexed = j
                if stop is not None and stop.is_set():
                    return False
            for w in words(text):
                add_hash(hash(w))
                add_row(j)
        h = np.frombuffer(hashes, dtype=np.int64)
        order = np.argsort(h, kind="stable")  # grouped by word; each word's rows in order
        h = h[order]
        js = np.frombuffer(rows, dtype=_NP_INT)[order]
        del order, hashes, rows
        first = np.ones(len(h), dtype=bool)
        first[1:] = h[1:] != h[:-1]
        starts = np.flatnonzero(first)
        keys, counts = h[starts], np.diff(np.append(starts, len(h)))
        del h, first
        keep = counts <= max(5, int(self.common * m))  # a word in more says nothing, and would be read for every row
        if not keep.all():
            js = js[np.repeat(keep, counts)]
            keys, counts = keys[keep], counts[keep]
            starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        idf = np.log(m / counts) + 1e-6 if len(counts) else np.zeros(0)
        w2 = idf * idf
        lengths = np.sqrt(np.bincount(js, weights=np.repeat(w2, counts), minlength=m)) if len(js) else np.zeros(m)
        self.keys, self.starts, self.counts, self.w2, self.rows = keys, starts, counts, w2, js
        self.norm = array("d")
        self.norm.frombytes(lengths.astype(np.float64).tobytes())
        self.indexed, self.ready = m, True
        return True

    def scores(self, text: str) -> dict[int, float]:
        """The candidates of a left row's ``text``: each right row sharing a word with it, and the shared words'
        idf² summed (words taken in order, rows in order: the same on every run)."""
        import numpy as np

        score: dict[int, float] = {}
        found = sorted(words(text))
        keys = self.keys
        if not found or keys is None or not len(keys):
            return score
        h = np.fromiter((hash(w) for w in found), dtype=np.int64, count=len(found))
        at = np.minimum(np.searchsorted(keys, h), len(keys) - 1)
        at = at[keys[at] == h]
        if not len(at):
            return score
        get, rows = score.get, self.rows
        for s, c, w2 in zip(self.starts[at].tolist(), self.counts[at].tolist(), self.w2[at].tolist(), strict=True):
            for j in rows[s: s + c].tolist():
                score[j] = get(j, 0.0) + w2
        return score

    def ranked(self, score: dict[int, float], k: int | None = None) -> list[int]:
        """The first ``k`` candidates (every one with ``k=None``) by cosine, ties by position."""
        norm = self.norm
        if k is None or len(score) <= k:
            return sorted(score, key=lambda j: (-score[j] / norm[j], j))
        best = heapq.nsmallest(k, score.items(), key=lambda kv: (-kv[1] / norm[kv[0]], kv[0]))
        return [j for j, _s in best]

    def rank_of(self, score: dict[int, float], j: int) -> int:
        """Where right row ``j`` ranks among the candidates (0 is the first); ``len(score)`` if it is not one."""
        if j not in score:
            return len(score)
        norm = self.norm
        key = (-score[j] / norm[j], j)
        return sum(1 for o, s in score.items() if (-s / norm[o], o) < key)


def block_pairs(left: list[str], right: list[str], *, per_left: int = 5, common: float = 0.1) -> list[tuple[int, int]]:
    """Positions ``(i, j)`` of the pairs blocking keeps: for each left text, its first ``per_left`` candidates
    (right texts sharing a word that is not common with it, ranked by cosine), in order of ``j``."""
    index = WordIndex(common)
    index.build(right, len(right))
    pairs: list[tuple[int, int]] = []
    for i, text in enumerate(left):
        pairs.extend((i, j) for j in sorted(index.ranked(index.scores(text), per_left)))
    return pairs
