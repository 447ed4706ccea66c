"""Compact descriptions of namespace variables: what the model sees instead of the data.

A DataFrame is described by its type, shape, dtypes and a few rows, never dumped: the text
for two million rows is as long as for ten. Every description is bounded, and so is the
whole namespace listing, whatever the size of the data. Nothing here imports pandas or
numpy: types are recognised by module and name, so describing costs nothing when they are
not in use.
"""

from __future__ import annotations

import inspect
import re
import sys
import types
import weakref
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

from .._secrets import scrub, scrub_clipped, secret_names
from ._frames import ROWS as _ROWS
from ._frames import forget as _forget_description
from ._frames import frame_text, kept_text
from ._parts import FP_COLUMNS, FrameParts, frame_fingerprint, frame_parts

__all__ = ("describe_value", "describe_namespace", "user_variables", "fingerprint", "snapshot", "HIDDEN_NAMES")

HIDDEN_NAMES = frozenset(
    {"In", "Out", "get_ipython", "exit", "quit", "primitives", "final_answer", "get_secret"}
)
"""Names never shown to the model as variables (IPython's own, and the actor's)."""

_VALUE_LIMIT = 600
_FRAME_LEAST = 28
"""The fewest characters a DataFrame's description has (``pd.DataFrame, shape (0, 0); columns: ``, or
``pd.X (could not describe: E)``), cut to ``per_value`` at most."""
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")


def _kind(obj: Any) -> str:
    t = type(obj)
    mod = t.__module__.split(".", 1)[0]
    return f"{mod}.{t.__qualname__}" if mod not in ("builtins",) else t.__qualname__


def _short_type(obj: Any) -> str:
    t = type(obj)
    mod = t.__module__.split(".", 1)[0]
    alias = {"pandas": "pd", "numpy": "np"}.get(mod)
    if alias:
        return f"{alias}.{t.__name__}"
    return t.__name__ if mod == "builtins" else f"{t.__module__}.{t.__name__}"


def _clip(text: str, limit: int) -> str:
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return text


def _safe_repr(obj: Any, limit: int) -> str:
    if isinstance(obj, str):  # secret values scrubbed before the cut, so no cut leaves a piece of one
        body = repr(scrub(obj)[: limit + 1])
        return _clip(body, limit) + (f" ({len(obj):,} characters)" if len(obj) > limit else "")
    if isinstance(obj, bytes | bytearray):
        return _clip(repr(obj[: limit + 1]), limit) + (f" ({len(obj):,} bytes)" if len(obj) > limit else "")
    try:
        text = scrub(repr(obj))
    except Exception as err:
        return f"<{_short_type(obj)}: repr failed: {type(err).__name__}>"
    # memory addresses differ every run: leave them out, so a prompt is the same each time (and replays)
    return _clip(_ADDRESS.sub(" at 0x…", text), limit)


def _frame(df: Any, limit: int) -> str:
    entry = _CACHE.get(id(df))
    if entry is not None:  # most frames of a run's system prompt: described before, as they are now
        text = kept_text(df, limit, entry)
        if text is not None:
            return text
    fp = fingerprint(df)
    entry = _CACHE.get(id(df))
    # its description is kept only while this fingerprint is the one the cache holds (see ._frames)
    return frame_text(df, limit, fp if entry is not None and entry[0] is fp else None)


def _series(s: Any, limit: int) -> str:
    n = len(s)
    head = ""
    if n:
        try:
            head = s.iloc[:_ROWS].to_string(max_rows=_ROWS)
        except Exception:
            head = ""
    label = f" {s.name!r}" if s.name is not None else " (unnamed)"
    text = f"pd.Series{label}, length {n:,}, dtype {s.dtype}"
    if head:
        text += f"\nfirst {min(n, _ROWS)}:\n{head}"
    return _clip(text, limit)


def _container(obj: Any, limit: int) -> str:
    n = len(obj)
    kind = type(obj).__name__
    if isinstance(obj, Mapping):
        items = []
        for i, (k, v) in enumerate(obj.items()):
            if i == 5:
                break
            items.append(f"{_safe_repr(k, 40)}: {_safe_repr(v, 60)}")
        body = "{" + ", ".join(items) + (", ..." if n > 5 else "") + "}"
    else:
        items = []
        for i, v in enumerate(obj):
            if i == 5:
                break
            items.append(_safe_repr(v, 60))
        opener, closer = (
            ("(", ")") if isinstance(obj, tuple) else ("{", "}") if isinstance(obj, set | frozenset) else ("[", "]")
        )
        body = opener + ", ".join(items) + (", ..." if n > 5 else "") + closer
    return _clip(f"{kind}, length {n:,}: {body}", limit)


