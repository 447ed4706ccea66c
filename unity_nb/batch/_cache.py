"""The map's result cache: the same model, the same row prompt and the same options give the stored answer
without a call.

Kept in the store, in a table of its own (``map_cache``: key, answer, model, created), not in the events: a hit
is one primary-key look-up, whatever the number of events, and a row's answer is written there once it
finished (``row_finished`` events still record every row, cached or not). The key hashes what determines the
answer: the model's identity (its name and the server's address; a :class:`ScriptedModel`, whose answers come
from its script, is never cached), the row's full prompt and what the row was told besides it (the batch's
interjections it started with), the answer's typed fields, and the row options a person may change (system
prompt, tools with their schemas, max steps, tool policy...).

Not cached (:func:`cacheable`): a row answered through a tool (its result may change), a row a person spoke to
while it ran (an interjection that landed mid-row: its answer depends on when), and a row whose reply came from
a stream that ended with neither a ``finish_reason`` nor ``[DONE]`` (it may be cut off) or that the provider says
it cut (``finish_reason`` ``length``: the request's max tokens; ``content_filter``).

Writes never run on the event loop: a writer thread per store takes them, with a connection of its own. While
another process holds the store's write lock, answers wait in memory (at most :data:`MAX_PENDING`) and the
writer tries again after 1 s, then 2, 4... up to 30 s, as the store's own writes do; the problem is said once
(the log, and :attr:`ResultCache.problem`) and nothing is raised: a row's answer stands, cached or not.

The table is bounded: at most :data:`MAX_ROWS` answers and :data:`MAX_CHARS` characters of them per store file;
past either, the oldest answers are dropped (down to nine tenths of the bound) as new ones are written.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

from .._errors import UserError
from ..loop import json_schema

__all__ = ("CUT_OFF", "MAX_CHARS", "MAX_PENDING", "MAX_ROWS", "ResultCache", "cacheable", "cut_reason", "cut_reply",
           "model_identity", "options_fingerprint")

log = logging.getLogger("unity_nb.batch")

MAX_ROWS = 100_000
"""The most answers the ``map_cache`` table keeps (the oldest go first)."""
MAX_CHARS = 64 * 1024 * 1024
"""The most characters of answers the ``map_cache`` table keeps, about 64 MB (the oldest go first)."""
MAX_PENDING = 10_000
"""The most answers waiting in memory for the store (while it is locked); past it the oldest are not cached."""

_TABLE = (
    "CREATE TABLE IF NOT EXISTS map_cache (key TEXT PRIMARY KEY, answer TEXT NOT NULL, model TEXT, created REAL)",
    "CREATE INDEX IF NOT EXISTS map_cache_created ON map_cache (created)",
)
_BUSY_WAIT = 1.0
"""Seconds the writer's connection waits for another process's write lock before it backs off."""
_RETRY_FIRST, _RETRY_MAX = 1.0, 30.0
"""Seconds before the writer tries again after the store refused a write, doubling up to the second."""
_IDLE = 2.0
"""Seconds a writer thread waits for more answers before it ends (the next answer starts another)."""


def model_identity(model: Any) -> str | None:
    """What names a model's answers: ``None`` for a model whose answers are not a function of its name and the
    prompt (a ScriptedModel, an object without a name)."""
    from ..models import OpenAIModel

    explicit = getattr(model, "cache_identity", None)
    if isinstance(explicit, str):
        return explicit
    if isinstance(model, OpenAIModel):  # its base_url is the openai client's (read without importing openai)
        return f"{model.name}@{model.base_url}\0{sorted(getattr(model, 'options', {}).items())!r}"
    return None


def options_fingerprint(options: dict[str, Any], output: Any) -> str:
    """The row options that change an answer, as text: tools by name, description and parameters; the rest by repr."""
    parts = []
    for key in sorted(options):
        value = options[key]
        if key == "tools":
            value = [(getattr(t, "name", repr(t)), getattr(t, "description", ""), _schema(t)) for t in value]
        parts.append(f"{key}={value!r}")
    if output is not None:
        parts.append(f"output={_schema_of(output)}")
    return "\n".join(parts)


def _schema(tool: Any) -> str:
    params = getattr(tool, "params", None)
    return _schema_of(params) if params is not None else ""


def _schema_of(model: Any) -> str:
    try:
        return repr(json_schema(model))
    except Exception:  # noqa: BLE001 - a schema that cannot be made: its name stands for it
        return repr(model)


def cacheable(row_loop: Any) -> bool:
    """Whether a finished row's answer is a function of what the cache key holds: no person spoke to the row
    while it ran (an interjection, a post), and no reply of it may be cut off (a stream that ended with neither a
    ``finish_reason`` nor ``[DONE]``) or was (:data:`CUT_OFF`: at the max tokens, by a content filter). Tools are
    checked by the batch (a row answered through one is not cached)."""
    if row_loop.run.conversation.heard:
        return False
    return not any(e.kind == "model_response" and (getattr(e, "truncated", False) or getattr(e, "finish_reason", None)
                                                   in CUT_OFF) for e in row_loop.events)


CUT_OFF = frozenset({"length", "content_filter"})
"""The ``finish_reason`` of a reply the provider cut: the request's max tokens reached, or its content filter."""


