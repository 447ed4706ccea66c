"""Durable tasks with turns, a message queue and parent/child tasks (after UniCore).

A task is a conversation kept in the store, in **turns**. Everything that reaches a task goes
through its **queue** first (a person's message, a child's completion notice), and one place
moves queued messages into the conversation:

- while the task runs, they are delivered into its current turn (the model sees them before
  its next call);
- while it is idle, they start a **new turn** (all messages queued by then, in order), but
  only if the last turn ended with an answer; a turn cut short (the kernel died) is resumed
  instead, its history repaired so every tool call has a result;
- once it was stopped, only a message sent since (a person's, its parent's) starts its next turn: what was
  queued when it stopped and its children's completion notices wait in its queue for that turn.

A task runs through the actor (``execute``), and its plans may ``spawn_task`` children: a
child runs on its own; when its turn ends, a completion notice is queued for the parent,
which wakes the parent in a new turn if it is idle. ``message_task`` resumes a child with a
new message. Messages are written to the store before each model call, so a kernel that
dies loses at most the step in flight.

``parent_context`` says whether a task's children see its conversation, as loops'
``parent_context`` says it for their children: ``"never"`` (the default), ``"always"``, or
``"model"`` (``spawn_task`` takes an ``include_parent_context`` flag the model sets); each turn
of such a child starts with the parent's conversation as it stands then, for reference.
``summaries="model"`` has the model write each turn's summary once the turn ends (the
truncated answer stands until it is written, and stays if writing it fails).
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import functools
import json
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

from .. import events as ev
from .._errors import HandleStateError, UserError
from ..loop import LoopHandle, start_loop
from ..models import default_model
from ._base import Manager
from ._task_records import DESCRIPTION_NEEDED, NAME_NEEDED, RunningElsewhere, Task, needed
from ._task_tools import manager_tools, task_tools
from ._task_wire import decode_messages, repair_history, turn_ending
from ._task_wire import render as _render

__all__ = ("Task", "TasksManager", "repair_history")

log = logging.getLogger(__name__)

ParentContext = Literal["always", "never", "model"]
Summaries = Literal["truncate", "model"]

_RETRY_FIRST, _RETRY_MAX = 1.0, 30.0  # seconds before writing a turn's end again, doubling up to the second
_INTERRUPTED = ("[this task's previous run was interrupted before it finished (the kernel stopped); "
                "continue where it left off]")


_SUMMARY_SYSTEM = (
    "You summarise one turn of a durable task for its record: what was asked, what was done, and how "
    "the turn ended. Answer with the summary only: one or two plain sentences, at most 300 characters."
)


def _soon(callback: Callable[..., Any], *args: Any) -> None:
    asyncio.get_running_loop().call_soon(callback, *args, context=contextvars.Context())


class TasksManager(Manager):
    """Durable tasks: create, list, edit, reorder and execute them; each keeps its conversation
    in turns across kernel restarts, receives messages through a queue, and may spawn child
    tasks whose completion wakes it."""

    alias = "tasks"
    caller_description = "running and organising the person's durable tasks"
    exposed = ("ask", "update", "run")

    def __init__(
        self,
        *,
        store: Any,
        model: Any = None,
        bus: ev.EventBus | None = None,
        registry: Any = None,
        namespace: dict | None = None,
        actor_options: dict | None = None,
        parent_context: ParentContext = "never",
        summaries: Summaries = "truncate",
    ) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        if store is None:
            raise UserError("TasksManager needs store=unity_nb.Store(path)")
        if parent_context not in ("always", "never", "model"):
            raise UserError(f"parent_context must be 'always', 'never' or 'model', not {parent_context!r}")
        if summaries not in ("truncate", "model"):
            raise UserError(f"summaries must be 'truncate' or 'model', not {summaries!r}")
        self.store = store
        self.parent_context: ParentContext = parent_context
        """Whether a task's children see its conversation: ``"always"``, ``"never"``, or
        ``"model"`` (``spawn_task`` takes an ``include_parent_context`` flag)."""
        self.summaries: Summaries = summaries
        """``"truncate"``: a turn's summary is the start of its answer (or of why it ended);
        ``"model"``: the model writes it once the turn ends."""
        self.store.execute(
            "CREATE TABLE IF NOT EXISTS task_parent_context (task_id TEXT PRIMARY KEY, share INTEGER NOT NULL)")
        self.namespace = namespace
        self.actor_options = dict(actor_options or {})
        self._live: dict[str, LoopHandle] = {}
        self._scheduled: set[str] = set()
        self._posted: dict[str, builtins.list[dict]] = {}  # queue rows posted into each running turn
        self._runs: dict[str, tuple[LoopHandle, int, dict]] = {}  # running turns: handle, turn, write cursor
        self._summary_loops: dict[str, LoopHandle] = {}
        self._ending: set[str] = set()  # tasks whose turn ended but the store has not taken that yet
        self._carried: dict[str, set[tuple]] = {}  # (content, ts) of what each last turn ended without seeing

    # ------------------------------------------------------------------ records

    def _row(self, task_id: str) -> dict:
        rows = self.store.query("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if not rows:
            names = [r["id"] for r in self.store.query("SELECT id FROM tasks ORDER BY position")]
            raise UserError(f"there is no task {task_id!r}; tasks: {names or 'none'}")
        return rows[0]

    def _task(self, row: dict) -> Task:
        status = row["status"]
        if status == "running" and row["id"] not in self._live and row["session"] not in self.store.alive_sessions():
            status = "interrupted"  # its kernel is gone (a live kernel sharing the store still runs it)
        return Task(row["id"], row["name"], row["description"], status, row["parent_id"], row["position"],
                    row["created"], row["updated"], row["result"])

    def create(
        self, name: str, description: str, *, parent: str | None = None, parent_context: bool | None = None,
    ) -> Task:
        """A new task (not started: :meth:`execute` or :meth:`send` starts it). A child
        (``parent=``) sees its parent's conversation if ``parent_context`` is true; ``None``
        follows the manager's ``parent_context`` (only ``"always"`` shares)."""
        name, description = needed(name, NAME_NEEDED), needed(description, DESCRIPTION_NEEDED)
        if parent is not None:
            self._row(parent)
        elif parent_context is not None:
            raise UserError("parent_context is for a child task: give its parent (parent=ID), or leave it out")
        task_id = f"t{secrets.token_hex(3)}"
        now = time.time()
        top = self.store.query("SELECT MAX(position) AS p FROM tasks")[0]["p"] or 0
        self.store.execute(
            "INSERT INTO tasks (id, name, description, status, parent_id, position, created, updated)"
            " VALUES (?, ?, ?, 'new', ?, ?, ?, ?)",
            (task_id, name, description, parent, top + 1, now, now),
        )
        if parent is not None and parent_context is not None:
            self.store.execute("INSERT INTO task_parent_context (task_id, share) VALUES (?, ?)",
                               (task_id, int(bool(parent_context))))
        return self.get(task_id)

    def get(self, task_id: str) -> Task:
        return self._task(self._row(task_id))

    def list(self, *, parent: str | None = None) -> builtins.list[Task]:
        """Every task in order (or the children of ``parent``)."""
        if parent is None:
            rows = self.store.query("SELECT * FROM tasks ORDER BY position")
        else:
            rows = self.store.query("SELECT * FROM tasks WHERE parent_id = ? ORDER BY position", (parent,))
        return [self._task(r) for r in rows]

    def edit(self, task_id: str, *, name: str | None = None, description: str | None = None) -> Task:
        row = self._row(task_id)  # None: as it is; blank text is no name nor description
        name = row["name"] if name is None else needed(name, NAME_NEEDED)
        description = row["description"] if description is None else needed(description, DESCRIPTION_NEEDED)
        self.store.execute("UPDATE tasks SET name = ?, description = ?, updated = ? WHERE id = ?",
                           (name, description, time.time(), task_id))
        return self.get(task_id)

    def reorder(self, task_ids: Iterable[str]) -> builtins.list[Task]:
        """Put these tasks first, in this order (the others keep their order after them)."""
        ids = list(task_ids)
        for i, tid in enumerate(ids):
            self._row(tid)
            if tid in ids[:i]:
                raise UserError(f"reorder names {tid!r} twice: name each task once, in the order wanted")
        rest = [t.id for t in self.list() if t.id not in ids]
        with self.store.transaction() as db:
            for i, tid in enumerate(ids + rest):
                db.execute("UPDATE tasks SET position = ? WHERE id = ?", (i + 1, tid))
        return self.list()

    def messages(self, task_id: str) -> builtins.list[dict]:
        """The task's whole conversation (wire format), all turns, as stored."""
        self._row(task_id)
        return decode_messages(task_id, self.store.path, self.store.query(
            "SELECT n, message FROM task_messages WHERE task_id = ? ORDER BY n", (task_id,)))

    def turns(self, task_id: str) -> builtins.list[dict]:
        """``[{turn, started, ended, summary, messages}]``."""
        self._row(task_id)
        out = []
        for t in self.store.query("SELECT * FROM task_turns WHERE task_id = ? ORDER BY turn", (task_id,)):
            msgs = decode_messages(task_id, self.store.path, self.store.query(
                "SELECT n, message FROM task_messages WHERE task_id = ? AND turn = ? ORDER BY n", (task_id, t["turn"])))
            out.append({**t, "messages": msgs})
        return out

    def sees_parent(self, task_id: str) -> bool:
        """Whether the task's turns start with its parent's conversation as context."""
        row = self._row(task_id)
        if row["parent_id"] is None:
            return False
        chosen = self.store.query("SELECT share FROM task_parent_context WHERE task_id = ?", (task_id,))
        return bool(chosen[0]["share"]) if chosen else self.parent_context == "always"

    def summary_loop(self, task_id: str) -> LoopHandle | None:
        """The loop writing (or that wrote) the summary of the task's last ended turn, with
        ``summaries="model"`` (``None`` before any): ``await`` it to wait for the summary."""
        self._row(task_id)
        return self._summary_loops.get(task_id)

    def handle(self, task_id: str) -> LoopHandle | None:
        """The live handle of a running task (``None`` when it is not running here)."""
        h = self._live.get(task_id)
        return h if h is not None and not h.done() else None

    # ------------------------------------------------------------------ the queue

    def send(self, task_id: str, message: str, *, type: str = "user", sender: str | None = None) -> None:
        """Queue ``message`` for the task: delivered into its current turn if it runs, else it
        starts a new turn (with everything else queued by then)."""
        self._row(task_id)
        if not isinstance(message, str) or not message.strip():
            raise UserError("send needs a non-empty message")
        self.store.execute(
            "INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, ?, ?, ?, ?)",
            (task_id, type, message, sender, time.time()),
        )
        self._activate(task_id)

    def _take_queue(self, task_id: str) -> builtins.list[dict]:
        with self.store.transaction() as db:
            rows = [dict(r) for r in db.execute("SELECT * FROM task_queue WHERE task_id = ? ORDER BY id", (task_id,))]
            db.execute("DELETE FROM task_queue WHERE task_id = ? AND id <= ?",
                       (task_id, rows[-1]["id"] if rows else -1))
        return rows

    def _activate(self, task_id: str) -> None:
        live = self.handle(task_id)
        if live is not None:
            for row in self._take_queue(task_id):
                try:
                    live.run.post(row["content"])
                    self._posted.setdefault(task_id, []).append(row)
                except HandleStateError:  # it ended meanwhile: the message starts the next turn
                    self.store.execute(
                        "INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, ?, ?, ?, ?)",
                        (task_id, row["type"], row["content"], row["sender"], row["ts"]),
                    )
                    break
            else:
                return
        self._schedule(task_id)

    def _schedule(self, task_id: str) -> None:
        """Start the task on the next tick (so messages queued in the same tick share its new
        turn), in a fresh context: its loop is nobody's child."""
        if task_id in self._scheduled:
            return
        self._scheduled.add(task_id)
        _soon(self._start_scheduled, task_id)

    def _start_scheduled(self, task_id: str) -> None:
        self._scheduled.discard(task_id)
        if self.handle(task_id) is not None:
            return
        row = self._row(task_id)
        if task_id in self._ending or self._elsewhere(row) is not None:
            return  # the kernel running it delivers what is queued (before its next model call, or a new turn)
        if row["status"] == "stopped":  # woken by a message sent since (a person's, its parent's), not by what
            waiting = self.store.query(  # was queued when it stopped nor by its children's completion notices
                "SELECT 1 FROM task_queue WHERE task_id = ? AND type != 'completion' AND ts > ? LIMIT 1",
                (task_id, row["updated"]))
        else:
            waiting = self.store.query("SELECT 1 FROM task_queue WHERE task_id = ? LIMIT 1", (task_id,))
        if waiting or row["status"] == "new":
            try:
                self._start(task_id)
            except RunningElsewhere:  # another kernel started it meanwhile: it delivers what is queued
                pass

    def _elsewhere(self, row: dict) -> str | None:
        """The session of another live kernel sharing the store that runs this task now, else ``None``."""
        session = row["session"]
        if row["status"] != "running" or session == self.store.session or row["id"] in self._live:
            return None
        return session if session in self.store.alive_sessions() else None

    # ------------------------------------------------------------------ running

    def execute(self, task_id: str, **options: Any) -> LoopHandle:
        """Run the task now and return its live handle (the running one if it runs already).
        A new task starts its first turn; an interrupted one resumes its turn; an idle one
        starts a new turn with its queued messages (or, with none, a request to go on).
        ``approval`` and ``code_timeout`` in ``options`` are this turn's actor's (else ``actor_options``')."""
        live = self.handle(task_id)
        if live is not None:
            return live
        return self._start(task_id, **options)

    def _start(self, task_id: str, **options: Any) -> LoopHandle:
        if options.get("context_window") or self.actor_options.get("context_window"):
            raise UserError(
                "durable tasks keep their whole history in the store; context compression is not available for them")
        if task_id in self._ending:
            raise UserError(f"task {task_id}'s last turn ended, but the store {self.store.path!r} has not taken "
                            "that yet (see the log: a full disk?); it is tried again: run the task once it has")
        row = self._claim(task_id)
        taken: builtins.list[dict] = []
        try:
            handle, turn, state = self._begin(task_id, row, taken, options)
        except BaseException:  # not started: the task as it was, its queued messages queued again
            self._unclaim(task_id, row, taken)
            raise
        handle.run.tags.update(manager=self, task_id=task_id)
        self._live[task_id] = handle
        self._posted[task_id] = []
        state["begin"] = {"new turn": state.pop("new turn"), "started": time.time(), "uid": self.store.uid(handle.id)}
        self._runs[task_id] = (handle, turn, state)
        self._listen(task_id, handle, turn, state)  # first: a write failing below is tried again by it
        try:  # the turn's row and its first messages: what the file cannot take now waits in the handle
            self._persist(task_id, handle, turn, state)
        except (sqlite3.Error, UserError) as err:
            log.warning("task %s: its turn %s could not be written to the store %r (%s); tried again before its "
                        "next model call and as it ends", task_id, turn, self.store.path, err)
        return handle

    def _claim(self, task_id: str) -> dict:
        """The task's row, marked running in this kernel in one transaction with the look at who runs it: of two
        kernels sharing the store that start it at once, one runs it and the other is told (two runs of one task
        would each write its conversation). Raises :class:`RunningElsewhere`."""
        with self.store.transaction() as db:
            row = self._row(task_id)
            if self._elsewhere(row) is not None:
                raise RunningElsewhere(
                    f"task {row['name']!r} ({task_id}) is running in another kernel sharing the store "
                    f"{self.store.path!r}: send it a message (that kernel delivers it into the running turn), or run "
                    "it here once it is idle")
            db.execute("UPDATE tasks SET status = 'running', session = ?, updated = ? WHERE id = ?",
                       (self.store.session, time.time(), task_id))
        return row

    def _unclaim(self, task_id: str, row: dict, taken: builtins.list[dict]) -> None:
        with self.store.transaction() as db:
            db.execute("UPDATE tasks SET status = ?, session = ? WHERE id = ? AND session = ?",
                       (row["status"], row["session"], task_id, self.store.session))
            db.executemany("INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, ?, ?, ?, ?)",
                           [(task_id, q["type"], q["content"], q["sender"], q["ts"]) for q in taken])

    def _begin(self, task_id: str, row: dict, taken: builtins.list[dict], options: dict) -> tuple:
        """The task's turn started (claimed: see :meth:`_claim`), its loop made: ``(handle, turn, state)``; the
        messages taken from its queue added to ``taken``."""
        task = self._task(row)
        history = repair_history(self.messages(task_id))
        taken += self._take_queue(task_id)
        queued = [q["content"] for q in taken]
        turns = self.store.query("SELECT turn, ended FROM task_turns WHERE task_id = ? ORDER BY turn", (task_id,))
        ended = not turns or turns[-1]["ended"] is not None
        if not history:
            queued = [f"Task {task.name!r}: {task.description}", *queued]
        elif not ended and not turn_ending(history[-1]):
            queued = [_INTERRUPTED, *queued]  # resume the turn cut short
        elif not queued:
            queued = ["[continue this task]"]
        turn = ((turns[-1]["turn"] + 1) if turns else 0) if ended else turns[-1]["turn"]
        context = self._parent_note(row) if self.sees_parent(task_id) else []
        from .._registry import registered_tools  # the notebook's @unity_nb.tool tools, as an actor's
        from ..actor import Actor

        actor = Actor(
            self.model, namespace=self.namespace if self.namespace is not None else None,
            tools=[*registered_tools(), *task_tools(self, task_id)],
            **{**self.actor_options, **{k: options.pop(k) for k in ("approval", "code_timeout") if k in options}},
        )
        name = f"task {task.name}"
        handle = actor.act(queued[-1], name=name, bus=self.bus,
                           history=context + history + [{"role": "user", "content": q} for q in queued[:-1]],
                           detached=True, **options)
        cursor = len(handle.messages) - len(queued)
        return handle, turn, {"cursor": cursor, "n": len(history), "new turn": ended}

    def _listen(self, task_id: str, handle: LoopHandle, turn: int, state: dict) -> None:
        def on_event(source: LoopHandle, event: ev.Event) -> None:
            if source is not handle:
                return
            if event.kind == "model_request":
                try:  # what the file cannot take now waits in the handle: the next write takes it
                    self._persist(task_id, handle, turn, state)
                    if self.store.query("SELECT 1 FROM task_queue WHERE task_id = ? LIMIT 1", (task_id,)):
                        self._activate(task_id)  # queued by another kernel sharing the store: into this turn
                except (sqlite3.Error, UserError) as err:
                    log.warning("task %s: its conversation could not be written to the store %r (%s); tried "
                                "again before its next model call", task_id, self.store.path, err)
            elif event.kind in ("loop_finished", "loop_failed"):
                self._finish(task_id, handle, turn, state, event, _RETRY_FIRST)

        handle.run.add_listener(on_event)

    def _finish(self, task_id: str, handle: LoopHandle, turn: int, state: dict, event: ev.Event,
                delay: float) -> None:
        """End the turn in the store; a file that cannot take it (a full disk) is tried again until it does
        (the turn's messages wait in the handle; a listener raising would leave the handle never ending)."""
        self._ending.add(task_id)
        try:
            self._end_turn(task_id, handle, turn, event, state)
        except (sqlite3.Error, UserError) as err:
            if task_id not in self._runs:  # written: what failed came after (the parent's notice, the queue's look)
                log.warning("task %s: after its turn %s ended: %s", task_id, turn, err)
                self._ending.discard(task_id)
                return
            log.warning("task %s: the end of its turn %s could not be written to the store %r (%s); tried again "
                        "in %.0f s", task_id, turn, self.store.path, err, delay)
            asyncio.get_running_loop().call_later(
                delay, self._finish, task_id, handle, turn, state, event, min(delay * 2, _RETRY_MAX))
            return
        self._ending.discard(task_id)

    def _parent_note(self, row: dict) -> builtins.list[dict]:
        """The parent's conversation as it stands (its running turn written first), as one
        system message for the start of a child's turn."""
        parent = self._row(row["parent_id"])
        run = self._runs.get(parent["id"])
        if run is not None and not run[0].done():
            self._persist(parent["id"], *run)
        text = _render(self.messages(parent["id"]), "parent")
        if not text:
            return []
        note = (
            f"Context: the conversation of your parent task {parent['name']!r} ({parent['id']}), for reference "
            f"only. Its roles are prefixed parent_; your own conversation follows.\n{text}"
        )
        return [{"role": "system", "content": note}]

    def _persist(self, task_id: str, handle: LoopHandle, turn: int, state: dict) -> None:
        """Write the messages the task's loop added since the last write (before each model call), after the turn's
        row and the task's loop at the first write (all or nothing: a failed write is whole at the next)."""
        if not handle.messages[state["cursor"]:] and state.get("begin") is None:
            return
        with self.store.transaction() as db:
            written = self._write_messages(db, task_id, handle, turn, state)
        state["n"], state["cursor"], state["begin"] = *written, None

    @staticmethod
    def _write_messages(db: Any, task_id: str, handle: LoopHandle, turn: int, state: dict) -> tuple[int, int]:
        """:meth:`_persist`'s statements, in the caller's transaction: the messages' count and the cursor after
        them, for ``state`` once the transaction commits."""
        wire = handle.messages
        begin, now, n = state.get("begin"), time.time(), state["n"]
        if begin is not None:
            if begin["new turn"]:
                db.execute("INSERT INTO task_turns (task_id, turn, started) VALUES (?, ?, ?)",
                           (task_id, turn, begin["started"]))
            db.execute("UPDATE tasks SET loop_uid = ?, updated = ? WHERE id = ?", (begin["uid"], now, task_id))
        for m in wire[state["cursor"]:]:
            db.execute("INSERT INTO task_messages (task_id, n, turn, message, ts) VALUES (?, ?, ?, ?, ?)",
                       (task_id, n, turn, json.dumps(m), now))
            n += 1
        return n, len(wire)

    def _end_turn(self, task_id: str, handle: LoopHandle, turn: int, event: ev.Event, state: dict) -> None:
        """The turn's last messages and its end, in one transaction: a kernel dying between the two would leave
        the answer in its messages but not the task's result, the turn never ended."""
        status = "idle" if event.kind == "loop_finished" and getattr(event, "status", "") == "finished" else (
            "stopped" if event.kind == "loop_finished" else "failed")
        answer = handle.state.answer if status == "idle" else None
        summary = (answer or getattr(event, "reason", None) or getattr(event, "error", None) or "")[:200]
        # messages posted into this turn that its model never saw (the turn ended first) are queued again
        pending = list(handle.run.conversation.pending)
        undelivered = []
        for row in self._posted.get(task_id, []):
            if row["content"] in pending:
                pending.remove(row["content"])
                undelivered.append(row)
        now = time.time()
        with self.store.transaction() as db:
            written = self._write_messages(db, task_id, handle, turn, state)
            db.execute("UPDATE task_turns SET ended = ?, summary = ? WHERE task_id = ? AND turn = ?",
                       (now, summary, task_id, turn))
            db.execute("UPDATE tasks SET status = ?, result = COALESCE(?, result), updated = ? WHERE id = ?",
                       (status, answer, now, task_id))
            for row in undelivered:
                db.execute("INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, ?, ?, ?, ?)",
                           (task_id, row["type"], row["content"], row["sender"], row["ts"]))
        state["n"], state["cursor"], state["begin"] = *written, None
        self._carried[task_id] = {(r["content"], r["ts"]) for r in undelivered}
        self._posted.pop(task_id, None)
        self._live.pop(task_id, None)
        self._runs.pop(task_id, None)
        row = self._row(task_id)
        if row["parent_id"]:
            turns = len(self.store.query("SELECT 1 FROM task_turns WHERE task_id = ?", (task_id,)))
            if status == "idle":
                notice = (
                    f"[child task {row['name']!r} ({task_id}) completed its turn {turn} ({turns} turn(s) so far). "
                    f"Continue it with message_task('{task_id}', message) if needed.]\nIts final response:\n{answer}"
                )
            else:  # a parent waiting for it must not wait for ever
                what = "was stopped" if status == "stopped" else "failed"
                notice = (
                    f"[child task {row['name']!r} ({task_id}) {what} in turn {turn}: {summary or 'no reason given'}. "
                    f"Send it a message with message_task('{task_id}', message) to try again.]"
                )
            _soon(functools.partial(self.send, row["parent_id"], notice, type="completion", sender=task_id))
        if status != "stopped" and self.store.query("SELECT 1 FROM task_queue WHERE task_id = ? LIMIT 1", (task_id,)):
            _soon(self._activate, task_id)  # messages that arrived as the turn ended (a stopped task keeps them)
        if self.summaries == "model":
            try:
                self._summarise(task_id, turn, status)
            except Exception:  # the truncated summary stands; the turn has ended all the same
                log.exception("the summary of task %s turn %s could not start", task_id, turn)

    def _summarise(self, task_id: str, turn: int, status: str) -> None:
        """Have the model write the summary of this ended turn (in a loop of its own, nobody's
        child); the truncated summary stands until then, and if it fails."""
        messages = self.store.query(
            "SELECT n, message FROM task_messages WHERE task_id = ? AND turn = ? ORDER BY n", (task_id, turn))
        text = _render(decode_messages(task_id, self.store.path, messages), "task")
        if not text:
            return
        row = self._row(task_id)
        how = {"idle": "answered", "stopped": "was stopped", "failed": "failed"}[status]
        request = f"Task {row['name']!r}, turn {turn} ({how}). The turn's conversation:\n{text}"
        model = self.model or default_model("the TasksManager's turn summaries")
        handle = contextvars.Context().run(
            start_loop, request, model=model, tools=[], system=_SUMMARY_SYSTEM, max_steps=1,
            name=f"{self.alias}.summary", bus=self.bus,
        )
        self._summary_loops[task_id] = handle

        def on_event(source: LoopHandle, event: ev.Event) -> None:
            if source is handle and event.kind == "loop_finished" and getattr(event, "status", "") == "finished":
                summary = (handle.state.answer or "").strip()
                if summary:
                    try:  # never raised into the summary's loop (its handle would never end)
                        self.store.execute("UPDATE task_turns SET summary = ? WHERE task_id = ? AND turn = ?",
                                           (summary[:500], task_id, turn))
                    except (sqlite3.Error, UserError) as err:
                        log.warning("task %s: the summary of turn %s could not be written (%s)", task_id, turn, err)

        handle.run.add_listener(on_event)

    # ------------------------------------------------------------------ as a manager (loops)

    def _tools(self) -> builtins.list[Callable[..., Any]]:
        return manager_tools(self)

    def ask(self, question: str) -> LoopHandle:
        """Answer a question about the tasks: what exists, their status, what they found."""
        tools = self._tools()
        return self._loop("ask", question, tools=[t for t in tools if t.__name__ in ("list_tasks", "get_task")])

    def update(self, instruction: str) -> LoopHandle:
        """Create, rename, describe or reorder tasks as instructed (does not run them)."""
        return self._loop("update", instruction)

    async def run(self, task_id: str, message: str | None = None) -> str:
        """Run a task (with an optional new message) until its turn ends; return its answer (to the message: a
        message its running turn ended without seeing is answered by the next turn, which it starts)."""
        if message is not None and (not isinstance(message, str) or not message.strip()):
            raise UserError("a message to run the task with is text, not blank: leave it out to run it without")
        if message:
            self._row(task_id)
            key = (message, time.time())
            self.store.execute("INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, ?, ?, ?, ?)",
                               (task_id, "user", message, self.caller(), key[1]))
            live = self.handle(task_id)
            if live is not None:
                self._activate(task_id)
                answer = await live
                if key not in self._carried.get(task_id, ()):
                    return answer
                return await (self.handle(task_id) or self.execute(task_id))  # the next turn: it has the message
        return await self.execute(task_id)
