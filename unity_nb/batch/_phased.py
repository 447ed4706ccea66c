"""Operators made of several maps: a phased plan is a generator that yields each :class:`Phase` (a map over work
items) and is sent back the finished map, so the next phase is built from the last one's results; it returns the
operator's result. The :class:`PhasedEngine` drives the generator the way httpx's client drives an auth flow:
the plan says what to ask, the engine runs each phase as a child map of the operation (so pause, resume and stop
reach the running one) and hands an interjection to the running map and to every later one.

A plan is plain code over results: it awaits nothing, so top-k's and agg's algorithms read top to bottom. Each
step, from one yield to the next, runs in a worker thread (a step over millions of rows never blocks the event
loop); work a plan must do without the model that would hold the event loop for long (a join's index of words) it
yields as :class:`Work`, which the engine runs in a worker thread and stops when the operation stops::

    def flow(self):
        scored = yield Phase("score", items, question + SCORE, {"output": Score})
        ...
        return best
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from .. import events as ev
from .._errors import Stopped, UserError
from ..loop import Driver, LoopHandle
from ..models import Usage, default_model
from ._map import MapHandle, check_map_options, finished_rows
from ._map_engine import EveryRowFailed
from ._spend import carried, checked_budget

__all__ = ("Phase", "PhasedEngine", "PhasedHandle", "Work")


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a phased plan: a map of ``items`` with ``task`` (a template), and the map's ``options``
    (``output=``, ...). Its map is named ``OPERATION.name``."""

    name: str
    items: Any
    task: str
    options: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    """Its rows are a part of the operation's work (a round of comparisons, one group's notes): a map whose every
    row failed is sent back to the plan (its rows missing, each with its reason) instead of failing the operation
    and what the phases before it found."""


@dataclass(frozen=True, slots=True)
class Work:
    """A step of a phased plan done without the model: ``fn(stop)`` runs in a worker thread (so a long one, such as
    indexing millions of rows, never holds the event loop) and its result is sent back to the plan. ``stop`` (a
    :class:`threading.Event`) is set once the operation stops: a long ``fn`` checks it now and then."""

    name: str
    fn: Callable[[threading.Event], Any]


Flow = Generator[Phase | Work, Any, Any]
"""A phased plan: yields phases (and work), is sent each finished map (or the work's result), returns the
operator's result."""