def cut_reason(finish_reason: str | None) -> str | None:
    """What a finished row says of its answer when the reply that gave it was cut (:data:`CUT_OFF`), else ``None``:
    the row is finished and its answer used (``.attrs["cut"]``, the rows' summary and its ``row_finished`` event's
    ``reason`` say so)."""
    if finish_reason == "length":
        return ("its answer was cut off: the reply reached the request's max tokens (finish_reason 'length'); "
                "allow the model more tokens (max_tokens) to get it whole")
    if finish_reason == "content_filter":
        return "its answer was cut off by the provider's content filter (finish_reason 'content_filter')"
    return None


def cut_reply(row_loop: Any) -> str | None:
    """:func:`cut_reason` of the last reply of a finished row's loop (the one that gave its answer)."""
    last = next((e for e in reversed(row_loop.events) if e.kind == "model_response"), None)
    return cut_reason(getattr(last, "finish_reason", None)) if last is not None else None


class ResultCache:
    """Answers by key in ``store``'s ``map_cache`` table: read on the caller's thread (one query for many keys),
    written by a thread (:class:`_Writer`, one per store)."""

    def __init__(self, store: Any, identity: str, fingerprint: str) -> None:
        self.store = store
        self._prefix = f"{identity}\0{fingerprint}\0".encode(errors="surrogatepass")
        self.hits = 0
        self._writer = _writer_for(store)

    @property
    def problem(self) -> str | None:
        """Why answers are waiting or were not cached (the store locked by another process, ...), or ``None``."""
        return self._writer.problem

    @property
    def max_rows(self) -> int:
        """The most answers the store's ``map_cache`` table keeps (:data:`MAX_ROWS`; the oldest go first). Set
        per store: every batch caching in it shares the bound."""
        return self._writer.max_rows

    @max_rows.setter
    def max_rows(self, value: int) -> None:
        self._writer.max_rows = _bound(value, "max_rows")

    @property
    def max_chars(self) -> int:
        """The most characters of answers the table keeps (:data:`MAX_CHARS`; the oldest go first), per store."""
        return self._writer.max_chars

    @max_chars.setter
    def max_chars(self, value: int) -> None:
        self._writer.max_chars = _bound(value, "max_chars")

    def key(self, prompt: str, told: Iterable[str] = ()) -> str:
        """The key of a row asked ``prompt`` and told ``told`` besides (the interjections it started with)."""
        h = hashlib.blake2b(self._prefix, digest_size=16)
        h.update(prompt.encode(errors="surrogatepass"))
        for note in told:
            h.update(b"\0told\0")
            h.update(note.encode(errors="surrogatepass"))
        return h.hexdigest()

    def get(self, key: str) -> str | None:
        return self.get_many([key]).get(key)

    def get_many(self, keys: list[str]) -> dict[str, str]:
        """The answers the cache holds for ``keys`` (those still waiting for the store, then one query)."""
        if not keys:
            return {}
        found = self._writer.waiting(keys)
        rest = [k for k in keys if k not in found]
        if not rest:
            return found
        try:
            rows = self.store.query(
                f"SELECT key, answer FROM map_cache WHERE key IN ({','.join('?' * len(rest))})", tuple(rest)
            )
        except Exception:  # noqa: BLE001 - a cache that cannot be read (no table yet, a damaged file) is a miss
            return found
        found.update((r["key"], r["answer"]) for r in rows)
        return found

    def put(self, key: str, answer: str, model: str) -> None:
        """Keep ``answer`` under ``key``: queued for the writer thread at once (never waits on the store)."""
        self._writer.put(key, answer, model)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` seconds: blocking, not for the event loop) until every answer queued so far is
        in the store; True if they are."""
        return self._writer.flush(timeout)


class _Writer:
    """The thread that writes one store's cached answers, with a connection of its own (so the store's lock and
    connection are never held while another process's write lock is waited for)."""

    def __init__(self, store: Any) -> None:
        try:  # held weakly: the writers are kept by store (a value must not keep its key alive)
            self._store: Any = weakref.ref(store)
        except TypeError:
            self._store = lambda: store
        path = getattr(store, "path", None)
        self.path = path if isinstance(path, str) and path and path != ":memory:" else None
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[str, str, float]] = {}  # key -> (answer, model, created), oldest first
        self._wake = threading.Event()
        self._hurry = threading.Event()  # a flush waiting: try again now, not at the end of the back-off
        self._written = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._local = threading.local()  # each writer thread's own connection (``db``)
        self._ready = False
        self._sizes: tuple[int, int] | None = None  # (rows, characters) in the table, as this writer counts them
        self.max_rows = MAX_ROWS
        self.max_chars = MAX_CHARS
        self.problem: str | None = None
        self._problem_kind: str | None = None
        self.dropped = 0
        """Answers not cached because too many waited for a locked store."""
        self._dropped_said = 0

    def put(self, key: str, answer: str, model: str) -> None:
        with self._lock:
            self._pending.pop(key, None)
            self._pending[key] = (answer, model, time.time())
            while len(self._pending) > MAX_PENDING:
                del self._pending[next(iter(self._pending))]
                self.dropped += 1
            self._start()
        self._wake.set()

    def _start(self) -> None:
        """A writer thread, if none runs (called with the lock held)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="unity_nb-map-cache", daemon=True)
            self._thread.start()

    def waiting(self, keys: list[str]) -> dict[str, str]:
        with self._lock:
            return {k: p[0] for k in keys if (p := self._pending.get(k)) is not None}

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._start()
                self._wake.set()
                self._hurry.set()
                self._written.wait(min(left, 0.5))
            return True

    def _run(self) -> None:
        retry = _RETRY_FIRST
        try:
            while True:
                woken = self._wake.wait(timeout=_IDLE)
                self._wake.clear()
                if self._write():
                    retry = _RETRY_FIRST
                else:  # the store refused: back off (new answers wait with the others; a flush cuts it short)
                    self._hurry.wait(retry)
                    self._hurry.clear()
                    retry = min(retry * 2, _RETRY_MAX)
                    self._wake.set()
                    continue
                if not woken:
                    with self._lock:
                        if not self._pending:  # retired under the lock: a put after it starts a new thread
                            self._thread = None
                            return
        finally:
            db = getattr(self._local, "db", None)
            if db is not None:  # this thread's own connection
                _quietly(db.close)
                self._local.db = None
            with self._lock:
                if self._thread is threading.current_thread():  # ended by an error: the next put starts another
                    self._thread = None

    def _write(self) -> bool:
        """Write what waits (one transaction), then keep the table within its bounds; False if the store refused."""
        with self._lock:
            batch = list(self._pending.items())
        if not batch:
            return True
        try:
            self._transaction(batch)
        except sqlite3.ProgrammingError as err:  # an in-memory store closed: its table is gone, nothing to retry
            with self._lock:
                self.dropped += len(self._pending)
                self._pending.clear()
                self._written.notify_all()
            self.problem, self._problem_kind = f"map cache: the store is closed ({err}): answers not cached", "closed"
            return True
        except Exception as err:  # noqa: BLE001 - said once and retried; the rows' answers stand
            self._trouble(err)
            return False
        recovered = False
        with self._lock:
            for key, entry in batch:
                if self._pending.get(key) is entry:  # not replaced meanwhile
                    del self._pending[key]
            if self.problem is not None and self._problem_kind != "dropped":
                self.problem = self._problem_kind = None
                recovered = True
            self._written.notify_all()
        if recovered:
            log.warning("map cache: writing again to %s; the waiting answers are cached", self._where())
        if self.dropped > self._dropped_said:  # said once per loss, and kept: those rows are asked again
            self._dropped_said = self.dropped
            self._problem_kind = "dropped"
            self.problem = (f"map cache: {self.dropped} answer(s) were not cached: more than {MAX_PENDING} waited "
                            f"while {self._where()} was locked by another process (those rows are asked again "
                            "next time)")
            log.warning("%s", self.problem)
        return True

    def _transaction(self, batch: list[tuple[str, tuple[str, str, float]]]) -> None:
        rows = [(k, a, m, c) for k, (a, m, c) in batch]
        if self.path is None:  # an in-memory store (no other process can lock it) or a store-like object
            store = self._store()
            if store is None:  # gone, and its in-memory table with it: nothing to keep the answers in
                return
            transaction = getattr(store, "transaction", None)
            if transaction is None:
                for statement in _TABLE:
                    store.execute(statement)
                self._insert(store.execute, rows)
                return
            with transaction() as store_db:  # the store's own connection, held for the transaction
                for statement in _TABLE:
                    store_db.execute(statement)
                self._insert(store_db.execute, rows, store_db)
            return
        db = getattr(self._local, "db", None)
        if db is None:
            db = self._local.db = sqlite3.connect(self.path, timeout=_BUSY_WAIT, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")  # waits _BUSY_WAIT for another process's lock, in this thread
        try:
            if not self._ready:
                for statement in _TABLE:
                    db.execute(statement)
            self._insert(db.execute, rows, db)
            db.execute("COMMIT")
            self._ready = True
        except BaseException:
            if db.in_transaction:
                _quietly(db.execute, "ROLLBACK")
            raise

    def _insert(self, execute: Any, rows: list[tuple], db: sqlite3.Connection | None = None) -> None:
        sql = "INSERT OR REPLACE INTO map_cache (key, answer, model, created) VALUES (?, ?, ?, ?)"
        if db is not None:
            db.executemany(sql, rows)
        else:
            for row in rows:
                execute(sql, row)
        if self._sizes is None:  # counted once a writer's life; then kept up to date as it writes
            count, chars = execute("SELECT COUNT(*), IFNULL(SUM(length(answer)), 0) FROM map_cache").fetchone()
        else:  # a replaced answer counts twice: the table is pruned a little early, never late
            count, chars = self._sizes[0] + len(rows), self._sizes[1] + sum(len(r[1]) for r in rows)
        if count > self.max_rows or chars > self.max_chars:
            count, chars = self._prune(execute, count, chars)
        self._sizes = (count, chars)

    def _prune(self, execute: Any, count: int, chars: int) -> tuple[int, int]:
        """Drop the oldest answers until the table holds nine tenths of its bounds at most."""
        keep_rows, keep_chars = self.max_rows * 9 // 10, self.max_chars * 9 // 10
        count, chars = execute("SELECT COUNT(*), IFNULL(SUM(length(answer)), 0) FROM map_cache").fetchone()
        drop_rows, drop_chars = max(0, count - keep_rows), max(0, chars - keep_chars)
        if not drop_rows and not drop_chars:
            return count, chars
        cut, freed, n = None, 0, 0
        for created, size in execute("SELECT created, length(answer) FROM map_cache ORDER BY created").fetchall():
            if n >= drop_rows and freed >= drop_chars:
                break
            cut, freed, n = created, freed + (size or 0), n + 1
        if cut is not None:
            execute("DELETE FROM map_cache WHERE created <= ?", (cut,))
        return tuple(execute("SELECT COUNT(*), IFNULL(SUM(length(answer)), 0) FROM map_cache").fetchone())

    def _where(self) -> str:
        return repr(self.path) if self.path is not None else "the store"

    def _trouble(self, err: BaseException) -> None:
        busy = isinstance(err, sqlite3.OperationalError) and ("locked" in str(err) or "busy" in str(err))
        with self._lock:
            waiting = len(self._pending)
        if busy:
            kind = "busy"
            text = (f"map cache: the store {self._where()} is locked by another process; {waiting} answer(s) wait "
                    "in memory and are cached once it is free (nothing to do; cache=False skips the cache)")
        else:
            kind = "broken"
            text = (f"map cache: cannot write to the store {self._where()} ({type(err).__name__}: {err}); "
                    f"{waiting} answer(s) wait and are tried again. Check that the file can be written, or pass "
                    "cache=False (%unity map --no-cache)")
        if self._problem_kind != kind:
            log.warning("%s", text)
        self.problem, self._problem_kind = text, kind
        db = getattr(self._local, "db", None)
        if db is not None and not busy:  # a connection that failed otherwise is made anew
            _quietly(db.close)
            self._local.db = None
            self._ready = False


def _bound(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"the cache's {what} takes a whole number of at least 1, not {value!r}")
    return value


def _quietly(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001, S110 - cleaning up after an error already reported
        pass


_WRITERS: weakref.WeakKeyDictionary[Any, _Writer] = weakref.WeakKeyDictionary()
_OTHERS: dict[int, _Writer] = {}  # stores that cannot be weakly referenced (kept for the process's life)
_WRITERS_LOCK = threading.Lock()


def _writer_for(store: Any) -> _Writer:
    """The one writer of ``store`` (every batch caching in it shares it)."""
    with _WRITERS_LOCK:
        try:
            writer = _WRITERS.get(store)
            if writer is None:
                writer = _WRITERS[store] = _Writer(store)
        except TypeError:  # not weakly referenceable
            writer = _OTHERS.get(id(store))
            if writer is None:
                writer = _OTHERS[id(store)] = _Writer(store)
        return writer


def _flush_all() -> None:
    """At exit: what waits is written if the store takes it within a few seconds."""
    for writer in [*_WRITERS.values(), *_OTHERS.values()]:
        try:
            writer.flush(3.0)
        except Exception:  # noqa: BLE001, S110 - at exit: nothing more to do
            pass


atexit.register(_flush_all)
