"""The knowledge manager: typed fact tables in the store, queried with read-only SQL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle
from ._base import Manager
from ._sql import Query, QueryFailed, TooMuchWork
from ._util import clip, fail

__all__ = ("KnowledgeManager",)

PREFIX = "kn_"
"""Every knowledge table is a real SQLite table named ``kn_<name>``."""
TYPES = {"text": "TEXT", "integer": "INTEGER", "real": "REAL", "boolean": "BOOLEAN"}
_TYPE_ALIASES = {
    "str": "text", "string": "text", "int": "integer", "float": "real", "number": "real", "bool": "boolean",
}
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_MAX_COLUMNS = 64
_MAX_ROWS_PER_CALL = 1000
_SHOW_ROWS = 100
_QUERY_BUDGET = 5_000
"""Units of work a query may take (a unit: 1,000 SQLite VM instructions, or 10,000 character pairs
compared inside one LIKE, GLOB, instr, replace or trim call): about 5M instructions, then it is
interrupted; counted, not timed, so it is the same on every machine (see ``_sql``)."""
_QUERY_SECONDS = 10.0
"""A ceiling on one query's time, behind the counted budget."""
_SELECT = re.compile(r"^\s*(select|with)\b", re.IGNORECASE)

_READ_ONLY_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_FUNCTION,
                                getattr(sqlite3, "SQLITE_RECURSIVE", 33)})


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail(
            f"{what} {name!r} is not allowed: use lowercase letters, digits and '_', starting with a letter, "
            "at most 48 characters (for example 'sales_regions')"
        )
    return name


def _check_type(kind: Any, column: str) -> str:
    key = str(kind).strip().lower() if isinstance(kind, str) else ""
    key = _TYPE_ALIASES.get(key, key)
    if key not in TYPES:
        raise fail(f"column {column!r} has type {kind!r}; the types are: {', '.join(TYPES)}")
    return key


def _value(column: str, kind: str, value: Any) -> Any:
    """``value`` checked against the column's type, as SQLite stores it (never formatted into SQL)."""
    if value is None:
        return None
    if kind == "text":
        if isinstance(value, str):
            return value
    elif kind == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind == "real":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind == "boolean":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int) and value in (0, 1):
            return value
    raise fail(f"column {column!r} is {kind}; {value!r} ({type(value).__name__}) is not a {kind} value")


def _authorize(action: int, arg1: str | None, _arg2: str | None, db: str | None, _source: str | None) -> int:
    """SQLite authorizer for knowledge queries: a SELECT that reads knowledge tables only."""
    if action == sqlite3.SQLITE_READ:
        if db is None:  # a common table expression or subquery of this statement
            return sqlite3.SQLITE_OK
        if db == "main" and (arg1 or "").lower().startswith(PREFIX):
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK if action in _READ_ONLY_ACTIONS else sqlite3.SQLITE_DENY


