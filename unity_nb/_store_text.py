"""How the store writes values to its file and reads them back: an event as JSON, text as SQLite takes it."""

from __future__ import annotations

import json

import orjson

from . import events as ev

__all__ = ("event_json", "readable", "sqlite_text")

_dumps = orjson.dumps


def event_json(event: ev.Event) -> str:
    """The event as compact JSON, non-ASCII kept: what ``event.model_dump_json()`` writes, parsed alike (orjson
    writes an event's dataclass fields in order, a third of the standard encoder's time; a float may be spelled
    another way, ``1e-05`` as ``1e-5``). A value orjson does not take (an int past 64 bits, a lone surrogate: text
    decoded with surrogateescape) goes the standard way, escaped to ASCII (SQLite takes no lone surrogate)."""
    try:
        return _dumps(event).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        # model_dump_json's, ASCII (escapes read alike); a value JSON cannot hold is kept as its repr: one odd
        # event must not cost the batch it is in
        return json.dumps(event.model_dump(), separators=(",", ":"), default=repr)


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
