"""A DataFrame's fingerprint: its shape, and its first column labels and dtypes read only when needed.

Every frame in the namespace is fingerprinted at each run's start (:func:`._describe.fingerprint`), and most
fingerprints are only ever compared with themselves (the frame was not changed) or described (about twenty of
them). :func:`frame_fingerprint` takes what the labels and dtypes are read from, all of it immutable, and
:class:`FrameParts` reads them when first asked. Frames over the very same objects (a frame's copies, which
share its columns' labels, blocks' dtypes and placements) share one FrameParts: made and read once.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from operator import attrgetter, is_
from typing import Any

from ._frames import dtype_text, frame_dtypes, labels

__all__ = ("FP_COLUMNS", "FrameParts", "frame_fingerprint", "frame_parts")

_DTYPE, _PLACE = attrgetter("values.dtype"), attrgetter("_mgr_locs")

FP_COLUMNS = 200
"""Columns a frame's fingerprint names (labels and dtypes)."""


_SHARED: dict[tuple, Any] = {}
"""``(columns' type, id of its labels, ids of the blocks' placements) -> weak reference to the parts made for
them`` (:func:`frame_fingerprint`): the parts of a frame, given to its copies and to frames over the very same
labels and blocks' layout whose blocks' dtypes are the very same too (one object, its text read once). A
reference only: the parts hold every object their key names, so a live one's key names those very objects,
and nothing here outlives the fingerprints that hold them (a dead one is a miss). At most :data:`_SHARED_MAX`
(emptied when full)."""
_SHARED_MAX = 4096


