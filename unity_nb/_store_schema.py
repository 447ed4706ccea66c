"""The store's schema: its migration steps, and how a loop's events are found (a deferred index).

Every event is a row of ``events`` (its ``seq`` the rowid: appended in order). Finding one loop's events
takes an index by loop; an index written with every event made each commit write a second b-tree (a
third of recording's cost, measured in the loop). So since version 3 the index is a table of its own,
``event_index``, brought up to date in bulk (at most once a second by a kernel that records, and when a
store opens or closes): ``store_meta.indexed`` is the last ``seq`` it covers. A loop's events are those
the index lists, then those after ``indexed`` (at most about a second's worth) found by a scan. Both parts
are read by one statement, in one snapshot: an event is in exactly one of them.

The index is derived data, so damage to it is repaired, never lived with: a store checks it when it opens
(:func:`index_damage`: whole up to :data:`CHECK_WHOLE_UP_TO` indexed events, 30 to 40 ms at 57,000 on a shared
2-core machine; beyond, a sample of :data:`CHECK_SAMPLE` events) and rebuilds it from the events
(:data:`REBUILD_INDEX`), and a read that finds it missing, or finds entries pointing at another loop's events,
rebuilds it too. A sampled check can miss sparse damage; a read that meets it still repairs it.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, Protocol

from ._errors import UserError
from ._store_errors import lost_tables, set_back

__all__ = (
    "CHECK_SAMPLE", "CHECK_WHOLE_UP_TO", "INDEX_CATCH_UP", "LAST_OF_KIND", "LAST_REQUESTS", "MIGRATIONS", "OF_LOOP",
    "OF_LOOP_KIND", "REBUILD_INDEX", "SCAN_LAST_OF_KIND", "SCAN_OF_LOOP", "SCHEMA_VERSION", "by_index", "check_index",
    "index_damage", "loop_rows", "check_tables", "migrate", "rebuild_index", "StoreFile",
)

log = logging.getLogger("unity_nb.store")


class StoreFile(Protocol):
    """What these functions read of a :class:`unity_nb.Store` (so this module imports nothing above it)."""

    path: Any

    def query(self, sql: str, params: tuple | dict = ()) -> list[dict]: ...

    def flush(self) -> None: ...

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

# events: once with AUTOINCREMENT, which made every commit write sqlite_sequence's page too (a sixth of
# recording's cost). A file made before keeps it (the same table to every reader); seq grows either way.
_V1 = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, pid INTEGER, host TEXT, started REAL);
CREATE TABLE loops (
    uid TEXT PRIMARY KEY, session TEXT, loop_id TEXT, name TEXT, task TEXT, model TEXT,
    parent_uid TEXT, lineage TEXT, status TEXT, started REAL, ended REAL, steps INTEGER DEFAULT 0,
    result TEXT, error TEXT
);
CREATE INDEX loops_started ON loops (started);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY, loop_uid TEXT, kind TEXT, ts REAL, data TEXT
);
CREATE INDEX events_loop ON events (loop_uid, seq);
CREATE TABLE knowledge_tables (name TEXT PRIMARY KEY, columns TEXT, description TEXT, created REAL);
CREATE TABLE guidance (
    id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT UNIQUE, body TEXT, functions TEXT, created REAL, updated REAL
);
"""

_V2 = """
CREATE TABLE tasks (
    id TEXT PRIMARY KEY, name TEXT, description TEXT, status TEXT, parent_id TEXT, position REAL,
    created REAL, updated REAL, session TEXT, loop_uid TEXT, result TEXT
);
CREATE TABLE task_turns (
    task_id TEXT, turn INTEGER, started REAL, ended REAL, summary TEXT, PRIMARY KEY (task_id, turn)
);
CREATE TABLE task_messages (
    task_id TEXT, n INTEGER, turn INTEGER, message TEXT, ts REAL, PRIMARY KEY (task_id, n)
);
CREATE TABLE task_queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT, task_id TEXT, type TEXT, content TEXT, sender TEXT, ts REAL
);
"""

