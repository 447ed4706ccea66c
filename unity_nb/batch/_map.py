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

Rows are made as they start (:class:`RowSource`): a 10,000,000-row generator starts at once, and a batch holds its
running rows plus, per finished row, its answer. Spending: ``h.cost`` (dollars so far), ``progress``'s projection
for the whole batch, ``budget=`` (no new row starts once spending reaches it), ``cache=`` (a store whose
``map_cache`` table answers a row asked before without a call; see :mod:`._cache`).
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
from ..loop import VERBS, LoopHandle, LoopOptions, Status
from ..models import Usage, default_model, price_of, set_rate_limit
from ._cache import ResultCache, cacheable, model_identity, options_fingerprint
from ._estimate import Estimate, estimate_map
from ._failures import fails_every_row, is_row_id, label_of, reason_of
from ._map_engine import MapEngine
from ._rows import (
    Row,
    RowSource,
    answer_tool,
    asked_hash,
    assemble,
    check_text_answer,
    finished_rows,
    output_model,
    parse_answer,
    row_id,
    row_key,
    to_json,
)
from ._spend import Spending, as_dollars

__all__ = ("Estimate", "MapHandle", "estimate_map", "finished_rows", "map_rows")

_KEEP_FAILED = 50
"""Failed rows whose loops stay in memory (to be opened); later ones keep only their reason."""
_KEEP_ROW_EVENTS = 2000
"""Rows' events a batch keeps in ``h.events`` (the first ones) and, past those, for ``wait_for`` (the last ones)."""
_ROW_EVENTS = frozenset({"row_finished", "child_started"})
_LOOKAHEAD = 256
"""Rows made ahead so the cache is asked about them in one query."""
_WINDOW = 30.0
"""Seconds of ended rows the rate is taken over (from the first row's start until that long has passed)."""


