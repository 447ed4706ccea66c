"""How the events that change a loop's row in the store's ``loops`` table change it (``Store._write`` calls them
in its transaction, with the store as ``self``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from . import events as ev
from ._store_text import sqlite_text as _text

__all__ = ("LOOP_ROW",)


def started(self: Any, db: sqlite3.Connection, event: ev.LoopStarted, uid: str) -> None:
    # never over another loop's row (ids are unique; a second start of the same id is ignored)
    db.execute(
        "INSERT INTO loops (uid, session, loop_id, name, task, model, parent_uid, lineage, status, started, kind,"
        " batch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?) ON CONFLICT (uid) DO NOTHING",
        (uid, self.session, event.loop_id, _text(event.name), _text(event.task), _text(event.model),
         self.uid(event.parent_id) if event.parent_id else None, json.dumps(event.lineage), event.ts,
         event.loop_kind, int(event.batch)),
    )


def steered(self: Any, db: sqlite3.Connection, event: ev.Steering, uid: str) -> None:
    from .loop import VERBS  # (imported here: the loop never imports the store)

    verb = VERBS.get(event.action)  # a verb that sets the loop's status (pause, resume) says so in its entry
    if verb is not None and verb.status is not None and event.request_id is None:
        db.execute("UPDATE loops SET status = ? WHERE uid = ? AND ended IS NULL", (verb.status, uid))


def finished(self: Any, db: sqlite3.Connection, event: ev.LoopFinished, uid: str) -> None:
    db.execute("UPDATE loops SET status = ?, ended = ?, result = ?, error = ?, steps = ? WHERE uid = ?",
               (event.status, event.ts, _text(event.result), _text(event.reason), event.steps, uid))


def failed(self: Any, db: sqlite3.Connection, event: ev.LoopFailed, uid: str) -> None:
    db.execute("UPDATE loops SET status = 'failed', ended = ?, error = ?, steps = ? WHERE uid = ?",
               (event.ts, _text(event.error), event.steps, uid))


LOOP_ROW: dict[str, Callable[..., None]] = {  # the kinds that change their loop's row (and model_request)
    "loop_started": started, "steering": steered, "loop_finished": finished, "loop_failed": failed,
}