_INDEX_TABLE = (
    "CREATE TABLE event_index (loop_uid TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (loop_uid, seq)) WITHOUT ROWID"
)

_V3 = _INDEX_TABLE + """;
INSERT INTO event_index (loop_uid, seq) SELECT loop_uid, seq FROM events WHERE loop_uid IS NOT NULL;
CREATE TABLE store_meta (key TEXT PRIMARY KEY, value);
INSERT INTO store_meta (key, value) VALUES ('indexed', (SELECT IFNULL(MAX(seq), 0) FROM events));
DROP INDEX events_loop
"""

# v4: every loop says what it is (``kind``: loop, actor, map, filter, ...) and whether its children are a batch's
# rows (``batch``). Loops recorded before carried both in their task's text (``[map] ...``, ``[map:filter] ...``,
# ``[topk] ...``): read from it once here, and the task keeps only what follows (a ``%unity`` line resumes from it).
_V4 = """
ALTER TABLE loops ADD COLUMN kind TEXT NOT NULL DEFAULT 'loop';
ALTER TABLE loops ADD COLUMN batch INTEGER NOT NULL DEFAULT 0;
UPDATE loops SET batch = 1 WHERE substr(task, 1, 4) = '[map';
UPDATE loops SET kind = 'map', task = substr(task, 7) WHERE substr(task, 1, 6) = '[map] ';
UPDATE loops SET kind = 'filter', task = substr(task, 14) WHERE substr(task, 1, 13) = '[map:filter] ';
UPDATE loops SET kind = 'extract', task = substr(task, 15) WHERE substr(task, 1, 14) = '[map:extract] ';
UPDATE loops SET kind = 'join', task = substr(task, 12) WHERE substr(task, 1, 11) = '[map:join] ';
UPDATE loops SET kind = 'map' WHERE batch = 1 AND kind = 'loop';
UPDATE loops SET kind = 'topk', task = substr(task, 8) WHERE substr(task, 1, 7) = '[topk] ';
UPDATE loops SET kind = 'agg', task = substr(task, 7) WHERE substr(task, 1, 6) = '[agg] ';
UPDATE loops SET kind = 'actor' WHERE kind = 'loop' AND name LIKE 'actor-%';
UPDATE loops SET kind = 'ask' WHERE kind = 'loop' AND name LIKE 'ask-%'
"""

MIGRATIONS: list[str] = [_V1, _V2, _V3, _V4]
"""Step ``i`` takes the schema from version ``i`` to ``i + 1``."""
SCHEMA_VERSION = len(MIGRATIONS)

_TABLES = (("sessions", "loops", "events", "knowledge_tables", "guidance"), ("tasks", "task_turns", "task_messages",
                                                                            "task_queue"))
"""The tables each step makes that hold what was recorded (the index of events, step 3's, is derived: rebuilt)."""


def migrate(db: sqlite3.Connection, path: str, target: int = SCHEMA_VERSION) -> None:
    """Apply the migration steps from the file's version up to ``target``, each in one transaction; then check that
    the file has the tables of its version (:func:`check_tables`)."""
    def version() -> int:
        return int(db.execute("PRAGMA user_version").fetchone()[0])

    current = version()
    if current > SCHEMA_VERSION:
        raise UserError(
            f"the store {path!r} has schema version {current}, newer than this unity_nb understands "
            f"({SCHEMA_VERSION}); upgrade unity_nb, or set UNITY_NB_STORE to another file"
        )
    for step in range(current, target):
        db.execute("BEGIN IMMEDIATE")
        try:
            if version() != step:  # another kernel migrated meanwhile
                db.execute("ROLLBACK")
                continue
            for statement in MIGRATIONS[step].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {step + 1}")
            db.execute("COMMIT")
        except BaseException as err:
            db.execute("ROLLBACK")
            if isinstance(err, sqlite3.OperationalError) and "already exists" in str(err):  # its version set back
                raise set_back(path, step, err) from None
            raise
    check_tables(db, version(), path)  # a table dropped by hand: said now, not at each read


