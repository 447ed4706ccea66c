"""One steerable operation over every row of a DataFrame, a Series or any iterable.

``h = u.map(papers.abstract, "Label the method used: one of survey, experiment, theory.", model=m)``
returns at once. Each row is a loop of its own (a child of the batch), at most ``concurrency`` at a
time. Pause, resume and stop act on the whole batch; an interjection reaches every running row and
every row not started yet; ``ask`` answers about the batch so far. ``await h`` gives a pandas Series
(a DataFrame with ``output=``/``columns=``) aligned to the input's index, with rows that did not
finish missing and ``.attrs["reasons"]`` saying why. A stopped batch's ``await`` raises :class:`Stopped` like any
stopped loop; ``h.results()`` gives its rows finished so far. An error that will fail every row (HTTP 401, 403,
404, or a 400 before any row succeeded) ends the batch at once: ``await`` raises that one error.

Finished rows keep only their answer: their loops are dropped (the store, when one records the bus,
keeps their transcripts), so a batch of thousands of rows holds about what its running rows hold.
Each ended row is a ``row_finished`` event, committed by the store at once, with what it was asked (a hash
of its task, the model's name and the answer's fields). ``done=`` (:func:`finished_rows` over a store)
continues one earlier run: a row it finished is kept only at the same position, under the same label,
asked the same; kept rows are written again as this run's events, so the newest run holds all of them.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from .. import events as ev
from .._collector import hold_loops, release_loops
from .._errors import ModelError, Stopped, UnityError, UserError
from .._secrets import scrub
from ..loop import VERBS, Engine, LoopHandle, LoopOptions, Status
from ..models import Usage, default_model, set_rate_limit
from ._rows import Row, answer_tool, asked_hash, assemble, make_rows, parse_answer, row_id, row_key, to_json

__all__ = ("MapHandle", "finished_rows", "map_rows")

_KEEP_FAILED = 50
"""Failed rows whose loops stay in memory (to be opened); later ones keep only their reason."""
_WINDOW = 30.0
"""Seconds of ended rows the rate is taken over (from the first row's start until that long has passed)."""
_ROW_SPECIFIC = re.compile(
    r"context|too long|too large|token|maximum|length|content.?(filter|policy|management)|safety|flagged", re.I
)
"""What a 400 says when it is about one row's content, not the request's shape."""


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

        h.first_start = time.monotonic()
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
                if h.fatal is not None:  # it would fail every row: the rows running stop, no other starts
                    raise h.fatal
        finally:
            for t in running:
                t.cancel()
            if running:
                await asyncio.wait(running)
        if h.stop_reason is not None:  # stopped while its last rows ended: a stop, not an answer
            raise asyncio.CancelledError
        c = h.counts
        if c["failed"] and not c["finished"] and not c["stopped"]:  # nothing came of it: not a success
            first = h.ended_badly[0].reason if h.ended_badly else None
            raise UnityError(f"every row of the batch failed ({c['failed']}); the first: {first}")
        h.set_result_object(h.results())  # an operator built on the map reduces its rows there
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
        parent: LoopHandle | None = None,
        **row_options: Any,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UserError(f"concurrency takes a whole number of at least 1, not {concurrency!r}")
        model = model if model is not None else default_model("map")
        self.model_name = str(getattr(model, "name", type(model).__name__))
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
        self._ended_at: collections.deque[list] = collections.deque()  # [whole second, rows ended in it]
        self._ended_rows = 0
        self.first_start: float | None = None
        """When the first row started (``time.monotonic()``): what the first window's rate is taken from."""
        self._last_end: float | None = None
        self._done_usage, self._done_steps, self._done_tool_calls = Usage(), 0, 0  # of the rows that ended
        self._failed_kept = 0
        self.fatal: BaseException | None = None
        """An error that would fail every row (a bad key, a missing model): the batch ends with it."""
        self.kept = 0
        """Rows finished by the run this one continues (``done=``), kept and not run again."""
        self.set_aside = 0
        """Rows that run finished which are not kept: asked something else now (data, task or model changed)."""
        if done is not None:
            self._keep(done)
        self._counts = collections.Counter(r.status for r in self.rows)  # kept as rows move on, not recounted
        self.ended_badly: list[Row] = []
        """Rows that failed or stopped, in the order they ended (what the widget lists)."""
        self._held = 0
        super().__init__(
            label or f"[map] {task}", model=model, name=name, bus=bus, max_steps=1, parent=parent,
        )
        for row in self.rows:  # this run's events hold every row it has: a later resume reads this run alone
            if row.kept:
                self._emit_row(row, None, kept=True)
        # its rows count as live loops from now to its end, also between waves (unity_nb._collector)
        self._held = min(concurrency, self._counts["waiting"])
        hold_loops(self._held)

    def _keep(self, done: Mapping[str, Any]) -> None:
        """Mark the rows ``done`` (from :func:`finished_rows`) has as finished, if asked the same now."""
        if not isinstance(done, Mapping):
            raise UserError(
                "done takes the rows an earlier run finished, as u.finished_rows(store, name) gives them "
                f"(a dict), not {type(done).__name__}"
            )
        for key in done:
            if not _is_row_id(key):
                raise UserError(
                    f"done takes the rows an earlier run finished, as u.finished_rows(store, name) gives them; "
                    f"{key!r} is not one of its keys ([position, label, what it was asked])"
                )
        for row in self.rows:
            rid = row_id(row.position, row_key(row.key), self.asked(row))
            if rid in done:
                try:
                    row.answer = parse_answer(done[rid], self.output)
                except ValueError:
                    continue
                row.status, row.kept = "finished", True
                self.kept += 1
        self.set_aside = len(done) - self.kept

    def asked(self, row: Row) -> str:
        """What ``row`` is asked (made once): the key a later run keeps its answer under."""
        if row.asked is None:
            row.asked = asked_hash(row.task, self.model_name, self.output)
        return row.asked

    def end(self, status: Status, *, answer: str | None = None, error: BaseException | None = None) -> None:
        held, self._held = self._held, 0
        release_loops(held)
        if status is not Status.FINISHED:  # rows never started say so (not None)
            why = ("not started: the batch was stopped" if status is Status.STOPPED
                   else f"not started: the batch failed ({_reason(error)})")
            for row in self.rows:
                if row.status == "waiting":
                    row.reason = why
        super().end(status, answer=answer, error=error)

    # -- one source for the batch's totals: the rows that ended, and those running ----------------

    @property
    def usage(self) -> Usage:
        """Tokens of every row of this run (ended and running)."""
        done = self._done_usage
        out = Usage(done.input_tokens, done.output_tokens, done.estimated)
        for c in self.live_children():
            out += c.usage
        return out

    @usage.setter
    def usage(self, value: Usage) -> None:
        self._done_usage = value

    @property
    def steps(self) -> int:
        """Model calls of every row of this run."""
        return self._done_steps + sum(c.steps for c in self.live_children())

    @steps.setter
    def steps(self, value: int) -> None:
        self._done_steps = value

    @property
    def tool_calls(self) -> int:
        """Tool calls of every row of this run."""
        return self._done_tool_calls + sum(c.tool_calls for c in self.live_children())

    @tool_calls.setter
    def tool_calls(self, value: int) -> None:
        self._done_tool_calls = value

    @property
    def counts(self) -> Mapping[str, int]:
        """Rows by status: ``waiting``, ``running``, ``finished``, ``failed``, ``stopped``."""
        return self._counts

    @property
    def outcome(self) -> str:
        """The status as a person reads it: a batch that finished with rows failed or stopped says so."""
        status = self.status.value
        if status == "finished" and (self._counts["failed"] or self._counts["stopped"]):
            return "finished with failures"
        return status

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
            if self.fatal is not None:
                row.reason = f"stopped: the batch failed ({_reason(self.fatal)})"
            else:
                row.reason = self.stop_reason or "the batch was stopped"
            row.status = "stopped"
            if not child.done():
                await child.stop(row.reason)
            raise
        except Exception as err:  # noqa: BLE001 - the row failed; the batch goes on (unless every row would)
            row.status, row.reason = "failed", _reason(err)
            if self.fatal is None and _fails_every_row(err, self._counts["finished"] > self.kept):
                self.fatal = err
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
        self._done_usage += child.usage
        self._done_steps += child.steps
        self._done_tool_calls += child.tool_calls
        now = self._last_end = time.monotonic()
        second = int(now)
        if self._ended_at and self._ended_at[-1][0] == second:
            self._ended_at[-1][1] += 1
        else:
            self._ended_at.append([second, 1])
        self._ended_rows += 1
        keep = row.status == "failed" and self._failed_kept < _KEEP_FAILED
        self._failed_kept += keep
        if not keep:  # its transcript lives in the store (if one records the bus), not in memory
            row.child = None
            if child in self.children:
                self.children.remove(child)
        self._emit_row(row, child)

    def _emit_row(self, row: Row, child: LoopHandle | None, *, kept: bool = False) -> None:
        answer = None
        if row.status == "finished":
            value = row.answer.model_dump(mode="json") if isinstance(row.answer, pydantic.BaseModel) else row.answer
            answer = to_json(value)
        self.emit(
            ev.RowFinished, row=row_key(row.key), position=row.position, status=row.status, answer=answer,
            reason=row.reason, child_id=child.id if child is not None else None, input_tokens=row.tokens[0],
            output_tokens=row.tokens[1], asked=self.asked(row), kept=kept,
        )

    def rate(self) -> float:
        """Rows ended a second: over the last ``_WINDOW`` seconds (from the first row's start until then),
        at least a second; once the batch has ended, over its whole run."""
        if self.first_start is None or not self._ended_rows:
            return 0.0
        if self.done():
            return self._ended_rows / max(1.0, (self._last_end or self.first_start) - self.first_start)
        now = time.monotonic()
        while self._ended_at and self._ended_at[0][0] < now - _WINDOW:
            self._ended_at.popleft()
        span = min(_WINDOW, now - self.first_start)
        return sum(n for _s, n in self._ended_at) / max(1.0, span)

    @property
    def progress(self) -> dict[str, Any]:
        """Done (``kept`` of them from the run this one continues), running, failed, stopped and waiting rows
        (``waiting`` once ended: never started); rows a second lately; seconds left while it runs; tokens so far."""
        counts = self._counts
        rate = self.rate()
        left = counts["waiting"] + counts["running"]
        moving = not self.done() and not self.gate.paused and self.stop_reason is None
        usage = self.usage
        return {
            "total": len(self.rows), "done": counts["finished"], "kept": self.kept, "running": counts["running"],
            "failed": counts["failed"], "stopped": counts["stopped"], "waiting": counts["waiting"],
            "rows_per_second": round(rate, 2),
            "eta_seconds": round(left / rate, 1) if rate and left and moving else None,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "tokens_estimated": usage.estimated, "outcome": self.outcome,
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
        c = self._counts
        rows = f"{c['finished']}/{len(self.rows)} rows done, {c['failed']} failed"
        return f"<unity batch {self.name!r}: {self.outcome}, {rows}>"


def _reason(err: BaseException | None) -> str:
    """Why a row failed (or the batch did), as its reason says it (no secret's value in it)."""
    return scrub(f"{type(err).__name__}: {err}")


def _status_of(err: BaseException) -> int | None:
    status = getattr(err, "status", None)
    if isinstance(status, int):
        return status
    found = re.search(r"\(HTTP (\d{3})\)", str(err))  # a ModelError made before it carried its status
    return int(found.group(1)) if found else None


def _fails_every_row(err: BaseException, any_succeeded: bool) -> bool:
    """A model error that every row would meet: a key refused (401, 403), no such model or path (404), or a
    400 before any row succeeded that is not about one row's content (the request's shape)."""
    if not isinstance(err, ModelError):
        return False
    status = _status_of(err)
    if status in (401, 403, 404):
        return True
    return status == 400 and not any_succeeded and not _ROW_SPECIFIC.search(str(err))


def _is_row_id(key: Any) -> bool:
    if not isinstance(key, str) or not key.startswith("["):
        return False
    try:
        value = json.loads(key)
    except ValueError:
        return False
    return (isinstance(value, list) and len(value) == 3 and isinstance(value[0], int)
            and isinstance(value[1], str) and isinstance(value[2], str))


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
    fields (a DataFrame results). ``done`` is what :func:`finished_rows` gives: the rows an earlier run
    finished, each kept if this run would ask it the same (same position, label, task, model and
    fields); ``h.kept`` counts them. Other options (``tools``, ``max_steps``, ``system``, ``tool_timeout``, ...)
    are each row's loop options.
    """
    return MapHandle(items, task, **options)


def finished_rows(store: Any, name: str) -> dict[str, Any]:
    """The rows the newest run of batch ``name`` (or the run of that uid) finished, from ``store``, for ``done=``:
    ``{'[position, label, what it was asked]': answer}``. One run only: a new ``u.map`` of the same name is a new
    run; a run that continued another (``done=``) holds the rows it kept too."""
    out: dict[str, Any] = {}
    for event in store.events(name, kind="row_finished"):
        if event.status == "finished" and event.answer is not None and event.asked is not None:
            out[row_id(event.position, event.row, event.asked)] = json.loads(event.answer)
    return out