class PhasedEngine(Driver):
    """Drives a phased plan (see the module's docstring): each phase a map under the operation, one after the
    other; one budget over them all; an interjection reaches the running map and every later one."""

    __slots__ = (
        "budget", "flow", "map_options", "model", "notes", "phase_name", "phases", "resume_from", "spent_before",
    )

    def __init__(self, flow: Callable[[], Flow], model: Any, map_options: dict[str, Any], *,
                 budget: float | None, resume_from: Any) -> None:
        self.flow = flow
        self.model = model
        self.map_options = map_options
        self.budget = budget
        self.resume_from = resume_from
        self.phases: list[MapHandle] = []
        self.phase_name = "starting"
        self.notes: list[str] = []
        self.spent_before = 0.0
        """Dollars the run this operation continues spent (``%unity resume`` after a dead kernel): its budget
        counts it."""

    def bind(self, run: Any, source: Any) -> PhasedEngine:
        Driver.__init__(self, run, source)
        return self

    async def drive(self) -> str:
        run = self._run
        flow = self.flow()
        try:
            ended, value = await asyncio.to_thread(_step, flow, None)  # a plan's step may be long: off the loop
            while not ended:
                m = await (self._work(value) if isinstance(value, Work) else self._phase(value))
                ended, value = await asyncio.to_thread(_step, flow, m)
        except Stopped:
            if run.state.stop_reason is not None:  # its phase was stopped by this operation's stop: a stop
                raise asyncio.CancelledError from None
            raise
        run.state.result_object = value
        return self.source.summary()  # type: ignore[attr-defined]

    async def _work(self, work: Work) -> Any:
        """Run one step of work in a worker thread; a stop of the operation tells it to stop (``stop`` set)."""
        await self._run.gate.wait()
        self.phase_name = work.name
        stop = threading.Event()
        try:
            return await asyncio.to_thread(work.fn, stop)
        finally:
            stop.set()

    async def _phase(self, phase: Phase) -> MapHandle:
        """Run one phase: a map under this operation, to its end (its rows' failures are its result's missing
        values; a map whose every row failed raises, unless the phase is ``partial``)."""
        run = self._run
        await run.gate.wait()
        self.phase_name = phase.name
        name = f"{run.name}.{phase.name}"
        done = None
        if self.resume_from is not None:
            try:
                done = finished_rows(self.resume_from, name)
            except UserError:  # the earlier run never reached this phase
                done = None
        options = {**self.map_options, **phase.options}
        if self.budget is not None:  # one cap over every phase, not one per phase
            options["budget"] = max(0.0, self.budget - self.spent(len(self.phases)))
        handle = run.handle
        m = MapHandle(phase.items, phase.task, model=self.model, parent=handle, name=name, done=done or None,
                      label=f"[{handle.kind} {phase.name}] {handle.task}", **options)
        self.phases.append(m)
        for note in self.notes:
            await m.interject(note)
        try:
            await m.result()
        except EveryRowFailed:
            if not phase.partial:
                raise
        return m

    def spent(self, phases: int) -> float:
        """Dollars the run this one continues and the first ``phases`` phases spent."""
        return self.spent_before + sum(p.cost or 0.0 for p in self.phases[:phases])

    async def steered(self, verb: str, message: str | None) -> None:
        if verb != "interject" or not message:
            return
        self.notes.append(message)
        m = self.phases[-1] if self.phases else None
        if m is not None and not m.done():
            await m.interject(message)

    def inspection(self, handle: Any) -> str:
        m = self.phases[-1] if self.phases else None
        inner = m.run.inspection(m) if m is not None else "(no phase has started)"
        done = ", ".join(f"{p.name} ({p.progress['outcome']})" for p in self.phases) or "none"
        calls = sum(p.steps for p in self.phases)
        return (f"You are inspecting the {handle.kind} operation {handle.name!r} ({handle.task!r}), status "
                f"{handle.status.value}, now in its phase {self.phase_name!r}; phases so far: {done}; "
                f"{calls} model calls. The running phase:\n\n{inner}")


def _step(flow: Flow, sent: Any) -> tuple[bool, Any]:
    """One step of a plan: ``(False, the next Phase)`` or ``(True, its result)`` (a StopIteration cannot cross a
    thread's future)."""
    try:
        return False, flow.send(sent)
    except StopIteration as end:
        return True, end.value


