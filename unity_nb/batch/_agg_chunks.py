"""What an aggregate reads: each group's rows as texts, made as they are needed, joined into chunks sized from the
model's context window. A row longer than a chunk is split into parts, in order, each marked as a part of that row
(``[row 'p3', part 2 of 3]``): nothing is cut.

The groups are found without reading the rows' texts: a factorize and a stable sort of the ``by`` column (a
position a row, 4 bytes each), then each group's rows are read in slices as its chunks are asked for. Without
``by`` there is nothing to sort: the rows (of a DataFrame, a Series, a list or a generator) are read in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass
from typing import Any

from .._errors import UserError
from ..models import context_window_of
from ._failures import label_of
from ._rows import Template, as_text

__all__ = ("DEFAULT_WINDOW", "Groups", "Sizing", "chunk_texts", "sizing")

DEFAULT_WINDOW = 8_192
"""Tokens assumed for a model whose context window is unknown (said in the result and the summary)."""
_RESERVED = 1_024
"""Tokens of the window kept for the instructions around a chunk and for the answer (a quarter of a small one)."""
_CHARS_PER_TOKEN = 3
"""Characters a token when sizing a chunk: fewer than English prose's 4, so text that tokenizes worse still fits."""
_SLICE = 2_048
"""Rows read at a time when a group's texts are made."""


@dataclass(frozen=True, slots=True)
class Sizing:
    """How large an aggregate's chunks are, and why."""

    chunk_chars: int
    window: int | None
    """The context window (tokens) the chunks are sized from; ``None`` when ``chunk_chars=`` was given."""
    basis: str
    """How it was chosen, as a person reads it."""

    def __str__(self) -> str:
        return f"chunks of at most {self.chunk_chars:,} characters ({self.basis})"


