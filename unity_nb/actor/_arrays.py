"""The arrays under a frame's blocks and index, read without pandas' own machinery (see :mod:`._frames`).

Nothing here imports pandas or numpy: arrays are recognised by their types' names.
"""

from __future__ import annotations

from typing import Any

__all__ = ("ROWS", "arrow_head", "arrow_strings", "column_head", "ndarray_of", "ndarray_type")

ROWS = 3
"""Rows shown."""

ndarray_type: list[Any] = []
"""numpy's ndarray type, once one was seen (numpy is not imported here)."""


def ndarray_of(values: Any) -> Any:
    """The numpy array under a block's values (itself, or an extension array's backing array), or None."""
    t = type(values)
    if t.__name__ == "ndarray" and t.__module__ == "numpy":
        if not ndarray_type:
            ndarray_type.append(t)
        return values
    inner = getattr(values, "_ndarray", None)  # Categorical (codes), DatetimeArray, TimedeltaArray, StringArray
    if inner is not None and type(inner).__name__ == "ndarray":
        return inner
    return None


_ARROW_STRINGS = frozenset({"ArrowStringArray", "ArrowStringArrayNumpySemantics"})


def arrow_strings(values: Any) -> Any:
    """The pyarrow array under an array of strings pandas keeps in pyarrow (pandas 3's ``str``), or None."""
    if type(values).__name__ in _ARROW_STRINGS:
        return getattr(values, "_pa_array", None)
    return None


def arrow_head(values: Any, chunked: Any, n: int) -> list:
    """``list(values[:n])`` for an array of strings in pyarrow (``chunked``): read from pyarrow, a missing one as
    the dtype's missing value (pandas' ``__iter__`` costs several times more)."""
    cells = (chunked if len(chunked) <= n else chunked.slice(0, n)).to_pylist()
    if None in cells:
        na = values.dtype.na_value
        return [na if v is None else v for v in cells]
    return cells


def column_head(values: Any, row: int) -> tuple[list, str]:
    """The first rows of one column of a block's values (a 2-D array or a 1-D extension array), and the
    kind of numpy array they came from ('' for anything else)."""
    chunked = arrow_strings(values)
    if chunked is not None:
        return arrow_head(values, chunked, ROWS), ""
    arr = ndarray_of(values)
    if arr is values or (arr is not None and type(values).__name__ == "StringArray"):
        kind = arr.dtype.kind
        if kind not in "mM":  # numpy's datetimes are pandas' Timestamps below
            head = arr[row, :ROWS] if arr.ndim == 2 else arr[:ROWS]
            return head.tolist(), kind if kind in "fiub" else ""
    elif arr is not None and type(values).__name__ == "Categorical":
        held_values = values.categories._values
        chunked = arrow_strings(held_values)
        if chunked is not None:  # pandas 3's str categories
            codes = arr[:ROWS].tolist()
            if len(chunked) <= 64:  # a few categories: all of them read at once costs less than three
                names = chunked.to_pylist()
                cells = [names[c] if c >= 0 else None for c in codes]
            else:
                cells = [chunked[c].as_py() if c >= 0 else None for c in codes]
            if None in cells:
                na = held_values.dtype.na_value
                return [na if v is None else v for v in cells], ""
            return cells, ""
        categories = ndarray_of(held_values)
        if categories is not None and categories.dtype.kind not in "mM":
            nan = float("nan")
            return [categories[c] if c >= 0 else nan for c in arr[:ROWS].tolist()], ""
    if getattr(values, "ndim", 1) == 2:
        values = values[row]
    return list(values[:ROWS]), ""
