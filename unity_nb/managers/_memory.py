"""The memory manager: offline consolidation of recent operations into the other managers."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle
from ._base import Manager
from ._util import clip, fail, other, render_transcript, segment_name, when

__all__ = ("MemoryManager",)

log = logging.getLogger("unity_nb.managers.memory")

DEFAULT_REQUEST = (
    "Consolidate what the recent operations learned: durable facts into the knowledge tables, "
    "reusable procedures into guidance, and open follow-ups into tasks."
)


class MemoryManager(Manager):
    """Offline consolidation: every ``every`` finished top-level operations (default 20) it
    reads their transcripts and records what is worth keeping (facts, procedures, follow-up
    tasks) through the knowledge, guidance and tasks managers.

    ``attach(bus)`` makes it watch a bus; ``consolidate()`` runs one consolidation now. It
    reads transcripts through the store it is given (read only) or the transcripts manager,
    and writes only through the other managers' public methods; a manager that is not
    registered is simply not used.
    """

    alias = "memory"
    caller_description = "consolidating what recent operations learned into long-term memory"
    exposed = ("consolidate",)

    def __init__(
        self,
        *,
        every: int = 20,
        store: Any = None,
        model: Any = None,
        bus: ev.EventBus | None = None,
        registry: Any = None,
    ) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise UserError(f"every must be a positive number of loops, not {every!r}")
        self.every = every
        self.store = store
        self.consolidations: list[LoopHandle] = []
        """Every consolidation started, oldest first."""
        self._pending: list[dict] = []
        self._tasks: dict[str, str] = {}
        self._since: float | None = None
        self._running: LoopHandle | None = None
        self._unsubscribe: list[Callable[[], None]] = []

    # -- watching a bus --------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Top-level loops finished since the last consolidation."""
        return len(self._pending)

    def attach(self, bus: ev.EventBus) -> Callable[[], None]:
        """Count the top-level loops that end on ``bus``; every ``every`` of them start a
        consolidation (on this manager's bus, which defaults to ``bus``). Returns a function
        that stops watching."""
        if self.bus is None:
            self.bus = bus
        unsubscribe = bus.subscribe(self._on_event, kinds=("loop_started", "loop_finished", "loop_failed"))
        self._unsubscribe.append(unsubscribe)
        return unsubscribe

    def detach(self) -> None:
        """Stop watching every bus."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()

    def _on_event(self, event: ev.Event) -> None:
        if len(event.lineage) != 1 or segment_name(event.lineage[0]).startswith(f"{self.alias}."):
            return  # a sub-operation, or a consolidation itself
        if isinstance(event, ev.LoopStarted):
            if len(self._tasks) < 1000:
                self._tasks[event.loop_id] = event.task
            return
        entry = {"loop_id": event.loop_id, "name": segment_name(event.lineage[0]),
                 "task": self._tasks.pop(event.loop_id, None), "ended": event.ts}
        if isinstance(event, ev.LoopFinished):
            entry.update(status=event.status, result=event.result)
        else:
            entry.update(status="failed", result=getattr(event, "error", None))
        self._pending.append(entry)
        self._maybe_start()

    def _maybe_start(self) -> None:
        if len(self._pending) < self.every or (self._running is not None and not self._running.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # published outside an event loop: the next loop's end will start it
            return
        # a fresh context: the consolidation is nobody's child and nobody's tool call
        loop.call_soon(self._start_scheduled, context=contextvars.Context())

    def _start_scheduled(self) -> None:
        if len(self._pending) < self.every or (self._running is not None and not self._running.done()):
            return
        why = f"{len(self._pending)} top-level operations finished since the last consolidation"
        try:
            self._consolidate(None,
                              caller=f"the MemoryManager's own schedule ({why}); no person is waiting on this run")
        except Exception:  # a schedule has nobody to raise to
            log.exception("memory consolidation could not start")

    # -- the loop's tools ------------------------------------------------------------------------------

    def _tools_for(self, since: float | None, pending: list[dict]) -> list[Callable[..., Any]]:
        manager = self
        tools: list[Callable[..., Any]] = []
        store = self.store
        pending_ids = {p["loop_id"] for p in pending}

        if store is not None:
            def recent_loops(limit: int = 20) -> list[dict] | str:
                """The top-level operations that ended since the last consolidation, newest first:
                key, name, task, status and the start of the result."""
                rows = [r for r in store.loops()
                        if r["parent_uid"] is None and not (r["name"] or "").startswith(f"{manager.alias}.")
                        and r["ended"] is not None
                        and (since is None or r["ended"] >= since or r["loop_id"] in pending_ids)]
                rows = rows[::-1][: max(1, min(limit, 100))]
                return [{"key": r["uid"], "name": r["name"], "task": clip(r["task"], 300), "status": r["status"],
                         "ended": when(r["ended"]),
                         "result": clip(r["result"] or r["error"], 300)}
                        for r in rows] or "no operations ended since the last consolidation"

            def read_transcript(loop: str) -> str:
                """The transcript of one operation (its key from recent_loops): task, tool calls
                and results, answer."""
                try:
                    row = store.find(loop)
                except UserError:
                    raise fail(f"no recorded operation {loop!r}; use recent_loops for the keys") from None
                return render_transcript(store.transcript(row["uid"]), max_chars=8000)

            tools += [recent_loops, read_transcript]

        transcripts = other(self, "transcripts")
        if transcripts is not None:
            async def ask_transcripts(question: str) -> Any:
                """Ask the transcripts manager about past operations (what they found or decided)."""
                return transcripts.ask(question)

            tools.append(ask_transcripts)

        knowledge = other(self, "knowledge")
        if knowledge is not None:
            async def ask_knowledge(question: str) -> Any:
                """Ask the knowledge manager what is already recorded (to avoid duplicates)."""
                return knowledge.ask(question)

            async def update_knowledge(instruction: str) -> Any:
                """Have the knowledge manager record or correct facts: say which facts, with their
                values, and which table they belong in if you know it."""
                return knowledge.update(instruction)

            tools += [ask_knowledge, update_knowledge]

        guidance = other(self, "guidance")
        if guidance is not None:
            async def update_guidance(instruction: str) -> Any:
                """Have the guidance manager add or edit a procedure: its title, its steps and the
                functions it uses."""
                return guidance.update(instruction)

            tools.append(update_guidance)

        tasks = other(self, "tasks")
        if tasks is not None:
            async def create_task(name: str, description: str) -> Any:
                """Create a follow-up task (not started) for the person: a short name and what it
                is to do."""
                create = getattr(tasks, "create", None)
                value = create(name, description) if create is not None else tasks.update(
                    f"Create a task named {name!r}: {description}")
                if asyncio.iscoroutine(value):
                    value = await value
                if isinstance(value, LoopHandle):
                    return value
                task_id = getattr(value, "id", None)
                return f"created task {task_id} ({name!r})" if task_id else f"created task {name!r}: {value}"

            tools.append(create_task)
        return tools

    # -- public: a loop ------------------------------------------------------------------------------------

    def consolidate(self, request: str | None = None) -> LoopHandle:
        """Consolidate the operations finished since the last consolidation: read what they did
        and found, and record what will matter later (durable facts with their values, reusable
        procedures, open follow-ups) through the other managers, checking first what is already
        known so nothing is recorded twice; then list what was recorded where. Chit-chat,
        one-off details and failed attempts are not worth keeping.

        ``request`` may narrow or redirect it ("only record the sales figures").
        """
        return self._consolidate(request)

    def _consolidate(self, request: str | None, caller: str | None = None) -> LoopHandle:
        request = request or DEFAULT_REQUEST
        pending, self._pending = self._pending, []
        since, self._since = self._since, time.time()
        lines = []
        if pending:
            lines.append("The operations finished since the last consolidation (oldest first):")
            for p in pending[-50:]:
                lines.append(f"- {p['name']} ({p['loop_id']}), {p['status']}: task {clip(p['task'], 200)!r}; "
                             f"result {clip(p['result'], 300)!r}")
        available = [a for a in ("transcripts", "knowledge", "guidance", "tasks") if other(self, a) is not None]
        lines.append("Managers available to you: "
                     + (", ".join(available) if available else "none (you can only report)"))
        handle = self._loop(
            "consolidate", request, tools=self._tools_for(since, pending), context="\n".join(lines), caller=caller,
        )
        self._running = handle
        self.consolidations.append(handle)

        def on_event(source: LoopHandle, event: ev.Event) -> None:
            if source is handle and event.kind in ("loop_finished", "loop_failed"):
                if self._running is handle:
                    self._running = None
                self._maybe_start()

        handle.run.add_listener(on_event)
        return handle