def sizing(model: Any, chunk_chars: Any = None, context_window: Any = None) -> Sizing:
    """The chunk size: ``chunk_chars`` if given; else from the context window (``context_window=`` in tokens, else
    the model's own, else :data:`DEFAULT_WINDOW`, said), less what the instructions and the answer need, at about
    three characters a token."""
    if chunk_chars is not None:
        if isinstance(chunk_chars, bool) or not isinstance(chunk_chars, int) or chunk_chars < 200:
            raise UserError(f"chunk_chars takes a number of characters of at least 200, not {chunk_chars!r}")
        return Sizing(chunk_chars, None, "chunk_chars= as given")
    name = str(getattr(model, "name", type(model).__name__))
    if context_window is not None:
        if isinstance(context_window, bool) or not isinstance(context_window, int) or context_window < 64:
            raise UserError(f"context_window is the model's window in tokens (at least 64), not {context_window!r}")
        window, basis = context_window, f"sized from context_window={context_window:,} tokens"
    else:
        known = context_window_of(model)
        if known is not None:
            window, basis = known, f"sized from {name}'s context window of {known:,} tokens"
        else:
            window = DEFAULT_WINDOW
            basis = (f"{name}'s context window is unknown: sized from an assumed {DEFAULT_WINDOW:,} tokens; "
                     "context_window= or chunk_chars= says otherwise")
    chars = max(200, (window - min(_RESERVED, window // 4)) * _CHARS_PER_TOKEN)
    return Sizing(chars, window, basis)


def chunk_texts(texts: Iterable[tuple[Any, str]], budget: int, *, kind: str = "row",
                split: dict[Any, int] | None = None) -> Iterator[str]:
    """``texts`` (``(key, text)`` pairs, in order) joined into chunks of at most ``budget`` characters, made as they
    are asked for. A text longer than ``budget`` is split into parts, each marked ``[KIND KEY, part i of n]`` and
    placed in order; ``split`` (if given) records ``key -> n`` for each text split."""
    current: list[str] = []
    size = 0
    for key, text in texts:
        parts = [text] if len(text) <= budget else _parts(f"{kind} {label_of(key)}", text, budget)
        if len(parts) > 1 and split is not None:
            split[key] = len(parts)
        for part in parts:
            if current and size + len(part) + 2 > budget:
                yield "\n\n".join(current)
                current, size = [], 0
            current.append(part)
            size += len(part) + 2
    if current:
        yield "\n\n".join(current)


def _parts(label: str, text: str, budget: int) -> list[str]:
    """``text`` in marked parts of at most ``budget`` characters each, marker included; their texts joined are
    ``text`` (a part ends after a space or a line break near its end where there is one)."""
    reserve = len(label) + 16 + 2 * len(str(len(text)))  # "[LABEL, part I of N]\n" with I and N at their longest
    room = max(1, budget - reserve)
    pieces, start, n = [], 0, len(text)
    while n - start > room:
        end = start + room
        near = start + room * 4 // 5
        cut = max(text.rfind(" ", near, end), text.rfind("\n", near, end))
        cut = cut + 1 if cut >= 0 else end
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return [f"[{label}, part {i} of {len(pieces)}]\n{p}" for i, p in enumerate(pieces, 1)]


class Groups:
    """The groups of an aggregate's input, read lazily. Made at once (only checks); :meth:`prepare` finds the
    groups (a factorize and a sort of the ``by`` column: call it off the event loop); then ``keys`` names them,
    :meth:`rows` gives a group's rows' ``(key, text)`` as they are read, and ``missing`` counts rows without a value
    of ``by`` (in no group)."""

    def __init__(self, items: Any, template: str, by: Any) -> None:
        import pandas as pd

        self.by = by
        self.fields = Template(template).fields
        self.items: Any = items
        self.keys: Any = None
        self.missing = 0
        self._order: Any = None
        self._starts: Any = None
        self._ids: Any = None  # the groups' numbers among the column's categories, when some have no row
        if isinstance(items, pd.DataFrame | pd.Series):
            if by is not None:
                if not isinstance(items, pd.DataFrame) or by not in items.columns:
                    cols = list(items.columns) if isinstance(items, pd.DataFrame) else []
                    raise UserError(f"by names a column of the items to group by; {by!r} is not one (columns: {cols})")
                if isinstance(items[by], pd.DataFrame):
                    raise UserError(f"by names one column; the items have {items[by].shape[1]} columns named {by!r}")
            if len(items) == 0:
                raise UserError("agg needs at least one row; the input is empty")
            if isinstance(items, pd.DataFrame) and self.fields:  # the columns it shows: one no row has, said now
                Template(template).check(str(c) for c in items.columns)
            return
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise UserError(f"agg takes a Series, a DataFrame or a list of items, not {type(items).__name__}")
        if by is not None:
            raise UserError(f"by names a column of the items to group by; {by!r} is not one (the items are a "
                            f"{type(items).__name__}, not a DataFrame: pd.DataFrame(items) makes one)")
        if isinstance(items, Sized) and not isinstance(items, Iterator):
            if len(items) == 0:
                raise UserError("agg needs at least one row; the input is empty")
        else:  # a generator: its first item read now, to refuse an empty one before the operation starts
            it = iter(items)
            first = next(it, _NONE)
            if first is _NONE:
                raise UserError("agg needs at least one row; the input is empty")
            self.items = itertools.chain([first], it)

    def prepare(self) -> None:
        """Find the groups: ``keys`` (sorted when they sort), each group's rows' positions (without ``by``: one
        group, ``"all"``, and nothing to find)."""
        import numpy as np
        import pandas as pd

        if self.keys is not None:
            return
        if self.by is None:
            self.keys = pd.Index(["all"])
            return
        codes, keys = _codes(self.items[self.by])
        self._order, starts, self.missing = _grouped(codes, len(keys))
        del codes
        present = np.flatnonzero(np.diff(starts))  # a category no row has is no group
        self._starts = starts
        self._ids = present if len(present) < len(keys) else None
        self.keys = pd.Index(keys[present] if self._ids is not None else keys, name=self.by)

    def __len__(self) -> int:
        return 0 if self.keys is None else len(self.keys)

    def name(self, group: int) -> Any:
        return self.keys[group]

    @property
    def rows_held(self) -> int:
        """Rows whose positions the groups hold (4 bytes each): every row with a group."""
        return 0 if self._order is None else len(self._order)

    def rows(self, group: int) -> Iterator[tuple[Any, str]]:
        """Group ``group``'s rows, in the input's order: ``(key, text)``, each text the values the template names
        (``name: value``), else every column's (a Series' or a list's value as it is)."""
        import pandas as pd

        items = self.items
        if isinstance(items, pd.DataFrame):
            if self.by is None:
                yield from _frame_texts(items, self.fields, (slice(i, i + _SLICE) for i in range(0, len(items),
                                                                                             _SLICE)))
                return
            at = group if self._ids is None else int(self._ids[group])
            positions = self._order[self._starts[at]:self._starts[at + 1]]
            yield from _frame_texts(items, self.fields, (positions[i:i + _SLICE] for i in range(0, len(positions),
                                                                                                 _SLICE)))
        elif isinstance(items, pd.Series):
            for start in range(0, len(items), _SLICE):
                part = items.iloc[start:start + _SLICE]
                yield from ((k, as_text(v)) for k, v in zip(part.index, part.to_numpy(dtype=object)))
        else:
            for i, item in enumerate(items):
                if isinstance(item, Mapping):
                    named = [k for k in item if str(k) in self.fields] or list(item)
                    yield i, "\n".join(f"{k}: {as_text(item[k])}" for k in named)
                else:
                    yield i, as_text(item)


_NONE = object()
_BLOCK = 1 << 18
"""Rows of the ``by`` column handled at a time while the groups are found (what is held beside the codes)."""


def _codes(column: Any) -> tuple[Any, Any]:
    """Each row's group number (-1: no value) as int32, and the groups' keys, sorted when they sort: a categorical's
    own codes and categories; else factorized a block at a time into one table (pandas' factorize of the whole
    column would hold 8 bytes a row and its hash table at once)."""
    import numpy as np
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), column.cat.categories
    n = len(column)
    codes = np.empty(n, dtype=np.int32)
    table: dict[Any, int] = {}
    for b in range(0, n, _BLOCK):
        local, uniques = pd.factorize(column.iloc[b:b + _BLOCK])
        if not len(uniques):
            codes[b:b + _BLOCK] = -1
            continue
        ids = np.fromiter((table.setdefault(v, len(table)) for v in uniques), dtype=np.int64, count=len(uniques))
        codes[b:b + _BLOCK] = np.where(local >= 0, ids[local], -1)
    keys = pd.Index(list(table), tupleize_cols=False)
    del table
    try:
        perm = keys.argsort()
    except TypeError:  # keys that do not sort among themselves: in the order they first come
        return codes, keys
    rank = np.empty(len(keys), dtype=np.int32)
    rank[perm] = np.arange(len(keys), dtype=np.int32)
    for b in range(0, n, _BLOCK):
        block = codes[b:b + _BLOCK]
        valid = block >= 0
        block[valid] = rank[block[valid]]
    return codes, keys[perm]


def _runs(ordered: Any) -> tuple[Any, Any, Any]:
    """The runs of equal values of a sorted array: each run's value, start and length."""
    import numpy as np

    if not len(ordered):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    starts = np.concatenate([[0], np.flatnonzero(np.diff(ordered)) + 1])
    lengths = np.diff(np.append(starts, len(ordered)))
    return ordered[starts], starts, lengths


def _grouped(codes: Any, groups: int) -> tuple[Any, Any, int]:
    """A counting sort of the rows by group, a block at a time: every row's position in group order (stable: a
    group's rows in the input's order; int32 when they fit), where each group starts in it, and how many rows have
    no group (left out)."""
    import numpy as np

    n = len(codes)
    counts = np.zeros(groups, dtype=np.int64)
    missing = 0
    for b in range(0, n, _BLOCK):
        block = codes[b:b + _BLOCK]
        valid = block[block >= 0]
        missing += len(block) - len(valid)
        if groups <= 4 * _BLOCK:
            counts += np.bincount(valid, minlength=groups)
        else:
            ids, _s, lengths = _runs(np.sort(valid))
            counts[ids] += lengths
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = np.empty(n - missing, dtype=np.int32 if n < 2**31 else np.int64)
    following = starts[:-1].copy()
    for b in range(0, n, _BLOCK):
        block = codes[b:b + _BLOCK]
        rows = np.flatnonzero(block >= 0)
        values = block[rows]
        by_group = np.argsort(values.astype(np.uint16) if groups <= 1 << 16 else values, kind="stable")  # radix
        ordered = values[by_group]
        ids, run_starts, lengths = _runs(ordered)
        rank = np.arange(len(ordered)) - np.repeat(run_starts, lengths)
        order[following[ordered] + rank] = rows[by_group] + b
        following[ids] += lengths
    return order, starts, missing


def _frame_texts(frame: Any, fields: list[str], slices: Iterator[Any]) -> Iterator[tuple[Any, str]]:
    columns = [str(c) for c in frame.columns]
    named = [i for i, c in enumerate(columns) if c in fields] or list(range(len(columns)))
    names = [columns[i] for i in named]
    for rows in slices:
        part = frame.iloc[rows, named]
        for key, values in zip(part.index, part.itertuples(index=False, name=None)):
            yield key, "\n".join(f"{c}: {as_text(v)}" for c, v in zip(names, values))
