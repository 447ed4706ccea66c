"""How an event is made and checked: the validation that matters (tuples for tuple fields, literal fields within
their choices) and, for each built-in kind, an ``__init__`` that does it without the dataclass's per-field cost.

Beside :mod:`unity_nb.events`, which registers its kinds here (``CHECKS``) and keeps the event types; this module
imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ("CHECKS", "check", "fast_init", "maker")

_set = object.__setattr__  # how a frozen dataclass sets its own fields

CHECKS: dict[type, tuple[str, tuple[str, ...], tuple[tuple[str, frozenset], ...]]] = {}
"""Per class: its kind, its fields typed ``tuple[...]`` (a list given for one is kept as a tuple),
and its fields typed ``Literal[...]`` with their choices."""


MAKERS: dict[type, Callable[..., Any]] = {}
"""Per built-in kind asked for: a function that makes an event of it as the class does (:func:`maker`)."""
_MAKER_SOURCES: dict[type, tuple[str, dict[str, Any]]] = {}
"""Per built-in kind: its maker's source and names, compiled when :func:`maker` is first asked for it (at import,
each kind's ``__init__`` alone is compiled)."""


_E = TypeVar("_E")


def maker(cls: type[_E]) -> Callable[..., _E]:
    """A function making an event of ``cls`` (a built-in kind) from the keywords its class takes: the same event,
    the same checks and errors, about half the cost (no keyword dict made and unpacked by the class call, one
    change of class instead of two). For the events a loop or a batch makes for each model call or row."""
    make = MAKERS.get(cls)
    if make is None:
        src, env = _MAKER_SOURCES[cls]
        exec(src, env)  # as its __init__ was made
        make = MAKERS[cls] = env["make"]
        make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    return make


def check(event: Any) -> None:
    """Tuples for tuple fields, literal fields within their choices: the validation that matters."""
    cls = type(event)
    checks = CHECKS.get(cls)
    if checks is None:
        return
    kind, tuples, choices = checks
    if event.kind != kind:
        raise ValueError(f"{cls.__name__}.kind is {kind!r}, not {event.kind!r}")
    for name in tuples:
        value = getattr(event, name)
        if type(value) is not tuple:
            _set(event, name, _tuple_of(cls, name, value))
    for name, allowed in choices:
        value = getattr(event, name)
        if value not in allowed:
            _bad_choice(cls, name, value, allowed)


def fast_init(cls: type, next_seq: Callable[[], int]) -> Any:
    """The ``__init__`` of a built-in event kind (registered in ``CHECKS``): what the dataclass's does (the same
    keywords, defaults and errors, then :func:`check`'s checks), without its per-field cost. A loop publishes
    several events per model call, a batch several per row: the generated one (``object.__setattr__`` per field,
    then ``__post_init__``) cost twice as much as setting each field through its slot's setter, and each such call
    cost more than a plain attribute store. So while its fields are set, an event is an instance of its kind's twin
    (:func:`_twin`: the same slots, without the frozen ``__setattr__``), and it is of its own class again before
    anything else sees it (an instance of a subclass is set through the slots' setters). ``next_seq`` gives ``seq``
    when none is given."""
    kind, tuples, choices = CHECKS[cls]
    env: dict[str, Any] = {"_time": time.time, "_next": next_seq, "_MISSING": dataclasses.MISSING,
                           "_tuple_of": _tuple_of, "_cls": cls, "_choices": dict(choices), "_kind": kind,
                           "_bad_choice": _bad_choice, "_bad_kind": _bad_kind, "_twin": _twin(cls), "_as": _set}
    params, fast, slow = [], [], []
    for f in dataclasses.fields(cls):
        n = f.name
        env[f"_s_{n}"] = next(k.__dict__[n] for k in cls.__mro__ if n in k.__dict__).__set__  # its slot's setter
        if n in ("ts", "seq"):
            params.append(f"{n}=_MISSING")
            maker = "_time()" if n == "ts" else "_next()"
            fast.append(f"        self.{n} = {maker} if {n} is _MISSING else {n}")
            slow.append(f"        _s_{n}(self, {maker} if {n} is _MISSING else {n})")
            continue
        if f.default is not dataclasses.MISSING:
            env[f"_d_{n}"] = f.default
            params.append(f"{n}=_d_{n}")
        else:
            params.append(n)
        fast.append(f"        self.{n} = {n}")
        slow.append(f"        _s_{n}(self, {n})")
    first = "    if type(lineage) is not tuple: lineage = tuple(lineage)"
    checks = ["    if kind != _kind: _bad_kind(_cls, kind)"]
    for n in tuples:
        checks.append(f"    if type({n}) is not tuple: _s_{n}(self, _tuple_of(_cls, {n!r}, {n}))")
    for n, _allowed in choices:
        checks.append(f"    if {n} not in _choices[{n!r}]: _bad_choice(_cls, {n!r}, {n}, _choices[{n!r}])")
    body = [first, "    if type(self) is _cls:", "        _as(self, '__class__', _twin)", *fast,
            "        _as(self, '__class__', _cls)", "    else:", *slow, *checks]
    # the maker (:func:`maker`): the same, made as the twin (its fields set by plain stores), of its kind once set
    made = [first, "    self = _new(_twin)", *(line[4:] for line in fast), "    self.__class__ = _cls", *checks,
            "    return self"]
    src = f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    env["_new"] = object.__new__
    _MAKER_SOURCES[cls] = (f"def make(*, {', '.join(params)}):\n" + "\n".join(made) + "\n", env)
    exec(src, env)  # made from the class's own field names, as dataclasses makes its __init__
    init = env["__init__"]
    init.__qualname__ = f"{cls.__name__}.__init__"
    init.__doc__ = cls.__dict__["__init__"].__doc__
    return init


def _twin(cls: type) -> type:
    """What an event of ``cls`` is while :func:`fast_init`'s ``__init__`` sets its fields: ``cls``'s base and slots
    (so that the instance may change from one class to the other through ``__class__``) and the plain
    ``__setattr__`` (a plain attribute store). Never seen outside that ``__init__``."""
    return type(f"_{cls.__name__}BeingMade", cls.__bases__, {
        "__slots__": cls.__dict__.get("__slots__", ()), "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__, "__module__": cls.__module__,
    })


def _tuple_of(cls: type, name: str, value: Any) -> tuple:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise ValueError(f"{cls.__name__}.{name} takes a tuple, not {type(value).__name__}")
    return tuple(value)


def _bad_kind(cls: type, kind: Any) -> None:
    raise ValueError(f"{cls.__name__}.kind is {CHECKS[cls][0]!r}, not {kind!r}")


def _bad_choice(cls: type, name: str, value: Any, allowed: frozenset) -> None:
    raise ValueError(f"{cls.__name__}.{name} takes one of {sorted(allowed)}, not {value!r}")