class KnowledgeManager(Manager):
    """Structured facts the person wants kept: typed tables (columns of type text, integer,
    real or boolean) stored in the unity_nb store, each with a description; asked in words,
    answered by read-only SQL over the tables, and updated by instruction.

    Each table is a real SQLite table ``kn_<name>`` with an integer ``id`` column first;
    ``dataframe(name)`` returns one as a pandas DataFrame (a plain method, not a loop).
    """

    alias = "knowledge"
    caller_description = "keeping and querying the person's structured knowledge tables"
    exposed = ("ask", "update")

    def __init__(self, *, store: Any, model: Any = None, bus: ev.EventBus | None = None, registry: Any = None) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        if store is None:
            raise UserError(
                "KnowledgeManager needs store=unity_nb.Store(path) (or Store(':memory:') for a throwaway one)")
        self.store = store
        self.query_budget = _QUERY_BUDGET
        """How much work one query may do (in thousands of SQLite VM instructions) before it is interrupted."""
        self.query_seconds = _QUERY_SECONDS
        """The most time one query may take, whatever its budget."""
        self.running: set[Query] = set()
        """The queries running now (each on its own connection)."""

    # -- the tables ---------------------------------------------------------------------------

    def _tables(self) -> list[dict]:
        rows = self.store.query("SELECT name, columns, description, created FROM knowledge_tables ORDER BY name")
        for r in rows:
            r["columns"] = json.loads(r["columns"] or "{}")
        return rows

    def _table(self, name: Any) -> dict:
        key = name[len(PREFIX):] if isinstance(name, str) and name.startswith(PREFIX) else name
        for t in self._tables():
            if t["name"] == key:
                return t
        names = [t["name"] for t in self._tables()]
        raise fail(f"there is no knowledge table {name!r}; the tables are: {names or 'none yet'}")

    def _overview(self) -> str:
        tables = self._tables()
        if not tables:
            return "There are no knowledge tables yet."
        lines = ["The knowledge tables now (query them by their SQL names):"]
        for t in tables:
            cols = ", ".join(f"{c} {k}" for c, k in t["columns"].items())
            lines.append(f"- {PREFIX}{t['name']} (id integer, {cols}): {clip(t['description'], 200)}")
        return "\n".join(lines)

    def dataframe(self, table: str):
        """The table ``table`` as a pandas DataFrame indexed by ``id`` (booleans as booleans,
        integers as nullable integers). For people and plans: returns at once, not a loop."""
        import pandas as pd

        try:
            t = self._table(table)
        except Exception as err:  # a ToolFailed carries the model-facing text
            raise UserError(str(err).removeprefix("error: ")) from None
        columns = list(t["columns"])
        rows = self.store.query(f'SELECT * FROM "{PREFIX}{t["name"]}" ORDER BY "id"')
        df = pd.DataFrame(rows, columns=["id", *columns]).set_index("id")
        dtypes = {"integer": "Int64", "real": "float64", "boolean": "boolean", "text": "object"}
        return df.astype({c: dtypes[k] for c, k in t["columns"].items()})

    # -- read-only SQL ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """A connection of the query's own (so a query never holds a lock that recording events or
        another query needs): read-only on a file store; a private copy of an in-memory store."""
        if self.store.path == ":memory:":
            return self.store.copy()
        uri = Path(self.store.path).expanduser().resolve().as_uri() + "?mode=ro"
        db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA query_only = ON")
        db.execute("PRAGMA busy_timeout = 10000")
        return db

    def _query(self, sql: Any, limit: int) -> Query:
        if not isinstance(sql, str) or not _SELECT.match(sql):
            raise fail("only a single read-only SELECT (or WITH ... SELECT) statement is allowed here; "
                       "to change tables or rows use the update tools")
        return Query(sql.strip().rstrip(";").strip(), self._connect, budget=self.query_budget,
                     seconds=self.query_seconds, authorizer=_authorize, limit=limit)

    def _run(self, query: Query) -> dict:
        """Run one SELECT under an authorizer that permits reading knowledge tables only."""
        self.running.add(query)
        try:
            return query.run()
        except sqlite3.ProgrammingError as err:
            if "one statement" in str(err):
                raise fail("only a single SELECT statement is allowed: remove everything after the first ';'") from None
            raise fail(f"the query failed: {err}") from None
        except TooMuchWork:
            if query.stopped:
                raise fail("the query was stopped") from None
            raise fail("the query did too much work and was interrupted; narrow it (WHERE, LIMIT) "
                       "or aggregate") from None
        except (QueryFailed, sqlite3.Error) as err:
            message = str(err)
            if "not authorized" in message or "prohibited" in message:
                raise fail(f"not allowed ({message}): a query may only read the knowledge tables "
                           f"({PREFIX}<name>), with a single SELECT") from None
            raise fail(f"the query failed: {message}") from None
        finally:
            self.running.discard(query)

    def _select(self, sql: str, limit: int = _SHOW_ROWS) -> dict:
        """Run one read-only SELECT here (blocking) and return its capped result."""
        return self._run(self._query(sql, limit))

    async def _select_async(self, sql: str, limit: int = _SHOW_ROWS) -> dict:
        """:meth:`_select` in a worker thread; cancelled (the loop was stopped), it interrupts the
        statement and returns only once it has ended, so nothing it held outlives the stop."""
        query = self._query(sql, limit)
        done = asyncio.get_running_loop().run_in_executor(None, self._run, query)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            query.interrupt()
            with contextlib.suppress(BaseException):
                await asyncio.wait({done})
            if done.done() and not done.cancelled():
                done.exception()  # observed: it was stopped
            raise

    # -- the loops' tools -----------------------------------------------------------------------

    def _read_tools(self) -> list[Callable[..., Any]]:
        manager = self

        def list_tables() -> list[dict] | str:
            """Every knowledge table: its name, SQL name, columns with types, description and row count."""
            tables = manager._tables()
            if not tables:
                return "there are no knowledge tables yet"
            out = []
            for t in tables:
                n = manager.store.query(f'SELECT COUNT(*) AS n FROM "{PREFIX}{t["name"]}"')[0]["n"]
                out.append({"name": t["name"], "sql_name": PREFIX + t["name"],
                            "columns": {"id": "integer", **t["columns"]},
                            "description": t["description"], "rows": n})
            return out

        def describe_table(name: str) -> dict:
            """One table in full: SQL name, columns with types, description, row count and its first 5 rows."""
            t = manager._table(name)
            sql_name = PREFIX + t["name"]
            n = manager.store.query(f'SELECT COUNT(*) AS n FROM "{sql_name}"')[0]["n"]
            sample = manager.store.query(f'SELECT * FROM "{sql_name}" ORDER BY "id" LIMIT 5')
            return {"name": t["name"], "sql_name": sql_name, "columns": {"id": "integer", **t["columns"]},
                    "description": t["description"], "rows": n, "first_rows": sample}

        async def query(sql: str) -> dict:
            """Run one read-only SQL SELECT over the knowledge tables (by their SQL names,
            ``kn_<name>``) and return the rows: at most 100 rows and about 20,000 characters of them
            (a value longer than 2,000 characters is cut, a blob shown by its size; a note says when
            anything was left out: aggregate or page with LIMIT/OFFSET for more). Booleans read as
            0/1. Anything but a single SELECT is refused, and so is a query doing too much work."""
            return await manager._select_async(sql)

        return [list_tables, describe_table, query]

    def _write_tools(self) -> list[Callable[..., Any]]:
        manager = self
        store = self.store

        def create_table(name: str, columns: dict[str, str], description: str) -> str:
            """Create a knowledge table. ``name``: lowercase letters, digits and '_' (its SQL name
            becomes ``kn_<name>``). ``columns`` maps each column name (same rules; ``id`` is
            added automatically) to its type: text, integer, real or boolean. ``description``
            says what one row means and where the facts come from."""
            _check_name(name, "table name")
            if any(t["name"] == name for t in manager._tables()):
                raise fail(f"a table {name!r} exists already; add columns or rows to it, or pick another name")
            if not isinstance(columns, dict) or not columns:
                raise fail("a table needs at least one column: columns={'name': 'text', ...}")
            if len(columns) > _MAX_COLUMNS:
                raise fail(f"at most {_MAX_COLUMNS} columns")
            checked: dict[str, str] = {}
            for col, kind in columns.items():
                _check_name(col, "column name")
                if col == "id":
                    raise fail("'id' is added to every table automatically; leave it out")
                checked[col] = _check_type(kind, col)
            if not isinstance(description, str) or not description.strip():
                raise fail("give the table a description: what one row means")
            ddl = ", ".join(f'"{c}" {TYPES[k]}' for c, k in checked.items())
            with store.transaction() as db:
                db.execute(f'CREATE TABLE "{PREFIX}{name}" ("id" INTEGER PRIMARY KEY, {ddl})')
                db.execute("INSERT INTO knowledge_tables (name, columns, description, created) VALUES (?, ?, ?, ?)",
                           (name, json.dumps(checked), description.strip(), time.time()))
            return f"created table {name!r} (SQL name {PREFIX}{name}) with columns id, {', '.join(checked)}"

        def add_column(table: str, column: str, type: str) -> str:
            """Add a column (type text, integer, real or boolean) to a table; existing rows get null in it."""
            t = manager._table(table)
            _check_name(column, "column name")
            if column == "id" or column in t["columns"]:
                raise fail(f"table {t['name']!r} has a column {column!r} already")
            kind = _check_type(type, column)
            columns = {**t["columns"], column: kind}
            with store.transaction() as db:
                db.execute(f'ALTER TABLE "{PREFIX}{t["name"]}" ADD COLUMN "{column}" {TYPES[kind]}')
                db.execute("UPDATE knowledge_tables SET columns = ? WHERE name = ?", (json.dumps(columns), t["name"]))
            return f"added column {column!r} ({kind}) to {t['name']!r}"

        def add_rows(table: str, rows: list[dict]) -> dict:
            """Add rows to a table: each a dict {column: value} with values of the column's type
            (null allowed; missing columns are null). Returns the new rows' ids."""
            t = manager._table(table)
            if not isinstance(rows, list) or not rows:
                raise fail("rows must be a non-empty list of {column: value} dicts")
            if len(rows) > _MAX_ROWS_PER_CALL:
                raise fail(f"at most {_MAX_ROWS_PER_CALL} rows per call")
            prepared = []
            for i, row in enumerate(rows):
                unknown = [c for c in row if c not in t["columns"]]
                if unknown:
                    raise fail(f"row {i}: no column {unknown} in {t['name']!r}; its columns: {list(t['columns'])}"
                               + (" ('id' is assigned automatically)" if "id" in unknown else ""))
                prepared.append([_value(c, t["columns"][c], row.get(c)) for c in t["columns"]])
            cols = ", ".join(f'"{c}"' for c in t["columns"])
            marks = ", ".join("?" for _ in t["columns"])
            ids = []
            with store.transaction() as db:
                for values in prepared:
                    cur = db.execute(f'INSERT INTO "{PREFIX}{t["name"]}" ({cols}) VALUES ({marks})', values)
                    ids.append(cur.lastrowid)
            return {"added": len(ids), "ids": ids}

        def _where(t: dict, where: dict) -> tuple[str, list]:
            if not isinstance(where, dict) or not where:
                raise fail("where must name at least one column: {column: value} (a list value matches any of "
                           "its values); to find the ids of rows, query first")
            clauses, params = [], []
            types = {"id": "integer", **t["columns"]}
            for col, value in where.items():
                if col not in types:
                    raise fail(f"no column {col!r} in {t['name']!r}; its columns: {list(types)}")
                if isinstance(value, list):
                    if not value:
                        raise fail(f"where[{col!r}] is an empty list: it matches nothing")
                    clauses.append(f'"{col}" IN ({", ".join("?" for _ in value)})')
                    params += [_value(col, types[col], v) for v in value]
                else:
                    clauses.append(f'"{col}" IS ?')
                    params.append(_value(col, types[col], value))
            return " AND ".join(clauses), params

        def update_rows(table: str, where: dict, values: dict) -> dict:
            """Set ``values`` ({column: new value}) in the rows of a table matching ``where``
            ({column: value}, all must hold; a list value matches any of its values; ``id``
            allowed). Returns how many rows changed."""
            t = manager._table(table)
            clause, params = _where(t, where)
            if not isinstance(values, dict) or not values:
                raise fail("values must set at least one column: {column: new value}")
            sets, set_params = [], []
            for col, value in values.items():
                if col not in t["columns"]:
                    raise fail(f"no column {col!r} to set in {t['name']!r}; its columns: {list(t['columns'])}"
                               + (" (ids cannot change)" if col == "id" else ""))
                sets.append(f'"{col}" = ?')
                set_params.append(_value(col, t["columns"][col], value))
            with store.transaction() as db:
                cur = db.execute(f'UPDATE "{PREFIX}{t["name"]}" SET {", ".join(sets)} WHERE {clause}',
                                 [*set_params, *params])
            return {"updated": cur.rowcount}

        def delete_rows(table: str, where: dict) -> dict:
            """Delete the rows of a table matching ``where`` ({column: value}, all must hold; a
            list value matches any of its values; ``id`` allowed). Returns how many were deleted."""
            t = manager._table(table)
            clause, params = _where(t, where)
            with store.transaction() as db:
                cur = db.execute(f'DELETE FROM "{PREFIX}{t["name"]}" WHERE {clause}', params)
            return {"deleted": cur.rowcount}

        return [create_table, add_column, add_rows, update_rows, delete_rows]

    def _tools(self) -> list[Callable[..., Any]]:
        return [*self._read_tools(), *self._write_tools()]

    # -- public: loops --------------------------------------------------------------------------

    def ask(self, question: str) -> LoopHandle:
        """Answer a question from the knowledge tables: find the relevant tables, query them
        with read-only SQL, and answer with the facts found (quoting the numbers), or say that
        the tables do not hold the answer. Never changes anything.
        """
        return self._loop("ask", question, tools=self._read_tools(), context=self._overview())

    def update(self, instruction: str) -> LoopHandle:
        """Change the knowledge tables as instructed: record new facts (creating a table with
        typed columns when none fits, or adding a column), correct facts, or delete them; then
        say exactly what changed (tables, columns, row ids).

        Look at the existing tables first and reuse one that fits rather than creating a
        near-duplicate; before changing or deleting rows, query to find exactly which.
        """
        return self._loop("update", instruction, context=self._overview())
