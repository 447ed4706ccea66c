"""The guidance manager: procedures and notes (how-tos), linked to the functions they use."""

from __future__ import annotations

import difflib
import json
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle
from ._base import Manager
from ._util import clip, fail, other, words_score

__all__ = ("GuidanceManager",)


class GuidanceManager(Manager):
    """Procedures and notes the person wants followed: step-by-step how-tos, walkthroughs and
    strategies for combining their functions, each with a title, a body and the names of the
    registered functions it uses; kept in the unity_nb store, searched, asked about and
    updated in words.

    When a functions manager is registered beside it, linked function names are checked
    against the registered functions; otherwise they are kept as given.
    """

    alias = "guidance"
    caller_description = "keeping the person's procedures and how-to notes"
    exposed = ("search", "ask", "update")

    def __init__(self, *, store: Any, model: Any = None, bus: ev.EventBus | None = None, registry: Any = None) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        if store is None:
            raise UserError(
                "GuidanceManager needs store=unity_nb.Store(path) (or Store(':memory:') for a throwaway one)")
        self.store = store

    # -- the table --------------------------------------------------------------------------------

    def _rows(self) -> list[dict]:
        rows = self.store.query("SELECT id, title, body, functions, created, updated FROM guidance ORDER BY id")
        for r in rows:
            r["functions"] = json.loads(r["functions"] or "[]")
        return rows

    def _row(self, key: Any) -> dict:
        rows = self._rows()
        for r in rows:
            if str(r["id"]) == str(key).strip() or r["title"].lower() == str(key).strip().lower():
                return r
        entries = [(r["id"], r["title"]) for r in rows] or "none yet"
        raise fail(f"there is no guidance {key!r}; the entries are: {entries}")

    def _check_functions(self, names: Any) -> list[str]:
        """The names, de-duplicated; checked against the functions manager's catalog when one
        is registered (through its public ``catalog()``), else kept as given."""
        if names is None:
            return []
        if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
            raise fail("functions must be a list of function names")
        names = list(dict.fromkeys(n.strip() for n in names))
        functions = other(self, "functions")
        catalog = getattr(functions, "catalog", None)
        if not names or catalog is None:
            return names
        known = {e["name"] for e in catalog()}
        short = {k.split(".")[-1]: k for k in known}
        checked, unknown = [], []
        for n in names:
            bare = n.removeprefix("primitives.").removeprefix("user.").split("(", 1)[0]
            if bare in known:
                checked.append(bare)
            elif bare in short:
                checked.append(short[bare])
            else:
                unknown.append(n)
        if unknown:
            hints = {n: difflib.get_close_matches(n, sorted(known), n=3, cutoff=0.5) for n in unknown}
            raise fail(
                f"these are not registered functions: {unknown}"
                + "".join(f"; for {n!r} did you mean {h}?" for n, h in hints.items() if h)
                + f". Registered: {sorted(known)[:60] or 'none'}. Link only registered functions "
                "(find them with ask_functions), or leave the name out of `functions` and mention it in the body."
            )
        return checked

    def _same_title(self, title: str, but: int | None = None) -> dict | None:
        """An entry titled ``title`` (ignoring case), other than entry ``but``."""
        for r in self._rows():
            if r["title"].lower() == title.lower() and r["id"] != but:
                return r
        return None

    @staticmethod
    def _public(row: dict) -> dict:
        return {"id": row["id"], "title": row["title"], "body": row["body"], "functions": row["functions"]}

    # -- the loops' tools -----------------------------------------------------------------------------

    def _read_tools(self) -> list[Callable[..., Any]]:
        manager = self

        def list_guidance() -> list[dict] | str:
            """Every guidance entry: id, title, linked functions and the first line of its body."""
            rows = manager._rows()
            if not rows:
                return "there is no guidance yet"
            return [{"id": r["id"], "title": r["title"], "functions": r["functions"],
                     "first_line": clip(r["body"].strip().split("\n", 1)[0], 160)} for r in rows]

        def get_guidance(id_or_title: int | str) -> dict:
            """One guidance entry in full (by its id or exact title)."""
            return manager._public(manager._row(id_or_title))

        def search_guidance(query: str, limit: int = 5) -> list[dict] | str:
            """The guidance entries whose title, body or linked functions best match the words of
            ``query``, best first, in full."""
            scored = [(words_score(query, r["title"], r["title"], r["body"], " ".join(r["functions"])), r)
                      for r in manager._rows()]
            scored = sorted((p for p in scored if p[0]), key=lambda p: -p[0])
            best = scored[: max(1, min(limit, 20))]
            return [manager._public(r) for _s, r in best] or "no guidance matches those words"

        return [list_guidance, get_guidance, search_guidance]

    def _write_tools(self) -> list[Callable[..., Any]]:
        manager = self
        store = self.store

        def add_guidance(title: str, body: str, functions: list[str] | None = None) -> dict:
            """Add a procedure or note. ``title``: short and unique ("Monthly sales report").
            ``body``: the steps, numbered one per line, then any notes. ``functions``: the names
            of the registered functions it uses."""
            if not isinstance(title, str) or not title.strip() or not isinstance(body, str) or not body.strip():
                raise fail("guidance needs a title and a body")
            existing = manager._same_title(title.strip())
            if existing is not None:
                raise fail(
                    f"guidance titled {existing['title']!r} exists already (id {existing['id']}); edit it instead")
            names = manager._check_functions(functions)
            now = time.time()
            try:
                cur = store.execute(
                    "INSERT INTO guidance (title, body, functions, created, updated) VALUES (?, ?, ?, ?, ?)",
                    (title.strip(), body.strip(), json.dumps(names), now, now),
                )
            except sqlite3.IntegrityError:  # added meanwhile (another kernel)
                raise fail(f"guidance titled {title.strip()!r} exists already; edit it instead") from None
            return {"added": cur.lastrowid, "title": title.strip(), "functions": names}

        def edit_guidance(id: int, title: str | None = None, body: str | None = None,
                          functions: list[str] | None = None) -> dict:
            """Change an entry's title, body or linked functions (what is not given stays)."""
            row = manager._row(id)
            names = manager._check_functions(functions) if functions is not None else row["functions"]
            new_title = title.strip() if isinstance(title, str) and title.strip() else row["title"]
            new_body = body.strip() if isinstance(body, str) and body.strip() else row["body"]
            clash = manager._same_title(new_title, but=row["id"])
            if clash is not None:
                raise fail(f"another entry (id {clash['id']}) is titled {clash['title']!r}")
            try:
                store.execute("UPDATE guidance SET title = ?, body = ?, functions = ?, updated = ? WHERE id = ?",
                              (new_title, new_body, json.dumps(names), time.time(), row["id"]))
            except sqlite3.IntegrityError:
                raise fail(f"another entry is titled {new_title!r}") from None
            return {"edited": row["id"], **manager._public(manager._row(row["id"]))}

        def delete_guidance(id: int) -> str:
            """Delete an entry by id."""
            row = manager._row(id)
            store.execute("DELETE FROM guidance WHERE id = ?", (row["id"],))
            return f"deleted guidance {row['id']} ({row['title']!r})"

        return [add_guidance, edit_guidance, delete_guidance]

    def _functions_tools(self) -> list[Callable[..., Any]]:
        functions = other(self, "functions")
        if functions is None:
            return []

        async def ask_functions(request: str) -> Any:
            """Ask the functions manager which registered functions fit a need (or about one
            function); it answers with exact names and signatures."""
            return functions.search(request)

        return [ask_functions]

    def _tools(self) -> list[Callable[..., Any]]:
        return [*self._read_tools(), *self._write_tools(), *self._functions_tools()]

    # -- public: loops ------------------------------------------------------------------------------

    def search(self, request: str) -> LoopHandle:
        """Find the procedures and notes that apply to a task or question; answer with each
        one's id, title, its steps in full and the functions it uses, or say that none applies.
        """
        return self._loop("search", request, tools=self._read_tools())

    def ask(self, question: str) -> LoopHandle:
        """Answer a question from the stored procedures and notes (how to do something, which
        functions a procedure uses), citing the entries by id and title.
        """
        return self._loop("ask", question, tools=[*self._read_tools(), *self._functions_tools()])

    def update(self, instruction: str) -> LoopHandle:
        """Add, edit or delete procedures and notes as instructed, linking each to the
        registered functions it uses; then say exactly what changed (ids and titles).

        Check the existing entries first and edit one that covers the same ground rather than
        adding a near-duplicate.
        """
        return self._loop("update", instruction)
