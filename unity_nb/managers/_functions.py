"""The functions manager: the person's registered notebook functions, searchable."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle, Tool, gated_function
from ._base import Manager
from ._util import clip, fail, words_score

__all__ = ("FunctionsManager",)


def _signature(fn: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(...)"


def _source(fn: Callable[..., Any], limit: int = 2000) -> str | None:
    try:  # a function marked needs_approval: its own source, not its gate's
        return clip(inspect.getsource(gated_function(fn) or fn), limit)
    except (OSError, TypeError):
        return None


class FunctionsManager(Manager):
    """The person's registered notebook functions: those offered to plans with
    ``@unity_nb.primitive`` (called as ``await primitives.<alias>.<name>(...)``), the tools
    registered with ``@unity_nb.tool``, and any functions given to this manager; searchable by
    name, signature and docstring.

    Functions are read at each call, so one registered in a later cell is found at once.
    ``catalog()`` returns the same listing as a list of dicts, for people and for other
    managers' code (it is not a loop, and not offered to the actor).
    """

    alias = "functions"
    caller_description = "looking up the person's registered notebook functions"
    exposed = ("search", "ask")

    def __init__(
        self,
        functions: Iterable[Callable[..., Any] | Tool] | Mapping[str, Callable[..., Any] | Tool] | None = None,
        *,
        model: Any = None,
        bus: ev.EventBus | None = None,
        registry: Any = None,
    ) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        own: dict[str, Callable[..., Any]] = {}
        items = functions.items() if isinstance(functions, Mapping) else ((None, f) for f in (functions or ()))
        for name, f in items:
            fn = f.fn if isinstance(f, Tool) else f
            if not callable(fn):
                raise UserError(f"FunctionsManager takes functions; {f!r} is a {type(f).__name__}")
            key = name or (f.name if isinstance(f, Tool) else getattr(fn, "__name__", None))
            if not key:
                raise UserError(f"{fn!r} has no __name__: pass functions as a dict {{name: function}}")
            own[key] = fn
        self._own = own

    # -- the catalog (plain, not a loop) ---------------------------------------------------

    def catalog(self) -> list[dict]:
        """Every known function as ``{name, kinds, call, signature, summary, doc}``, sorted by name.

        ``name`` is how to refer to it (``alias.name`` for a primitive of an alias other than
        ``user``); ``kinds`` lists ``primitive``, ``tool`` and ``function`` (given to this
        manager); ``call`` says how a plan calls it.
        """
        from .._registry import registered_tools
        from ..actor import registered_primitives

        by_fn: dict[int, dict] = {}
        entries: list[dict] = []

        def add(name: str, fn: Callable[..., Any], kind: str, call: str, doc: str | None = None) -> None:
            entry = by_fn.get(id(fn))
            if entry is not None and entry["name"].split(".")[-1] == name.split(".")[-1]:
                if kind not in entry["kinds"]:
                    entry["kinds"].append(kind)
                    entry["call"] += f"; {call}"
                return
            doc = doc if doc is not None else (inspect.getdoc(fn) or "")
            entry = {
                "name": name, "kinds": [kind], "call": call, "signature": _signature(fn),
                "summary": doc.strip().split("\n", 1)[0], "doc": doc.strip(),
            }
            by_fn.setdefault(id(fn), entry)
            entries.append(entry)

        for alias, fns in registered_primitives().items():
            for name, fn in fns.items():
                label = name if alias == "user" else f"{alias}.{name}"
                add(label, fn, "primitive", f"await primitives.{alias}.{name}{_signature(fn)}")
        for t in registered_tools():
            add(t.name, t.fn, "tool", f"the actor's JSON tool {t.name}",
                t.description if t.description != f"Call {t.name}." else None)
        for name, fn in self._own.items():
            add(name, fn, "function", f"{name}{_signature(fn)} (a notebook function)")
        entries.sort(key=lambda e: e["name"].lower())
        return entries

    def _entries(self) -> list[dict]:
        return self.catalog()

    def _lookup(self, name: str) -> list[dict]:
        name = (name or "").strip()
        if name.startswith("primitives."):
            name = name[len("primitives."):]
            if name.startswith("user."):
                name = name[len("user."):]
        name = name.split("(", 1)[0]
        entries = self._entries()
        exact = [e for e in entries if e["name"] == name]
        if exact:
            return exact
        return [e for e in entries if e["name"].split(".")[-1] == name]

    # -- the loops' tools -------------------------------------------------------------------

    def _tools(self) -> list[Callable[..., Any]]:
        manager = self

        def list_functions() -> list[dict] | str:
            """Every registered function: name, kinds (primitive / tool / function), signature
            and the first line of its docstring."""
            entries = manager._entries()
            if not entries:
                return ("no functions are registered "
                        "(none with @unity_nb.primitive or @unity_nb.tool, none given to this manager)")
            return [{"name": e["name"], "kinds": e["kinds"], "signature": e["signature"], "summary": e["summary"]}
                    for e in entries[:200]]

        def find_functions(query: str, limit: int = 10) -> list[dict] | str:
            """The functions whose name, signature or docstring best match the words of
            ``query``, best first (an empty list: nothing matched; try other words or
            list_functions)."""
            scored = []
            for e in manager._entries():
                score = words_score(query, e["name"].replace("_", " "), e["name"], e["signature"], e["doc"])
                if score:
                    scored.append((score, e))
            scored.sort(key=lambda p: -p[0])
            return [{"name": e["name"], "kinds": e["kinds"], "signature": e["signature"], "summary": e["summary"]}
                    for _s, e in scored[: max(1, min(limit, 50))]]

        def describe(name: str) -> list[dict]:
            """Everything about one function: its full signature and docstring, how a plan calls
            it, and its source when available."""
            found = manager._lookup(name)
            if not found:
                names = [e["name"] for e in manager._entries()]
                close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
                raise fail(f"no registered function is named {name!r}"
                           + (f"; did you mean {close}?" if close else f"; the functions are: {names[:50]}"))
            out = []
            for e in found:
                fn = manager._function(e["name"])
                out.append({**e, "source": _source(fn) if fn is not None else None})
            return out

        return [list_functions, find_functions, describe]

    def _function(self, name: str) -> Callable[..., Any] | None:
        from .._registry import registered_tools
        from ..actor import registered_primitives

        if name in self._own:
            return self._own[name]
        alias, _, short = name.rpartition(".")
        fn = registered_primitives().get(alias or "user", {}).get(short)
        if fn is not None:
            return fn
        return next((t.fn for t in registered_tools() if t.name == name), None)

    # -- public: loops ------------------------------------------------------------------------

    def search(self, request: str) -> LoopHandle:
        """Find the registered functions that fit a need described in words ("something that
        cleans a sales table"); answer with each one's exact name, signature, how a plan calls
        it, and one line on why it fits, or say plainly that none fits.

        Search with several phrasings (find_functions), confirm candidates with describe, and
        never invent a function that is not registered.
        """
        return self._loop("search", request)

    def ask(self, question: str) -> LoopHandle:
        """Answer a question about the registered functions (what exists, what a function does,
        what its parameters mean, how to call it) from their signatures, docstrings and source.
        """
        return self._loop("ask", question)