class FrameParts:
    """A frame's first :data:`FP_COLUMNS` column labels and dtypes, as text, read only when first needed.

    Every frame in the namespace is fingerprinted at each run's start, and most fingerprints are only ever
    compared with themselves. This holds what the text is read from, all of it immutable: the columns Index
    (pandas replaces it for any change of labels; its name is not read) and each block's dtype and placement
    (pandas gives a block a new placement object, never changes one). So the text, read when a description
    needs it or when another frame's parts are compared with these, is what it was when the fingerprint was
    taken. It holds labels and dtypes only, never a block or its data.
    """

    __slots__ = ("__weakref__", "_labels", "_shape", "_text", "_where", "columns", "dtypes", "places", "width")

    _labels: list
    _where: tuple[list[int], list[int]]

    def __init__(self, columns: Any, dtypes: tuple, places: tuple) -> None:
        self.columns = columns
        self.dtypes = dtypes
        """Each block's dtype."""
        self.places = places
        """Each block's placement (its columns)."""
        self.width = len(columns)
        """How many columns (every frame over these parts has as many: an Index does not change its length)."""
        self._shape: tuple[int, int] = (-1, self.width)
        """The shape of the last frame fingerprinted over these parts (its copies give the same tuple: one object
        fewer for the collector to track per copy)."""
        self._text: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        # _labels and _where are set with _text (read only after it): every frame of the namespace has parts, and
        # objects made for nothing wake the collector sooner

    def where(self) -> tuple[list[int], list[int]]:
        """For each of the first columns, the number of the block holding it and its place in that block (pandas'
        ``blknos`` and ``blklocs``, which a new block manager builds for all its columns when first asked)."""
        if self._text is None:
            self.text()
        return self._where

    def labels(self) -> list:
        """The first columns' labels themselves (:func:`labels`)."""
        if self._text is None:
            self.text()
        return self._labels

    def text(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(labels, dtypes)``: the first columns' labels (``str``) and dtypes (:func:`dtype_text`)."""
        text = self._text
        if text is None:
            n = min(len(self.columns), FP_COLUMNS)
            dtypes = [""] * n
            blknos, blklocs = [-1] * n, [-1] * n
            for no, (dtype, placement) in enumerate(zip(self.dtypes, self.places)):
                name = dtype_text(dtype)
                locs = placement.indexer
                places: Iterable[int]
                at: Iterable[int]
                if type(locs) is slice:
                    places = range(*locs.indices(n))
                    at = range(len(places))
                elif len(locs) <= 64:  # a few places: read as a list (numpy's mask costs more)
                    both = [(loc, i) for i, loc in enumerate(locs.tolist()) if loc < n]
                    places, at = [loc for loc, _i in both], [i for _loc, i in both]
                else:
                    mask = locs < n
                    places, at = locs[mask].tolist(), mask.nonzero()[0].tolist()
                for loc, i in zip(places, at):
                    dtypes[loc] = name
                    blknos[loc] = no
                    blklocs[loc] = i
            self._where = (blknos, blklocs)
            self._labels = labels(self.columns, n)
            text = self._text = (tuple(map(str, self._labels)), tuple(dtypes))
        return text

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not FrameParts:
            return NotImplemented
        if (
            self.columns is other.columns and len(self.dtypes) == len(other.dtypes)
            and all(map(is_, self.dtypes, other.dtypes)) and all(map(is_, self.places, other.places))
        ):
            return True  # the very same objects (held: no other can have their identity)
        return self.text() == other.text()

    def __hash__(self) -> int:
        return hash(self.text())

    def __repr__(self) -> str:
        return f"FrameParts{self.text()!r}"


def frame_fingerprint(df: Any, axes: list | None = None, blocks: tuple | None = None) -> tuple:
    """``(id, type, shape, FrameParts)``: a frame's fingerprint, from its block manager, its labels and dtypes
    to be read when needed (:class:`FrameParts`). A frame over the very labels, dtypes and placements of another
    (a copy, the same frame loaded again) has the same parts (see :data:`_SHARED`): not the frame's own columns
    Index, then (the fingerprint cache holds that). ``axes`` and ``blocks``: its block manager's, when just read
    (both or neither). Raises AttributeError for another pandas layout."""
    if axes is None or blocks is None:
        mgr = df._mgr
        axes, blocks = mgr.axes, mgr.blocks
    columns = axes[0]
    # the labels (a plain Index's array, which a copy's columns Index shares; any other Index itself) and each
    # block's placement, by identity; the dtypes, compared one by one with the parts found
    data = columns._data if type(columns).__name__ == "Index" else columns
    reads = (type(columns), id(data), *map(id, map(_PLACE, blocks)))
    known = _SHARED.get(reads)
    parts = known() if known is not None else None
    if parts is None or not all(map(is_, map(_DTYPE, blocks), parts.dtypes)):
        # two tuples, not one a block: every frame of the namespace has one, and fewer objects wake the collector
        parts = FrameParts(columns, tuple(map(_DTYPE, blocks)), tuple(map(_PLACE, blocks)))
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        _SHARED[reads] = weakref.ref(parts)
    index = axes[1]
    # a RangeIndex's length is its range's (pandas' __len__ is a Python call; every new frame's fingerprint reads it)
    rows = len(index._range) if type(index).__name__ == "RangeIndex" else len(index)
    shape = parts._shape
    if shape[0] != rows:
        shape = parts._shape = (rows, parts.width)
    return (id(df), type(df), shape, parts)


def frame_parts(df: Any, n: int) -> tuple[tuple[int, int], tuple[str, ...], tuple[str, ...]]:
    """``df``'s shape, and its first ``n`` column labels and dtypes as text, read from the block manager (a
    frame's fingerprint: every frame in the namespace is fingerprinted at each run's start, where pandas'
    ``shape``, ``columns`` and ``dtypes`` cost several times more)."""
    try:
        mgr = df._mgr
        axes = mgr.axes
        columns = axes[0]
        width = len(columns)
        shape = (len(axes[1]), width)
        blocks = mgr.blocks
        if len(blocks) == 1:  # one dtype: no need to place the columns
            dtypes = (dtype_text(blocks[0].values.dtype),) * min(width, n)
        else:
            texts = [dtype_text(b.values.dtype) for b in blocks]
            dtypes = tuple([texts[b] for b in mgr.blknos[:n].tolist()])
    except (AttributeError, IndexError):  # another pandas layout
        return df.shape, tuple(map(str, labels(df.columns, n))), tuple(frame_dtypes(df, n))
    return shape, tuple(map(str, labels(columns, n))), dtypes
