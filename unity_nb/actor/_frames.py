"""A DataFrame's head as text, formatted from its blocks, and each frame's description kept until it could differ.

The system prompt describes up to about twenty frames at each run's start, and the description's rows
(``df.iloc[:3, :12].to_string()``) cost pandas about a millisecond a frame. Here the head is read from the
block manager (a slice of each block's array) and laid out as ``to_string`` lays it out (index left, columns
right-aligned two spaces apart, floats to six decimals with the common trailing zeros cut, the scientific form
past 1e6 or under 1e-6, cells past 23 characters cut): a few tens of microseconds a frame. A layout this does
not know (a MultiIndex, a named columns index, no columns) goes through ``to_string`` as before.

A frame's description is kept (:func:`frame_text`) and given again while nothing it says could have changed.
How a kept description is never stale:

- shape, column labels and dtypes: the description is kept with the frame's fingerprint, which
  :func:`._describe.fingerprint` reuses only while the frame, its columns Index, blocks tuple and blocks are the
  very objects it was made from (weak references drop it when any of them goes); pandas replaces one of them
  for every change of shape, labels or dtypes. The axes are Index objects, immutable but for their names:
  the index's and the columns' names are compared on every use;
- the row labels: a RangeIndex's range (its start, stop and step), compared on every use; any other index's
  first labels, as the values below;
- the values shown: what the head reads from each block (the first three values of every column of a block
  that holds a shown column, and of the row index) is compared on every use with what it read when the
  description was made: as bytes for numbers, dates and categories' codes (a cell written in place differs
  there); as the identities of the very objects for cells held as Python objects, which the kept entry holds
  so no other object can take their identity, and only when every one is of an immutable type (str, int,
  float, ...); as the values themselves for strings kept in pyarrow (pandas 3's ``str``: each read makes new
  ``str`` objects, and a string is what it reads), read again only when the block's pyarrow array is another
  than the one read then (known by a weak reference: pyarrow arrays are immutable, and pandas writes a cell by
  making a new one). A block of any other kind (other pyarrow arrays, a mutable
  object in a shown cell) is not compared: the frame is described anew every time.

So a hit costs a fingerprint lookup and a slice of each shown block, a few microseconds a frame. When only some
blocks' heads read differently (a cell written), the other blocks' columns of the head are kept as they were,
and so are a block of numbers' columns whose own first rows read the same.

A new object (a frame loaded again, a copy) has nothing kept under its identity, but it may show what another
showed: descriptions are also kept by everything they read, as values (:func:`_content_key`: shape, labels
and their types, dtypes, where each shown column is, the row index and every shown block's first rows as
compared above), a bounded number of them; a new frame whose key is one of them is given that description.
The row labels are not in the key but beside it: a frame showing all another showed under other labels (a
copy indexed anew) is given its columns as laid out, and when its labels are a RangeIndex's only their column
is made (:func:`_relabelled`).
"""

from __future__ import annotations

import weakref
from typing import Any

from ._arrays import ROWS
from ._arrays import arrow_head as _arrow_head
from ._arrays import arrow_strings as _arrow_strings
from ._arrays import column_head as _column
from ._arrays import ndarray_of as _ndarray
from ._cells import cell_text as _text
from ._cells import column_cells as _cells
from ._probe import COLUMNS, head_probe, reads_as_kept, strings_kept

__all__ = (
    "dtype_text", "fingerprint_text", "forget", "frame_dtypes", "frame_head", "frame_text", "kept_text", "labels",
)


_DTYPE_TEXT: dict[int, tuple[Any, str]] = {}
"""``id(dtype) -> (dtype, str(dtype))``: the dtype held, so an equal id is the very dtype (dtypes do not change)."""


def dtype_text(dtype: Any) -> str:
    """``str(dtype)``, kept (naming one costs a microsecond or two; a frame's columns share a few dtypes)."""
    kept = _DTYPE_TEXT.get(id(dtype))
    if kept is not None and kept[0] is dtype:
        return kept[1]
    if type(dtype).__name__ == "CategoricalDtype":  # its own per column, and it holds the categories: not kept
        return "category"
    if len(_DTYPE_TEXT) >= 256:
        _DTYPE_TEXT.clear()
    text = str(dtype)
    _DTYPE_TEXT[id(dtype)] = (dtype, text)
    return text