def check_tables(db: sqlite3.Connection, version: int, path: str) -> None:
    """A UserError if the file (of schema ``version``) has lost tables it records in (dropped by hand, say): opened
    as if whole, it failed at every read and write with SQLite's 'no such table', its events waiting in memory for a
    table that never came back."""
    have = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    lost = [t for step in _TABLES[:version] for t in step if t not in have]
    if lost:
        raise lost_tables(path, lost)

_INDEXED = "IFNULL((SELECT value FROM store_meta WHERE key = 'indexed'), 0)"  # no row: nothing indexed
INDEXED = _INDEXED
"""SQL: the newest event the index of events by loop lists (those after it are found by ``loop_uid``)."""

INDEX_CATCH_UP = (
    f"INSERT OR IGNORE INTO event_index (loop_uid, seq) SELECT loop_uid, seq FROM events WHERE seq > {_INDEXED}"
    " AND loop_uid IS NOT NULL",
    "INSERT INTO store_meta (key, value) VALUES ('indexed', (SELECT IFNULL(MAX(seq), 0) FROM events))"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
)
"""The statements that bring the index up to date (in one write transaction)."""


REBUILD_INDEX = (
    "DROP TABLE IF EXISTS event_index",
    _INDEX_TABLE,
    "INSERT INTO event_index (loop_uid, seq) SELECT loop_uid, seq FROM events WHERE loop_uid IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS store_meta (key TEXT PRIMARY KEY, value)",
    INDEX_CATCH_UP[1],
)
"""The statements that make the index anew from the events (in one write transaction)."""

CHECK_WHOLE_UP_TO = 100_000
"""Up to this many indexed events, the check on open compares the whole index with the events."""
CHECK_SAMPLE = 256
"""Beyond it, this many events spread over the indexed ones are looked up in the index."""


