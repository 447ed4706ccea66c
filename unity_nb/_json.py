"""JSON from outside (a model's tool arguments, a provider's error body, a stream's events), read within a bound,
and JSON sent out (a request's body), both with orjson where it gives what the ``json`` module gives.

``json.loads`` has no depth limit of its own: text nested deeper than Python's stack raises a
``RecursionError``, which no caller expects, and a value nested almost that deep breaks the code that walks
it next. :func:`loads` reads JSON as ``json.loads`` does, but text nested more than :data:`MAX_DEPTH` levels
deep is a ``json.JSONDecodeError`` (a ``ValueError``) like any other text that is not JSON, saying so.

orjson reads JSON several times faster than ``json``; :func:`loads` takes its value when it is the one ``json``
gives, and hands anything else to ``json`` itself, for its value or its error: text orjson refuses (``NaN``,
``Infinity``, a number past a float's range, a lone surrogate, a byte-order mark, text that is not UTF-8, text
nested past orjson's own limit) and text with a run of 19 digits or more (orjson reads an integer past 64 bits
as a float; ``json`` as the integer). :func:`dumps` is ``json.dumps(value, ensure_ascii=False, separators=(",",
":")).encode()`` in meaning (a float may be written another way: ``1e-05`` as ``0.00001``).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ("MAX_DEPTH", "dumps", "loads")

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
_ORJSON_LOADS = orjson.loads
_ORJSON_ERROR = orjson.JSONDecodeError
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
"""Every digit as ``0``, every other byte as a space: a run of digits is a run of ``0`` after ``translate``."""
_LONG_RUN = b"0" * 19  # the shortest integer orjson reads as a float (-9223372036854775809) has 19 digits


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads(data)``, with text nested more than :data:`MAX_DEPTH` levels deep a ``json.JSONDecodeError``."""
    try:
        value = _ORJSON_LOADS(data)
    except _ORJSON_ERROR:
        value = _json_loads(data)
    else:
        raw = data if type(data) is not str else data.encode()  # orjson took it: no lone surrogate in it
        if _LONG_RUN in raw.translate(_DIGITS):  # perhaps an integer past 64 bits, which orjson reads as a float
            value = _json_loads(data)
    if len(data) <= 2 * MAX_DEPTH:  # too short to nest that deep (each level takes two brackets): most texts
        return value
    opened = data.count("[") + data.count("{") if isinstance(data, str) else data.count(b"[") + data.count(b"{")
    if opened > MAX_DEPTH and _depth_exceeds(value, MAX_DEPTH):  # fewer brackets cannot nest that deep
        raise _too_deep(data)
    return value


def _json_loads(data: str | bytes | bytearray) -> Any:
    try:
        return _DECODE(data) if type(data) is str else json.loads(data)
    except RecursionError:
        raise _too_deep(data) from None


_ORJSON_DUMPS = orjson.dumps
_STRICT = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS
"""What ``json`` refuses (a dataclass, a datetime) orjson refuses too, and a subclass of str, int, dict or list
goes to ``json``, which writes it its own way (an int subclass by ``int.__repr__``)."""
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> bytes:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()`` in meaning, by orjson when it
    can: what orjson refuses (an integer past 64 bits, a key that is not a string, a lone surrogate, a type of
    its own) and anything with a ``null`` in it (orjson writes NaN and infinities as ``null``, ``json`` as
    ``NaN`` and ``Infinity``) are written by ``json``, which raises what it raises. (orjson writes a UUID and
    an enum member of no str or int type as their values, which ``json`` refuses.)"""
    try:
        out = _ORJSON_DUMPS(value, option=_STRICT)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return _ENCODER.encode(value).encode()
    if b"null" in out:
        return _ENCODER.encode(value).encode()
    return out