class PhasedHandle(LoopHandle):
    """An operation whose work is several maps, one after the other, each a child of it (so pause, resume and
    stop reach the running one). An interjection reaches the map running and every later one. ``progress``
    is the running map's, with ``phase`` naming it; ``calls`` counts model calls over every phase. A subclass
    gives its plan: :meth:`flow`."""

    kind = "operator"

    def __init__(self, title: str, *, model: Any = None, name: str | None = None, bus: ev.EventBus | None = None,
                 resume_from: Any = None, **map_options: Any) -> None:
        model = model if model is not None else default_model(self.kind)
        for bad in ("output", "columns", "done", "parent"):
            if bad in map_options:
                hint = " (resume_from=store keeps the rows its earlier run finished)" if bad == "done" else ""
                raise UserError(f"{self.kind} takes no {bad}=: it sets its own{hint}")
        label = map_options.pop("label", None) or title  # the magics label it with its line, to resume
        budget = checked_budget(map_options.pop("budget", None), model)
        check_map_options(model, map_options)  # a mistake said now, not once a phase starts (a join's after indexing)
        self._phased = PhasedEngine(self.flow, model, map_options, budget=budget, resume_from=resume_from)
        super().__init__(label, model=model, name=name, bus=bus, max_steps=1, engine=self._phased.bind)
        self.run.inspection = self._phased.inspection  # what a question about the operation is answered from

    def flow(self) -> Flow:  # pragma: no cover - each operator says what it does
        raise NotImplementedError(f"{type(self).__name__} does not define flow")

    def summary(self) -> str:
        """What its run's answer says once it ends."""
        return f"{self.calls} model calls in {len(self.phases)} phase(s)"

    @property
    def phases(self) -> list[MapHandle]:
        """Its maps so far, in order."""
        return self._phased.phases

    @property
    def phase(self) -> MapHandle | None:
        """The map running (or the last one)."""
        phases = self._phased.phases
        return phases[-1] if phases else None

    @property
    def calls(self) -> int:
        """Model calls over every phase so far (an answer that did not validate is sent back once: two calls)."""
        return sum(m.steps for m in self._phased.phases)

    @property
    def questions(self) -> int:
        """Questions asked over every phase so far: the rows of its maps."""
        return sum(m.rows.total or 0 for m in self._phased.phases)

    @property
    def kept(self) -> int:
        """Rows kept from an earlier run (``resume_from=``), over every phase so far."""
        return sum(m.rows.kept for m in self._phased.phases)

    @property
    def ended_badly(self) -> list:
        """Rows of every phase that failed or stopped, in order (what the widget lists)."""
        return [r for m in self._phased.phases for r in m.rows.ended_badly]

    @property
    def budget(self) -> float | None:
        """The cap on dollars for the whole operation (``None``: none)."""
        return self._phased.budget

    def set_budget(self, dollars: float | None) -> None:
        """Change the cap on dollars for the whole operation (``None`` lifts it): the running phase gets what the
        phases before it left. A phase paused at its budget stays paused until :meth:`resume`."""
        engine = self._phased
        engine.budget = dollars = checked_budget(dollars, self.model)
        m = self.phase
        if m is not None and not m.done():
            spent = engine.spent(len(engine.phases) - 1)
            m.set_budget(None if dollars is None else max(0.0, dollars - spent))

    def carry_spent(self, dollars: float, *, origin: str | None = None) -> None:
        """Count ``dollars`` the run this one continues spent against its budget (before its first phase)."""
        self._phased.spent_before = carried(self.run, dollars, origin)

    @property
    def spent(self) -> float:
        """Dollars the budget counts: the run this one continues, and every phase so far."""
        return self._phased.spent(len(self._phased.phases))

    @property
    def usage(self) -> Usage:
        """Tokens of every phase's rows."""
        out = Usage()
        for m in self._phased.phases:
            out += m.usage
        return out

    @property
    def steps(self) -> int:
        """Model calls over every phase (``calls``)."""
        return self.calls

    @property
    def progress(self) -> dict[str, Any]:
        """The running phase's progress (the widget's bar), with ``phase`` and ``calls`` so far."""
        m = self.phase
        if m is not None:
            p = dict(m.progress)
        else:
            p = {"total": 0, "done": 0, "kept": 0, "cached": 0, "running": 0, "queued": 0, "failed": 0, "stopped": 0,
                 "not_started": 0, "ended": 0, "percent": None, "rows_per_second": 0.0, "eta_seconds": None,
                 "input_tokens": 0, "output_tokens": 0, "tokens_estimated": False, "rows_text": "", "text": ""}
        name = self._phased.phase_name
        p.update(phase=name, calls=self.calls, outcome=self.status.value,
                 text=f"phase {name}: {p['text']}" if p["text"] else f"phase {name}")
        return p

    def __repr__(self) -> str:
        status = self.status.value
        failed = sum(m.rows.counts["failed"] for m in self._phased.phases)  # a phase's failed rows are not hidden
        rows = f", {failed} row(s) of its phases failed" if failed else ""
        return f"<unity {self.kind} {self.name!r}: {status}, phase {self._phased.phase_name}, {self.calls} calls{rows}>"