def index_damage(db: sqlite3.Connection) -> str | None:
    """What is wrong with the index of events by loop (``None``: nothing found), read in one snapshot."""
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE name IN ('event_index', 'store_meta')")}
    if names != {"event_index", "store_meta"}:
        return "its table is missing" if "event_index" not in names else "its mark is missing"
    db.execute("BEGIN")  # one snapshot: a catch-up committed by another kernel meanwhile is not damage
    try:
        mark = int(db.execute(f"SELECT {_INDEXED}").fetchone()[0] or 0)
        if mark <= CHECK_WHOLE_UP_TO:
            listed = db.execute(
                "SELECT COUNT(*) FROM events WHERE seq <= ? AND loop_uid IS NOT NULL", (mark,)).fetchone()[0]
            entries = db.execute("SELECT COUNT(*) FROM event_index").fetchone()[0]
            right = db.execute("SELECT COUNT(*) FROM event_index i JOIN events e"
                               " ON e.seq = i.seq AND e.loop_uid = i.loop_uid WHERE i.seq <= ?", (mark,)).fetchone()[0]
            if listed == entries == right:
                return None
            return (f"{listed - right} of {listed} indexed events not listed under their loop,"
                    f" {entries - right} entries wrong")
        missing = 0
        for i in range(CHECK_SAMPLE):
            row = db.execute("SELECT seq, loop_uid FROM events WHERE seq >= ? AND loop_uid IS NOT NULL"
                             " ORDER BY seq LIMIT 1", (1 + (mark - 1) * i // (CHECK_SAMPLE - 1),)).fetchone()
            if row is not None and row[0] <= mark and db.execute(
                    "SELECT 1 FROM event_index WHERE loop_uid = ? AND seq = ?", (row[1], row[0])).fetchone() is None:
                missing += 1
        return f"{missing} of {CHECK_SAMPLE} events sampled not listed under their loop" if missing else None
    finally:
        db.execute("COMMIT")


def _of_loop(more: str) -> str:
    return (
        "SELECT seq, data, loop_uid FROM events WHERE seq IN"
        f" (SELECT seq FROM event_index WHERE loop_uid = :uid AND seq <= {_INDEXED}){more}"
        f" UNION ALL SELECT seq, data, loop_uid FROM events WHERE seq > {_INDEXED} AND loop_uid = :uid{more}"
        " ORDER BY seq"
    )


_KIND = " AND kind = :kind"
OF_LOOP, OF_LOOP_KIND = _of_loop(""), _of_loop(_KIND)
"""The data of one loop's events (``:uid``; of one kind too, ``:kind``), oldest first, each with its
``loop_uid``: an entry of a damaged index may point at another loop's event (the reader checks)."""
SCAN_OF_LOOP = "SELECT seq, data, loop_uid FROM events WHERE loop_uid = :uid{} ORDER BY seq"
"""The same found by a scan of every event (the index missing and not rebuilt: a file opened read-only)."""

LAST_OF_KIND = (
    f"SELECT data FROM events WHERE seq > {_INDEXED} AND loop_uid = :uid AND kind = :kind ORDER BY seq DESC LIMIT 1",
    "SELECT e.data FROM event_index i JOIN events e ON e.seq = i.seq AND e.loop_uid = i.loop_uid"
    " WHERE i.loop_uid = :uid AND e.kind = :kind ORDER BY i.seq DESC LIMIT 1",
)
"""The newest event of a kind of one loop: first among those the index does not list yet, then the index
(walked from its newest entry). An event the index takes between the two is found by the second."""
SCAN_LAST_OF_KIND = "SELECT data FROM events WHERE loop_uid = :uid AND kind = :kind ORDER BY seq DESC LIMIT 1"

LAST_REQUESTS = (
    "SELECT loop_uid, data, MAX(seq) FROM events WHERE seq > " + _INDEXED + " AND kind = 'model_request'"
    " GROUP BY loop_uid"
)
"""Each loop's newest model call among the events the index does not list yet (SQLite gives the row of the
``MAX``): for :meth:`Store.loops`, one scan of them whatever the number of loops listed."""


def check_index(store: StoreFile, damage: Callable[[], str | None]) -> None:
    """On open: rebuild the index if ``damage()`` (:func:`index_damage` read under the store's lock) finds it
    damaged."""
    why = damage()
    if why is not None:
        rebuild_index(store, why)


def rebuild_index(store: StoreFile, why: str) -> None:
    """Make the index of events by loop anew from the events (one transaction), and say so in the log."""
    log.warning("store: the index of events by loop in %r was damaged (%s): rebuilt from the events", store.path, why)
    with store.transaction() as db:
        for statement in REBUILD_INDEX:
            db.execute(statement)


def by_index(store: StoreFile, sql: str, params: dict, scan: str) -> list[dict]:
    """Rows read through the index; if it is missing, it is rebuilt first (read by ``scan`` if that fails)."""
    try:
        return store.query(sql, params)
    except sqlite3.OperationalError as err:
        if "no such table" not in str(err):
            raise
        try:
            rebuild_index(store, str(err))
        except (sqlite3.Error, UserError):
            return store.query(scan, params)  # a file this process cannot write: every event read
        return store.query(sql, params)


def loop_rows(store: StoreFile, uid: str, kind: str | None = None) -> list[dict]:
    """The rows (``seq``, ``data``) of one loop's events (of one kind), oldest first. Entries pointing at another
    loop's events are left out, and the index rebuilt."""
    params = {"uid": uid, "kind": kind}
    sql, scan = (OF_LOOP, SCAN_OF_LOOP.format("")) if kind is None else (OF_LOOP_KIND, SCAN_OF_LOOP.format(_KIND))
    rows = by_index(store, sql, params, scan)
    if any(r["loop_uid"] != uid for r in rows):
        with contextlib.suppress(sqlite3.Error, UserError):
            rebuild_index(store, "entries of one loop point at another's events")
            rows = by_index(store, sql, params, scan)
        rows = [r for r in rows if r["loop_uid"] == uid]
    return rows
