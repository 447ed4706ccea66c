"""The base of every event kind (:class:`Event`): its fields, comparison, and the pydantic-style methods.

Re-exported by :mod:`unity_nb.events`, where the kinds are. The kinds register themselves here (``KINDS``,
``CONTAINERS``) when :mod:`unity_nb.events` is imported.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from ._event_checks import check as _check

__all__ = ("CONTAINERS", "KINDS", "Event", "field_names", "kind_of", "next_seq")

_seq = itertools.count(1)
next_seq = _seq.__next__
"""The next process-wide sequence number (an event's ``seq``)."""
_set = object.__setattr__  # how a frozen dataclass sets its own fields
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

_NAMES: dict[type, tuple[str, ...]] = {}
KINDS: dict[str, type] = {}
"""Each kind's class, by its ``kind``."""
CONTAINERS: dict[type, tuple[str, ...]] = {}
"""Per class: the tuple fields that hold dicts (copied by ``model_dump``)."""


def field_names(cls: type) -> tuple[str, ...]:
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def kind_of(cls: type) -> str:
    return next(f.default for f in dataclasses.fields(cls) if f.name == "kind")  # type: ignore[return-value]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Event:
    """Base of all events: which loop, where in the tree, when.

    Events are frozen, slotted dataclasses built with keywords (``ev.ToolStarted(loop_id=...,
    lineage=..., call_id=..., name=..., arguments=...)``). A list given for a tuple field is kept
    as a tuple; a value outside a field's literal choices (``Steering.action``, ``status``) is a
    ``ValueError``. ``model_dump()``, ``model_dump_json()``, ``model_copy()`` and
    ``Event.model_validate(...)`` / ``model_validate_json(...)`` work as they did when events
    were pydantic models, and ``pydantic.TypeAdapter(AnyEvent)`` still parses any of them.
    """

    kind: str
    loop_id: str
    """The loop's unique id."""
    lineage: tuple[str, ...]
    """The loop's position in the nesting tree, outermost first."""
    ts: float = field(default_factory=time.time)
    """Wall-clock time of publication (seconds since the epoch)."""
    seq: int = field(default_factory=next_seq)
    """A process-wide increasing sequence number: orders events exactly."""

    def __post_init__(self) -> None:
        if type(self.lineage) is not tuple:
            _set(self, "lineage", tuple(self.lineage))
        _check(self)

    # one __eq__, __hash__ and __repr__ for every kind (generated per class, they cost import time)
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in field_names(type(self)))

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, n) for n in field_names(type(self))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in field_names(type(self)))})"

    def model_dump(self, *, mode: str = "python", include: Iterable[str] | None = None,
                   exclude: Iterable[str] | None = None) -> dict[str, Any]:
        """The fields as a dict (``kind`` first); ``mode="json"`` gives lists for tuples."""
        names = field_names(type(self))
        if include is not None:
            keep = set(include)
            names = tuple(n for n in names if n in keep)
        if exclude is not None:
            drop = set(exclude)
            names = tuple(n for n in names if n not in drop)
        out = {n: getattr(self, n) for n in names}
        if mode == "json":
            out = json.loads(_dumps(out))
        else:  # containers copied, as pydantic's model_dump did: the event stays as it was
            for n in CONTAINERS.get(type(self), ()):
                if n in out:
                    out[n] = tuple(dict(c) if isinstance(c, dict) else c for c in out[n])
        return out

    def model_dump_json(self, *, indent: int | None = None, include: Iterable[str] | None = None,
                        exclude: Iterable[str] | None = None) -> str:
        """The fields as JSON text (compact, non-ASCII kept), as pydantic wrote it."""
        data = self.model_dump(include=include, exclude=exclude)
        if indent is not None:
            return json.dumps(data, ensure_ascii=False, indent=indent)
        return _dumps(data)

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        """A copy, with ``update`` applied (the copy keeps ``ts`` and ``seq`` unless updated)."""
        return dataclasses.replace(self, **(update or {}))

    @classmethod
    def model_validate(cls, data: Any) -> Event:
        """An event from a dict (or an event): ``Event.model_validate`` picks the class by ``kind``;
        a subclass's takes its own kind only. Keys that are not fields are ignored."""
        if isinstance(data, Event):
            data = data.model_dump()
        if not isinstance(data, dict):
            raise ValueError(f"an event is a dict with a 'kind', not {type(data).__name__}")
        kind = data.get("kind")
        target = KINDS.get(kind) if isinstance(kind, str) else None
        if target is None:
            raise ValueError(f"unknown event kind {kind!r}")
        if cls is not Event and target is not cls:
            raise ValueError(f"{cls.__name__} takes kind {kind_of(cls)!r}, not {kind!r}")
        fields = field_names(target)
        try:
            return target(**{k: v for k, v in data.items() if k in fields})
        except TypeError as err:
            raise ValueError(f"{target.__name__}: {err}") from None

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> Event:
        return cls.model_validate(json.loads(text))
