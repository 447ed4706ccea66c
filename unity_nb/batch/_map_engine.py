"""The engine of a batch: it owns the row work. Rows are picked (made as they start), settled without a call where
they can be (kept from the run this one continues, answered by the cache, or failing their template), started while
fewer than ``concurrency`` run and the batch is neither paused, stopped, over its budget nor failing every row, and
released as they end: each row ends as a row of the batch (in its :class:`Book`), never as the batch's own failure.

What a batch adds to a steering verb is a hook of the engine, run by the loop's own verb on the loop's own thread:
an interjection reaches the running rows and every row not started yet (:meth:`MapEngine.steered`), and a resume is
refused while spending is at the budget (:meth:`MapEngine.refusal`)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from .. import events as ev
from .._collector import hold_loops, release_loops
from .._errors import Stopped, UnityError, UserError
from .._event_checks import maker
from ..loop import VERBS, Driver, LoopHandle, LoopOptions, Status, stop_once
from ..models import Endpoint, endpoint_of, turn_hook, weak_hook
from ._book import _KEEP_FAILED, NOT_STARTED, Book, counts_text
from ._cache import ResultCache, cacheable, cut_reply
from ._failures import fails_every_row, is_row_id, label_of, reason_of
from ._rows import Row, RowSource, asked_hash, parse_answer, row_id, row_key, to_json
from ._spend import Spending

__all__ = ("EveryRowFailed", "MapEngine", "RowPlan")

_row_finished = maker(ev.RowFinished)  # a row's event, made without the class call's cost
_json_str = json.encoder.encode_basestring  # what to_json writes for a str (non-ASCII kept)

_SETTLED_YIELD = 256
"""Rows settled without a call (kept, from the cache) in a row before the batch lets the event loop run."""
_LOOKAHEAD = 256
"""Rows made ahead so the cache is asked about them in one query."""


class EveryRowFailed(UnityError):
    """A batch every row of which failed (none finished, none stopped): nothing came of it. The first row's reason
    is the message; an operator of several maps may read such a phase's rows as its answer (``Phase.partial``)."""


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What every row of a batch is asked, and how: checked once for every row."""

    template: str
    output: Any
    """The answer's fields (a pydantic model), or ``None`` for text."""
    config: LoopOptions
    """Each row's loop options (checked once)."""
    named: bool
    """The rows' loops are named by the person (else ``BATCH[label]``)."""
    model_name: str
    concurrency: int
    cache: ResultCache | None