def _callable(obj: Any, limit: int) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = "(...)"
    doc = (inspect.getdoc(obj) or "").strip().split("\n", 1)[0]
    kind = "class" if isinstance(obj, type) else "function"
    name = getattr(obj, "__name__", "?")
    return _clip(f"{kind} {name}{sig}" + (f": {doc}" if doc else ""), limit)


def describe_value(obj: Any, limit: int = _VALUE_LIMIT) -> str:
    """A bounded, human- and model-readable description of ``obj``, secret values scrubbed (in every form
    they take when shown: see :func:`unity_nb._secrets.forms`), the start of one a cut left too (a DataFrame's
    cells are cut to 23 characters, a description to ``limit``: see :func:`unity_nb._secrets.scrub_clipped`)."""
    return scrub_clipped(_describe(obj, limit))


def _describe(obj: Any, limit: int) -> str:
    try:
        kind = _KINDS.get(type(obj)) or _kind_of(type(obj))  # pandas' and numpy's types known by their MRO, kept
        if kind == "frame":
            return _frame(obj, limit)
        if kind == "series":
            return _series(obj, limit)
        if kind == "array":
            return _clip(f"np.ndarray, shape {obj.shape}, dtype {obj.dtype}", limit)
        if isinstance(obj, str | bytes | bytearray | int | float | complex | bool) or obj is None:
            return f"{_short_type(obj)}: {_safe_repr(obj, limit - 12)}"
        if isinstance(obj, list | tuple | set | frozenset | dict) or (
            isinstance(obj, Mapping) and hasattr(obj, "__len__")
        ):
            return _container(obj, limit)
        if isinstance(obj, types.FunctionType | types.BuiltinFunctionType | type) or inspect.ismethod(obj):
            return _callable(obj, limit)
        shape = getattr(obj, "shape", None)
        if isinstance(shape, tuple):
            return _clip(f"{_short_type(obj)}, shape {shape}", limit)
    except Exception as err:
        return f"{_short_type(obj)} (could not describe: {type(err).__name__})"
    if callable(getattr(obj, "complete", None)) and isinstance(getattr(obj, "name", None), str):
        # a model: its name, never its repr (a CachedModel's mode, a local server's port), so that a prompt is
        # the same in a fresh kernel and a recording replays
        return _clip(f"{_short_type(obj)}, a model named {scrub(obj.name)!r}", limit)
    return f"{_short_type(obj)}: {_safe_repr(obj, limit - 20)}"