# -- formatting -------------------------------------------------------------------------------------


def labels(index: Any, n: int) -> list:
    """``index[:n].tolist()``, from the array under the index when it is a plain one (the Index costs more)."""
    values = index._values
    chunked = _arrow_strings(values)
    if chunked is not None:
        return _arrow_head(values, chunked, n)
    arr = _ndarray(values)
    if arr is not None and arr.ndim == 1 and arr.dtype.kind not in "mM" and (
        arr is values or type(values).__name__ == "StringArray"
    ):
        return arr[:n].tolist()
    return index[:n].tolist()


def frame_head(
    df: Any, shown: list, reuse: dict[int, dict[int, list[str]]] | None = None,
    where: tuple[list[int], list[int]] | None = None, probe: tuple | None = None,
) -> tuple[str, dict]:
    """``df.iloc[:3, :12].to_string(max_colwidth=24, show_dimensions=False)``, laid out from the blocks (``shown``:
    the labels of the first 12 columns, :func:`labels`), and the columns made (title and cells, aligned),
    ``{block number: {place in the block: column}}``. ``reuse`` gives such columns of blocks whose head reads
    as when they were made (a column's title is the fingerprint's, and its alignment its own). ``where``: the
    first columns' block numbers and places in their blocks, when known (pandas builds them for every column).
    ``probe``: :func:`._probe.head_probe`'s, taken just before: for a frame described for the first time (no ``reuse``),
    a column laid out before from a block whose head read the same (:data:`_LAID`) is taken as it was."""
    mgr = df._mgr
    columns, index = mgr.axes[0], mgr.axes[1]
    if (
        type(columns).__name__ == "MultiIndex" or type(index).__name__ == "MultiIndex"
        or columns.name is not None or not len(columns)
    ):
        sample = df.iloc[:ROWS, :COLUMNS]
        return str(sample.to_string(max_colwidth=24, show_dimensions=False)), {}
    n = len(shown)
    blocks = mgr.blocks
    if where is not None:
        blknos, blklocs = where[0][:n], where[1][:n]
    else:
        blknos, blklocs = mgr.blknos[:n].tolist(), mgr.blklocs[:n].tolist()
    name = index.name
    kept = reuse.get(-1) if reuse and name is None else None  # the rows' labels, as the index is the same
    if kept is not None:
        cols = [kept[0]]
    else:
        if type(index).__name__ == "RangeIndex":
            start, step = index.start, index.step
            rows = list(map(str, range(start, start + step * min(ROWS, len(index)), step)))
        else:
            rows = _cells(*_column(index._values, 0))
        first = [_text(name) if name is not None else "", *rows]
        width = max(map(len, first))
        cols = [[" " * width] + [r.ljust(width) for r in rows]]
    named = [_text(name).ljust(len(cols[0][0]))] if name is not None else None
    made: dict[int, dict[int, list[str]]] = {-1: {0: cols[0]}}
    # a frame described before (``reuse``) shows new rows in the blocks it lays out again: only a frame described
    # for the first time looks for, and leaves, columns by what their block reads
    keys = {n: (k, h) for (n, k), h in zip(probe[1], probe[3])} if probe is not None and reuse is None else None
    for label, no, loc in zip(shown, blknos, blklocs):
        old = reuse.get(no) if reuse else None
        col = old.get(loc) if old else None
        if col is None:  # the column's title and cells, right-aligned to the widest of them
            title = label if type(label) is str and label.isprintable() else _text(label)
            known = keys.get(no) if keys is not None else None
            seen = _LAID.get((known[0], loc, title)) if known is not None else None
            if seen is not None:
                col = seen[0]
            else:
                cells = _cells(*_column(blocks[no].values, loc))
                cells.insert(0, title)
                width = max(map(len, cells))
                col = [c.rjust(width) for c in cells]
                if known is not None and _light(known[1]) and _narrow(known[0]):
                    if len(_LAID) >= _LAID_MAX:
                        _LAID.clear()
                    _LAID[(known[0], loc, title)] = (col, known[1])
        laid = made.get(no)
        if laid is None:
            laid = made[no] = {}
        laid[loc] = col
        cols.append(col)
        if named is not None:
            named.append(" " * len(col[0]))
    lines = ["  ".join(line) for line in zip(*cols)]
    if named is not None:
        lines.insert(1, "  ".join(named))
    return "\n".join(lines), made