class MapHandle(Spending, LoopHandle):
    """The handle of a batch: one steerable operation whose children are its running rows."""

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
        columns: Iterable[str] | str | None = None,
        name: str | None = None,
        bus: ev.EventBus | None = None,
        done: Mapping[str, Any] | None = None,
        label: str | None = None,
        budget: float | None = None,
        cache: Any = True,
        expected_output_tokens: int | None = None,
        parent: LoopHandle | None = None,
        **row_options: Any,
    ) -> None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UserError(f"concurrency takes a whole number of at least 1, not {concurrency!r}")
        model = model if model is not None else default_model("map")
        self.model_name = str(getattr(model, "name", type(model).__name__))
        self.output = output_model(output, columns)
        self.source = RowSource(items, task)
        self.template = task
        self.concurrency = concurrency
        self.result_name = getattr(items, "name", None) if self.output is None else None
        tools = list(row_options.pop("tools", ()) or ())
        if self.output is not None:
            tools.append(answer_tool(self.output))
        self.row_options = {"tools": tools, **row_options}
        self._fingerprint = options_fingerprint(self.row_options, self.output)
        if self.output is not None:  # an answer in text that does not validate is sent back once
            self.row_options["evaluations"] = [*row_options.get("evaluations", ()), check_text_answer(self.output)]
        self.row_config = LoopOptions.make(model=model, **self.row_options)  # checked once, for every row
        if rate is not None:
            set_rate_limit(model, rate)
        self.budget: float | None = None
        """The cap on dollars spent (``budget=``, :meth:`set_budget`); ``None`` for none."""
        self.budget_reached = False
        """True once spending reached the budget: no row starts until the cap is lifted."""
        self.budget_note: str | None = None
        """Said before the batch starts when its estimate exceeds the budget (and where it will stop)."""
        if budget is not None:
            if price_of(model) is None:
                raise UserError(
                    f"budget= needs the price of {self.model_name!r}, which is unknown: set it first with "
                    f"u.set_price({self.model_name!r}, input=..., output=...) (dollars per million tokens)"
                )
            self.budget = as_dollars(budget)
        self.exhausted = False
        """True once every row of the input was made (started, kept or settled)."""
        self.started_rows = 0
        self.cached = 0
        """Rows answered from the result cache (no call)."""
        self._looked_up: dict[int, str | None] = {}  # the cache's answers for the rows just ahead, by position
        self.cache: ResultCache | None = None
        """The result cache in use: ``None`` with ``cache=False``, without a store, or for a model whose answers
        are not a function of its name (a ScriptedModel)."""
        identity = model_identity(model)
        if cache not in (True, False, None) and not callable(getattr(cache, "query", None)):
            raise UserError(f"cache takes True, False or a store (u.Store), not {cache!r}")
        if identity is not None and cache not in (True, False, None):
            self.cache = ResultCache(cache, identity, self._fingerprint)
        self._row_notes: list[str] = []
        self._ended_at: collections.deque[list] = collections.deque()  # [whole second, rows ended in it]
        self._ended_rows = 0
        self.first_start: float | None = None
        """When the first row started (``time.monotonic()``): what the first window's rate is taken from."""
        self._last_end: float | None = None
        self._done_usage, self._done_steps, self._done_tool_calls = Usage(), 0, 0  # of the rows that ended
        self._done_tree = Usage()  # the rows' whole trees (a row's sub-loops too)
        self._done_cost = 0.0
        self._unpriced: dict[str, Usage] = {}  # tokens of unpriced models under rows that ended (_spend)
        self._failed_kept = 0
        self.fatal: BaseException | None = None
        """An error that would fail every row (a bad key, a missing model): the batch ends with it."""
        self._answers: dict[int, Any] = {}  # position -> answer: all a finished row keeps
        self._bad: dict[int, tuple[str, str | None]] = {}  # position -> (status, reason) of a row failed or stopped
        self._running: dict[int, Row] = {}
        self._recent: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=20)
        self._not_started: str | None = None
        self.kept = 0
        """Rows finished by the run this one continues (``done=``), kept and not run again."""
        self.set_aside = 0
        """Rows that run finished which are not kept: asked something else now (data, task or model changed)."""
        self._kept: dict[int, tuple[Any, Any, str | None]] = {}  # position -> (answer, key, asked)
        self._done_lazy: Mapping[str, Any] | None = None
        self._counts: collections.Counter[str] = collections.Counter()
        if done is not None:
            self._keep(done, items)
        self.ended_badly: list[Row] = []
        """The first rows that failed or stopped, in the order they ended (what the widget lists)."""
        self._held = 0
        super().__init__(
            label or f"[map] {task}", model=model, name=name, bus=bus, max_steps=1, parent=parent, engine=MapEngine,
        )
        # past its first rows' events (row_finished, child_started), h.events stops growing with the rows
        self.run.cap_events(_ROW_EVENTS, _KEEP_ROW_EVENTS)
        self.run.on_end.append(MapHandle._ending)
        self.run.inspection = MapHandle.inspection  # what a question about the batch is answered from
        for position, (answer, key, asked) in sorted(self._kept.items()):  # this run's events hold every row it has
            row = Row(position, key, {}, "")
            row.asked = asked
            self._emit_kept(row, answer)
        if self.budget is not None:
            self._project(expected_output_tokens)
        # its rows count as live loops from now to its end, also between waves (unity_nb._collector)
        total = self.source.total
        self._held = min(concurrency, total - self.kept) if total is not None else concurrency
        hold_loops(self._held)

    def _keep(self, done: Mapping[str, Any], items: Any) -> None:
        """Mark the rows ``done`` (from :func:`finished_rows`) has as finished, if asked the same now: at once for
        an input that can be read twice (so ``kept`` is known at the start), else as the rows come."""
        if not isinstance(done, Mapping):
            raise UserError(
                "done takes the rows an earlier run finished, as u.finished_rows(store, name) gives them "
                f"(a dict), not {type(done).__name__}"
            )
        for key in done:
            if not is_row_id(key):
                raise UserError(
                    f"done takes the rows an earlier run finished, as u.finished_rows(store, name) gives them; "
                    f"{key!r} is not one of its keys ([position, label, what it was asked])"
                )
        if not done:
            return
        if self.source.total is None:  # a generator: read once, as its rows come
            self._done_lazy = done
            return
        for row in RowSource(items, self.template):
            answer = self._kept_answer(row, done)
            if answer is not None:
                self._kept[row.position] = (answer, row.key, row.asked)
        self.kept = len(self._kept)
        self._counts["finished"] += self.kept
        self.set_aside = len(done) - self.kept

    def _kept_answer(self, row: Row, done: Mapping[str, Any]) -> Any:
        rid = row_id(row.position, row_key(row.key), self.asked(row))
        if rid not in done:
            return None
        try:
            return parse_answer(done[rid], self.output)
        except ValueError:
            return None

    def asked(self, row: Row) -> str:
        """What ``row`` is asked (made once): the key a later run keeps its answer under."""
        if row.asked is None:
            row.asked = asked_hash(row.task, self.model_name, self.output)
        return row.asked

    # -- rows as they come ----------------------------------------------------------------------

    def next_row(self) -> Row | None:
        """The next row of the input (made now), or ``None`` once there is none."""
        if self.exhausted:
            return None
        try:
            return next(self.source)
        except StopIteration:
            self.exhausted = True
            return None

    def settle(self, row: Row) -> bool:
        """End ``row`` without a call if it can be: kept from the run this one continues, answered by the cache,
        or its template could not be filled (it fails). True if it was."""
        pos = row.position
        if pos in self._kept:  # counted as finished from the start
            self._answers[pos] = answer = self._kept.pop(pos)[0]
            self._recent.append((row.key, answer))
            return True
        if self._done_lazy is not None:
            answer = self._kept_answer(row, self._done_lazy)
            if answer is not None:
                self._answers[pos] = answer
                self._recent.append((row.key, answer))
                self.kept += 1
                self._counts["finished"] += 1
                self._emit_kept(row, answer)
                return True
        if row.reason is not None:  # its values do not fit the template
            row.status = "failed"
            self._settled(row, None)
            return True
        if self.cache is not None:
            stored = self._cached_answer(row)
            if stored is not None:
                try:
                    row.answer = parse_answer(json.loads(stored), self.output)
                except ValueError:
                    return False
                row.status = "finished"
                self.cached += 1
                self._settled(row, None, cached=True)
                return True
        return False

    def _cached_answer(self, row: Row) -> str | None:
        """The cache's answer for ``row``: looked up with the next rows' in one query (they are made ahead:
        at most ``_LOOKAHEAD`` rows, held until they start)."""
        assert self.cache is not None
        if row.position not in self._looked_up:
            ahead = [row, *(r for r in self.source.peek(_LOOKAHEAD) if r.reason is None)]
            keys = {r.position: self.cache.key(r.task, self._row_notes) for r in ahead}
            found = self.cache.get_many(list(keys.values()))
            self._looked_up = {p: found.get(k) for p, k in keys.items()}
        return self._looked_up.pop(row.position, None)

    def _emit_kept(self, row: Row, answer: Any) -> None:
        row.status, row.answer, row.kept = "finished", answer, True
        self._emit_row(row, None, kept=True)

    # -- its rows' events: on the bus and in the store; in ``h.events`` only the first ones -------------

    # -- one source for the batch's totals: the rows that ended, and those running ----------------

    @property
    def usage(self) -> Usage:
        """Tokens of every row of this run (ended and running)."""
        done = self._done_usage
        out = Usage(done.input_tokens, done.output_tokens, done.estimated)
        for c in self.run.live_children():
            out += c.usage
        return out

    @usage.setter
    def usage(self, value: Usage) -> None:
        self._done_usage = value

    @property
    def steps(self) -> int:
        """Model calls of every row of this run."""
        return self._done_steps + sum(c.steps for c in self.run.live_children())

    @steps.setter
    def steps(self, value: int) -> None:
        self._done_steps = value

    @property
    def tool_calls(self) -> int:
        """Tool calls of every row of this run."""
        return self._done_tool_calls + sum(c.tool_calls for c in self.run.live_children())

    @tool_calls.setter
    def tool_calls(self, value: int) -> None:
        self._done_tool_calls = value

    @property
    def total(self) -> int | None:
        """Rows in the input: known from the start for a DataFrame, a Series or a list; for a generator once it
        is used up (``None`` until then)."""
        total = self.source.total
        return total if total is not None else (self.source.made if self.exhausted else None)

    @property
    def counts(self) -> Mapping[str, Any]:
        """Rows by status: ``waiting`` (``None`` while a generator's length is unknown), ``running``,
        ``finished``, ``failed``, ``stopped``."""
        c = self._counts
        total = self.total
        ended = c["finished"] + c["failed"] + c["stopped"]
        waiting = total - ended - c["running"] if total is not None else None
        return {"waiting": waiting, "running": c["running"], "finished": c["finished"], "failed": c["failed"],
                "stopped": c["stopped"]}

    @property
    def outcome(self) -> str:
        """The status as a person reads it: a batch that finished with rows failed or stopped says so."""
        status = self.status.value
        if status == "finished" and (self._counts["failed"] or self._counts["stopped"]):
            return "finished with failures"
        return status

    async def resume(self) -> None:
        """Resume the batch; refused while its spending is at its budget (lift the cap first)."""
        if self.budget_reached and self.budget is not None and not self.done():
            raise UserError(f"cannot resume {self.name!r}: it {self.budget_message()}")
        await super().resume()

    # -- rows ------------------------------------------------------------------------------

    async def run_row(self, row: Row) -> None:
        """Run one row's loop to its end and record how it ended (never raises for the row's own failure)."""
        row.status = "running"
        self._counts["running"] += 1
        self._running[row.position] = row
        self.started_rows += 1
        config = self.row_config
        if "name" not in self.row_options:
            config = config.named(f"{self.name}[{label_of(row.key)}]")
        child = LoopHandle(row.task, parent=self, config=config)
        row.child = child
        row.told = len(self._row_notes)  # what it was told besides its task: part of its cache key
        for note in self._row_notes:  # interjections made before the row started
            child.run.conversation.note(note)
        try:
            value = await child.result()
            row.answer, row.status = parse_answer(value, self.output), "finished"
        except Stopped as err:
            row.status, row.reason = "stopped", err.reason
        except asyncio.CancelledError:
            if self.fatal is not None:
                row.reason = f"stopped: the batch failed ({reason_of(self.fatal)})"
            else:
                row.reason = self.state.stop_reason or "the batch was stopped"
            row.status = "stopped"
            if not child.done():
                await child.stop(row.reason)
            raise
        except Exception as err:  # noqa: BLE001 - the row failed; the batch goes on (unless every row would)
            row.status, row.reason = "failed", reason_of(err)
            if self.fatal is None and fails_every_row(err, self._counts["finished"] > self.kept + self.cached):
                self.fatal = err
        finally:
            self._counts["running"] -= 1
            self._running.pop(row.position, None)
            self._ended_row(row, child)

    def _ended_row(self, row: Row, child: LoopHandle) -> None:
        if row.status == "running":  # ended some other way (a BaseException): as the event says, stopped
            row.status = "stopped"
        row.tokens = (child.usage.input_tokens, child.usage.output_tokens)
        self._done_usage += child.usage
        self.count_spent(child)
        self._done_steps += child.steps
        self._done_tool_calls += child.tool_calls
        keep = row.status == "failed" and self._failed_kept < _KEEP_FAILED
        self._failed_kept += keep
        if not keep:  # its transcript lives in the store (if one records the bus), not in memory
            row.child = None
            if child in self.children:
                self.children.remove(child)
        if row.status == "finished" and self.cache is not None and not _used_tools(child) and cacheable(child):
            key = self.cache.key(row.task, self._row_notes[: row.told])
            self.cache.put(key, to_json(_plain(row.answer)), self.model_name)
        self._settled(row, child)
        self.check_budget()

    def _settled(self, row: Row, child: LoopHandle | None, *, cached: bool = False) -> None:
        """Count an ended row, keep what a finished row keeps (its answer), and publish its event."""
        self._counts[row.status] += 1
        if row.status == "finished":
            self._answers[row.position] = row.answer
            self._recent.append((row.key, row.answer))
        else:
            self._bad[row.position] = (row.status, row.reason)
            if len(self.ended_badly) < _KEEP_FAILED:
                self.ended_badly.append(row)
        now = self._last_end = time.monotonic()
        second = int(now)
        if self._ended_at and self._ended_at[-1][0] == second:
            self._ended_at[-1][1] += 1
        else:
            self._ended_at.append([second, 1])
        self._ended_rows += 1
        self._emit_row(row, child, cached=cached)
        row.values = {}  # what the row was filled from is not kept once it ended

    def _emit_row(self, row: Row, child: LoopHandle | None, *, kept: bool = False, cached: bool = False) -> None:
        answer = to_json(_plain(row.answer)) if row.status == "finished" else None
        self.run.emit(
            ev.RowFinished, row=row_key(row.key), position=row.position, status=row.status, answer=answer,
            reason=row.reason, child_id=child.id if child is not None else None, input_tokens=row.tokens[0],
            output_tokens=row.tokens[1], asked=self.asked(row), kept=kept,
            cached=cached,
        )

    @staticmethod
    def _ending(h: MapHandle, status: Status, error: BaseException | None) -> None:
        """As the batch ends (``Run.on_end``): its rows stop counting as live loops, and rows never started say why."""
        held, h._held = h._held, 0
        release_loops(held)
        if status is not Status.FINISHED:  # rows never started say so (not None)
            h._not_started = ("not started: the batch was stopped" if status is Status.STOPPED
                              else f"not started: the batch failed ({reason_of(error)})")

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
        """Done (``kept`` of them from the run this one continues, ``cached`` from the result cache), running,
        failed, stopped and waiting rows (``waiting`` once ended: never started; ``None`` while a generator's length
        is unknown); rows a second lately; seconds left while it runs; tokens and dollars so far (``cost``, ``None``
        when the price is unknown) and ``projected_cost`` for the whole batch from the rows ended so far; the
        ``budget`` and whether it was reached."""
        counts = self.counts
        rate = self.rate()
        waiting = counts["waiting"]
        left = None if waiting is None else waiting + counts["running"]
        moving = not self.done() and not self.run.gate.paused and self.state.stop_reason is None
        usage = self.usage
        cost = self._tree_cost()
        ended = self._ended_rows  # rows of this run that ended (kept rows excluded)
        projected = None
        if cost is not None and left is not None:
            projected = cost + (self._done_cost / ended * left if ended else 0.0) if left else cost
            if left and not ended:
                projected = None
        return {
            "total": self.total, "done": counts["finished"], "kept": self.kept, "cached": self.cached,
            "running": counts["running"], "failed": counts["failed"], "stopped": counts["stopped"],
            "waiting": waiting, "rows_per_second": round(rate, 2),
            "eta_seconds": round(left / rate, 1) if rate and left and moving else None,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "tokens_estimated": usage.estimated, "outcome": self.outcome,
            "cost": None if cost is None else round(cost, 6),
            "projected_cost": None if projected is None else round(projected, 6),
            "budget": self.budget, "budget_reached": self.budget_reached,
        }

    def _key(self, position: int) -> Any:
        index = self.source.index
        return index[position] if index is not None else position

    def results(self) -> Any:
        """The result so far (what ``await`` gives once the batch ends): rows not finished are missing, and
        ``.attrs["reasons"]`` says why (``None`` for a row still to come)."""
        total = self.total if self.total is not None else self.source.made
        index = self.source.index_for(total)
        reasons: dict[int, str | None] = {p: why for p, (_s, why) in self._bad.items()}
        for p in range(total):
            if p not in self._answers and p not in reasons:
                reasons[p] = self._not_started if p not in self._running else None
        return assemble(self._answers, dict(sorted(reasons.items())), index, self.output, self.result_name)

    @property
    def failures(self) -> Any:
        """Rows that failed or stopped: a DataFrame of ``key``, ``status`` and ``reason``."""
        import pandas as pd

        bad = sorted(self._bad.items())
        return pd.DataFrame({"key": [self._key(p) for p, _ in bad], "status": [s for _, (s, _r) in bad],
                             "reason": [r for _, (_s, r) in bad]})

    def row_handle(self, key: Any) -> LoopHandle | None:
        """The loop of row ``key`` while it runs (or if it failed among the first ones); else ``None``."""
        rows = [*self._running.values(), *self.ended_badly]
        return next((r.child for r in rows if r.key == key and r.child is not None), None)

    # -- steering --------------------------------------------------------------------------

    async def interject(self, message: str, *, request_id: str | None = None) -> None:
        """Deliver ``message`` to every running row, and to every row not started yet (at its start)."""
        self.run.require_live("interject")
        if not isinstance(message, str) or not message.strip():
            raise UserError("interject needs a non-empty message")
        self.run.steer("interject", message)
        self._row_notes.append(VERBS["interject"].note(message, None) or message)
        self._looked_up = {}  # rows ahead were looked up without it: asked again as they start
        await asyncio.gather(
            *(c.interject(message) for c in self.run.live_children()), return_exceptions=True
        )

    def inspection(self) -> str:
        p = self.progress
        lines = [f"- {label_of(k)}: {str(a)[:300]}" for k, a in self._recent]
        bad = [f"- {label_of(r.key)}: {r.status}: {r.reason}" for r in self.ended_badly[:20]]
        total = p["total"] if p["total"] is not None else "an unknown number of"
        return (
            f"You are inspecting a batch (the operation {self.name!r}, status {self.status.value}): the task "
            f"{self.template!r} run for each of {total} rows. So far: {p['done']} done, {p['running']} "
            f"running, {p['failed']} failed, {p['waiting']} waiting. Answer the user's question about it "
            "concisely and truthfully; you cannot change it.\n\nLatest answers:\n" + ("\n".join(lines) or "(none)")
            + "\n\nRows that failed or stopped:\n" + ("\n".join(bad) or "(none)")
        )

    def __repr__(self) -> str:
        c = self._counts
        total = self.total if self.total is not None else "?"
        rows = f"{c['finished']}/{total} rows done, {c['failed']} failed"
        return f"<unity batch {self.name!r}: {self.outcome}, {rows}>"


