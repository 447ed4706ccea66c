"""What a frame's description reads from it, to tell whether a kept description could differ (see :mod:`._frames`).

:func:`head_probe` reads it all (the names, the row index, and the first rows of every block holding a shown
column, as bytes, identities of immutable objects, or strings in pyarrow); :func:`reads_as_kept` reads again, the
shortest way each block allows, what a kept description read.
"""

from __future__ import annotations

import decimal
import fractions
import weakref
from typing import Any

from ._arrays import ROWS
from ._arrays import arrow_strings as _arrow_strings
from ._arrays import ndarray_of as _ndarray
from ._arrays import ndarray_type as _NDARRAY

__all__ = ("COLUMNS", "block_key", "head_probe", "reads_as_kept", "strings_kept")

COLUMNS = 12
"""Columns shown."""

_IMMUTABLE = frozenset({str, int, float, bool, bytes, complex, type(None), decimal.Decimal, fractions.Fraction})
"""Cell types whose objects cannot change: the same object always reads the same."""
_IMMUTABLE_NAMES = frozenset({
    ("pandas", "Timestamp"), ("pandas", "Timedelta"), ("pandas", "NaTType"), ("pandas", "NAType"),
    ("pandas", "Period"), ("datetime", "datetime"), ("datetime", "date"), ("datetime", "timedelta"),
    ("numpy", "float64"), ("numpy", "int64"), ("numpy", "bool_"), ("numpy", "str_"),
})


def _immutable(t: type) -> bool:
    return t in _IMMUTABLE or (t.__module__.split(".", 1)[0], t.__name__) in _IMMUTABLE_NAMES


def block_key(values: Any, held: list) -> tuple | None:
    """What the head reads from one block's ``values`` (see :mod:`._frames`), the objects it names by
    identity added to ``held``; None when it cannot be compared."""
    if _NDARRAY and type(values) is _NDARRAY[0] and not values.dtype.hasobject:  # the usual block: numbers
        return (values.dtype.str, values[..., :ROWS].tobytes())
    chunked = _arrow_strings(values)
    if chunked is not None:  # strings in pyarrow: compared by value (fresh str objects each time, immutable)
        held.append(values.dtype)
        return (id(values.dtype), *chunked.slice(0, ROWS).to_pylist())
    arr = _ndarray(values)
    if arr is not None:
        parts = [arr]
    else:
        data, mask = getattr(values, "_data", None), getattr(values, "_mask", None)  # masked: Int64, boolean
        if data is None or mask is None or _ndarray(data) is None or _ndarray(mask) is None:
            return None
        parts = [data, mask]
    key: list = []
    if values is not arr:
        held.append(values.dtype)  # an extension dtype (categories, a time zone): compared by identity
        key.append(id(values.dtype))
    for part in parts:
        head = part[..., :ROWS]
        if part.dtype.hasobject:
            cells = head.ravel().tolist()
            if not all(map(_immutable, map(type, cells))):
                return None
            held.extend(cells)  # kept alive by the entry: an equal id is the very same object
            key.extend(map(id, cells))
        else:
            key.append(part.dtype.str)
            key.append(head.tobytes())
    return tuple(key)