def _relabelled(
    df: Any, rows: int, made: dict[int, dict[int, list[str]]], where: tuple[list[int], list[int]] | None, n: int
) -> tuple[str, dict] | None:
    """The head :func:`frame_head` made for another frame (``made``, its columns by block and place) that showed
    all ``df`` shows but its row labels, laid out again with ``df``'s: only when they are a RangeIndex's with no
    name (its column is three numbers); None otherwise. ``where``: the ``n`` shown columns' blocks and places."""
    index = df._mgr.axes[1]
    # no columns: the other's head was pandas' own (``Empty DataFrame``, its labels in it), nothing to lay out again
    if type(index).__name__ != "RangeIndex" or index.name is not None or where is None or not n:
        return None
    tails = made.get(-2)
    if tails is None:  # each line but its row label, kept with the columns (made alike for every frame they fit)
        try:
            cols = [made[no][loc] for no, loc in zip(where[0][:n], where[1][:n])]
        except KeyError:
            return None
        tails = made[-2] = {0: ["  ".join(line) for line in zip(*cols)]}
    start, step = index.start, index.step
    labels = list(map(str, range(start, start + step * min(ROWS, rows), step)))
    width = max(map(len, labels))
    col = [" " * width, *[label.ljust(width) for label in labels]]
    made = dict(made)
    made[-1] = {0: col}
    return "\n".join([f"{label}  {tail}" for label, tail in zip(col, tails[0])]), made


_LAID: dict[tuple, tuple[list[str], list]] = {}
"""``(block key, place in the block, title) -> (column, objects the key names)``: columns of heads laid out, by what
they read (:func:`._probe.block_key`: the first rows of the block holding them, as in :func:`._probe.head_probe`),
so a frame whose blocks show what another's showed (a copy, a frame indexed or its columns renamed anew) lays out
only what differs. At most :data:`_LAID_MAX` (emptied when full); an entry holds the objects its key names by
identity, only when small (:func:`_light`)."""
_LAID_MAX = 2048
_LAID_BYTES = 4096
"""A column is kept by what its block reads only when that reads at most this many bytes (a block as wide as
a few hundred columns): the key outlives the frame."""


def _narrow(key: tuple) -> bool:
    """Whether a block's key (:func:`._probe.block_key`) is small enough to be kept in :data:`_LAID`."""
    return sum([len(part) for part in key if type(part) is bytes]) <= _LAID_BYTES


_DESCRIBED: dict[int, tuple] = {}
"""``id(frame) -> (fingerprint, limit, key, blocks' keys, description, objects the keys name, column text,
columns of the head by block, labels shown, blocks of strings in pyarrow)`` (the last: :func:`_strings`): a
frame's description (see the module's docstring). It goes with the frame's fingerprint cache entry
(:func:`forget`)."""


_SEEN: dict[tuple, tuple] = {}
"""``content key -> (description, column text, columns of the head by block, objects the key names)``: the
descriptions of frames by what they show (:func:`_content_key`), so a new object over data described before
(a frame loaded again, a copy) is not laid out anew. At most :data:`_SEEN_MAX`, the oldest dropped first; an
entry holds the few objects its key names by identity (the cells of the shown rows held as Python objects, an
extension dtype), only when they are small (:func:`_light`), never a frame or its data."""
_SEEN_MAX = 256
_SEEN_HELD = 1000
"""A description is kept by what it shows only when the objects its key holds are small: no category list nor
string longer than this (an entry outlives its frame)."""


def _light(held: list) -> bool:
    """Whether the objects a content key names by identity are small enough to outlive their frame."""
    for obj in held:
        if type(obj) is str or type(obj) is bytes:
            if len(obj) > _SEEN_HELD:
                return False
        elif type(obj).__name__ == "CategoricalDtype" and len(obj.categories) > _SEEN_HELD:
            return False
    return True


