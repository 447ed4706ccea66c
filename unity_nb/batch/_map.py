"""One steerable operation over every row of a DataFrame, a Series or any iterable.

``h = u.map(papers.abstract, "Label the method used: one of survey, experiment, theory.", model=m)``
returns at once. Each row is a loop of its own (a child of the batch), at most ``concurrency`` at a
time. Pause, resume and stop act on the whole batch; an interjection reaches every running row and
every row not started yet; ``ask`` answers about the batch so far. ``await h`` gives a pandas Series
(a DataFrame with ``output=``/``columns=``) aligned to the input's index, with rows that did not
finish missing and ``.attrs["reasons"]`` saying why.

Finished rows keep only their answer: their loops are dropped (the store, when one records the bus,
keeps their transcripts), so a batch of thousands of rows holds about what its running rows hold.
Each ended row is a ``row_finished`` event, committed by the store at once; ``done=`` (or
:func:`finished_rows` over a store) skips the rows an earlier run of the batch finished.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from .. import events as ev
from .._collector import hold_loops, release_loops
from .._errors import Stopped, UserError
from ..loop import VERBS, Engine, LoopHandle, LoopOptions, Status
from ..models import default_model, set_rate_limit
from ._rows import Row, answer_tool, assemble, make_rows, parse_answer, row_key, to_json

__all__ = ("MapHandle", "finished_rows", "map_rows")

_KEEP_FAILED = 50
"""Failed rows whose loops stay in memory (to be opened); later ones keep only their reason."""


class MapEngine(Engine):
    """Drives a batch: rows start while fewer than ``concurrency`` run and the batch is not paused."""

    async def drive(self) -> str:
        h = self.owner
        assert isinstance(h, MapHandle)
        todo = collections.deque(r for r in h.rows if r.status == "waiting")
        running: set[asyncio.Task] = set()
        # each row's task says when it ends (asyncio.wait(FIRST_COMPLETED) would add and remove a callback
        # on every running row at each wake-up: concurrency x wake-ups)
        ended: list[asyncio.Task] = []
        wake = asyncio.Event()

        def row_ended(task: asyncio.Task) -> None:
            running.discard(task)
            ended.append(task)
            wake.set()

        try:
            while (todo and h.stop_reason is None) or running or ended:
                await h.gate.wait()
                while todo and len(running) < h.concurrency and not h.gate.paused and h.stop_reason is None:
                    task = h.event_loop.create_task(h.run_row(todo.popleft()))
                    running.add(task)
                    task.add_done_callback(row_ended)
                if not ended and running:
                    wake.clear()
                    await wake.wait()
                while ended:
                    ended.pop(0).result()  # a row's own failure is recorded on the row; this raises only the batch's
        finally:
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running)
        if h.stop_reason is not None:  # stopped while its last rows ended: a stop, not an answer
            raise asyncio.CancelledError
        h.set_result_object(assemble(h.rows, h.index, h.output, h.result_name))
        p = h.progress
        return f"{p['done']} of {p['total']} rows done, {p['failed']} failed"


class MapHandle(LoopHandle):
    """The handle of a batch: one steerable operation whose children are its running rows."""

    engine_type = MapEngine
    kind = "map"

    def __init__(
        self,
        items: Any,
        task: str,
        *,
        model: Any = None,
        concurrency: int = 8,
        rate: Any = None,
        output: type[pydantic.BaseModel] | None = None,
        columns: Iterable[str] | None = None,
        name: str | None = None,
        bus: ev.EventBus | None = None,
        done: Mapping[str, Any] | None = None,
        label: str | None = None,
        **row_options: Any,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UserError(f"concurrency takes a whole number of at least 1, not {concurrency!r}")
        model = model if model is not None else default_model("map")
        self.output = _output_model(output, columns)
        self.rows, self.index = make_rows(items, task)
        self.template = task
        self.concurrency = concurrency
        self.result_name = getattr(items, "name", None) if self.output is None else None
        tools = list(row_options.pop("tools", ()) or ())
        if self.output is not None:
            tools.append(answer_tool(self.output))
        self.row_options = {"tools": tools, **row_options}
        self.row_config = LoopOptions.make(model=model, **self.row_options)  # checked once, for every row
        if rate is not None:
            set_rate_limit(model, rate)
        self.started_rows = 0
        self._row_notes: list[str] = []
        self._finished_at: collections.deque[float] = collections.deque(maxlen=200)
        self._tokens = [0, 0]
        self._failed_kept = 0
        if done:  # finished by an earlier run of this batch: each row's key made once, looked up once
            for row in self.rows:
                key = row_key(row.key)
                if key in done:
                    row.status, row.answer = "finished", parse_answer(done[key], self.output)
        self._counts = collections.Counter(r.status for r in self.rows)  # kept as rows move on, not recounted
        self.ended_badly: list[Row] = []
        """Rows that failed or stopped, in the order they ended (what the widget lists)."""
        self._held = 0
        super().__init__(
            label or f"[map] {task}", model=model, name=name, bus=bus, max_steps=1,
        )
        # its rows count as live loops from now to its end, also between waves (unity_nb._collector)
        self._held = min(concurrency, self._counts["waiting"])
        hold_loops(self._held)

    def end(self, status: Status, *, answer: str | None = None, error: BaseException | None = None) -> None:
        held, self._held = self._held, 0
        release_loops(held)
        super().end(status, answer=answer, error=error)

    # -- rows ------------------------------------------------------------------------------

    async def run_row(self, row: Row) -> None:
        """Run one row's loop to its end and record how it ended (never raises for the row's own failure)."""
        row.status = "running"
        self._counts["waiting"] -= 1
        self._counts["running"] += 1
        self.started_rows += 1
        config = self.row_config
        if "name" not in self.row_options:
            config = config.named(f"{self.name}[{_label(row.key)}]")
        child = LoopHandle(row.task, parent=self, config=config)
        row.child = child
        for note in self._row_notes:  # interjections made before the row started
            child.note(note)
        try:
            value = await child.result()
            row.answer, row.status = parse_answer(value, self.output), "finished"
        except Stopped as err:
            row.status, row.reason = "stopped", err.reason
        except asyncio.CancelledError:
            row.status, row.reason = "stopped", self.stop_reason or "the batch was stopped"
            if not child.done():
                await child.stop(row.reason)
            raise
        except Exception as err:  # noqa: BLE001 - the row failed; the batch goes on
            row.status, row.reason = "failed", f"{type(err).__name__}: {err}"
        finally:
            self._ended_row(row, child)

    def _ended_row(self, row: Row, child: LoopHandle) -> None:
        if row.status == "running":  # ended some other way (a BaseException): as the event says, stopped
            row.status = "stopped"
        self._counts["running"] -= 1
        self._counts[row.status] += 1
        if row.status != "finished":
            self.ended_badly.append(row)
        row.tokens = (child.usage.input_tokens, child.usage.output_tokens)
        self._tokens[0] += row.tokens[0]
        self._tokens[1] += row.tokens[1]
        self._finished_at.append(time.monotonic())
        keep = row.status == "failed" and self._failed_kept < _KEEP_FAILED
        self._failed_kept += keep
        if not keep:  # its transcript lives in the store (if one records the bus), not in memory
            row.child = None
            if child in self.children:
                self.children.remove(child)
        answer = None
        if row.status == "finished":
            value = row.answer.model_dump(mode="json") if isinstance(row.answer, pydantic.BaseModel) else row.answer
            answer = to_json(value)
        self.emit(
            ev.RowFinished, row=row_key(row.key), position=row.position, status=row.status, answer=answer,
            reason=row.reason, child_id=child.id, input_tokens=row.tokens[0], output_tokens=row.tokens[1],
        )

    @property
    def progress(self) -> dict[str, Any]:
        """Done, running, failed and waiting rows; rows per second lately; seconds left; tokens so far."""
        counts = self._counts
        done = counts["finished"]
        recent = self._finished_at
        rate = (len(recent) - 1) / (recent[-1] - recent[0]) if len(recent) > 1 and recent[-1] > recent[0] else 0.0
        left = counts["waiting"] + counts["running"]
        live_in = sum(c.usage.input_tokens for c in self.live_children())
        live_out = sum(c.usage.output_tokens for c in self.live_children())
        return {
            "total": len(self.rows), "done": done, "running": counts["running"], "failed": counts["failed"],
            "stopped": counts["stopped"], "waiting": counts["waiting"], "rows_per_second": round(rate, 2),
            "eta_seconds": round(left / rate, 1) if rate and left else None,
            "input_tokens": self._tokens[0] + live_in, "output_tokens": self._tokens[1] + live_out,
        }

    def results(self) -> Any:
        """The result so far (what ``await`` gives once the batch ends): rows not finished are missing."""
        return assemble(self.rows, self.index, self.output, self.result_name)

    @property
    def failures(self) -> Any:
        """Rows that failed or stopped: a DataFrame of ``key``, ``status`` and ``reason``."""
        import pandas as pd

        rows = [r for r in self.rows if r.status in ("failed", "stopped")]
        return pd.DataFrame(
            {"key": [r.key for r in rows], "status": [r.status for r in rows], "reason": [r.reason for r in rows]}
        )

    def row_handle(self, key: Any) -> LoopHandle | None:
        """The loop of row ``key`` while it runs (or if it failed among the first ones); else ``None``."""
        return next((r.child for r in self.rows if r.key == key), None)

    # -- steering --------------------------------------------------------------------------

    async def interject(self, message: str, *, request_id: str | None = None) -> None:
        """Deliver ``message`` to every running row, and to every row not started yet (at its start)."""
        self.require_live("interject")
        if not isinstance(message, str) or not message.strip():
            raise UserError("interject needs a non-empty message")
        self.steer("interject", message)
        self._row_notes.append(VERBS["interject"].note(message, None) or message)
        await asyncio.gather(
            *(c.interject(message) for c in self.live_children()), return_exceptions=True
        )

    def inspection(self) -> str:
        p = self.progress
        finished = [r for r in self.rows if r.status == "finished"][-20:]
        failed = [r for r in self.rows if r.status in ("failed", "stopped")][:20]
        lines = [f"- {_label(r.key)}: {str(r.answer)[:300]}" for r in finished]
        bad = [f"- {_label(r.key)}: {r.status}: {r.reason}" for r in failed]
        return (
            f"You are inspecting a batch (the operation {self.name!r}, status {self.status.value}): the task "
            f"{self.template!r} run for each of {p['total']} rows. So far: {p['done']} done, {p['running']} "
            f"running, {p['failed']} failed, {p['waiting']} waiting. Answer the user's question about it "
            "concisely and truthfully; you cannot change it.\n\nLatest answers:\n" + ("\n".join(lines) or "(none)")
            + "\n\nRows that failed or stopped:\n" + ("\n".join(bad) or "(none)")
        )

    def __repr__(self) -> str:
        p = self.progress
        rows = f"{p['done']}/{p['total']} rows done, {p['failed']} failed"
        return f"<unity batch {self.name!r}: {self.status.value}, {rows}>"


def _label(key: Any) -> str:
    text = str(key)
    return text if len(text) <= 40 else text[:37] + "..."


def _output_model(output: Any, columns: Iterable[str] | None) -> type[pydantic.BaseModel] | None:
    if output is not None and columns is not None:
        raise UserError("give output= (a pydantic model) or columns=, not both")
    if output is not None:
        if not (isinstance(output, type) and issubclass(output, pydantic.BaseModel)):
            raise UserError(f"output takes a pydantic model class, not {output!r}")
        return output
    if columns is None:
        return None
    names = [columns] if isinstance(columns, str) else list(columns)
    if not names or any(not isinstance(n, str) or not n.isidentifier() for n in names):
        raise UserError(f"columns takes names of the answer's fields (identifiers), not {columns!r}")
    fields: dict[str, Any] = {n: (str, ...) for n in names}
    return pydantic.create_model("Answer", **fields)


def map_rows(items: Any, task: str, **options: Any) -> MapHandle:
    """Run ``task`` for every row of ``items`` (a Series, a DataFrame or any iterable) as one steerable
    operation, and return its handle at once.

    ``task`` is a template: ``{column}`` is filled from each row (a Series' values are ``{value}``, and
    ``{<its name>}``); without fields, each row's values are appended. ``concurrency`` rows run at a
    time; ``rate`` (``"600/min"``, ``"10/s"``, a number a minute or a :class:`RateLimit`) is shared by
    every loop calling the model. ``output`` (a pydantic model) or ``columns`` make each row answer in
    fields (a DataFrame results). ``done`` maps row keys (JSON) to answers finished earlier (see
    :func:`finished_rows`). Other options (``tools``, ``max_steps``, ``system``, ``tool_timeout``, ...)
    are each row's loop options.
    """
    return MapHandle(items, task, **options)


def finished_rows(store: Any, name: str) -> dict[str, Any]:
    """The rows an earlier run of batch ``name`` finished, from ``store``: ``{row key: answer}`` (for ``done=``)."""
    out: dict[str, Any] = {}
    for event in store.events(name, kind="row_finished"):
        if event.status == "finished" and event.answer is not None:
            out[event.row] = json.loads(event.answer)
    return out