class MapEngine(Driver):
    """Drives a batch's rows (see the module's docstring). Made before its loop, then bound to it (:meth:`bind`)."""

    batch = True

    __slots__ = (
        "_done_lazy", "_endpoint", "_failed_kept", "_held", "_kept", "_looked_up", "_notes", "book", "fatal", "plan",
        "spending",
    )

    def __init__(self, plan: RowPlan, book: Book, spending: Spending, *, items: Any = None,
                 done: Mapping[str, Any] | None = None) -> None:
        self.plan = plan
        self.book = book
        book.plan = plan
        self.spending = spending
        self.fatal: BaseException | None = None
        """An error that would fail every row (a bad key, a missing model): the batch ends with it."""
        self._notes: list[str] = []  # interjections, told to every row not started yet at its start
        self._looked_up: dict[int, str | None] = {}  # the cache's answers for the rows just ahead, by position
        self._kept: dict[int, tuple[Any, Any, str | None]] = {}  # position -> (answer, key, asked)
        self._done_lazy: Mapping[str, Any] | None = None
        self._held = 0
        self._failed_kept = 0  # failed rows whose loops stay in memory (to be opened)
        self._endpoint: Endpoint | None = None  # the rows' model's server, as their starts say it (found once)
        if done is not None:
            self._keep(done, items)

    def bind(self, run: Any, source: Any) -> MapEngine:
        """Join the batch's loop (``LoopHandle(engine=engine.bind)``)."""
        Driver.__init__(self, run, source)
        self.spending.bind(run)
        run.on_end.append(self._ending)
        return self

    def start(self) -> None:
        """Once the loop has started: this run's events hold every row it kept, and its rows count as live loops
        from now to its end, also between waves (``unity_nb._collector``)."""
        for position, (answer, key, asked) in sorted(self._kept.items()):
            row = Row(position, key, {}, "")
            row.asked = asked
            row.status, row.answer, row.kept = "finished", answer, True
            self._emit_row(row, None, kept=True)
        total = self.book.source.total
        self._held = min(self.plan.concurrency, total - self.book.kept) if total is not None else self.plan.concurrency
        hold_loops(self._held)

    # -- rows kept from an earlier run ------------------------------------------------------------

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
        source = self.book.source
        if source.total is None:  # a generator: read once, as its rows come
            self._done_lazy = done
            return
        for row in RowSource(items, self.plan.template):
            answer = self._kept_answer(row, done)
            if answer is not None:
                self._kept[row.position] = (answer, row.key, row.asked)
        book = self.book
        book.kept = len(self._kept)
        book.tally["finished"] += book.kept
        book.set_aside = len(done) - book.kept

    def _kept_answer(self, row: Row, done: Mapping[str, Any]) -> Any:
        rid = row_id(row.position, row_key(row.key), self.asked(row))
        return self._answer_of(done[rid]) if rid in done else None

    def _answer_of(self, value: Any) -> Any:
        """A kept row's answer as this run reads it, or ``None`` when it no longer parses (the answer's fields kept
        their names, so it is asked the same, but a field's type changed since): the row is asked again."""
        try:
            return parse_answer(value, self.plan.output)
        except ValueError:
            return None

    def _still_answers(self, done: Mapping[str, Any]) -> dict[str, Any]:
        """The rows of ``done`` whose answers still parse (:meth:`_answer_of`): kept where rows are made elsewhere
        (a Ray cluster's blocks), which keeps them without parsing them."""
        return {rid: value for rid, value in done.items() if self._answer_of(value) is not None}

    def asked(self, row: Row) -> str:
        """What ``row`` is asked (made once): the key a later run keeps its answer under."""
        if row.asked is None:
            row.asked = asked_hash(row.task, self.plan.model_name, self.plan.output, self.plan.config.system)
        return row.asked

    # -- the drive ----------------------------------------------------------------------------------

    async def drive(self) -> str:
        run, book, plan = self._run, self.book, self.plan
        # each row is its loop's task alone (no task of its own around it): the loop says when it ends
        # (``Run.on_end``), and the row is settled here, in the batch's task
        running: dict[LoopHandle, Row] = {}
        ended: list[LoopHandle] = []
        wake = asyncio.Event()

        def row_ended(child: Any, _status: Status, _error: BaseException | None) -> None:
            ended.append(child)
            wake.set()

        book.first_start = time.monotonic()
        settled = 0
        try:
            while True:
                if run.gate.paused and not running and not ended and not self._input_left():
                    break  # held (at its budget) with no row running and none left to start: it is done
                if run.gate.paused and running and not ended:
                    # held (at its budget) with rows in flight: each is settled as it ends, held or not
                    wake.clear()
                    await _first(wake.wait(), run.gate.wait())
                elif not ended:
                    await run.gate.wait()
                while (len(running) < plan.concurrency and not run.gate.paused and run.state.stop_reason is None
                       and self.fatal is None and not self.spending.check()):
                    row = self._next_row()
                    if row is None:
                        break
                    if self._settle(row):  # kept, from the cache, or a template it cannot fill: no call
                        settled += 1
                        if settled % _SETTLED_YIELD == 0:
                            await asyncio.sleep(0)  # a long run of them leaves the event loop its turns
                        continue
                    child = self._start_row(row)
                    running[child] = row
                    child.run.on_end.append(row_ended)
                if not running and not ended and (book.exhausted or run.state.stop_reason is not None):
                    break
                if not ended and running:
                    wake.clear()
                    await wake.wait()
                while ended:
                    child = ended.pop(0)
                    self._row_ended(running.pop(child), child)
                if self.fatal is not None:  # it would fail every row: the rows running stop, no other starts
                    raise self.fatal
        finally:
            # rows that ended meanwhile are settled as they ended; rows still running (the batch stopped or
            # failed) stop with the batch's reason, whatever settling the others raised
            try:
                while ended:
                    child = ended.pop(0)
                    self._row_ended(running.pop(child), child)
            finally:
                if running:
                    await self._stop_rows(running)
        self.conclude()
        return counts_text(book.counts, book.total, ended=True, kept=book.kept, cached=book.cached, cut=len(book.cut))

    def conclude(self) -> None:
        """A batch whose rows all ended: a stop (stopped while its last rows ended) is a stop, not an answer; a
        batch of which every row failed raises the first row's reason; else the result is its rows'."""
        run, book = self._run, self.book
        if run.state.stop_reason is not None:
            raise asyncio.CancelledError
        c = book.counts
        if c["failed"] and not c["finished"] and not c["stopped"]:  # nothing came of it: not a success
            if book.first_failure is not None and book.unasked:  # the rows asked say what went wrong, not the others
                raise EveryRowFailed(
                    f"every row of the batch failed ({c['failed']}: {book.unasked} not asked, for no value for what "
                    f"the task names or a task they cannot fill); the first that was asked: {book.first_failure}")
            first = book.ended_badly[0].reason if book.ended_badly else None
            raise EveryRowFailed(f"every row of the batch failed ({c['failed']}); the first: {first}")
        run.state.result_object = self.source.results()  # type: ignore[attr-defined]

    def _next_row(self) -> Row | None:
        """The next row of the input (made now), or ``None`` once there is none."""
        book = self.book
        if book.exhausted:
            return None
        try:
            return next(book.source)
        except StopIteration:
            book.exhausted = True
            return None

    def _input_left(self) -> bool:
        """Whether the input has a row not taken yet (made now to know it); once it has none, it is exhausted."""
        book = self.book
        if book.exhausted:
            return False
        if book.source.peek(1):
            return True
        book.exhausted = True
        return False

    def _settle(self, row: Row) -> bool:
        """End ``row`` without a call if it can be: kept from the run this one continues, answered by the cache,
        or its template could not be filled (it fails). True if it was."""
        book, pos = self.book, row.position
        if pos in self._kept:  # counted as finished from the start
            book.finished_without_call(row, self._kept.pop(pos)[0])
            return True
        if self._done_lazy is not None:
            answer = self._kept_answer(row, self._done_lazy)
            if answer is not None:
                book.finished_without_call(row, answer)
                book.kept += 1
                book.tally["finished"] += 1
                row.status, row.answer, row.kept = "finished", answer, True
                self._emit_row(row, None, kept=True)
                return True
        if row.reason is not None:  # its values do not fit the template
            row.status = "failed"
            self._settled(row, None, asked=False)
            return True
        if self.plan.cache is not None:
            stored = self._cached_answer(row)
            if stored is not None:
                try:  # a stored answer that is not one (a damaged table) is a miss: the row is asked
                    value = json.loads(stored)
                    if self.plan.output is None and not (isinstance(value, str) and value.strip()):
                        return False  # a text answer is text that says something (as a call's answer is)
                    row.answer = parse_answer(value, self.plan.output)
                except (ValueError, TypeError):
                    return False
                row.status = "finished"
                book.cached += 1
                self._settled(row, None, cached=True)
                return True
        return False

    def _cached_answer(self, row: Row) -> str | None:
        """The cache's answer for ``row``: looked up with the next rows' in one query (they are made ahead:
        at most ``_LOOKAHEAD`` rows, held until they start)."""
        cache = self.plan.cache
        assert cache is not None
        if row.position not in self._looked_up:
            ahead = [row, *(r for r in self.book.source.peek(_LOOKAHEAD) if r.reason is None)]
            keys = {r.position: cache.key(r.task, self._notes) for r in ahead}
            found = cache.get_many(list(keys.values()))
            self._looked_up = {p: found.get(k) for p, k in keys.items()}
        return self._looked_up.pop(row.position, None)

    def _start_row(self, row: Row) -> LoopHandle:
        """Start ``row``'s loop (its task runs it); the batch hears when it ends (:meth:`_row_ended`)."""
        book, plan, run = self.book, self.plan, self._run
        book.started_row(row)
        name = None if plan.named else f"{run.name}[{label_of(row.key)}]"  # the options shared, not copied per row
        # the loop's task runs in a context of its own where its requests waiting for their turn make the row
        # queued (``turn_hook``): the batch's own context is left as it is. The row is held weakly there: the
        # context outlives the loop wherever aiohttp's keep-alive timer or a pooled connection copied it
        context = contextvars.copy_context()
        context.run(turn_hook.set, weak_hook(row.waits))
        if self._endpoint is None:
            self._endpoint = endpoint_of(plan.config.model)
        child: LoopHandle = context.run(LoopHandle, row.task, parent=run.handle, config=plan.config, _name=name,
                                        _endpoint=self._endpoint)
        row.child = child
        row.told = len(self._notes)  # what it was told besides its task: part of its cache key
        for note in self._notes:  # interjections made before the row started (heard before its first call)
            child.run.conversation.note(note)
        return child

    def _row_ended(self, row: Row, child: LoopHandle) -> None:
        """Record how ``row``'s loop ended (it has): its answer, or why it stopped or failed."""
        book = self.book
        try:
            try:
                value = child.run.outcome()
                row.answer, row.status = parse_answer(value, self.plan.output), "finished"
                row.reason = cut_reply(child)  # a reply the provider cut: the answer is used, and said cut
            except Stopped as err:
                row.status, row.reason = "stopped", err.reason
            except asyncio.CancelledError:  # its task cancelled from outside: stopped with the batch
                row.status, row.reason = "stopped", self._stop_reason()
            except Exception as err:  # noqa: BLE001 - the row failed; the batch goes on (unless every row would)
                row.status, row.reason = "failed", reason_of(err)
                if self.fatal is None and fails_every_row(err, book.tally["finished"] > book.kept + book.cached):
                    self.fatal = err
        finally:
            book.left(row)
            self._release(row, child)

    def _stop_reason(self) -> str:
        if self.fatal is not None:
            return f"stopped: the batch failed ({reason_of(self.fatal)})"
        return self._run.state.stop_reason or "the batch was stopped"

    async def _stop_rows(self, running: dict[LoopHandle, Row]) -> None:
        """The batch ends with rows running: each stops with the batch's reason, and is settled as stopped."""
        reason = self._stop_reason()
        try:
            await asyncio.gather(*(stop_once(c, reason) for c in running if not c.done()), return_exceptions=True)
        finally:
            for child, row in running.items():
                if child.done() and row.status == "running":
                    row.status, row.reason = "stopped", reason
                    self.book.left(row)
                    self._release(row, child)

    def _release(self, row: Row, child: LoopHandle) -> None:
        """Count an ended row's tokens and dollars, drop its loop (the store keeps its transcript), cache its
        answer, and settle it."""
        if row.status == "running":  # ended some other way (a BaseException): as the event says, stopped
            row.status = "stopped"
        row.tokens = (child.usage.input_tokens, child.usage.output_tokens)
        self.book.add_totals(child.usage, child.steps, child.tool_calls)
        self.spending.count(child)
        keep = row.status == "failed" and self._failed_kept < _KEEP_FAILED
        self._failed_kept += keep
        if not keep:  # its transcript lives in the store (if one records the bus), not in memory
            row.child = None
            try:  # rows end about in the order they started: found near the front, in one pass
                self._run.children.remove(child)
            except ValueError:
                pass
        cache = self.plan.cache
        if row.status == "finished" and cache is not None and not _used_tools(child) and cacheable(child):
            cache.put(cache.key(row.task, self._notes[: row.told]), to_json(_plain(row.answer)), self.plan.model_name)
        self._settled(row, child)
        self.spending.check()

    def _settled(self, row: Row, child: LoopHandle | None, *, cached: bool = False,
                 child_id: str | None = None, asked: bool = True) -> None:
        """``child_id``: the row's loop when it ran elsewhere (a Ray worker), its events published here; ``asked``:
        False for a row failed without a call (no value, a task it cannot fill)."""
        self.book.settled(row, asked=asked)
        self._emit_row(row, child, cached=cached, child_id=child_id)
        row.values = {}  # what the row was filled from is not kept once it ended

    def _emit_row(self, row: Row, child: LoopHandle | None, *, kept: bool = False, cached: bool = False,
                  child_id: str | None = None) -> None:
        answer = None
        if row.status == "finished":
            value = row.answer
            answer = _json_str(value) if type(value) is str else to_json(_plain(value))
        run = self._run
        run.publish(_row_finished(
            loop_id=run.id, lineage=run.lineage, row=row_key(row.key), position=row.position,
            status=row.status,  # one of the three, as the event checks
            answer=answer, reason=row.reason, child_id=child.id if child is not None else child_id,
            input_tokens=row.tokens[0], output_tokens=row.tokens[1], asked=self.asked(row), kept=kept, cached=cached,
        ))

    def _ending(self, _handle: Any, status: Status, error: BaseException | None) -> None:
        """As the batch ends (``Run.on_end``): its rows stop counting as live loops, and rows never started say why."""
        held, self._held = self._held, 0
        release_loops(held)
        self.spending.ended()
        self._carry_unread()
        self.book.over = True
        if status is not Status.FINISHED:  # rows never started say so (not None)
            self.book.not_started = (f"{NOT_STARTED}: the batch was stopped" if status is Status.STOPPED
                                     else f"{NOT_STARTED}: the batch failed ({reason_of(error)})")

    def _carry_unread(self) -> None:
        """A generator's rows the run this one continues finished, which this run never read (it ended first: stopped,
        failed, held at its budget), are written again as this run's kept rows, as an input read twice writes them
        all at its start: the newest run holds every row finished so far, and a run that continues it keeps each
        one it asks the same (``done=`` checks each row as it comes)."""
        done, self._done_lazy = self._done_lazy, None
        if not done or self.book.exhausted:  # every row read: a row past its end is no longer in the input
            return
        taken = self.book.source.taken
        run = self._run
        for rid, value in done.items():
            position, key, asked = json.loads(rid)
            if position >= taken:
                run.publish(_row_finished(
                    loop_id=run.id, lineage=run.lineage, row=key, position=position, status="finished",
                    answer=to_json(value), asked=asked, kept=True,
                ))

    # -- what the batch adds to the loop's verbs --------------------------------------------------------

    def refusal(self, verb: str) -> str | None:
        if verb == "resume":
            return self.spending.refusal(self._run.ended.is_set())
        return None

    async def steered(self, verb: str, message: str | None) -> None:
        if verb != "interject" or not message:
            return
        self._notes.append(VERBS["interject"].note(message, None) or message)
        self._looked_up = {}  # rows ahead were looked up without it: asked again as they start
        await asyncio.gather(*(c.interject(message) for c in self._run.live_children()), return_exceptions=True)

    def inspection(self, handle: Any) -> str:
        """What a question about the batch is answered from (``ask``)."""
        book = self.book
        lines = [f"- {label_of(k)}: {str(a)[:300]}" for k, a in book.recent]
        bad = [f"- {label_of(r.key)}: {r.status}: {r.reason}" for r in book.ended_badly[:20]]
        total = book.total if book.total is not None else "an unknown number of"
        return (
            f"You are inspecting a batch (the operation {handle.name!r}, status {handle.status.value}): the task "
            f"{self.plan.template!r} run for each of {total} rows. So far: "
            f"{counts_text(book.counts, book.total, ended=book.over)}. Answer the user's question about it "
            "concisely and truthfully; you cannot change it.\n\nLatest answers:\n" + ("\n".join(lines) or "(none)")
            + "\n\nRows that failed or stopped:\n" + ("\n".join(bad) or "(none)")
        )


async def _first(*waits: Any) -> None:
    """Wait until the first of ``waits`` (coroutines) is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _used_tools(child: LoopHandle) -> bool:
    """Whether a row's answer went through a tool other than ``submit_answer`` (its result may change: the row
    is not cached)."""
    return any(c.name != "submit_answer" for m in child.transcript for c in m.tool_calls)


def _plain(answer: Any) -> Any:
    return answer.model_dump(mode="json") if isinstance(answer, pydantic.BaseModel) else answer