def _content_key(
    df: Any, named: tuple, shown: list, probe: tuple, limit: int, where: tuple[list[int], list[int]] | None
) -> tuple[tuple, tuple] | None:
    """``(key, rows)``: everything a description made by :func:`frame_text` reads, as values (``named``: the
    shape, labels and dtypes the frame's fingerprint names; ``probe``: :func:`._probe.head_probe`'s, the shown rows of
    every shown block, the names, the objects named by identity held in the probe), with where each shown column
    is (block and place), in ``key``; the row labels shown in ``rows`` (a RangeIndex's start and step, or what
    the probe read from another index). Two frames with equal keys and rows read alike; with equal keys only,
    all but their rows' labels."""
    try:
        mgr = df._mgr
        index = mgr.axes[1]
        n = len(shown)
        rng = (index.start, index.step) if type(index).__name__ == "RangeIndex" else None
        if where is not None:
            layout = (tuple(where[0][:n]), tuple(where[1][:n]))
        else:
            layout = (tuple(mgr.blknos[:n].tolist()), tuple(mgr.blklocs[:n].tolist()))
    except (AttributeError, IndexError, TypeError):
        return None
    # the labels with their types: 1, 1.0 and True are equal, and shown as "1", "1.0" and "True"
    ahead = probe[0]  # the names, the blocks' count, then what a row index other than a RangeIndex reads
    key = (limit, named[0], named[2][:n], tuple(shown), tuple(map(type, shown)), layout, ahead[:3], probe[1])
    try:
        hash(key)
    except TypeError:  # a label that is no key (a list): such a frame is not kept by what it shows
        return None
    return key, (rng if rng is not None else ahead[3:])


def _unwritten(values: Any, now: tuple, then: tuple, laid: dict[int, list[str]]) -> dict[int, list[str]]:
    """The columns of a block of numbers (``values``, 2-D) laid out when its head read ``then``, whose own first
    rows read the same ``now`` (:func:`._probe.block_key`'s: the dtype, then each column's first rows' bytes in
    turn)."""
    if len(now) != 2 or len(then) != 2 or now[0] != then[0] or type(now[1]) is not bytes or len(now[1]) != len(
        then[1]
    ) or getattr(values, "ndim", 0) != 2:
        return {}
    size = len(now[1]) // max(values.shape[0], 1)
    a, b = now[1], then[1]
    return {loc: col for loc, col in laid.items() if a[loc * size:(loc + 1) * size] == b[loc * size:(loc + 1) * size]}


def _rewritten(df: Any, kept: tuple, probe: tuple, where: tuple[list[int], list[int]]) -> tuple[str, dict] | None:
    """The head of a frame described before (``kept``, its :data:`_DESCRIBED` entry) with the same shape, labels,
    dtypes and row index, some of whose shown blocks read otherwise now (``probe``, :func:`._probe.head_probe`'s): only
    the columns whose first rows changed laid out again (every column of a block that is no 2-D block of numbers),
    the others as they were; and the columns by block. None when the kept layout does not tell (fall back)."""
    made: dict[int, dict[int, list[str]]] = kept[7]
    rows_col = made.get(-1)
    if rows_col is None or df._mgr.axes[1].name is not None:
        return None  # no head made (pandas' own), or a named row index (a line more): laid out whole
    blocks = df._mgr.blocks
    fresh: dict[int, dict[int, list[str]]] = {}
    for (no, now), (_no, then) in zip(probe[1], kept[3]):
        if now != then:
            laid = made.get(no)
            if laid is None:
                return None
            fresh[no] = _unwritten(blocks[no].values, now, then, laid)  # the columns whose own rows read the same
    shown = kept[8]
    cols = [rows_col[0]]
    out = dict(made)
    out.pop(-2, None)  # the lines without their row labels (:func:`_relabelled`), made again when needed
    for label, no, loc in zip(shown, where[0], where[1]):
        col = made[no].get(loc) if no in made else None
        same = fresh.get(no)
        if col is None or (same is not None and loc not in same):
            title = label if type(label) is str and label.isprintable() else _text(label)
            cells = _cells(*_column(blocks[no].values, loc))
            cells.insert(0, title)
            width = max(map(len, cells))
            col = [c.rjust(width) for c in cells]
            laid = out.get(no)
            if laid is None or laid is made.get(no):  # the kept entry's own: copied, never changed
                laid = out[no] = dict(laid) if laid is not None else {}
            laid[loc] = col
        cols.append(col)
    return "\n".join(["  ".join(line) for line in zip(*cols)]), out


