"""One guarded read-only SELECT of the knowledge manager: bounded work, bounded result, stoppable.

Work is counted, not timed, so a query is refused the same way on every machine:

- the SQLite VM's instructions, by a progress handler (one unit per 1,000 instructions);
- the work done *inside* one function call, which no progress handler sees: the built-in functions
  whose cost grows with the product of their arguments' lengths (``like``, ``glob``, ``instr``,
  ``replace``, ``trim``) are replaced, for the query's connection only, by wrappers that charge
  that product to the same budget first and then call the built-in (on a private in-memory
  connection, so the semantics are SQLite's own).

A wall-clock ceiling backs the counts up, and :meth:`Query.interrupt` (from any thread: the loop
was stopped) ends the statement at its next instruction. Every query has a connection of its
own, closed when it ends, so an abandoned query never holds a lock another one needs.

The rows reaching the model are capped in number and in characters (long values are cut, blobs
are described), and the result says so.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ("Query", "QueryFailed", "TooMuchWork")

_CHARGED = (
    ("like", 2), ("like", 3), ("glob", 2), ("instr", 2), ("replace", 3), ("trim", 2), ("ltrim", 2), ("rtrim", 2),
)
"""Built-ins whose work inside one call grows with len(first argument) * len(second argument)."""
_PAIRS_PER_UNIT = 10_000
"""Character pairs such a function may compare for one unit of budget (about what 1,000 VM instructions cost)."""
MAX_VALUE = 1_000_000
"""While a query runs, no string or blob it builds may exceed this many bytes."""
MAX_CELL = 2_000
"""Characters of one value shown to the model; longer ones are cut, saying how much."""
MAX_RESULT = 20_000
"""Characters of rows shown to the model in one result; the rows after are left out, saying so."""


class TooMuchWork(Exception):
    """The query used up its budget (or its time, or was stopped)."""


class QueryFailed(Exception):
    """SQLite refused the statement; the message says why."""


def _size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str | bytes):
        return len(value)
    return len(str(value))


def shown(value: Any, room: int = MAX_CELL) -> Any:
    """A value as the model reads it: a text longer than ``room`` cut, a blob described (never its bytes)."""
    if isinstance(value, bytes):
        return f"<blob of {len(value):,} bytes>"
    if isinstance(value, str) and len(value) > room:
        return value[:room] + f"… [{len(value) - room:,} more characters cut]"
    return value


class Query:
    """One statement on its own connection (``connect()`` makes it), within ``budget`` units of work."""

    def __init__(
        self, text: str, connect: Callable[[], sqlite3.Connection], *, budget: float, seconds: float,
        authorizer: Callable[..., int], limit: int,
    ) -> None:
        self.text, self.connect, self.budget, self.seconds = text, connect, budget, seconds
        self.authorizer, self.limit = authorizer, limit
        self.spent = 0.0
        self.stopped = False
        self.error: str | None = None
        self._deadline = 0.0
        self._db: sqlite3.Connection | None = None
        self._guard = threading.Lock()

    # -- bounding the work ---------------------------------------------------------------------

    def _progress(self) -> int:
        self.spent += 1
        return 1 if self.spent > self.budget or self.stopped or time.monotonic() > self._deadline else 0

    def _charged(self, helper: sqlite3.Connection, name: str, n: int) -> Callable[..., Any]:
        sql = f"SELECT {name}({', '.join('?' * n)})"

        def call(*args: Any) -> Any:
            self.spent += (_size(args[0]) + 1) * (_size(args[1]) + 1) / _PAIRS_PER_UNIT
            if self.spent > self.budget or self.stopped:
                raise TooMuchWork  # SQLite ends the statement ("user-defined function raised exception")
            try:
                return helper.execute(sql, args).fetchone()[0]
            except sqlite3.Error as err:
                self.error = str(err)
                raise

        return call

    def interrupt(self) -> None:
        """End the statement at its next instruction (callable from any thread; also before it starts)."""
        with self._guard:
            self.stopped = True
            if self._db is not None:
                self._db.interrupt()

    # -- running ---------------------------------------------------------------------------------

    def run(self) -> dict:
        """The result ``{"columns", "rows"[, "note"]}``; :class:`TooMuchWork` or :class:`QueryFailed`."""
        self._deadline = time.monotonic() + self.seconds
        db = self.connect()
        helper = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            for conn in (db, helper):
                conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE)
            for name, n in _CHARGED:
                db.create_function(name, n, self._charged(helper, name, n), deterministic=True)
            db.set_authorizer(self.authorizer)
            db.set_progress_handler(self._progress, 1000)
            with self._guard:
                if self.stopped:
                    raise TooMuchWork
                self._db = db
            try:
                cur = db.execute(self.text)
                names = [d[0] for d in cur.description or ()]
                return self._rows(cur, names)
            except sqlite3.ProgrammingError:
                raise
            except sqlite3.Error as err:
                if self.stopped or self.spent > self.budget or str(err) == "interrupted":
                    raise TooMuchWork from None
                raise QueryFailed(self.error or str(err)) from None
        finally:
            with self._guard:
                self._db = None
            db.close()
            helper.close()

    def _rows(self, cur: sqlite3.Cursor, names: list[str]) -> dict:
        """At most ``limit`` rows and about ``MAX_RESULT`` characters of them, fetched one by one."""
        rows: list[dict] = []
        used, cut, more = 0, False, False
        while True:
            row = cur.fetchone()
            if row is None:
                break
            if len(rows) >= self.limit:
                more = True
                break
            # each value gets its share of the result (a row of many long columns is cut to fit, too)
            room = max(20, min(MAX_CELL, MAX_RESULT // max(1, len(names))))
            values = {k: shown(v, room) for k, v in zip(names, tuple(row), strict=False)}
            cut = cut or any(isinstance(v, bytes) or (isinstance(v, str) and len(v) > room) for v in tuple(row))
            size = len(json.dumps(values, ensure_ascii=False, default=repr))
            if rows and used + size > MAX_RESULT:
                more = True
                break
            rows.append(values)
            used += size
        out: dict[str, Any] = {"columns": names, "rows": rows}
        notes = []
        if more and len(rows) >= self.limit:
            notes.append(f"only the first {self.limit} rows are shown; aggregate or add LIMIT/OFFSET for the rest")
        elif more:
            notes.append(f"only the first {len(rows)} rows are shown (a result is cut at about {MAX_RESULT:,} "
                         "characters); select fewer or shorter columns, aggregate, or page with LIMIT/OFFSET")
        if cut:
            notes.append("long values are cut (marked '… [N more characters cut]') and blobs are shown by size only; "
                         "use substr() or length() to read them")
        if notes:
            out["note"] = "; ".join(notes)
        return out
