"""What the store reads back that is not SQL: a loop's transcript rebuilt from its events, and whether a
session's process still runs."""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Iterable

from . import events as ev

__all__ = ("alive_sessions", "pid_alive", "process_ticks", "rebuild_transcript")


def rebuild_transcript(events: Iterable[ev.Event]) -> list:
    """A loop's transcript rebuilt from its recorded events, oldest first (``Store.transcript``)."""
    from .loop import Message, ToolCallRecord, steering_entry

    events = list(events)
    dropped = _dropped_calls(events)
    out: list[Message] = []
    calls: dict[str, ToolCallRecord] = {}
    multi = False  # a multi-request loop's answers are its requests' (its own result only lists them)
    for e in events:
        if isinstance(e, ev.RequestSubmitted):
            multi = True
        if isinstance(e, ev.LoopStarted):
            out.append(Message("user", e.task, kind="task", ts=e.ts))
        elif isinstance(e, ev.ModelResponse) and not e.interrupted:
            recs = [ToolCallRecord(c["id"], c["name"], c["arguments"]) for c in e.tool_calls if c["id"] not in dropped]
            calls.update({r.id: r for r in recs})
            content = e.content
            if len(recs) < len(e.tool_calls) and not content:  # calls where no tools were offered: as the loop says
                content = f"[called {', '.join(c['name'] for c in e.tool_calls if c['id'] in dropped)}]"
            out.append(Message("assistant", content, kind="text", tool_calls=recs, ts=e.ts))
        elif isinstance(e, ev.ModelResponse):  # cut off by a stop or an interjection: what had streamed
            if e.content:
                out.append(Message("assistant", e.content, kind="interrupted", ts=e.ts))
        elif isinstance(e, ev.ToolFinished):
            if e.call_id in calls:
                calls[e.call_id].result, calls[e.call_id].error = e.result, e.error
            out.append(Message("tool", e.result, kind="tool_result", tool_call_id=e.call_id, name=e.name,
                               error=e.error, ts=e.ts))
        elif isinstance(e, ev.ToolOutput) and e.call_id in calls:
            calls[e.call_id].output += e.text
        elif isinstance(e, ev.Steering):
            text, kind = steering_entry(e.action, e.message, e.request_id, e.by)
            out.append(Message("user", text, kind=kind, ts=e.ts))
        elif isinstance(e, ev.ClarificationRequested):
            out.append(Message("assistant", e.question, kind="clarification", tool_call_id=e.call_id, ts=e.ts))
        elif isinstance(e, ev.ClarificationAnswered):
            out.append(Message("user", e.answer, kind="clarification", tool_call_id=e.call_id, ts=e.ts))
        elif isinstance(e, ev.EvaluationRun) and e.note:  # the model sent back to correct its answer
            out.append(Message("user", e.note, kind="evaluation", ts=e.ts))
        elif isinstance(e, ev.Notification):
            out.append(Message("tool", e.text, kind="notification", tool_call_id=e.call_id, ts=e.ts))
        elif isinstance(e, ev.LoopFinished) and e.status == "finished":
            last = next((m for m in reversed(out) if m.role == "assistant" and not m.tool_calls), None)
            if last is not None and (multi or e.result is None or last.content == e.result):
                last.kind = "answer"
            elif e.result is not None and not multi:  # a value a plan or tool ended it with, a post-processed answer
                out.append(Message("assistant", e.result, kind="answer", ts=e.ts))
        elif isinstance(e, ev.LoopFailed):
            out.append(Message("assistant", f"[failed] {e.error}", kind="error", error=True, ts=e.ts))
    return out


def _dropped_calls(events: list[ev.Event]) -> set[str]:
    """The ids of tool calls that never ran (called at a step where no tools were offered): no tool event names
    them before the loop's next reply or its end (a call still to start in a running loop is not one)."""
    waiting: set[str] = set()
    dropped: set[str] = set()
    for e in events:
        if isinstance(e, ev.ToolStarted | ev.ToolFinished):
            waiting.discard(e.call_id)
        elif isinstance(e, ev.ModelResponse | ev.LoopFinished | ev.LoopFailed):
            dropped |= waiting
            waiting = {c["id"] for c in e.tool_calls} if isinstance(e, ev.ModelResponse) else set()
    return dropped


def pid_alive(pid: int | None) -> bool:
    """Whether the process ``pid`` runs (on this host). A pid changed by hand into no process's (text, 0 or less: a
    process group, -1 every process) is none."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True


def alive_sessions(rows: list[dict], own: str, path: str) -> set[str]:
    """The sessions (rows of ``sessions``, with the ``ticks`` their store recorded) whose process still runs on this
    host; ``own`` is this store's. Pids are reused (a container restarted starts its processes at the same small
    ids): a dead kernel's loops would otherwise show running, and resume refuse them, forever.

    A session that recorded its process's start (``ticks``: clock ticks from boot to it, which no wall clock moves)
    is alive while a process with its pid started then runs: another one with that pid, even a kernel with the
    store's file open, is not it. For one recorded before (or where the start cannot be read), a process that
    started after its session did, and has not the store's file ``path`` open, is not it (its file open, it is
    taken for the kernel: a wall clock stepped forward, after a paused virtual machine, makes a process seem to
    have started later than it did)."""
    host, alive = socket.gethostname(), {own}
    began: dict[int, float | None] = {}  # each process's start (inf: gone), read once: a kernel opens many stores
    holds: dict[int, bool] = {}
    for r in rows:
        pid, started, ticks = r["pid"], r["started"], r.get("ticks")
        if r["host"] != host:
            continue
        if pid not in began:
            began[pid] = _began(pid) if pid_alive(pid) else math.inf
        at = began[pid]
        if at == math.inf:
            continue
        if isinstance(ticks, int) and not isinstance(ticks, bool):
            now = process_ticks(pid)
            if now is not None:
                if now == ticks:
                    alive.add(r["id"])
                continue
        if at is None or not started or at <= started + _SLACK:
            alive.add(r["id"])
        elif holds.setdefault(pid, _holds(pid, path)):
            alive.add(r["id"])
    return alive


def _holds(pid: int, path: str) -> bool:
    """Whether the process ``pid`` has the file ``path`` open (True where that cannot be read: never taken for dead
    on a guess)."""
    try:
        wanted = os.path.realpath(path)
        fds = os.listdir(f"/proc/{int(pid)}/fd")
    except OSError:
        return True
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{int(pid)}/fd/{fd}") == wanted:
                return True
    return False


_SLACK = 5.0
"""Seconds a process may seem to have started after its session did (the boot time is read in whole seconds)."""


def process_ticks(pid: int) -> int | None:
    """When the process ``pid`` started, in clock ticks since boot (``/proc``'s field 22, fixed for its life: no wall
    clock moves it); ``None`` where it cannot be read (not Linux, gone meanwhile)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the name, which may hold spaces and parentheses
        return int(fields[19])
    except (OSError, ValueError, IndexError, OverflowError):
        return None


def _began(pid: int) -> float | None:
    """When the process ``pid`` started (a time), ``None`` where it cannot be read (not Linux, gone meanwhile)."""
    ticks = process_ticks(pid)
    if ticks is None:
        return None
    try:
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