def user_variables(ns: Mapping[str, Any], hidden: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The user's variables in ``ns``: not modules, not ``_``-prefixed names, not IPython's own.

    ``hidden`` is IPython's ``user_ns_hidden`` (names the shell put there itself); a name in it
    counts as the user's only once rebound to another object.
    """
    out = {}
    for name, value in list(ns.items()):
        if type(name) is not str or name.startswith("_") or name in HIDDEN_NAMES or isinstance(value, types.ModuleType):
            continue
        if hidden is not None and name in hidden and hidden[name] is value:
            continue
        out[name] = value
    return out


def snapshot(
    ns: Mapping[str, Any],
    hidden: Mapping[str, Any] | None = None,
    *,
    trust: Mapping[str, tuple] | None = None,
    hint: Mapping[str, tuple] | None = None,
) -> dict[str, tuple]:
    """``{name: fingerprint}`` of :func:`user_variables` in one pass (an actor step takes it through :mod:`._watch`).

    ``trust`` is a recent snapshot whose fingerprints are taken as they are for names still bound to
    the same object (an identity check only): what was created, deleted or rebound since is seen,
    an in-place change since is not. ``hint`` is an earlier snapshot: a name still bound to the
    object it had there is known to be a user variable (its fingerprint is checked again).
    """
    out = {}
    hidden_names, module, cached = HIDDEN_NAMES, types.ModuleType, _CACHE.get
    hinted = (hint or {}).get
    for name, value in list(ns.items()):
        key = id(value)
        if trust is not None:
            fp = trust.get(name)
            if fp is not None and fp[0] == key:
                out[name] = fp
                continue
        fp = hinted(name)
        if fp is None or fp[0] != key:  # not known as a user variable bound to this object: filter
            if type(name) is not str or name[:1] == "_" or name in hidden_names or isinstance(value, module):
                continue
            if hidden is not None and name in hidden and hidden[name] is value:
                continue
        entry = cached(key)
        if entry is not None:  # fingerprint()'s cache hit, inlined: this loop runs for every variable, every step
            mgr = value._mgr
            axes = mgr.axes
            if entry[1] == id(mgr.blocks) and entry[2] == id(axes[0]) and entry[3] == id(axes[-1]):
                out[name] = entry[0]
                continue
        out[name] = fingerprint(value)
    return out


_KINDS: dict[type, str] = {}
"""The kinds of types a module holds (a library's: they live as long as the process)."""
_OWN_KINDS: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
"""The kinds of every other type (a class defined in a cell or a plan, defined again there): never kept alive."""
_REF = weakref.ref
_CACHE: dict[int, tuple] = {}
"""``id(obj) -> (fingerprint, ids of its blocks tuple, first and last axis, *weak references to what pins them)``
for pandas objects. An entry goes as soon as its object or any object pinning it is collected, so an id in it
always names the object it named when cached (but a frame's row index's: see :func:`fingerprint`). Only weak
references to what holds data: the cache keeps no old version of a frame's data alive (a frame's entry holds
its columns Index, and its fingerprint its blocks' dtypes and placements, never a block: see FrameParts)."""

_CHURN = [0]
"""How many times an entry of ``_CACHE`` was added, replaced or dropped: while it stays the same, every entry seen
before is still there (so :mod:`._watch` checks its entries again only when it moved)."""


def _kind_of(t: type) -> str:
    kind = _KINDS.get(t) or _OWN_KINDS.get(t)
    if kind is None:
        names = {(c.__module__.split(".", 1)[0], c.__name__) for c in t.__mro__}
        if ("pandas", "DataFrame") in names:
            kind = "frame"
        elif ("pandas", "Series") in names:
            kind = "series"
        elif ("numpy", "ndarray") in names:
            kind = "array"
        elif issubclass(t, str | bytes | int | float | bool | complex | tuple | frozenset) or t is type(None):
            kind = "value"
        elif issubclass(t, list | dict | set | bytearray):
            kind = "container"
        else:
            kind = "other"
        module = t.__module__
        if module != "__main__" and getattr(sys.modules.get(module), t.__qualname__, None) is t:
            _KINDS[t] = kind
        else:
            _OWN_KINDS[t] = kind
    return kind


class _Drop(int):
    """``key``: called when an object pinning ``_CACHE[key]`` is collected (with the weak reference to it), drops
    the entry when that reference is one of the entry's (a newer entry under the same key stays). An ``int``:
    every new frame has an entry, and an object the collector does not track wakes it no sooner (a
    ``functools.partial`` makes three tracked ones)."""

    __slots__ = ()

    def __call__(self, ref: Any) -> None:
        key = int(self)
        entry = _CACHE.get(key)
        # by identity: a dead reference equals only itself, and the entry's others are compared as objects
        if entry is not None and any([r is ref for r in entry[4:]]):
            _CACHE.pop(key, None)
            _forget_description(key)  # a frame's description is kept only with its entry's fingerprint
            _CHURN[0] += 1


def fingerprint(obj: Any) -> tuple:
    """A cheap signature to notice in-place changes (identity, type, size, shape, columns, dtypes).

    Mutations that keep all of these (one cell of a big DataFrame rewritten) go unnoticed:
    hashing the data would cost as much as reading it.

    A DataFrame's or Series' fingerprint is cached, and reused while its block manager's axes (Index
    objects, immutable), its blocks tuple and blocks (one dtype each) are the very same objects: every
    in-place change pandas makes to shape, labels or dtypes replaces one of them (``df['new'] = ...``,
    ``df.columns = ...``, a dtype change, ``inplace=True`` methods, a new manager). Checking that costs a
    tuple of ids, where building ``df.dtypes`` costs tens of microseconds. The manager itself is not
    compared: shape, labels and dtypes are read from its axes and blocks only, so a manager made anew over the
    very same ones says the same (and a description is checked against the rows it shows on every use).

    A DataFrame's is ``(id, type, shape, parts)``: ``parts`` (:class:`._parts.FrameParts`) names its first
    labels and dtypes, read only when compared with another or described (a new frame costs a few
    microseconds), and always as they were when the fingerprint was taken.
    """
    kind = _KINDS.get(type(obj)) or _kind_of(type(obj))
    if kind != "frame" and kind != "series":
        return _fingerprint(obj, kind)
    try:
        mgr = obj._mgr
        axes = mgr.axes
        blocks = mgr.blocks
        pins = id(blocks), id(axes[0]), id(axes[-1])
    except (AttributeError, IndexError, TypeError):  # another pandas layout: no cache
        return _fingerprint(obj, kind)
    key = id(obj)
    entry = _CACHE.get(key)
    # The entry exists only while the object, its columns and every block it was cached with are alive, so
    # equal ids mean the very same columns. The blocks tuple is compared by id: pandas
    # replaces it when it replaces a block, and the block replaced (pinned by a weak reference) dies with it,
    # which drops the entry. A frame's row index is not pinned: another index in its place has its length
    # (pandas checks), and that is all the fingerprint reads of it (a description reads its labels itself).
    if entry is not None and entry[1] == pins[0] and entry[2] == pins[1] and entry[3] == pins[2]:
        return entry[0]
    if kind == "frame":  # every frame in the namespace, at each run's start: labels and dtypes read when needed
        try:
            fp = frame_fingerprint(obj, axes, blocks)
        except Exception:
            fp = _fingerprint(obj, kind)
    else:
        fp = _fingerprint(obj, kind)
    try:
        forget = _Drop(key)
        if type(fp[-1]) is FrameParts:  # the entry holds the frame's columns Index: no other can take its identity
            # (its fingerprint's parts may be another frame's, over the very same labels: see frame_fingerprint)
            _CACHE[key] = (fp, *pins, *map(_REF, (obj, *blocks), repeat(forget)), axes[0])
        else:
            _CACHE[key] = (fp, *pins, *map(_REF, (obj, *axes, *blocks), repeat(forget)))
    except TypeError:  # something there takes no weak reference: no cache
        return fp
    _CHURN[0] += 1
    return fp


def _fingerprint(obj: Any, kind: str) -> tuple:
    parts: list[Any] = [id(obj), type(obj)]
    try:
        if kind == "frame":
            parts += frame_parts(obj, FP_COLUMNS)
        elif kind in ("series", "array"):
            parts += [obj.shape, str(obj.dtype)]
        elif kind == "value":
            parts.append(obj if not isinstance(obj, str | bytes) or len(obj) < 4096 else hash(obj))
        elif kind == "container":
            parts.append(len(obj))
            if isinstance(obj, dict) and len(obj) <= 64:
                parts.append(tuple(map(id, obj.values())))
            elif isinstance(obj, list) and len(obj) <= 64:
                parts.append(tuple(map(id, obj)))
    except Exception:
        pass
    return tuple(parts)


def describe_namespace(
    variables: Mapping[str, Any],
    *,
    budget: int = 6000,
    per_value: int = _VALUE_LIMIT,
    order: Iterable[str] | None = None,
) -> str:
    """Every variable described, within ``budget`` characters in total (the rest named only)."""
    names = list(order) if order is not None else sorted(variables)
    if not names:
        return "(no variables yet)"
    lines: list[str] = []
    used = 0
    # a frame's line is at least this long (unscrubbed): one that cannot fit is not described to be left out
    least = min(_FRAME_LEAST, per_value) if not secret_names() else 0
    for i, name in enumerate(names):
        value = variables[name]
        if used + len(name) + 4 + least > budget and least and _kind_of(type(value)) == "frame":
            line = ""  # over the budget whatever it says
        else:
            line = f"- {name}: {describe_value(value, per_value)}"
        if not line or used + len(line) > budget:
            rest = names[i:]
            shown = ", ".join(rest[:50])
            more = f" and {len(rest) - 50} more" if len(rest) > 50 else ""
            lines.append(f"- ({len(rest)} more, not described for space: {shown}{more})")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)