def head_probe(
    df: Any, shown: list[int] | None = None, where: list[int] | None = None, known: dict | None = None
) -> tuple[tuple, tuple, list, tuple, dict] | None:
    """``(key, blocks, held, by block, strings)``: what the description's head reads from ``df`` (see :mod:`._frames`'s
    docstring): the names, the row index and the blocks' count in ``key``, ``(block number, its key)`` for each
    block holding a shown column in ``blocks``, the objects they name by identity in ``held``, those each
    block's key names (in the order of ``blocks``) in ``by block``, and for each block of strings in pyarrow
    ``(its pyarrow array, dtype, key)`` in ``strings`` (see :func:`_strings`). None when
    ``df``'s layout cannot be compared (it is described anew each time). ``shown``: the numbers of the blocks
    holding the first columns, when known (they are while the fingerprint is the same); ``where``: the numbers of
    the blocks holding the first columns in order (``blknos``), when known; ``known``: the ``strings`` of the
    description kept (:func:`_strings`), a block whose pyarrow array is the very one read then reads the same."""
    try:
        mgr = df._mgr
        blocks = mgr.blocks
        columns, index = mgr.axes[0], mgr.axes[1]
        if shown is None:
            shown = sorted(set(where[:COLUMNS] if where is not None else mgr.blknos[:COLUMNS].tolist()))
        if type(columns).__name__ == "MultiIndex" or type(index).__name__ == "MultiIndex":
            return None  # their level names are theirs to change: not compared, described anew
        names = (index.name, columns.name)
    except (AttributeError, IndexError, TypeError):
        return None
    held: list = [*names]
    key: list = [id(names[0]), id(names[1]), len(blocks)]
    if type(index).__name__ == "RangeIndex":  # its start, stop and step (immutable): what its labels read
        key.append(getattr(index, "_range", None) or (index.start, index.stop, index.step))
    else:
        index_key = block_key(getattr(index, "_values", None), held)
        if index_key is None:
            return None
        key.append(index_key)
    keys = []
    helds = []
    strings: dict = {}
    for n in shown:
        values = blocks[n].values
        chunked = _arrow_strings(values)
        read: tuple | None
        if chunked is not None:  # strings in pyarrow: compared by value (fresh str objects each time, immutable)
            dtype = values.dtype
            own: list = [dtype]
            was = known.get(n) if known is not None else None
            if was is not None and was[0]() is chunked and was[1] is dtype:
                read = was[2]  # the very pyarrow array (immutable: pandas writes a cell by making a new one)
            else:
                read = (id(dtype), *chunked.slice(0, ROWS).to_pylist())
                was = (chunked, dtype, read)
            strings[n] = was
        else:
            own = []
            read = block_key(values, own)
            if read is None:
                return None
        keys.append((n, read))
        helds.append(own)
        held += own
    return tuple(key), tuple(keys), held, tuple(helds), strings


_REF = weakref.ref


def strings_kept(read: dict) -> dict:
    """A probe's ``strings`` as the kept description holds them: each block's pyarrow array by a weak reference
    (never its data), with the dtype and the key read from it (a dead reference reads anew)."""
    return {n: was if type(was[0]) is _REF else (_REF(was[0]), was[1], was[2]) for n, was in read.items()}

def reads_as_kept(kept: tuple, axes: list, blocks: tuple) -> bool:
    """Whether everything :func:`head_probe` reads from a frame (its ``axes`` and ``blocks``) reads as it did for
    the description ``kept`` (whose fingerprint is the frame's now: the same blocks hold the shown columns), read
    the shortest way: a frame with a RangeIndex, each shown block a 2-D array of numbers, codes (categories,
    dates), strings in the very pyarrow array read then, or any other kind compared as the probe compares it.
    False when anything differs or another way must tell (the probe)."""
    ahead = kept[2]
    try:
        columns, index = axes
        # the names: held by the entry (so their identities are theirs); a RangeIndex: its start, stop and step
        if id(index.name) != ahead[0] or id(columns.name) != ahead[1] or len(blocks) != ahead[2]:
            return False
        if type(index).__name__ != "RangeIndex" or getattr(index, "_range", None) != ahead[3]:
            return False
        strings = kept[9]
        # a block keeps its dtype (pandas makes a new block for another, and the fingerprint differs): the first
        # rows' bytes are all that can differ in an array of numbers
        for n, was in kept[3]:
            values = blocks[n].values
            if _NDARRAY and type(values) is _NDARRAY[0]:
                if values.dtype.hasobject or values[..., :ROWS].tobytes() != was[1]:
                    return False
                continue
            inner = getattr(values, "_ndarray", None)  # categories' codes, dates: the dtype held by the entry
            if (
                inner is not None and len(was) == 3 and type(was[2]) is bytes and _NDARRAY
                and type(inner) is _NDARRAY[0] and not inner.dtype.hasobject
            ):
                if id(values.dtype) != was[0] or inner[..., :ROWS].tobytes() != was[2]:
                    return False
                continue
            known = strings.get(n)
            if known is not None:  # strings in pyarrow: the very array read then (immutable), the same dtype
                if known[0]() is not _arrow_strings(values) or known[1] is not values.dtype:
                    return False
                continue
            if was != block_key(values, []):  # objects it names by identity are held by the entry
                return False
    except (AttributeError, IndexError, TypeError, ValueError):
        return False
    return True
