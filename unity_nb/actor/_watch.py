"""One namespace watched step after step: each snapshot redoes only what could differ from the last one.

An actor step looks at the namespace twice (before the model is asked, for what the person changed, and after
the plan, for what it changed), and most steps leave all but a name or two as they were. Taken against the
snapshot it took last, :meth:`Watch.take` gives the very snapshot :func:`._describe.snapshot` with that ``hint``
would, and the few names whose fingerprints may differ:

- the names, and the identities of what they are bound to, are compared whole (C loops over two tuples):
  only a name bound to another object since is looked at again;
- a value whose fingerprint holds the value itself (a number, a short string, a tuple) cannot change while its
  name is bound to the same object: the last snapshot keeps it alive, so no other object can have its identity;
- pandas objects are checked all at once: the identities of each one's blocks tuple, first and last axis, read
  by attribute getters mapped over all of them (C loops, no Python code per object), against those read last
  time. They are what :func:`._describe.fingerprint` compares before reusing a cached
  fingerprint, and they are valid for the same reason: the cache entry each was read from is still there
  (checked when the cache changed at all since, ``_CHURN``), so every object it pins by a weak reference is
  alive, and an equal identity is the very same object (a frame's row index is not pinned: another in its
  place has its length, and the fingerprint reads nothing else of it);
- everything else (lists, dicts, arrays, other objects; a name bound to a module or IPython's) is looked at
  again every time, as without history.

Where a shortcut does not hold (a name added or removed, a pandas object rebound, changed in place or new, a
cache entry gone, a snapshot other than the last one), the pass is the full one, which also learns for the next.

A run's first look learns from the last run's (``carry``): a run's watch leaves what its last pass learnt under the
namespace's identity as the run ends (:data:`_CARRIED`), and a new watch over a namespace with that identity starts
from it. Nothing above depends on the namespace being the very same dict: every shortcut trusts only identities the
carried snapshot or the fingerprint cache keeps alive, so a dict made where a dead one was (the same identity) is
looked at correctly, most likely in a full pass (its names differ).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from itertools import chain, compress
from operator import attrgetter, is_, itemgetter, ne
from typing import Any

from ._describe import _CACHE, _CHURN, _KINDS, HIDDEN_NAMES, fingerprint

__all__ = ("Watch",)

_MGR, _AXES, _BLOCKS = attrgetter("_mgr"), attrgetter("axes"), attrgetter("blocks")
_FIRST, _LAST, _PINS = itemgetter(0), itemgetter(-1), itemgetter(1, 2, 3)
_HELD = frozenset({int, float, complex, bool, type(None), tuple, frozenset})
"""Exact types whose fingerprint holds the value itself (``str`` and ``bytes`` too, when short)."""
_CARRIED: dict[int, tuple] = {}
"""``id(namespace) -> (hidden, last snapshot, what the pass learnt)``: the last pass over each namespace, for the
next run's first look (see the module's docstring). At most :data:`_CARRIED_MAX` namespaces, the first carried
dropped first; what it holds lives that long after its namespace: the snapshot's fingerprints (numbers, short
strings and tuples held as values), and the fingerprint cache's entries it relied on (a frame's columns Index),
never a frame or its data."""
_CARRIED_MAX = 16
_SAME, _FRAME, _AGAIN = 1, 2, 3
"""What a name holds: a variable whose fingerprint holds its value; a pandas object with a cached fingerprint;
anything else (looked at on every pass)."""


def _signature(frames: Iterable[Any]) -> tuple:
    """The identities of the pandas objects' blocks tuples, then of their first and last axes."""
    mgrs = list(map(_MGR, frames))
    axes = list(map(_AXES, mgrs))
    return tuple(map(id, chain(map(_BLOCKS, mgrs), map(_FIRST, axes), map(_LAST, axes))))


def _never(name: Any) -> bool:
    """Never a user variable, whatever it is bound to."""
    return type(name) is not str or name[:1] == "_" or name in HIDDEN_NAMES


