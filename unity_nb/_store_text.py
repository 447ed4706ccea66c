"""How the store writes values to its file and reads them back: an event as JSON, text as SQLite takes it."""

from __future__ import annotations

import json
from typing import Any

import orjson

from . import events as ev

__all__ = ("event_json", "readable", "sqlite_text", "whole")

_dumps = orjson.dumps


def event_json(event: ev.Event) -> str:
    """The event as compact JSON, non-ASCII kept: what ``event.model_dump_json()`` writes, parsed alike (orjson
    writes an event's dataclass fields in order, a third of the standard encoder's time; a float may be spelled
    another way, ``1e-05`` as ``1e-5``). A value orjson does not take (an int past 64 bits, a lone surrogate: text
    decoded with surrogateescape) goes the standard way, escaped to ASCII (SQLite takes no lone surrogate)."""
    try:
        return _dumps(event).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        pass
    # model_dump_json's, ASCII (escapes read alike); a value JSON cannot hold is kept as its repr: one odd
    # event must not cost the batch it is in
    try:
        return json.dumps(event.model_dump(), separators=(",", ":"), default=repr)
    except (TypeError, ValueError, RecursionError):  # a dict keyed by a tuple, a list within itself, one too deep
        return json.dumps(_plain(event.model_dump(), set(), 0), separators=(",", ":"), default=repr)


_KEYS = (str, int, float, bool)
_DEEPEST = 200


def _plain(value: Any, within: set[int], depth: int) -> Any:
    """``value`` as JSON holds it: a dict's key JSON takes none of as its repr, a dict or list within itself (or
    deeper than ``_DEEPEST``) as a note saying so."""
    if not isinstance(value, dict | list | tuple):
        return value
    if id(value) in within or depth > _DEEPEST:
        return f"<{type(value).__name__} {'within itself' if id(value) in within else 'nested too deep'}>"
    within.add(id(value))
    try:
        if isinstance(value, dict):
            return {k if k is None or isinstance(k, _KEYS) else repr(k): _plain(v, within, depth + 1)
                    for k, v in value.items()}
        return [_plain(v, within, depth + 1) for v in value]
    finally:
        within.discard(id(value))


def sqlite_text(value: str | None) -> str | None:
    """A loops row's text as SQLite takes it: a lone surrogate (text decoded with surrogateescape) written as its
    escape, ``\\udcff`` (SQLite takes none; the whole batch, every event in it, failed with it)."""
    if value is None or value.isascii():
        return value
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode()
    return value


def readable(data: str) -> bool:
    try:
        ev.parse_event(data)
    except ValueError:
        return False
    return True


def whole(value: object) -> int:
    """A step count read from the file as a whole number; 0 where it is none (a row changed by hand: one loop's
    count must not cost every reader of the store its history)."""
    try:
        return max(0, int(value)) if isinstance(value, int | float | str) and not isinstance(value, bool) else 0
    except (ValueError, OverflowError):
        return 0
