"""A column's first cells as pandas' ``to_string`` shows them (see :mod:`._frames`, which lays out a frame's head).

Floats to six decimals with the common trailing zeros cut, the scientific form past 1e6 or under 1e-6; dates
alone when every time is midnight; missing values as pandas names them; cells past 23 characters cut.
"""

from __future__ import annotations

from typing import Any

__all__ = ("cell_text", "column_cells")

_CELL = 23
"""A cell's text past this many characters is cut (pandas' ``max_colwidth=24`` with its leading space)."""


def cell_text(value: Any) -> str:
    if value is None:
        return "None"
    if type(value) is float:
        return "NaN" if value != value else repr(value)
    text = str(value)
    if "\n" in text or "\t" in text or "\r" in text:
        text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


_FLOAT_TYPES: set[type] = {float}


def _is_float(value: Any) -> bool:
    t = type(value)
    if t in _FLOAT_TYPES:
        return True
    if t.__module__ == "numpy" and t.__name__.startswith("float"):
        _FLOAT_TYPES.add(t)
        return True
    return False


def _floats(values: list) -> list[str]:
    """A column of floats as pandas shows them: six decimals with the common trailing zeros cut; the
    scientific form when one is past 1e6 or under 1e-6. What is not a float (a missing value) shows as itself."""
    finite = [v for v in values if _is_float(v) and v - v == 0]  # v - v is nan for nan and the infinities
    if any(abs(v) > 1e6 or 0 < abs(v) < 1e-6 for v in finite):
        return [f"{v:.6e}" if _is_float(v) and v - v == 0 else _special(v) for v in values]
    if len(finite) == len(values):
        texts = fixed = [f"{v:.6f}" for v in values]
    else:
        texts = [f"{v:.6f}" if _is_float(v) and v - v == 0 else _special(v) for v in values]
        fixed = [t for t in texts if t[-1:].isdigit()]
        if not fixed:
            return texts
    # the trailing zeros all of them have, but one decimal stays
    cut = min(min(len(t) - len(t.rstrip("0")) for t in fixed), min(len(t) - t.index(".") for t in fixed) - 2)
    if cut <= 0:
        return texts
    return [t[:-cut] if t[-1:].isdigit() else t for t in texts]


def _special(value: Any) -> str:
    """A float that is not finite, or what stands for a missing one."""
    if not _is_float(value):
        return cell_text(value)
    if value != value:
        return "NaN"
    return "inf" if value > 0 else "-inf"


def _dates(values: list) -> list[str] | None:
    """Timestamps as pandas shows a column of them: the date alone when every one is at midnight."""
    stamps = [v for v in values if type(v).__name__ == "Timestamp"]
    if not stamps or any(type(v).__name__ not in ("Timestamp", "NaTType") for v in values):
        return None
    if all(s.tz is None and s.hour == s.minute == s.second == s.microsecond == s.nanosecond == 0 for s in stamps):
        return [str(v)[:10] if type(v).__name__ == "Timestamp" else "NaT" for v in values]
    return None


def _missing(value: Any) -> bool:
    return value is None or (type(value).__name__ in ("NAType", "NaTType"))


def _clipped(text: str) -> str:
    return text if len(text) <= _CELL else text[: _CELL - 3] + "..."


def column_cells(values: list, kind: str = "") -> list[str]:
    """One column's cells as text; ``kind`` is its numpy dtype's kind when known (``f``: floats)."""
    if kind == "f":
        if all([v - v == 0 and (v == 0 or 1e-6 <= abs(v) <= 1e6) for v in values]):  # the usual: six decimals
            texts = [f"{v:.6f}" for v in values]
            cut = 5  # the trailing zeros all of them have, but one decimal stays (each has six)
            for t in texts:
                zeros = len(t) - len(t.rstrip("0"))
                if zeros < cut:
                    cut = zeros
                    if not cut:
                        return texts
            return [t[:-cut] for t in texts]
        return _floats(values)
    if kind in ("i", "u", "b"):
        return list(map(str, values))
    if all(type(v) is str for v in values):
        return [_clipped(cell_text(v)) for v in values]
    present = [v for v in values if not _missing(v)]
    if present and all(map(_is_float, present)):
        return _floats(values)
    dates = _dates(values)
    if dates is not None:
        return dates
    return [_clipped(cell_text(v)) for v in values]