class Watch:
    """Snapshots of ``namespace``'s user variables (see :func:`._describe.snapshot`), each learning from the last."""

    def __init__(
        self, namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None = None, *, carry: bool = False
    ) -> None:
        self.namespace = namespace
        self.hidden = hidden
        self.last: dict[str, tuple] = {}
        """The last snapshot taken."""
        self.bound: tuple = ((), ())
        """The namespace's names and the identities of their values when :attr:`last` was taken."""
        self._churn = -1
        self._names: tuple = ()
        self._ids: tuple = ()
        self._frames: tuple[int, ...] = ()
        self._frame_set: frozenset[int] | None = None
        self._mask: bytes | None = None
        self._entries: list[tuple] = []
        self._sig: tuple = ()
        self._again: tuple[int, ...] = ()
        self._left_for: dict | None = None
        self._left: tuple[dict[str, tuple], tuple[int, ...]] | None = None
        self._carry = id(namespace) if carry else None
        """The key this watch leaves each pass's state under, for the next run's (None: not carried)."""
        carried = _CARRIED.get(id(namespace)) if carry else None
        if carried is not None and carried[0] is hidden:
            (_, self.last, self._names, self._ids, self._frames, self._entries, self._sig, self._again,
             self._churn) = carried
            self.bound = (self._names, self._ids)

    def leave(self) -> None:
        """The last pass's state, for the next watch over a namespace with this identity (see :data:`_CARRIED`): a
        run leaves it as it ends."""
        key = self._carry
        if key is None:
            return
        if self._left_for is not self.last:  # worked out once per snapshot (most passes change nothing)
            self._left_for, self._left = self.last, self._carried()
        if self._left is None:
            _CARRIED.pop(key, None)
            return
        if key not in _CARRIED and len(_CARRIED) >= _CARRIED_MAX:
            try:  # the first carried goes (another thread's watch may have taken it out just now)
                _CARRIED.pop(next(iter(_CARRIED)), None)
            except (StopIteration, RuntimeError):
                pass
        last, again = self._left
        _CARRIED[key] = (self.hidden, last, self._names, self._ids, self._frames, self._entries, self._sig, again,
                         self._churn)

    def _carried(self) -> tuple[dict[str, tuple], tuple[int, ...]] | None:
        """The last snapshot as it is carried, and the names to look at again: a fingerprint that holds an object
        of the person's (its type a class of theirs, or a tuple or frozenset held as its value) is carried as its
        identity alone, and its name looked at again by the next watch, so a namespace that lets go of it (a cell's
        class, its instances) frees it; None (nothing carried) when a pandas object's type is theirs."""
        again = set(self._again)
        last: dict[str, tuple] = {}
        frames = set(self._frames)
        for p, name in enumerate(self._names):
            fp = self.last.get(name)
            if fp is None:
                continue
            kind = fp[1] if len(fp) > 1 else None
            if kind in _KINDS and kind is not tuple and kind is not frozenset:
                last[name] = fp
            elif p in frames:
                return None
            else:
                last[name] = (fp[0],)  # equal to no fingerprint: looked at again, it is taken anew
                again.add(p)
        return last, tuple(sorted(again))

    def variables(self) -> list[str] | None:
        """The user variables' names, in namespace order, when every name is bound to the object it was bound to at
        the last pass (a carried one too: see :data:`_CARRIED`), without fingerprinting them. None when a binding
        differs, or no pass was taken.

        An equal identity is the very object only where the last pass holds it (see :meth:`_fast`): a value held by
        its fingerprint, a pandas object while its cache entry is there; a name the pass looks at every time is
        looked at again (a module or IPython's own is no variable)."""
        if not self._names:
            return None
        ns = self.namespace
        names = tuple(ns)
        if not self._same_names(names):
            return None
        values = tuple(ns.values())
        ids = tuple(map(id, values))
        if len(values) != len(names) or ids[:len(self._ids)] != self._ids or not self._entries_hold(ids, _CHURN[0]):
            return None
        hidden, module, last = self.hidden, types.ModuleType, self.last
        for p in self._again:
            value, name = values[p], names[p]
            now = not isinstance(value, module) and not (hidden is not None and hidden.get(name, hidden) is value)
            if now != (name in last):
                return None
        return list(last)

    def _same_names(self, names: tuple) -> bool:
        """Whether ``names`` are the last pass's, in order, but for names never a variable added after them (a cell
        run in IPython adds ``_i7``, and ``_7`` when it shows a value): each position still names what it named."""
        known = self._names
        if names == known:
            return True
        n = len(known)
        return len(names) > n and names[:n] == known and all(map(_never, names[n:]))

    def _entries_hold(self, ids: tuple, churn: int) -> bool:
        """Whether every fingerprint cache entry the last pass relied on is still the one there (each pins its
        pandas object: an equal identity is the very object)."""
        return churn == self._churn or all(
            map(is_, map(_CACHE.get, map(ids.__getitem__, self._frames)), self._entries)
        )

    def take(self, hint: dict[str, tuple] | None = None) -> tuple[dict[str, tuple], list[str] | None]:
        """``snapshot(namespace, hidden, hint=hint)``, and the names whose fingerprints differ from ``hint``'s
        (in namespace order), or ``None`` when any may. A snapshot is never changed once returned: one that
        would equal ``hint`` is ``hint`` itself."""
        churn = _CHURN[0]  # read first: whatever changes the cache from here on shows at the next pass
        ns = self.namespace
        values = tuple(ns.values())
        names = tuple(ns)
        if len(names) != len(values):  # another thread changed the namespace between the two reads
            items = list(ns.items())
            names, values = tuple(k for k, _v in items), tuple(v for _k, v in items)
        ids = tuple(map(id, values))
        self.bound = (names, ids)
        if hint is not None and hint is self.last and self._same_names(names):
            looked = self._fast(names, values, ids, hint, churn)
            if looked is not None:
                return self.last, looked
        return self._full(names, values, ids, hint, churn), None

    def _fast(
        self, names: tuple, values: tuple, ids: tuple, hint: dict[str, tuple], churn: int
    ) -> list[str] | None:
        """The pass against :attr:`last` (``hint``), or ``None`` when only a full pass can tell."""
        moved: list[int] = []
        if ids != self._ids:
            moved = [p for p in compress(range(len(ids)), map(ne, ids, self._ids)) if not _never(names[p])]
            if self._frame_set is None:
                self._frame_set = frozenset(self._frames)
            if not self._frame_set.isdisjoint(moved):  # a pandas object's name rebound
                return None
        if self._frames:
            if not self._entries_hold(ids, churn):  # an entry of the fingerprint cache it relies on is gone
                return None
            if self._mask is None:
                mask = bytearray(len(names))
                for p in self._frames:
                    mask[p] = 1
                self._mask = bytes(mask)
            try:
                if _signature(compress(values, self._mask)) != self._sig:
                    return None  # one changed in place, or was replaced
            except Exception:
                return None
        again = set(self._again) if moved else None
        look = sorted({*self._again, *moved}) if moved else self._again
        now = hint
        changed: list[str] = []
        hinted = hint.get
        for p in look:
            name = names[p]
            fp, role = self._look(name, values[p], ids[p], hinted)
            if role == _FRAME:  # a pandas object where there was none: the full pass learns it
                return None
            if again is not None:
                (again.add if role == _AGAIN else again.discard)(p)
            old = hinted(name)
            if fp is None:
                if old is None:
                    continue
                if now is hint:
                    now = dict(hint)
                del now[name]
            elif old is None:  # a variable under a name that was none: the full pass keeps the order
                return None
            elif fp == old:
                continue
            else:
                if now is hint:
                    now = dict(hint)
                now[name] = fp
            changed.append(name)
        if again is not None:
            self._again = tuple(sorted(again))
        self._names, self._ids = names, ids  # names never a variable may have been added after the others
        self._churn = churn
        self.last = now
        return changed

    def _look(
        self, name: str, value: Any, key: int, hinted: Callable[[str], tuple | None]
    ) -> tuple[tuple | None, int]:
        """One name's fingerprint (``None``: not a user variable) and what it is, as :func:`snapshot` decides."""
        fp = hinted(name)
        if fp is None or fp[0] != key:
            if _never(name):
                return None, _SAME
            if isinstance(value, types.ModuleType):
                return None, _AGAIN
            hidden = self.hidden
            if hidden is not None and name in hidden and hidden[name] is value:
                return None, _AGAIN
        fp = fingerprint(value)
        t = type(value)
        if t in _HELD or ((t is str or t is bytes) and len(value) < 4096):
            return fp, _SAME
        entry = _CACHE.get(key)
        return fp, (_FRAME if entry is not None and entry[0] is fp else _AGAIN)

    def _full(self, names: tuple, values: tuple, ids: tuple, hint: dict[str, tuple] | None, churn: int) -> dict:
        """The snapshot without shortcuts (one pass, fingerprint()'s cache hit inlined), learning for the next."""
        out: dict[str, tuple] = {}
        frames: list[int] = []
        entries: list[tuple] = []
        again: list[int] = []
        hinted = (hint or {}).get
        hidden, hidden_names, module, cached = self.hidden, HIDDEN_NAMES, types.ModuleType, _CACHE.get
        for p, name in enumerate(names):
            value, key = values[p], ids[p]
            fp = hinted(name)
            if fp is None or fp[0] != key:  # not known as a user variable bound to this object: filter
                if type(name) is not str or name[:1] == "_" or name in hidden_names:
                    continue
                if isinstance(value, module) or (hidden is not None and name in hidden and hidden[name] is value):
                    again.append(p)  # not a variable now; it may be once the module or IPython lets go
                    continue
            entry = cached(key)
            if entry is not None:  # fingerprint()'s cache hit, inlined: this loop runs for every variable
                mgr = value._mgr
                axes = mgr.axes
                if entry[1] == id(mgr.blocks) and entry[2] == id(axes[0]) and entry[3] == id(axes[-1]):
                    out[name] = entry[0]
                    frames.append(p)
                    entries.append(entry)
                    continue
            fp = out[name] = fingerprint(value)
            t = type(value)
            if t in _HELD or ((t is str or t is bytes) and len(value) < 4096):
                continue
            entry = cached(key)
            if entry is not None and entry[0] is fp:
                frames.append(p)
                entries.append(entry)
            else:
                again.append(p)
        self._names, self._ids = names, ids
        self._frames, self._frame_set, self._mask = tuple(frames), None, None
        self._entries = entries
        self._sig = tuple(chain.from_iterable(zip(*map(_PINS, entries))))
        self._again = tuple(again)
        self._churn = churn
        self.last = out
        return out
