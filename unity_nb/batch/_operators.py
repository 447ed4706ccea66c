"""Semantic operators over DataFrames, built on the map: filter and extract are maps with an answer tool and a
reduction; top-k and aggregate are compositions of maps (:class:`PhasedHandle`), join a map over blocked pairs.

Every operator is one steerable handle: pause, resume and stop reach the batch running (and each row); an
interjection reaches every running row and every row not started yet, in this phase and the later ones; ``ask``
answers about the operation so far. ``await`` gives a DataFrame (or a Series) keyed by the input's index, with
what did not come out missing and ``.attrs["reasons"]`` saying why.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic

from .. import events as ev
from .._errors import Stopped, UserError
from ..loop import Driver, LoopHandle
from ..models import Usage, default_model
from ._map import MapHandle, finished_rows
from ._rows import Template
from ._spend import carried, checked_budget

__all__ = ("ExtractHandle", "FilterHandle", "PhasedHandle", "extract", "filter_rows", "Verdict")


class Verdict(pydantic.BaseModel):
    """keep: true if the row meets the condition, false if it does not, null if its text does not let you
    decide; reason: one sentence saying why."""

    keep: bool | None
    reason: str


_DECIDE = (
    "\n\nDecide for this row with submit_answer: keep true if it does, false if it does not, null if the text does "
    "not let you decide; and a one-sentence reason."
)


def as_pandas(items: Any, what: str) -> Any:
    """A DataFrame or Series as it is; a list as a Series (its positions the index)."""
    import pandas as pd

    if isinstance(items, pd.DataFrame | pd.Series):
        return items
    if isinstance(items, str | bytes | dict) or not hasattr(items, "__iter__"):
        raise UserError(f"{what} takes a Series, a DataFrame or a list of items, not {type(items).__name__}")
    return pd.Series(list(items), dtype=object)


class FilterHandle(MapHandle):
    """A filter: each row asked ``condition`` once, answering a :class:`Verdict`. ``await`` gives the rows kept
    (the input's rows, its index); ``verdicts`` every row's ``keep`` (true, false or missing) and ``reason``.
    A row the model could not decide (``keep`` null, or its row failed) is neither kept nor dropped silently:
    it is missing from the result and ``.attrs["reasons"]`` says why ("undecided: ..." or "failed: ...")."""

    kind = "filter"

    def __init__(self, items: Any, condition: str, **options: Any) -> None:
        if not isinstance(condition, str) or not condition.strip():
            raise UserError("filter needs a condition: a question each row answers yes or no, e.g. "
                            "'Does {abstract} report an experiment on humans?'")
        if "output" in options or "columns" in options:
            raise UserError("filter answers with its own fields (keep, reason): it takes no output= or columns=")
        self.items = as_pandas(items, "filter")
        options.setdefault("label", f"[map:filter] {condition}")
        options.setdefault("max_steps", 3)
        super().__init__(self.items, condition + _DECIDE, output=Verdict, **options)
        self.template = condition

    @property
    def verdicts(self) -> Any:
        """Every row's ``keep`` (a nullable boolean: missing when undecided or failed) and ``reason`` (the
        model's, or why the row failed), aligned to the input's index."""
        frame = MapHandle.results(self)
        failed = frame.attrs.get("reasons", {})
        frame["keep"] = frame["keep"].astype("boolean")
        for key, why in failed.items():
            frame.loc[key, "reason"] = why or "no answer"
        frame.attrs = {"failed": dict(failed)}
        return frame

    def results(self) -> Any:
        """The rows kept so far; ``.attrs["reasons"]`` maps each row not decided to why."""
        import pandas as pd

        frame = self.verdicts
        failed = frame.attrs["failed"]
        keep = frame["keep"].fillna(False).to_numpy(dtype=bool)
        kept = self.items[keep].copy()
        reasons = {}
        for key, verdict, why in zip(frame.index, frame["keep"], frame["reason"]):
            if key in failed:
                reasons[key] = f"failed: {why}"
            elif verdict is None or verdict is pd.NA:
                reasons[key] = f"undecided: {why}"
        kept.attrs = {"reasons": reasons}
        return kept


class ExtractHandle(MapHandle):
    """Extraction: each row answers ``columns`` (the map's ``columns=``, types included where the map takes
    them); ``await`` gives a DataFrame of those columns aligned to the input's index."""

    kind = "extract"


_EXTRACT = "\n\nGive the fields with submit_answer; a text field the text does not give is an empty string."


def filter_rows(items: Any, condition: str, **options: Any) -> FilterHandle:
    """Keep the rows of ``items`` (a DataFrame, a Series or a list) that meet ``condition``, a template filled per
    row like the map's (``"Does {abstract} report an experiment on humans?"``), as one steerable batch.

    Each row answers once with a verdict (``keep``: true, false or null for "cannot tell", and a ``reason``).
    ``await h`` gives the input's rows kept, in order, with their index; ``h.verdicts`` every row's verdict
    and reason. A row undecided or failed is missing from the result with ``.attrs["reasons"]`` saying why:
    never silently kept or dropped. Options are the map's (``model``, ``concurrency``, ``rate``, ``name``,
    ``done``, ...)."""
    return FilterHandle(items, condition, **options)


def extract(items: Any, task: str, *, columns: Any, **options: Any) -> ExtractHandle:
    """Extract ``columns`` (``"method,sample_size,venue"`` or a list; a type per column where the map takes one)
    from every row of ``items`` as one steerable batch: ``await h`` gives a DataFrame of those columns aligned to
    the input's index, rows that failed missing with ``.attrs["reasons"]``. ``task`` is a template
    (``"From {abstract}"``). Options are the map's."""
    if isinstance(columns, str):
        columns = [c.strip() for c in columns.split(",") if c.strip()]
    if not isinstance(task, str) or not task.strip():
        raise UserError("extract needs a task: a template saying what to read, e.g. 'From {abstract}'")
    options.setdefault("label", f"[map:extract] {task}")
    return ExtractHandle(as_pandas(items, "extract"), task + _EXTRACT, columns=columns, **options)


# -- operators made of several maps ----------------------------------------------------------------


class PhasedEngine(Driver):
    """Drives an operator made of several maps: its phases run one after the other (``run_phases``)."""

    async def drive(self) -> str:
        h = self.source
        assert isinstance(h, PhasedHandle)
        try:
            value = await h.run_phases()
        except Stopped:
            if h.state.stop_reason is not None:  # its phase was stopped by this operation's stop: a stop
                raise asyncio.CancelledError from None
            raise
        h.state.result_object = value
        return h.summary()


class PhasedHandle(LoopHandle):
    """An operation whose work is several maps, one after the other, each a child of it (so pause, resume and
    stop reach the running one). An interjection reaches the map running and every later one. ``progress``
    is the running map's, with ``phase`` naming it; ``calls`` counts model calls over every phase."""

    kind = "operator"

    def __init__(self, title: str, *, model: Any = None, name: str | None = None, bus: ev.EventBus | None = None,
                 resume_from: Any = None, **map_options: Any) -> None:
        model = model if model is not None else default_model(self.kind)
        for bad in ("output", "columns", "done", "parent"):
            if bad in map_options:
                hint = " (resume_from=store keeps the rows its earlier run finished)" if bad == "done" else ""
                raise UserError(f"{self.kind} takes no {bad}=: it sets its own{hint}")
        label = map_options.pop("label", None) or title  # the magics label it with its line, to resume
        self.resume_from = resume_from
        """A store: each phase keeps the rows the newest earlier run of its map (``NAME.phase``) finished, where
        they are asked the same."""
        self.budget: float | None = checked_budget(map_options.pop("budget", None), model)
        """Dollars for the whole operation: each phase's map gets what the phases before it left."""
        self.map_options = map_options
        self.phases: list[MapHandle] = []
        self.phase_name = "starting"
        self._notes: list[str] = []
        self._own_usage = Usage()
        self._own_steps = 0
        super().__init__(label, model=model, name=name, bus=bus, max_steps=1, engine=PhasedEngine)
        self.run.inspection = PhasedHandle.inspection  # what a question about the operation is answered from

    async def run_phases(self) -> Any:  # pragma: no cover - each operator says what it does
        raise NotImplementedError(f"{type(self).__name__} does not define run_phases")

    def summary(self) -> str:
        return f"{self.calls} model calls in {len(self.phases)} phase(s)"

    async def run_map(self, phase: str, items: Any, task: str, **options: Any) -> MapHandle:
        """Run one phase: a map of ``items`` under this operation, to its end (its rows' failures are its
        result's missing values; a map whose every row failed raises)."""
        await self.run.gate.wait()
        self.phase_name = phase
        name = f"{self.name}.{phase}"
        done = None
        if self.resume_from is not None:
            try:
                done = finished_rows(self.resume_from, name)
            except UserError:  # the earlier run never reached this phase
                done = None
        if self.budget is not None:  # one cap over every phase (and the run it continues), not one per phase
            options["budget"] = max(0.0, self.budget - self.spent_before - sum(p.cost or 0.0 for p in self.phases))
        m = MapHandle(items, task, model=self.model, parent=self, name=name, done=done or None,
                      label=f"[map:{self.kind} {phase}] {self.task}", **{**self.map_options, **options})
        self.phases.append(m)
        for note in self._notes:
            await m.interject(note)
        await m.result()
        return m

    @property
    def phase(self) -> MapHandle | None:
        """The map running (or the last one)."""
        return self.phases[-1] if self.phases else None

    @property
    def calls(self) -> int:
        """Model calls over every phase so far (an answer that did not validate is sent back once: two calls)."""
        return sum(m.steps for m in self.phases)

    def set_budget(self, dollars: float | None) -> None:
        """Change the cap on dollars for the whole operation (``None`` lifts it): the running phase gets what the
        phases before it left. A phase paused at its budget stays paused until :meth:`resume`."""
        self.budget = dollars = checked_budget(dollars, self.model)
        m = self.phase
        if m is not None and not m.done():
            spent = self.spent_before + sum(p.cost or 0.0 for p in self.phases[:-1])
            m.set_budget(None if dollars is None else max(0.0, dollars - spent))

    spent_before = 0.0
    """Dollars the run this operation continues spent (``%unity resume`` after a dead kernel): its budget counts it."""

    def carry_spent(self, dollars: float, *, origin: str | None = None) -> None:
        """Count ``dollars`` the run this one continues spent against its budget (before its first phase)."""
        self.spent_before = carried(self, dollars, origin)

    @property
    def kept(self) -> int:
        """Rows kept from an earlier run (``resume_from=``), over every phase so far."""
        return sum(m.kept for m in self.phases)

    @property
    def questions(self) -> int:
        """Questions asked over every phase so far: the rows of its maps."""
        return sum(m.progress["total"] or 0 for m in self.phases)

    @property
    def usage(self) -> Usage:
        """Tokens of every phase's rows."""
        out = Usage(self._own_usage.input_tokens, self._own_usage.output_tokens, self._own_usage.estimated)
        for m in self.phases:
            out += m.usage
        return out

    @usage.setter
    def usage(self, value: Usage) -> None:
        self._own_usage = value

    @property
    def steps(self) -> int:
        """Model calls over every phase (``calls``)."""
        return self._own_steps + self.calls

    @steps.setter
    def steps(self, value: int) -> None:
        self._own_steps = value

    @property
    def progress(self) -> dict[str, Any]:
        """The running phase's progress (the widget's bar), with ``phase`` and ``calls`` so far."""
        m = self.phase
        if m is not None:
            p = dict(m.progress)
        else:
            p = {"total": 0, "done": 0, "kept": 0, "running": 0, "failed": 0, "stopped": 0, "waiting": 0,
                 "rows_per_second": 0.0, "eta_seconds": None, "input_tokens": 0, "output_tokens": 0,
                 "tokens_estimated": False}
        p.update(phase=self.phase_name, calls=self.calls, outcome=self.status.value)
        return p

    @property
    def ended_badly(self) -> list:
        """Rows of every phase that failed or stopped, in order (what the widget lists)."""
        return [r for m in self.phases for r in m.ended_badly]

    async def interject(self, message: str, *, request_id: str | None = None) -> None:
        """Deliver ``message`` to every row running and every row of this and later phases not started yet."""
        self.run.require_live("interject")
        if not isinstance(message, str) or not message.strip():
            raise UserError("interject needs a non-empty message")
        self.run.steer("interject", message)
        self._notes.append(message)
        m = self.phase
        if m is not None and not m.done():
            await m.interject(message)

    def inspection(self) -> str:
        m = self.phase
        inner = m.inspection() if m is not None else "(no phase has started)"
        done = ", ".join(f"{p.name} ({p.outcome})" for p in self.phases) or "none"
        return (f"You are inspecting the {self.kind} operation {self.name!r} ({self.task!r}), status "
                f"{self.status.value}, now in its phase {self.phase_name!r}; phases so far: {done}; "
                f"{self.calls} model calls. The running phase:\n\n{inner}")

    def __repr__(self) -> str:
        return f"<unity {self.kind} {self.name!r}: {self.status.value}, phase {self.phase_name}, {self.calls} calls>"


def field_free(template: str) -> str:
    """``template`` with each ``{field}`` written as ``<field>`` and braces escaped: a text another template
    can hold (the question a comparison or a summary repeats)."""
    out = []
    for literal, field, _spec, _conv in Template(template).parts:
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            out.append(f"<{field}>")
    return "".join(out)


def row_texts(items: Any, template: str) -> list[tuple[Any, str]]:
    """Each row's key and the text the model reads of it: the values the template names (``name: value``), else
    every column's (a Series' or a list's value as it is)."""
    import pandas as pd

    fields = Template(template).fields
    if isinstance(items, pd.Series):
        return [(k, str(v)) for k, v in items.items()]
    columns = [str(c) for c in items.columns]
    named = [c for c in columns if c in fields] or columns
    out = []
    for key, values in zip(items.index, items.itertuples(index=False, name=None)):
        row = dict(zip(columns, values))
        out.append((key, "\n".join(f"{c}: {row[c]}" for c in named)))
    return out
