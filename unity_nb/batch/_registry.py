"""The registry of operators: one entry per operator drives its ``%unity`` subcommand (its arguments, options and
help), its dispatch, ``--estimate``, ``%unity resume`` after a dead kernel, and what the store records of it (its
``kind``).

An operator is a function ``start(items, text, **options)`` that returns a handle (a map, or a phased plan) and,
given ``estimate=True``, runs nothing and returns an :class:`Estimate`. Adding one is one file with that function
and one :func:`register_operator` call::

    def sentiment(items, task, *, estimate=False, **options):
        return u.map(items, task + " Answer positive, negative or neutral.", kind="sentiment",
                     estimate=estimate, **options)

    u.register_operator(u.Operator("sentiment", sentiment, "The sentiment of every row of ITEMS."))

``%unity sentiment reviews.text How does {value} sound?`` then starts it (``--estimate``, ``--budget``, ...
included), ``%unity help sentiment`` says it, and ``%unity resume NAME`` continues it after a dead kernel. The
handle's ``kind`` must be the operator's name (a map takes ``kind=``; a phased handle is a class with ``kind``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ("OPERATORS", "Operator", "Param", "register_operator", "reserve_operator_names", "unregister_operator")

ParamKind = Literal["count", "whole", "text", "flag", "items", "columns"]
"""What a parameter takes on a ``%unity`` line: ``count`` a whole number of at least 1, ``whole`` one of at least 0,
``text``, ``flag`` (present or not), ``items`` (a notebook expression, evaluated like ITEMS), ``columns``
(``name,age:int``)."""


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter an operator takes beside its items, its text and the map's options."""

    name: str
    """Its keyword argument (``k``, ``right``, ``candidates``); on a ``%unity`` line ``--name-with-dashes``."""
    kind: ParamKind
    doc: str
    """What it does, in a sentence (the help says it)."""
    metavar: str = "N"
    positional: bool = False
    """A word after ITEMS on the line (``K``, ``RIGHT``), in the order declared; else an option."""
    required: bool = False


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator: its name (the subcommand, and the ``kind`` of its handle in the store), the function that
    starts it, a paragraph saying what it does, how its help names its text, its parameters, and how it resumes."""

    name: str
    start: Callable[..., Any]
    """``start(items, text, **options)`` -> handle; ``start(..., estimate=True)`` -> :class:`Estimate`."""
    doc: str
    text: str = "TASK"
    params: tuple[Param, ...] = ()
    phased: bool = False
    """It runs several maps (``NAME.phase``) and resumes with ``resume_from=store``; else it is one map and resumes
    with ``done=`` (the rows its run finished)."""
    line_options: Callable[[dict[str, Any], dict[str, str]], dict[str, Any]] | None = None
    """From a ``%unity`` line: the keyword arguments for ``start`` given the parameters read and the expressions
    the line named (``{"items": "papers", "right": "grants"}``): a join names its sides after them."""


OPERATORS: dict[str, Operator] = {}
"""The operators by name, in the order registered (the help lists them so)."""


def register_operator(op: Operator) -> Operator:
    """Add (or replace) an operator: its ``%unity`` subcommand, help, ``--estimate`` and resume follow."""
    if not isinstance(op, Operator):
        raise TypeError(f"register_operator takes an Operator, not {type(op).__name__}")
    if not op.name.isidentifier() or op.name.startswith("_"):
        raise ValueError(f"an operator's name is an identifier (its subcommand), not {op.name!r}")
    taken = _taken(op.name)
    if taken is not None:
        raise ValueError(f"{op.name!r} is {taken}: an operator by that name could never be reached from %unity "
                         "(the line would run that instead). Give it another name")
    OPERATORS[op.name] = op
    return op


_RESERVED: dict[str, str] = {}
"""Names other parts take for lines of their own (``%unity list``), with what each is."""


def _taken(name: str) -> str | None:
    """What ``name`` is besides an operator's name (a ``%unity`` subcommand, a steering verb), or None."""
    from ..loop import VERBS  # steering verbs can be registered at any time: read when asked

    if name in VERBS:
        return "a steering verb (%unity " + name + " NAME)"
    return _RESERVED.get(name)


def reserve_operator_names(names: Iterable[str], what: str) -> None:
    """Names another part takes for lines of its own (the ``%unity`` magics' subcommands): an operator by one of them
    could never be reached, so :func:`register_operator` refuses them. An operator registered by one already is said
    to be out of reach (a warning)."""
    for name in names:
        _RESERVED[name] = what
        if name in OPERATORS:
            warnings.warn(f"the operator {name!r} cannot be reached from %unity: {name!r} is {what}. Register it "
                          "under another name", UserWarning, stacklevel=2)


def unregister_operator(name: str) -> None:
    """Remove an operator :func:`register_operator` added."""
    OPERATORS.pop(name, None)
