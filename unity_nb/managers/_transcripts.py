"""The transcripts manager: past loops' transcripts and events, from the store."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle, current_loop
from ._base import Manager
from ._util import clip, fail, render_transcript, when

__all__ = ("TranscriptsManager",)

_SKIP_KINDS = ("model_request",)
"""Events whose text repeats what other events hold (the newest user message)."""


def _snippet(data: str, text: str, width: int = 160) -> str:
    """The part of a recorded event that contains ``text`` (in the event's readable fields)."""
    try:
        fields = json.loads(data)
    except ValueError:
        fields = {"data": data}
    needle = text.lower()
    for key, value in fields.items():
        if key in ("kind", "loop_id", "lineage", "ts", "seq"):
            continue
        value = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        at = value.lower().find(needle)
        if at >= 0:
            start, end = max(0, at - width), min(len(value), at + len(text) + width)
            return f"{key}: " + ("..." if start else "") + value[start:end] + ("..." if end < len(value) else "")
    return clip(data, 2 * width)


class TranscriptsManager(Manager):
    """The history of past operations: every recorded loop (its task, status, result and
    place in the tree) with its transcript and events, kept in the unity_nb store across
    kernel restarts; searched and asked about in words.
    """

    alias = "transcripts"
    caller_description = "searching the transcripts of past operations"
    exposed = ("search", "ask")

    def __init__(self, *, store: Any, model: Any = None, bus: ev.EventBus | None = None, registry: Any = None) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        if store is None:
            raise UserError("TranscriptsManager needs store=unity_nb.Store(path), attached to the bus the loops use")
        self.store = store

    def _excluded(self) -> set[str]:
        """The store keys of the loop asking and its ancestors: their text would match itself."""
        out: set[str] = set()
        loop = current_loop()
        while loop is not None:
            out.add(self.store.uid(loop.id))
            loop = loop.parent
        return out

    def _tools(self) -> list[Callable[..., Any]]:
        store = self.store
        manager = self

        def list_loops(name_contains: str = "", status: str = "", limit: int = 30) -> list[dict] | str:
            """Past loops, newest first: key, name (like "Actor.act" or "knowledge.ask"), task,
            status (finished, stopped, failed, running, interrupted), start time, steps, parent
            key and the start of the result. Filter by part of the name and by status."""
            excluded = manager._excluded()
            rows = [r for r in store.loops() if r["uid"] not in excluded]
            if name_contains:
                rows = [r for r in rows if name_contains.lower() in (r["name"] or "").lower()]
            if status:
                rows = [r for r in rows if r["status"] == status]
            if not rows:
                return "no recorded loops match"
            rows = rows[::-1][: max(1, min(limit, 200))]
            return [{
                "key": r["uid"], "name": r["name"], "task": clip(r["task"], 200), "status": r["status"],
                "started": when(r["started"]), "steps": r["steps"], "parent": r["parent_uid"],
                "result": clip(r["result"], 200) if r["result"] else None,
                "error": clip(r["error"], 200) if r["error"] else None,
            } for r in rows]

        def get_transcript(loop: str, max_chars: int = 8000) -> str:
            """The transcript of one loop (its key from list_loops or search_text, or its name for
            the newest of that name): the task, each model turn and tool call with its result,
            steering, and the answer; long ones are shortened in the middle."""
            try:
                row = store.find(loop)
            except UserError:
                raise fail(f"no recorded loop {loop!r}; use list_loops for the keys") from None
            head = f"loop {row['name']} ({row['uid']}), {row['status']}, started {when(row['started'])}\n"
            return head + render_transcript(store.transcript(row["uid"]), max_chars=max(1000, min(max_chars, 30000)))

        def search_text(text: str, limit: int = 20) -> list[dict] | str:
            """Recorded events (tasks, model replies, tool calls and results, interjections,
            answers) containing ``text`` (case-insensitive), newest first, each with its loop's
            key and name and the passage around the match."""
            if not isinstance(text, str) or not text.strip():
                raise fail("give some text to search for")
            needle = json.dumps(text.strip(), ensure_ascii=False)[1:-1]  # as it appears inside the JSON
            pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            excluded = sorted(manager._excluded())
            n = max(1, min(limit, 100))
            rows = store.query(
                "SELECT e.seq, e.loop_uid, e.kind, e.ts, e.data, l.name AS name FROM events e "
                "LEFT JOIN loops l ON l.uid = e.loop_uid "
                f"WHERE e.data LIKE ? ESCAPE '\\' AND e.kind NOT IN ({', '.join('?' for _ in _SKIP_KINDS)}) "
                f"AND e.loop_uid NOT IN ({', '.join('?' for _ in excluded)}) ORDER BY e.seq DESC LIMIT ?",
                (pattern, *_SKIP_KINDS, *excluded, n),
            )
            hits = [{
                "loop": r["loop_uid"], "name": r["name"], "kind": r["kind"], "when": when(r["ts"]),
                "match": _snippet(r["data"], text.strip()),
            } for r in rows]
            return hits or f"no recorded event contains {text!r}"

        return [list_loops, get_transcript, search_text]

    def search(self, request: str) -> LoopHandle:
        """Find the past operations (loops) that match a description ("when did we plot the
        sales regions?", "the runs that failed today"); answer with each one's key, name,
        when it ran, its status and a line on what it did or found.
        """
        return self._loop("search", request)

    def ask(self, question: str) -> LoopHandle:
        """Answer a question from past transcripts (what was found, decided or said, why a run
        failed): locate the relevant loops, read their transcripts, and answer citing the loop
        keys it comes from.
        """
        return self._loop("ask", question)