def _used_tools(child: LoopHandle) -> bool:
    """Whether a row's answer went through a tool other than ``submit_answer`` (its result may change: the row
    is not cached)."""
    return any(c.name != "submit_answer" for m in child.transcript for c in m.tool_calls)


def _plain(answer: Any) -> Any:
    return answer.model_dump(mode="json") if isinstance(answer, pydantic.BaseModel) else answer


def map_rows(items: Any, task: str, *, estimate: bool = False, **options: Any) -> Any:
    """Run ``task`` for every row of ``items`` (a Series, a DataFrame or any iterable, a generator too: rows are
    made as they start) as one steerable operation, and return its handle at once.

    ``task`` is a template: ``{column}`` is filled from each row (a Series' values are ``{value}``, and
    ``{<its name>}``); without fields, each row's values are appended. ``concurrency`` rows run at a
    time; ``rate`` (``"600/min"``, ``"10/s"``, a number a minute or a :class:`RateLimit`) is shared by
    every loop calling the model. ``output`` (a pydantic model) or ``columns`` (``"method,sample_size:int"``: a type
    per field among str, int, float and bool) make each row answer in typed fields (a DataFrame results); an answer
    that does not validate is sent back once, then the row fails with the reason. ``done`` is what
    :func:`finished_rows` gives: the rows an earlier run finished, each kept if this run would ask it the same (same
    position, label, task, model and fields); ``h.kept`` counts them. ``budget`` (dollars) pauses the batch once its
    spending reaches it (rows in flight finish); ``cache`` (a store, or ``False``) answers a row asked before from
    the store; ``estimate=True`` runs nothing and returns an :class:`Estimate` (``expected_output_tokens`` a row
    replaces its assumption). Other options (``tools``, ``max_steps``, ``system``, ``tool_timeout``, ...) are
    each row's loop options.
    """
    if estimate:
        return estimate_map(items, task, **options)
    return MapHandle(items, task, **options)
