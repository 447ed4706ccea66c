"""JSON from outside (a model's tool arguments, a provider's error body, a stream's events), read within a bound.

``json.loads`` has no depth limit of its own: text nested deeper than Python's stack raises a
``RecursionError``, which no caller expects, and a value nested almost that deep breaks the code that walks
it next. :func:`loads` reads JSON as ``json.loads`` does, but text nested more than :data:`MAX_DEPTH` levels
deep is a ``json.JSONDecodeError`` (a ``ValueError``) like any other text that is not JSON, saying so.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ("MAX_DEPTH", "loads")

MAX_DEPTH = 200
"""How deep JSON from outside may nest (arrays and objects in one another); pydantic's own limit too."""


def _too_deep(data: str | bytes | bytearray) -> json.JSONDecodeError:
    err = json.JSONDecodeError(f"nested more than {MAX_DEPTH} levels deep", data if isinstance(data, str) else "", 0)
    err.args = (err.msg,)  # said as it is, without "line 1 column 1 (char 0)"
    return err


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` (decoded JSON) nests arrays and objects more than ``limit`` deep (walked without
    recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


_DECODE = json.JSONDecoder().decode


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``, with text nested more than :data:`MAX_DEPTH` levels deep a ``json.JSONDecodeError``."""
    try:
        value = _DECODE(data) if type(data) is str else json.loads(data)
    except RecursionError:
        raise _too_deep(data) from None
    if len(data) <= 2 * MAX_DEPTH:  # too short to nest that deep (each level takes two brackets): most texts
        return value
    opened = data.count("[") + data.count("{") if isinstance(data, str) else data.count(b"[") + data.count(b"{")
    if opened > MAX_DEPTH and _depth_exceeds(value, MAX_DEPTH):  # fewer brackets cannot nest that deep
        raise _too_deep(data)
    return value