def forget(key: int) -> None:
    """The frame ``key`` names is gone, or its fingerprint changed: its description goes too."""
    _DESCRIBED.pop(key, None)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def kept_text(df: Any, limit: int, entry: tuple) -> str | None:
    """``df``'s kept description when nothing it says could differ, found the shortest way (the system prompt
    describes about twenty frames at each run's start, most of them as they were): ``entry`` is ``df``'s
    fingerprint cache entry (see :func:`._describe.fingerprint`), still its own while the frame's blocks tuple and
    axes are the very ones it pins. None when another way must tell (:func:`frame_text`)."""
    kept = _DESCRIBED.get(id(df))
    if kept is None or kept[0] is not entry[0] or kept[1] != limit:
        return None
    try:
        mgr = df._mgr
        axes = mgr.axes
        blocks = mgr.blocks
        if entry[1] != id(blocks) or entry[2] != id(axes[0]) or entry[3] != id(axes[-1]):
            return None
    except (AttributeError, IndexError, TypeError):
        return None
    return kept[4] if reads_as_kept(kept, axes, blocks) else None


def frame_text(df: Any, limit: int, fp: tuple | None) -> str:
    """``df`` described: type, shape, dtypes and its first rows, at most ``limit`` characters. ``fp`` is its
    fingerprint when :func:`._describe.fingerprint` holds it in its cache (only then is the description kept)."""
    key = id(df)
    kept = _DESCRIBED.get(key) if fp is not None else None
    if kept is not None and (kept[0] is not fp or kept[1] != limit):
        kept = None
    if kept is not None and reads_as_kept(kept, df._mgr.axes, df._mgr.blocks):
        return kept[4]  # nothing it says could differ
    # the current fingerprint: its parts tell which blocks hold the first columns (pandas builds that for all)
    parts = fp[3] if fp is not None and len(fp) == 4 and type(fp[3]).__name__ == "FrameParts" else None
    where = parts.where() if parts is not None else None
    # the same fingerprint: the same blocks hold the first columns
    probe = (
        head_probe(
            df, [n for n, _k in kept[3]] if kept is not None else None, where[0] if where else None,
            kept[9] if kept is not None else None,
        ) if fp is not None else None
    )
    if kept is not None and probe is not None and kept[2] == probe[0]:
        if kept[3] == probe[1]:
            # a new pyarrow array, reading the same
            if any([type(was[0]) is not weakref.ref for was in probe[4].values()]):
                _DESCRIBED[key] = (*kept[:9], strings_kept(probe[4]))
            return kept[4]  # nothing it says could differ
        if where is not None:  # a cell written: only the columns whose first rows read otherwise are laid out again
            again = _rewritten(df, kept, probe, where)
            if again is not None and fp is not None:
                size = fp[2]  # the same fingerprint: its shape
                text = f"pd.DataFrame, shape ({size[0]:,}, {size[1]}); columns: {kept[6]}\n"
                text = _clip(f"{text}first {min(size[0], ROWS)} rows:\n{again[0]}", limit)
                _DESCRIBED[key] = (fp, limit, probe[0], probe[1], text, probe[2], kept[6], again[1], kept[8],
                                   strings_kept(probe[4]))
                return text
        # the same shape, labels, dtypes and index: blocks whose head reads the same keep their columns
        reuse = {}
        for (n, k), (n2, k2) in zip(probe[1], kept[3]):
            laid = kept[7].get(n)
            if n != n2 or laid is None:
                continue
            if k == k2:
                reuse[n] = laid
            else:  # a cell written in one column of a block of numbers: its other columns stay as laid out
                same = _unwritten(df._mgr.blocks[n].values, k, k2, laid)
                if same:
                    reuse[n] = same
        if -1 in kept[7]:
            reuse[-1] = kept[7][-1]  # the row labels' column: the same index
    else:
        reuse = None
    # the probe is taken before the text is made: a change in between (another thread) makes the key differ
    named = fingerprint_text(fp)
    if kept is not None:
        shown = kept[8]  # the very same columns Index
    elif named is not None and fp is not None and len(fp) == 4:  # the current fingerprint: the same columns
        shown = fp[3].labels()[:COLUMNS]
    else:
        shown = labels(df.columns, COLUMNS)
    if named is not None:  # shape, labels and dtypes as text, as the fingerprint names them
        (rows, cols), names, dtypes = named
    else:
        (rows, cols), names, dtypes = df.shape, tuple(map(str, shown)), tuple(frame_dtypes(df, COLUMNS))
    seen = labelled = hit = None
    if kept is None and probe is not None and named is not None:
        found = _content_key(df, named, shown, probe, limit, where)
        if found is not None:
            seen, labelled = found
            hit = _SEEN.get(seen)
        if hit is not None:
            if hit[4] == labelled:  # another frame showed all this: its description, kept for this one too
                _DESCRIBED[key] = (fp, limit, probe[0], probe[1], hit[0], probe[2], hit[1], hit[2], shown,
                                   strings_kept(probe[4]))
                return hit[0]
            # all but the rows' labels (a frame indexed anew): its columns as laid out, the labels' column alone made
            reuse = {n: laid for n, laid in hit[2].items() if n >= 0}
    if kept is not None:
        col_text = kept[6]  # shape, labels and dtypes: the fingerprint's, unchanged
    elif hit is not None:
        col_text = hit[1]  # the same shape, labels and dtypes
    else:
        col_text = ", ".join(f"{names[i]}: {dtypes[i]}" for i in range(len(shown)))
        if cols > len(shown):
            col_text += f", ... ({cols - len(shown)} more columns)"
    head = ""
    made: dict[int, dict[int, list[str]]] = {}
    relabelled = _relabelled(df, rows, hit[2], where, len(shown)) if hit is not None and rows else None
    if relabelled is not None:
        head, made = relabelled
    elif rows:
        try:
            head, made = frame_head(df, shown, reuse, where, probe)
        except Exception:  # a layout this module does not know: pandas' own, uncached
            probe = None
            try:
                head = df.iloc[:ROWS, : len(shown)].to_string(max_colwidth=24, show_dimensions=False)
            except Exception:
                head = ""
    text = f"pd.DataFrame, shape ({rows:,}, {cols}); columns: {col_text}"
    if head:
        text += f"\nfirst {min(rows, ROWS)} rows:\n{head}"
    text = _clip(text, limit)
    if probe is not None:
        strings = strings_kept(probe[4])
        _DESCRIBED[key] = (fp, limit, probe[0], probe[1], text, probe[2], col_text, made, shown, strings)
        # a RangeIndex read as another's: every object held is one the other's key named (kept: light)
        if seen is not None and (relabelled is not None or _light(probe[2])):
            if len(_SEEN) >= _SEEN_MAX and seen not in _SEEN:
                del _SEEN[next(iter(_SEEN))]
            _SEEN[seen] = (text, col_text, made, probe[2], labelled)
    return text


def fingerprint_text(fp: tuple | None) -> tuple[tuple[int, int], tuple[str, ...], tuple[str, ...]] | None:
    """``(shape, labels, dtypes)`` a frame's fingerprint names, or None when it is not one."""
    if fp is None:
        return None
    if len(fp) == 4 and type(fp[3]).__name__ == "FrameParts":  # see ._parts
        return (fp[2], *fp[3].text())
    if len(fp) == 5:
        return fp[2], fp[3], fp[4]
    return None


def frame_dtypes(df: Any, n: int) -> list[str]:
    """The first ``n`` of ``df.dtypes`` as text (a Series of them costs tens of microseconds; the blocks
    have them at hand)."""
    try:
        mgr = df._mgr
        texts = [dtype_text(b.dtype) for b in mgr.blocks]
        return [texts[b] for b in mgr.blknos[:n].tolist()]
    except AttributeError:  # another pandas layout
        return list(map(dtype_text, df.dtypes.iloc[:n]))
