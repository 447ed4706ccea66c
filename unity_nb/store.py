"""Persistence: one SQLite file (WAL) for loops, their events, tasks, knowledge and guidance.

The store is a *subscriber* of the event bus (the loop never imports it): every event but the
streamed deltas is written. Writes are batched: a batch is committed when a model call is about
to be made (a ``model_request`` event), when a loop ends, when steering or a question for the
person arrives, and otherwise within half a second (a loop's start goes with its first model call).
So every event is committed before the loop's next model call, and a kernel that dies mid-loop loses at
most the step in flight. After a restart,
:meth:`Store.loops` lists every past loop (one whose process died shows as ``interrupted``, with the steps
its events record: a running loop's row gets its count at most once a second) and
:meth:`Store.transcript` rebuilds its transcript from its events.

Several kernels may share one file: SQLite's WAL mode lets one writer and many readers work
at once, every write waits its turn (``busy_timeout``; on the event loop no longer than ``loop_wait``, then
its events wait in memory as below), and rows are keyed by a per-process
session id and the loop's id (random, 64 bits: unique across kernels and time). The schema has a version
(``PRAGMA user_version``) and numbered migration steps, applied in order on open.

A file that cannot be used (damaged, not a database, in a folder that cannot be written) is a
:class:`UserError` naming the file and what to do. When the file cannot take a batch (a full disk,
a lock held too long, an error of any other kind), the events wait in memory, the problem is reported once (the
log, and :attr:`Store.problem` for whoever shows it), and the backlog is written as soon as a later try succeeds.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import secrets
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import events as ev
from ._errors import UserError
from ._store_batches import BATCH, history_frame, tree_tokens
from ._store_errors import BUSY as _BUSY
from ._store_errors import DAMAGED as _DAMAGED
from ._store_errors import FULL as _FULL
from ._store_errors import code as _code
from ._store_errors import literal as _literal
from ._store_errors import the_files as _the_files
from ._store_errors import unusable as _unusable
from ._store_loops import LOOP_ROW as _LOOP_ROW
from ._store_reads import alive_sessions, process_ticks, rebuild_transcript
from ._store_schema import (
    INDEX_CATCH_UP,
    LAST_OF_KIND,
    LAST_REQUESTS,
    SCAN_LAST_OF_KIND,
    SCHEMA_VERSION,
    by_index,
    check_index,
    index_damage,
    loop_rows,
    migrate,
)
from ._store_text import event_json as _json
from ._store_text import readable as _readable
from ._store_text import whole as _whole

__all__ = ("Store", "SCHEMA_VERSION", "default_store_path")

log = logging.getLogger("unity_nb.store")

_SKIP = frozenset({"model_delta"})
_FLUSH_NOW = frozenset({
    "model_request", "loop_finished", "loop_failed", "steering", "clarification_requested",
    "approval_requested", "request_submitted", "request_finished", "control_handed_off", "row_finished",
    "provider_batch",
})
_FLUSH_AFTER = 0.5
_STEPS_EVERY = 1.0  # seconds between writes of a running loop's step count (Store.loops counts from its events)
_INDEX_EVERY = 1.0  # seconds between bringing the index of events by loop up to date (see _store_schema)
_LIVE = ("running", "paused", "waiting", "idle")
_RETRY_FIRST, _RETRY_MAX = 1.0, 30.0
"""Seconds before the first retry of a batch the file could not take, doubling up to the second."""
_TRIES_ALONE = 3
"""Tries at writing an event that fails alone, the file taking others (not the file's error), before it is left out
(said in the log, counted in :attr:`Store.left_out`)."""

_ROWS = 50  # rows per INSERT statement: one statement per batch
_INSERTS = ["", *("INSERT INTO events (loop_uid, kind, ts, data) VALUES " + ", ".join(["(?, ?, ?, ?)"] * n)
                  for n in range(1, _ROWS + 1))]


def default_store_path() -> str:
    """``UNITY_NB_STORE`` if set, else ``.unity_nb/state.db`` in the working directory (beside the notebook)."""
    return os.environ.get("UNITY_NB_STORE") or os.path.join(".unity_nb", "state.db")


_OPEN: weakref.WeakSet[Store] = weakref.WeakSet()
"""The stores not closed, flushed at exit. Held weakly: ``atexit.register(store._at_exit)`` kept every store
made and dropped without ``close()`` (one read through ``Store(path)``, a map's ``cache=``) for the process's life,
its SQLite connection (two open files, its page cache) with it. Events wait in a store while its write timer is
armed (which holds it) or after a failed write; one dropped then loses them where exit would have tried again."""


def _flush_open_stores() -> None:
    for store in list(_OPEN):
        store._at_exit()


atexit.register(_flush_open_stores)


class Store:
    """A SQLite store at ``path`` (``":memory:"`` for a throwaway one)."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = 10.0,
                 loop_wait: float = 0.2) -> None:
        """``timeout``: seconds a read, a transaction or :meth:`flush` waits for another process's write lock;
        ``loop_wait``: events recorded on an event loop (where a wait freezes the kernel), then they wait in
        memory, :attr:`problem` says why, and a retry writes them."""
        path = str(path) if path is not None else default_store_path()
        if path != ":memory:":
            parent = Path(path).expanduser().resolve().parent
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UserError(f"cannot create the store's folder {str(parent)!r}: {err}") from None
        self.path = path
        self._lock = threading.RLock()
        self.session = secrets.token_hex(8)
        try:
            self._db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as err:
            raise _unusable(path, err) from None
        try:
            self._db.row_factory = sqlite3.Row
            self._waits = (int(timeout * 1000), max(0, int(loop_wait * 1000)))  # (elsewhere, on the event loop)
            self._wait_ms = -1
            self._wait(self._waits[0])
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self.migrate()
            with contextlib.suppress(sqlite3.OperationalError):  # a full disk: a write's catch-up (or close's) does it
                check_index(self, self._index_damage)  # derived data: damaged, it is rebuilt
                self._catch_up()  # what a kernel that died left out of the index
            self.execute(
                "INSERT INTO sessions (id, pid, host, started) VALUES (?, ?, ?, ?)",
                (self.session, os.getpid(), socket.gethostname(), time.time()),
            )
            ticks = process_ticks(os.getpid())  # this process's start: no other with its pid has it (alive_sessions)
            if ticks is not None:
                with contextlib.suppress(sqlite3.OperationalError):  # unknown, its session is told by its clock
                    self.execute("INSERT OR REPLACE INTO store_meta (key, value) VALUES (?, ?)",
                                 (f"proc:{self.session}", ticks))
        except (sqlite3.Error, UserError) as err:
            self._db.close()
            if isinstance(err, UserError):
                raise
            raise _unusable(path, err) from None
        self._unsubscribe: list[Callable[[], None]] = []
        self._pending: list[ev.Event] = []
        self._alone: dict[int, tuple[ev.Event, int]] = {}  # an event that failed alone: its tries so far
        self.left_out = 0
        """Events left out: each failed alone, the file taking others, :data:`_TRIES_ALONE` times (see the log)."""
        self._uids: dict[str, str] = {}
        self._steps_at: dict[str, float] = {}  # per running loop: when its row's step count was last written
        self._timer: tuple[asyncio.TimerHandle, asyncio.AbstractEventLoop] | None = None  # a write (or retry) armed
        self._retry = _RETRY_FIRST
        self._listeners: list[Callable[[str | None], None]] = []
        self._problem: tuple[str, str] | None = None  # (kind, message with {n} for the events waiting)
        self._indexed_at = time.monotonic()
        _OPEN.add(self)  # flushed at exit while open; held weakly (see _flush_open_stores)

    def _at_exit(self) -> None:
        self.flush()
        with contextlib.suppress(sqlite3.Error, UserError):  # the next store to open it brings it up to date
            self._catch_up()
        if self._pending:
            log.warning("store: %d events could not be written to %r and are lost (%s)",
                        len(self._pending), self.path, self.problem)

    def __repr__(self) -> str:
        return f"<unity_nb.Store {self.path!r}>"

    # -- the database --------------------------------------------------------------------

    def _catch_up(self, wait_ms: int | None = None) -> None:
        """Bring the index of events by loop up to date (``_store_schema``): one transaction."""
        with self._transaction(self._waits[0] if wait_ms is None else wait_ms) as db:
            for statement in INDEX_CATCH_UP:
                db.execute(statement)

    @property
    def version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self, target: int = SCHEMA_VERSION) -> None:
        """Apply the migration steps from the file's version up to ``target``, each in one transaction."""
        with self._lock:
            migrate(self._db, self.path, target)

    @contextlib.contextmanager
    def _damage(self) -> Iterator[None]:
        """A damaged file is a UserError naming it and what to do (not a raw ``DatabaseError``)."""
        try:
            yield
        except sqlite3.DatabaseError as err:
            if _code(err) in _DAMAGED:
                raise _unusable(self.path, err) from err
            raise

    def _wait(self, ms: int) -> None:
        """How long SQLite waits for another process's write lock from now on (set only when it changes)."""
        if ms != self._wait_ms:
            self._db.execute(f"PRAGMA busy_timeout = {ms}")
            self._wait_ms = ms

    def _index_damage(self) -> str | None:
        """What is wrong with the index of events by loop (``_store_schema.index_damage``), read under the lock."""
        with self._lock, self._damage():
            return index_damage(self._db)

    def execute(self, sql: str, params: tuple | dict = ()) -> sqlite3.Cursor:
        with self._lock, self._damage():
            self._wait(self._waits[0])
            return self._db.execute(sql, params)

    def query(self, sql: str, params: tuple | dict = ()) -> list[dict]:
        with self._lock, self._damage():
            return [dict(r) for r in self._db.execute(sql, params).fetchall()]

    def transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """Statements inside commit together (``BEGIN IMMEDIATE``: writers queue up, never deadlock)."""
        return self._transaction(self._waits[0])

    @contextlib.contextmanager
    def _transaction(self, wait_ms: int) -> Iterator[sqlite3.Connection]:
        with self._lock, self._damage():
            self._wait(wait_ms)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled back already (a full disk does)
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    def copy(self) -> sqlite3.Connection:
        """A private in-memory copy of the database (its own connection: reading it takes no lock of the store's)."""
        dest = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        with self._lock, self._damage():
            self._db.backup(dest)
        return dest

    def close(self) -> None:
        self._at_exit()
        _OPEN.discard(self)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        with self._lock:
            self._db.close()

    # -- recording -----------------------------------------------------------------------

    def attach(self, bus: ev.EventBus) -> Callable[[], None]:
        """Record every event published on ``bus`` (streamed deltas excepted)."""
        unsubscribe = bus.subscribe(self.record)
        self._unsubscribe.append(unsubscribe)
        return unsubscribe

    def uid(self, loop_id: str) -> str:
        """The store's key of a loop of this process."""
        uid = self._uids.get(loop_id)
        if uid is None:
            if len(self._uids) >= 4096:  # made once per loop, not per event; kept for the recent loops
                self._uids.clear()
            uid = self._uids[loop_id] = f"{self.session}-{loop_id}"
        return uid

    def record(self, event: ev.Event) -> None:
        """Take one event; it is committed with its batch (at once for the kinds that matter).
        While the file cannot take events (see :attr:`problem`), they wait for the next retry."""
        kind = event.kind
        if kind in _SKIP:
            return
        with self._lock:
            self._pending.append(event)
        # a row answered from the map's cache is committed with its batch: its answer is in the cache already
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if kind in _FLUSH_NOW and self._problem is None and not getattr(event, "cached", False):
            self._commit(self._waits[1])  # a timer already armed stays: it writes what comes next (one a half second)
            return
        timer = self._timer
        if timer is None or timer[1] is not loop:  # none, or armed on an event loop that has gone (a test's)
            self._arm(loop, _FLUSH_AFTER if self._problem is None else self._retry)

    def _arm(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        if self._timer is not None:
            self._timer[0].cancel()
        self._timer = (loop.call_later(delay, self._flush_on_loop), loop)  # it disarms it

    @property
    def waiting(self) -> int:
        """Events taken but not yet written."""
        return len(self._pending)

    @property
    def problem(self) -> str | None:
        """Why events are waiting (``"store: disk full, N events waiting ..."``), or ``None`` when all are written."""
        return self._problem[1].format(n=len(self._pending)) if self._problem else None

    def add_problem_listener(self, fn: Callable[[str | None], None]) -> Callable[[], None]:
        """Call ``fn(message)`` when events start or keep waiting (the message says why and how many),
        and ``fn(None)`` once they are all written; returns a function removing it."""
        self._listeners.append(fn)

        def remove() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return remove

    def flush(self) -> None:
        """Commit every event taken so far (one transaction), waiting for another process's write lock up to the
        store's ``timeout``. Never raises: when the file cannot take them, they are kept for the next try and the
        problem is reported (once)."""
        self._flush(self._waits[0])

    def _flush_on_loop(self) -> None:
        """The timer's write, on the event loop: it waits for the lock no longer than ``loop_wait``."""
        self._flush(self._waits[1])

    def _flush(self, wait_ms: int) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer[0].cancel()
                self._timer = None
            self._commit(wait_ms)

    def _commit(self, wait_ms: int) -> None:
        with self._lock:
            if not self._pending:
                return
            self._wait(wait_ms)
            batch, self._pending = self._pending, []
            try:
                self._write(batch)
            except BaseException as err:  # the file's (sqlite3.Error, an OSError) or anything else: none is dropped
                self._pending = batch + self._pending  # kept for the next try: nothing is lost
                if not isinstance(err, Exception):
                    raise  # (an interrupt: the next try writes them)
                if _the_files(err):
                    self._trouble(err)
                    return
                del self._pending[:len(batch)]  # not the file's doing: each event alone, so one cannot hold the rest
                for i, event in enumerate(batch):
                    try:
                        self._write([event])
                    except Exception as one:  # noqa: BLE001 - each kept, or said
                        if _the_files(one) or not self._unwritable(event, one):
                            self._pending[:0] = batch[i:]
                            self._trouble(one)
                            return
                self._alone.clear()  # every event of the batch written or left out
            if self._problem is not None:
                self._recovered(len(batch))
            now = time.monotonic()
            if now - self._indexed_at >= _INDEX_EVERY:  # after the batch, on its own: a full disk undoes the whole
                self._indexed_at = now  # of a transaction that cannot grow, and the events must not wait on it
                with contextlib.suppress(sqlite3.Error, UserError):  # the next second's (or close's) catch-up does it
                    self._catch_up(wait_ms)

    def _unwritable(self, event: ev.Event, err: Exception) -> bool:
        """``event`` failed alone, the file taking others: the same error each try (not the file's, not a full
        disk's) is an event no try will write. Tried :data:`_TRIES_ALONE` times over later tries, then left out,
        said in the log (its kind, loop and the error): True when it is left out."""
        key = id(event)
        tries = self._alone.get(key, (event, 0))[1] + 1
        if tries < _TRIES_ALONE:
            self._alone[key] = (event, tries)
            return False
        self._alone.pop(key, None)
        self.left_out += 1
        log.warning("store: a %s event of loop %s could not be written to %s after %d tries (%s: %s): it is left "
                    "out (%d so far)", event.kind, event.loop_id, self.path, tries, type(err).__name__,
                    str(err)[:300], self.left_out)
        return True

    def _trouble(self, err: BaseException) -> None:
        """Report once per kind of problem; keep the message's count current; schedule a retry."""
        code, path = _code(err), _literal(self.path)
        if code in _FULL:
            kind, text = "full", "store: disk full, {n} events waiting (written when space returns): " + path
        elif code in _BUSY:
            kind, text = "busy", "store: the file is locked by another process, {n} events waiting: " + path
        elif _the_files(err):
            reason = str(err) if isinstance(err, UserError) else str(_unusable(self.path, err))
            kind, text = "broken", "store: {n} events waiting; " + _literal(reason)
        else:  # not the file's doing: said as it is
            kind, text = "failed", ("store: {n} events waiting; writing them to " + path + " failed ("
                                    + _literal(f"{type(err).__name__}: {err}") + "): tried again later")
        first = self._problem is None or self._problem[0] != kind
        self._problem = (kind, text)
        if first:
            log.warning("%s", self.problem)
        self._notify(self.problem)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # the next event (or read) tries again
        self._arm(loop, self._retry)  # replaces a write armed before the trouble
        self._retry = min(self._retry * 2, _RETRY_MAX)

    def _recovered(self, n: int) -> None:
        log.warning("store: recording again; the %d waiting events are written to %s", n, self.path)
        self._problem = None
        self._retry = _RETRY_FIRST
        self._notify(None)

    def _notify(self, message: str | None) -> None:
        for fn in list(self._listeners):
            try:
                fn(message)
            except Exception:  # a listener must never break recording
                log.exception("store problem listener %r failed", fn)

    def _write(self, batch: list[ev.Event]) -> None:
        """One transaction: a row per event (one statement for every 50), then the loops rows they change.
        A batch that changes no loops row and is one statement is written by that statement alone (its own
        transaction: no ``BEGIN`` and ``COMMIT`` to run). A damaged file raises the raw error here;
        :meth:`_trouble` words it as :meth:`transaction` would."""
        uid, steps_at = self.uid, self._steps_at
        rows = [(uid(e.loop_id), e.kind, e.ts, _json(e)) for e in batch]  # before the write lock
        steps: dict[str, int] = {}  # per loop, its newest step
        changes = []  # (what changes a loops row, its event, its uid), in order
        for event, row in zip(batch, rows):
            kind = row[1]
            if kind == "model_request":  # its step: written to the row at most once a second
                steps[row[0]] = event.step  # type: ignore[attr-defined]
            elif kind in _LOOP_ROW:
                if kind != "steering":  # these set the row's count themselves (started: 0, ended: the last)
                    steps.pop(row[0], None)
                    steps_at.pop(row[0], None)
                changes.append((_LOOP_ROW[kind], event, row[0]))
        now = time.monotonic()
        due = [(n, u) for u, n in steps.items() if now - steps_at.get(u, -_STEPS_EVERY) >= _STEPS_EVERY]
        db = self._db
        if not changes and not due and len(rows) <= _ROWS:  # the common batch: one step's events
            db.execute(_INSERTS[len(rows)], [v for row in rows for v in row])
            return
        db.execute("BEGIN IMMEDIATE")  # writers of other kernels queue up (busy_timeout), never deadlock
        try:
            for i in range(0, len(rows), _ROWS):
                chunk = rows[i : i + _ROWS]
                db.execute(_INSERTS[len(chunk)], [v for row in chunk for v in row])
            for change, event, key in changes:
                change(self, db, event, key)
            if due:  # a page written per model call would be a fifth of recording's cost
                db.executemany("UPDATE loops SET steps = ? WHERE uid = ?", due)
            db.execute("COMMIT")
            if len(steps_at) > 4096:  # loops that ended elsewhere: at worst one more write each
                steps_at.clear()
            steps_at.update((u, now) for _n, u in due)
        except BaseException:
            if db.in_transaction:  # SQLite may have rolled back already (a full disk does)
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise

    # -- reading -------------------------------------------------------------------------

    def alive_sessions(self) -> set[str]:
        """Sessions whose process still runs (on this host)."""
        rows = self.query("SELECT id, pid, host, started FROM sessions")
        try:  # derived data's table, which a damaged file may lack (a read rebuilds it): then no start is known
            ticks = {r["key"][5:]: r["value"] for r in self.query(
                "SELECT key, value FROM store_meta WHERE key >= 'proc:' AND key < 'proc;'")}
        except sqlite3.OperationalError:
            ticks = {}
        return alive_sessions([{**r, "ticks": ticks.get(r["id"])} for r in rows], self.session, self.path)

    def loops(self, *, limit: int | None = None, name: str | None = None, batch_rows: bool = True) -> list[dict]:
        """Past and present loops, newest last: ``uid, name, task, status, started, ended, steps, ...``.
        A loop whose kernel died before it ended has status ``interrupted``. ``batch_rows=False`` leaves out
        the loops of a batch's rows (a batch is a loop whose ``batch`` is set: a map, an operator's map)."""
        self.flush()
        where = ["name = ?"] if name else []
        if not batch_rows:
            where.append(f"(parent_uid IS NULL OR parent_uid NOT IN (SELECT uid FROM loops WHERE {BATCH}))")
        sql = "SELECT * FROM loops" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY started DESC"
        params: tuple = (name,) if name else ()
        if limit:
            sql, params = sql + " LIMIT ?", (*params, limit)
        alive, rows = self.alive_sessions(), self.query(sql, params)
        tail = None  # the newest model call of each loop among the events the index does not list yet: one scan
        if any(row["ended"] is None for row in rows):
            tail = {r["loop_uid"]: r["data"] for r in by_index(self, LAST_REQUESTS, {}, LAST_REQUESTS)}
        return [self._present(row, alive, tail) for row in reversed(rows)]

    def _present(self, row: dict, alive: set[str], tail: dict[str, str] | None = None) -> dict:
        """A loops row as read: ``interrupted`` if its kernel is gone, the lineage a tuple, and the steps
        of a loop that has not ended as its events count them (its row's count is written once a second)."""
        if row["status"] in _LIVE and row["session"] not in alive:
            row["status"] = "interrupted"
        lineage = self._loads(row["lineage"] or "[]", row, "its lineage", [])
        row["lineage"] = tuple(lineage) if isinstance(lineage, list) else ()
        if row["ended"] is None:
            params = {"uid": row["uid"], "kind": "model_request"}
            if tail is None:  # one loop read: its own look after the index
                found = by_index(self, LAST_OF_KIND[0], params, SCAN_LAST_OF_KIND)
                last = found[0]["data"] if found else None
            else:
                last = tail.get(row["uid"])
            if last is None:  # then the index, from its newest entry
                found = by_index(self, LAST_OF_KIND[1], params, SCAN_LAST_OF_KIND)
                last = found[0]["data"] if found else None
            if last:
                step = self._loads(last, row, "its newest model call", {})
                row["steps"] = max(_whole(row["steps"]), _whole(step.get("step")) if isinstance(step, dict) else 0)
        return row

    def _loads(self, text: str, row: dict, what: str, default: Any) -> Any:
        """JSON from the file; a value changed by hand or damaged is ``default``, said in the log (one bad row must
        not cost every reader of the store its history)."""
        try:
            return json.loads(text)
        except ValueError as err:
            log.warning("store %r: loop %s (%s): %s cannot be read (%s): left out", self.path, row.get("name"),
                        row.get("uid"), what, err)
            return default

    def find(self, key: str) -> dict:
        """A loop by uid, loop id or name (the newest of that name)."""
        self.flush()
        rows = self.query(
            "SELECT * FROM loops WHERE uid = ? OR loop_id = ? OR name = ? ORDER BY started DESC LIMIT 1",
            (key, key, key),
        )
        if not rows:
            raise UserError(f"the store has no loop {key!r}; see %unity history")
        return self._present(rows[0], self.alive_sessions())

    def events(self, loop: str | None = None, *, kind: str | None = None) -> list[ev.Event]:
        """The recorded events (of one loop: its uid, id or name), oldest first, as event objects."""
        if loop is not None:
            rows = loop_rows(self, self.find(loop)["uid"], kind)  # find() writes what is waiting
        else:
            self.flush()
            where, args = (" WHERE kind = ?", (kind,)) if kind is not None else ("", ())
            rows = self.query(f"SELECT seq, data FROM events{where} ORDER BY seq", args)
        try:
            return [ev.parse_event(r["data"]) for r in rows]
        except ValueError as err:  # JSONDecodeError, a ValidationError: a row changed by hand, or damaged
            bad = next(r["seq"] for r in rows if not _readable(r["data"]))
            raise UserError(
                f"the store file {self.path!r} holds an event it cannot read (events row seq={bad}: "
                f"{str(err).splitlines()[0]}): it was changed by hand or damaged. Delete that row (sqlite3 "
                f"{self.path!r} 'DELETE FROM events WHERE seq = {bad}'), or move the file aside"
            ) from None

    def transcript(self, loop: str) -> list:
        """The transcript of a loop rebuilt from its recorded events (also after a crash)."""
        return rebuild_transcript(self.events(loop))

    def history(self, limit: int | None = None):
        """One row per past loop (a DataFrame): name, the task's first 80 characters, status, started, steps,
        and for a batch (``u.map``, ``%unity map``: one row for the batch, none per row loop) its rows: how many
        finished (kept from the run it continued among them), failed, stopped, and running (when its kernel
        died, for an interrupted batch)."""
        return history_frame(self, self.loops(limit=limit, batch_rows=False))

    def tree_tokens(self, uid: str) -> list[tuple[str, int, int]]:
        """Tokens spent under the loop ``uid`` (its children, theirs...), by model: ``[(model, in, out)]``."""
        return tree_tokens(self, uid)
