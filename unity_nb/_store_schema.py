"""The store's schema: its migration steps, and how a loop's events are found (a deferred index).

Every event is a row of ``events`` (its ``seq`` the rowid: appended in order). Finding one loop's events
takes an index by loop; an index written with every event made each commit write a second b-tree (a
third of recording's cost, measured in the loop). So since version 3 the index is a table of its own,
``event_index``, brought up to date in bulk (at most once a second by a kernel that records, and when a
store opens or closes): ``store_meta.indexed`` is the last ``seq`` it covers. A loop's events are those
the index lists, then those after ``indexed`` (at most about a second's worth) found by a scan. Both parts
are read by one statement, in one snapshot: an event is in exactly one of them.
"""

from __future__ import annotations

__all__ = ("INDEX_CATCH_UP", "LAST_OF_KIND", "LAST_REQUESTS", "MIGRATIONS", "OF_LOOP", "OF_LOOP_KIND", "SCHEMA_VERSION")

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

_V3 = """
CREATE TABLE event_index (loop_uid TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (loop_uid, seq)) WITHOUT ROWID;
INSERT INTO event_index (loop_uid, seq) SELECT loop_uid, seq FROM events WHERE loop_uid IS NOT NULL;
CREATE TABLE store_meta (key TEXT PRIMARY KEY, value);
INSERT INTO store_meta (key, value) VALUES ('indexed', (SELECT IFNULL(MAX(seq), 0) FROM events));
DROP INDEX events_loop
"""

MIGRATIONS: list[str] = [_V1, _V2, _V3]
"""Step ``i`` takes the schema from version ``i`` to ``i + 1``."""
SCHEMA_VERSION = len(MIGRATIONS)

_INDEXED = "IFNULL((SELECT value FROM store_meta WHERE key = 'indexed'), 0)"  # no row: nothing indexed

INDEX_CATCH_UP = (
    f"INSERT OR IGNORE INTO event_index (loop_uid, seq) SELECT loop_uid, seq FROM events WHERE seq > {_INDEXED}"
    " AND loop_uid IS NOT NULL",
    "INSERT INTO store_meta (key, value) VALUES ('indexed', (SELECT IFNULL(MAX(seq), 0) FROM events))"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
)
"""The statements that bring the index up to date (in one write transaction)."""


def _of_loop(more: str) -> str:
    return (
        "SELECT seq, data FROM events WHERE seq IN"
        f" (SELECT seq FROM event_index WHERE loop_uid = :uid AND seq <= {_INDEXED}){more}"
        f" UNION ALL SELECT seq, data FROM events WHERE seq > {_INDEXED} AND loop_uid = :uid{more} ORDER BY seq"
    )


OF_LOOP, OF_LOOP_KIND = _of_loop(""), _of_loop(" AND kind = :kind")
"""The data of one loop's events (``:uid``; of one kind too, ``:kind``), oldest first."""

LAST_OF_KIND = (
    f"SELECT data FROM events WHERE seq > {_INDEXED} AND loop_uid = :uid AND kind = :kind ORDER BY seq DESC LIMIT 1",
    "SELECT e.data FROM event_index i JOIN events e ON e.seq = i.seq WHERE i.loop_uid = :uid AND e.kind = :kind"
    " ORDER BY i.seq DESC LIMIT 1",
)
"""The newest event of a kind of one loop: first among those the index does not list yet, then the index
(walked from its newest entry). An event the index takes between the two is found by the second."""

LAST_REQUESTS = (
    "SELECT loop_uid, data, MAX(seq) FROM events WHERE seq > " + _INDEXED + " AND kind = 'model_request'"
    " GROUP BY loop_uid"
)
"""Each loop's newest model call among the events the index does not list yet (SQLite gives the row of the
``MAX``): for :meth:`Store.loops`, one scan of them whatever the number of loops listed."""
