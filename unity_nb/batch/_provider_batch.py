"""A map run through the provider's Batch API (``u.map(..., via="batch")``, ``%unity map ... --via batch``): its
rows go as files of requests to the provider, which runs them within its 24-hour window, at its batch price and
outside the live rate limits.

:class:`ProviderBatchEngine` takes the map's :class:`RowPlan`, :class:`Book` and :class:`Spending`, like the live
:class:`MapEngine` (whose settling it shares: rows kept from the run this one continues, answered by the result
cache, or failing their template make no request), so the handle, its results, progress, the store's
``row_finished`` events and the widget are the same. What differs:

- **Requests.** A row is one request: the system prompt, its task and the interjections made before it was
  submitted, with the answer tool forced for typed output (``columns=``, ``output=``). A row that would need more
  than one step (tools other than the answer tool) is refused before anything is sent: one request has no turn in
  which to read a tool's result; run such a map live.
- **Files.** Rows are gathered into files of at most ``batch_max_requests`` requests (50,000) and
  ``batch_max_bytes`` (200 MB), each uploaded and submitted as one provider batch; results are matched by
  ``custom_id`` (the row's position and what it was asked), never by order.
- **Durable.** Each file's and batch's id is a ``provider_batch`` event the store commits at once; a new kernel
  (``%unity resume NAME``, or ``batches=provider_batches(store, name)``) polls those batches instead of sending
  their rows again, and submits only the rows that were in none.
- **Polling** every ``batch_poll`` seconds (30 by default), backing off to ten times that while nothing changes;
  pause stops polling and submitting; stop cancels the provider's batches, follows them to their end (the cancels
  and looks at most ``batch_stop_wait`` seconds in all) and keeps the rows the provider finished before the cancel
  took effect.
- **Failures.** A row in the error file fails with the provider's message; rows of an expired batch fail saying
  the window expired; a failed batch fails its rows with the provider's errors; a provider without the Batch API
  (404 on ``/v1/files``) ends the map at once with one error saying so (no live fallback). A provider batch the
  provider no longer has (404 on a look) fails its rows; one not ended an hour past its window (:func:`window_end`),
  running still or not to be looked at, fails its rows rather than be polled forever. An ended batch's files that
  cannot be downloaded, or hold fewer results than its ``request_counts`` say ended, are read again at each look,
  :data:`READS` times, before its rows fail saying why. A row the provider never answered says how to ask it again.
- **Spend.** Tokens are counted at the batch price (the model's batch rate, else half its live price); a budget is
  applied before a file is submitted: a file is cut to what the budget still covers, at the estimate's
  assumptions, and none is submitted once the budget is reached. Results no row took (a resume asking under another
  prompt, a stranger's line) are counted too: the provider charged for them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from .. import events as ev
from .._errors import UserError
from ..loop import VERBS, Tool
from ..models import FileTooLarge, ModelRequest, NoBatchAPI, RowResult, Usage, batch_api_of, batch_price
from ._cache import CUT_OFF, cut_reason
from ._failures import reason_of
from ._map_engine import MapEngine, RowPlan
from ._map_engine import _plain as plain_answer
from ._provider_files import (
    FINAL,
    MAX_BACKOFF,
    OVERDUE,
    READS,
    WINDOW,
    BatchSettings,
    Chunk,
    again,
    batch_settings,
    count_of,
    errors_said,
    estimated_dollars,
    files_short,
    gone,
    progress_of,
    provider_batches,
    ranges,
    read_results,
    reply_answer,
    resume_chunk,
    unused_usage,
    window_end,
)
from ._rows import Row, to_json

__all__ = ("BatchSettings", "ProviderBatchEngine", "batch_settings", "provider_batches")


class ProviderBatchEngine(MapEngine):
    """Drives a map's rows through the provider's Batch API (see the module's docstring)."""

    __slots__ = ("_api", "_bytes", "_chunks", "_claimed", "_line", "_pending", "_reserved", "_size", "_wake",
                 "settings")

    def __init__(self, plan: RowPlan, book: Any, spending: Any, settings: BatchSettings, *, items: Any = None,
                 done: Mapping[str, Any] | None = None) -> None:
        model = plan.config.model
        api = batch_api_of(model)
        if api is None:
            raise UserError(f"via='batch' needs an OpenAI-compatible model (an OpenAIModel, whose provider has the "
                            f"Batch API), not {type(model).__name__}: run it live (leave out via='batch')")
        others = [getattr(t, "name", getattr(t, "__name__", "?")) for t in plan.config.tools
                  if getattr(t, "name", None) != "submit_answer"]
        if others:
            raise UserError(
                f"via='batch' sends each row as one request, with no turn to read a tool's result; the tools "
                f"{others} would need more. Run it live (leave out via='batch'), or without tools")
        if plan.config.multi or plan.config.dynamic_tools is not None:
            raise UserError("via='batch' sends each row as one request: multi= and dynamic_tools= need a live loop")
        super().__init__(plan, book, spending, items=items, done=done)
        self.settings = settings
        self._api = api
        self._chunks: list[Chunk] = []
        self._pending: dict[str, Row] = {}  # custom_id -> row, gathered for the next file
        self._bytes: list[bytes] = []
        self._size = 0  # bytes in self._bytes (counted as they come: never summed again a row)
        self._claimed: dict[int, Chunk] = {}  # positions in a resumed provider batch -> it
        self._reserved = 0.0  # dollars the submitted files are estimated to cost, until they end
        self._line = 0  # bytes of the latest request made (the next row's is estimated alike)
        self._wake = asyncio.Event()
        for e in settings.resumed:
            resume_chunk(self._chunks, self._claimed, e)

    # -- requests ---------------------------------------------------------------------------------

    def custom_id(self, row: Row) -> str:
        return f"{row.position}:{self.asked(row)}"

    def request(self, row: Row) -> ModelRequest:
        """The one request a row makes: as a live loop's first step would send it."""
        cfg = self.plan.config
        messages: list[dict] = []
        if cfg.system:
            messages.append({"role": "system", "content": cfg.system})
        messages.extend(dict(m) for m in cfg.history)
        messages.append({"role": "user", "content": row.task})
        if self._notes:
            messages.append({"role": "user", "content": "\n".join(self._notes)})
        tools = [t.schema() for t in cfg.tools if isinstance(t, Tool)]
        choice: Any = "none"
        if tools:
            choice = {"type": "function", "function": {"name": "submit_answer"}}
        return ModelRequest(messages, tools, choice, cfg.options)

    # -- the drive ----------------------------------------------------------------------------------

    async def drive(self) -> str:
        run, book = self._run, self.book
        book.first_start = time.monotonic()
        idle = 0
        try:
            for chunk in self._chunks:
                if chunk.ended:
                    continue
                if chunk.batch_id is None and chunk.file_id is not None:  # uploaded, not yet submitted
                    await self._create(chunk)
            while True:
                if run.gate.paused and not self._pending and all(c.ended for c in self._chunks) and \
                        not self._input_left():
                    break  # held (at its budget) with nothing with the provider and no row left: it is done
                if run.gate.paused and not self._polls_while_held():
                    await run.gate.wait()
                if self.fatal is not None:
                    raise self.fatal
                await self._gather()
                changed = await self._poll()
                if self.fatal is not None:
                    raise self.fatal
                active = [c for c in self._chunks if not c.ended]
                if book.exhausted and not self._pending and not active:
                    break
                if not active and not self._pending and run.gate.paused:
                    continue
                idle = 0 if changed else idle + 1
                delay = self.settings.poll * min(MAX_BACKOFF, 1.5 ** max(0, idle - 1))
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    pass
        except asyncio.CancelledError:
            if run.state.stop_reason is not None:
                await self._cancel_all()
            self._abandon(self._stop_reason())  # rows whose file was on its way (no provider batch to follow yet)
            raise
        except BaseException as err:  # the batch fails (raised from result()): no row is left without a reason
            self._abandon(f"stopped: the batch failed ({reason_of(err)})")
            raise
        self.conclude()
        c = book.counts
        total = book.total or 0
        return f"{c['finished']} of {total} rows done, {c['failed']} failed (via the provider's Batch API)"

    async def _gather(self) -> None:
        """Take rows into the next file while the batch may submit; submit a file once full, or at the end."""
        run, book, s = self._run, self.book, self.settings
        settled = 0
        while not run.gate.paused and run.state.stop_reason is None and self.fatal is None:
            if self._over_budget() and not self._claimed_next():
                break
            row = self._next_row()
            if row is None:
                break
            if row.position in self._claimed and self._kept_before(row):  # its answer is kept: not taken again
                self._claimed.pop(row.position).positions.discard(row.position)
            if row.position in self._claimed and not self._claimed[row.position].ended:
                chunk = self._claimed[row.position]  # in a provider batch an earlier kernel submitted
                row.told = -1  # what that kernel told it besides its task is not known: its answer is not cached
                book.started_row(row)
                row.values = {}
                chunk.rows[self.custom_id(row)] = row
                continue
            if self._settle(row):
                settled += 1
                if settled % 256 == 0:
                    await asyncio.sleep(0)
                continue
            line = self._api.line(self.custom_id(row), self.request(row))
            self._line = len(line)
            if self._pending and (len(self._pending) >= s.max_requests or self._size + len(line) > s.max_bytes):
                await self._submit()
            if len(line) > s.max_bytes:
                row.status, row.reason = "failed", (
                    f"its request is {len(line):,} bytes, more than batch_max_bytes={s.max_bytes:,}")
                self._settled(row, None)
                continue
            row.told = len(self._notes)
            book.started_row(row)
            row.values = {}
            self._pending[self.custom_id(row)] = row
            self._bytes.append(line)
            self._size += len(line)
            if len(self._pending) >= s.max_requests:
                await self._submit()
        if self._pending and (book.exhausted or self._over_budget()):
            await self._submit()

    def _claimed_next(self) -> bool:
        """Whether the next row is in a provider batch an earlier kernel submitted: taken whatever the budget (it
        costs nothing more, and that batch is followed only once its rows are all made)."""
        if not self._claimed:
            return False
        ahead = self.book.source.peek(1)
        chunk = self._claimed.get(ahead[0].position) if ahead else None
        return chunk is not None and not chunk.ended

    def _kept_before(self, row: Row) -> bool:
        """Whether ``row`` finished in the run this one continues (``done=``): kept, even if the provider batch it
        was in did not end there (its kernel died between the row's end and the batch's)."""
        if row.position in self._kept:
            return True
        return self._done_lazy is not None and self._kept_answer(row, self._done_lazy) is not None

    def _polls_while_held(self) -> bool:
        """A batch held at its budget (not paused by a person) still follows its provider batches to their end."""
        return self.spending.budget is not None and self.spending.reached and any(not c.ended for c in self._chunks)

    def _row_dollars(self, line_bytes: int, rows: int) -> float:
        return estimated_dollars(self.plan, self.spending.expected_output_tokens, line_bytes, rows)

    def _over_budget(self) -> bool:
        """True when no more rows may be submitted: what was spent and what the files submitted are estimated to
        cost reach the budget (said once, as a live batch at its budget says it)."""
        spending = self.spending
        if spending.budget is None:
            return False
        if spending.check():
            return True
        # the rows gathered so far and the next one (estimated as long as the latest request: a template's rows
        # are alike): a row is taken only if what it is estimated to cost still fits
        size = self._size + self._line
        if spending.spent + self._reserved + self._row_dollars(size, len(self._bytes) + 1) <= spending.budget:
            return False
        if self._pending or any(not c.ended for c in self._chunks):
            return True  # the file gathered so far is submitted, the provider's batches followed; no row more
        self._run.gate.close()
        self._run.emit(ev.BudgetReached, budget=spending.budget, spent=round(spending.spent, 6), message=(
            f"paused before submitting more rows: ${spending.spent:,.4f} spent and ${self._reserved:,.4f} estimated "
            f"for the rows with the provider reach its budget of ${spending.budget:,.2f}. Lift the cap: "
            "h.set_budget(DOLLARS) then h.resume()"))
        return True

    async def _submit(self) -> None:
        """Upload the rows gathered as one file, and run it as a provider batch (each id an event at once)."""
        rows, data = self._pending, b"".join(self._bytes)
        self._pending, self._bytes, self._size = {}, [], 0
        chunk = Chunk(len(self._chunks), rows)
        chunk.positions = {r.position for r in rows.values()}
        self._chunks.append(chunk)
        chunk.reserved = self._row_dollars(len(data), len(rows))
        self._reserved += chunk.reserved
        try:
            chunk.file_id = await self._api.upload(data, f"unity_nb-{self._run.name}-{chunk.index}.jsonl")
        except NoBatchAPI as err:
            self.fatal = err
            chunk.ended = True
            self._fail_rows(chunk, rows.values(), reason_of(err))
            return
        except Exception as err:  # noqa: BLE001 - this file's rows fail; a later file may go
            chunk.ended = True
            self._fail_rows(chunk, rows.values(), f"its file could not be uploaded: {reason_of(err)}")
            return
        self._event(chunk, "uploaded", positions=ranges(list(chunk.positions)))
        await self._create(chunk)

    async def _create(self, chunk: Chunk) -> None:
        assert chunk.file_id is not None
        try:
            made = await self._api.create(chunk.file_id, {"unity_nb": self._run.name[:500]})
        except NoBatchAPI as err:
            self.fatal = err
            chunk.ended = True
            self._fail_rows(chunk, chunk.rows.values(), reason_of(err))
            return
        except Exception as err:  # noqa: BLE001
            chunk.ended = True
            self._fail_rows(chunk, chunk.rows.values(), f"its provider batch could not be created: {reason_of(err)}")
            return
        chunk.batch_id = str(made["id"])
        self._take(chunk, made)
        self._event(chunk, "created")

    def _event(self, chunk: Chunk, stage: str, **extra: Any) -> None:
        self._run.emit(ev.ProviderBatch, stage=stage, chunk=chunk.index, file_id=chunk.file_id or "",
                       batch_id=chunk.batch_id, status=chunk.status, completed=chunk.counts["completed"],
                       failed=chunk.counts["failed"], total=chunk.counts["total"], **extra)

    def _take(self, chunk: Chunk, batch: Mapping[str, Any]) -> bool:
        """Note a Batch object's status and counts; True if they changed."""
        counts = batch.get("request_counts")
        counts = counts if isinstance(counts, Mapping) else {}
        new = {k: count_of(counts.get(k), chunk.counts.get(k, 0)) for k in ("completed", "failed", "total")}
        changed = batch.get("status") != chunk.status or new != chunk.counts
        chunk.status = str(batch.get("status"))
        chunk.counts = new if new["total"] else {**new, "total": chunk.counts["total"]}
        # a Batch object that says nothing of its window: a day from the first look (no wait is without an end)
        chunk.expires_at = window_end(batch) or chunk.expires_at or time.time() + WINDOW
        return changed

    async def _poll(self) -> bool:
        """Look at every provider batch not ended; read the files of those that ended. True if anything moved."""
        changed = False
        for chunk in self._chunks:
            if chunk.ended or chunk.batch_id is None:
                continue
            if self._run.gate.paused and not self._polls_while_held():
                break
            if chunk.resumed and not self.book.exhausted and len(chunk.rows) < len(chunk.positions):
                continue  # its rows are not all made yet: its results wait for them
            try:
                batch = await self._api.get(chunk.batch_id)
            except Exception as err:  # noqa: BLE001 - looked at again next time
                if gone(err):  # it will never end here: its rows fail now rather than be waited for forever
                    self._lost(chunk, err)
                    changed = True
                elif self._overdue(chunk, f"it could not be looked at since: {reason_of(err)}"):
                    changed = True
                else:
                    self._run.emit(ev.Notification, call_id=None, text=(
                        f"the provider batch {chunk.batch_id} could not be looked at: {reason_of(err)}"))
                continue
            if self._take(chunk, batch):
                changed = True
                self._event(chunk, "status")
            if chunk.status in FINAL:
                await self._collect(chunk, batch)
                changed = True  # its rows ended, or its files are tried again soon (not at a backed-off look)
            elif self._overdue(chunk, f"it is still {chunk.status!r}"):
                changed = True
        return changed

    def _overdue(self, chunk: Chunk, what: str) -> bool:
        """End ``chunk``'s rows (failed) once its provider batch is :data:`OVERDUE` seconds past its window and not
        ended: a provider batch that never ends is not waited for forever. True if it was."""
        expires = chunk.expires_at
        if not isinstance(expires, int | float) or isinstance(expires, bool) or time.time() < expires + OVERDUE:
            return False
        said = (f"the provider batch {chunk.batch_id} passed its 24h window (it ended at {int(expires)}) "
                f"{OVERDUE / 3600:g} h ago and {what}: its rows are not waited for any longer")
        self._end_chunk(chunk, "failed", said)
        return True

    async def _collect(self, chunk: Chunk, batch: Mapping[str, Any]) -> bool:
        """A provider batch ended: its files read, and their results matched to rows by ``custom_id``. Files that
        cannot be read now are tried again at the next look, :data:`READS` times, then its rows fail saying why.
        True when the batch's rows ended."""
        try:
            results, twice = await read_results(self._api, chunk, batch)
        except Exception as err:  # noqa: BLE001 - tried again at the next look (the work is done, and paid for)
            chunk.reads += 1
            said = f"the files of provider batch {chunk.batch_id} could not be read ({reason_of(err)})"
            if chunk.reads >= READS or gone(err) or isinstance(err, FileTooLarge):  # (it reads the same again)
                tries = f"; {chunk.reads} tries" if not isinstance(err, FileTooLarge) else ""
                self._end_chunk(chunk, "failed", f"{said}{tries}: its rows are not waited for any longer")
                return True
            self._run.emit(ev.Notification, call_id=None,
                           text=f"{said}: tried again at the next look ({chunk.reads} of {READS} tries)")
            return False
        short = files_short(chunk, results, twice)  # its files not all there yet: read again, READS times in all
        if short is not None and chunk.reads < READS:
            self._run.emit(ev.Notification, call_id=None, text=f"{short}: read again at the next look")
            return False
        self._settle_chunk(chunk, batch, results, twice, short)
        return True

    def _settle_chunk(self, chunk: Chunk, batch: Mapping[str, Any], results: dict[str, RowResult],
                      twice: dict[str, list[RowResult]], short: str | None) -> None:
        """Each row of an ended provider batch ends from its result (see :meth:`_collect`); ``short``: what its
        files lacked when they were read for the last time."""
        status = chunk.status
        said = errors_said(batch)
        for cid, row in list(chunk.rows.items()):
            found = results.pop(cid, None)
            if cid in twice:  # which one is its answer is not known: none is taken (each one's tokens counted)
                usage = Usage()
                for r in twice[cid]:
                    if r.reply is not None and r.reply.usage is not None:
                        usage += r.reply.usage
                self._end_row(row, "failed", f"the provider's files hold {len(twice[cid])} results for this row "
                              f"({cid}): which one answers it is not known", usage)
            elif found is not None:
                self._row_result(row, found)
            elif chunk.resumed and status == "completed":  # asked something else now: sent again, in a new file
                self.book.left(row)
                row.status = "waiting"
                self._requeue(row)
                continue
            elif status == "cancelled":
                self._end_row(row, "stopped", "stopped: the provider's batch was cancelled before it ran this row")
            elif status == "expired":
                self._end_row(row, "failed", "the provider's batch expired (its 24h completion window) before it "
                              f"ran this row{again(self._run.name)}")
            elif status == "failed":
                self._end_row(row, "failed", f"the provider's batch failed: {said or 'no reason given'}")
            else:
                self._end_row(row, "failed", "the provider's output has no line for this row" + (
                    f" ({short})" if short else "") + again(self._run.name))
        unused = unused_usage(chunk, results)  # the provider charged for them: counted (the store: on "ended")
        if results:  # lines for no row waiting for one (a row kept from the run this continues, or a stranger's)
            ids = ", ".join(sorted(results)[:5]) + (", ..." if len(results) > 5 else "")
            paid = self._count(unused)
            self._run.emit(ev.Notification, call_id=None, text=(
                f"the files of provider batch {chunk.batch_id} hold {len(results)} result line(s) for no row waiting "
                f"for one ({ids}): not used" + (f"; their tokens are counted ({paid})" if paid else "")))
        chunk.rows = {}
        chunk.ended = True
        self._reserved = max(0.0, self._reserved - chunk.reserved)
        self._event(chunk, "ended", message=said, input_tokens=unused.input_tokens,
                    output_tokens=unused.output_tokens)
        self.spending.check()

    def _lost(self, chunk: Chunk, err: BaseException, status: str = "failed") -> None:
        """The provider has no batch ``chunk.batch_id`` (404): its rows end saying so."""
        self._end_chunk(chunk, status, f"the provider has no batch {chunk.batch_id} (deleted, or another provider or "
                        f"key than the one it was submitted with): {reason_of(err)}")

    def _end_chunk(self, chunk: Chunk, status: str, said: str) -> None:
        """``chunk``'s provider batch will not be followed any more: its rows end (``status``) saying ``said``."""
        for row in list(chunk.rows.values()):
            self._end_row(row, status, said + (again(self._run.name) if status == "failed" else ""))
        chunk.rows = {}
        chunk.ended = True
        self._reserved = max(0.0, self._reserved - chunk.reserved)
        self._event(chunk, "ended", message=said)

    def _requeue(self, row: Row) -> None:
        self._claimed.pop(row.position, None)
        row.told = len(self._notes)
        self.book.started_row(row)
        line = self._api.line(self.custom_id(row), self.request(row))
        self._pending[self.custom_id(row)] = row
        self._bytes.append(line)
        self._size += len(line)

    def _row_result(self, row: Row, found: RowResult) -> None:
        reply = found.reply
        if reply is None:
            status = "failed"
            reason = (f"the provider's batch expired (its 24h completion window) before it ran this row: {found.error}"
                      f"{again(self._run.name)}" if found.expired else f"the provider failed this row: {found.error}")
            self._end_row(row, status, reason)
            return
        usage = reply.usage
        try:
            answer = reply_answer(reply, self.plan.output)
        except ValueError as err:
            self._end_row(row, "failed", str(err), usage)
            return
        row.answer = answer
        # a reply the provider cut is used, said cut, and never cached
        self._end_row(row, "finished", cut_reason(reply.finish_reason), usage, cache=reply.finish_reason not in CUT_OFF)

    def _end_row(self, row: Row, status: str, reason: str | None, usage: Usage | None = None, *,
                 cache: bool = True) -> None:
        book = self.book
        book.left(row)
        row.status, row.reason = status, reason
        if usage is not None:
            row.tokens = (usage.input_tokens, usage.output_tokens)
            self._count(usage, 1)
        store = self.plan.cache if cache else None
        if status == "finished" and store is not None and row.told >= 0:
            store.put(store.key(row.task, self._notes[: row.told]), to_json(plain_answer(row.answer)),
                      self.plan.model_name)
        row.task = ""
        self._settled(row, None)

    def _count(self, usage: Usage, steps: int = 0) -> str | None:
        """Count ``usage`` at the batch price: its dollars as said, or ``None`` for no tokens."""
        book = self.book
        book.add_totals(usage, steps, 0)
        book.tree_usage += usage
        price, _note = batch_price(self.plan.config.model)
        if price is not None:
            book.cost += price.cost(usage)
        if not (usage.input_tokens or usage.output_tokens):
            return None
        return f"{usage.input_tokens:,} in, {usage.output_tokens:,} out" + (
            f", ${price.cost(usage):,.2f}" if price is not None else "")

    def _abandon(self, why: str) -> None:
        """The batch ended (failed, or stopped): every row still gathered or with the provider stops saying ``why``
        (a provider batch is not cancelled here: it is named, as it may still run its rows)."""
        for row in self._pending.values():
            self._end_row(row, "stopped", f"{why} (before it was submitted)")
        self._pending, self._bytes, self._size = {}, [], 0
        for chunk in self._chunks:
            if not chunk.ended and chunk.rows:
                where = (f"; its provider batch {chunk.batch_id} was not cancelled" if chunk.batch_id else
                         " (while its file was uploaded or its provider batch created)")
                for row in list(chunk.rows.values()):
                    self._end_row(row, "stopped", why + where)
                chunk.rows = {}

    def _fail_rows(self, chunk: Chunk, rows: Any, reason: str, status: str = "failed") -> None:
        for row in list(rows):
            self._end_row(row, status, reason)
        chunk.rows = {}

    async def _cancel_all(self) -> None:
        """Stop: cancel every provider batch not ended, follow each to its end and keep the rows it finished; rows
        gathered but not submitted stop. The cancels and the looks together take at most ``batch_stop_wait``
        seconds (a provider that does not answer is not waited for at the model's timeout and retries)."""
        for row in self._pending.values():
            self._end_row(row, "stopped", "stopped before it was submitted")
        self._pending, self._bytes, self._size = {}, [], 0
        live = [c for c in self._chunks if not c.ended and c.batch_id is not None]
        try:
            await asyncio.wait_for(self._follow_cancels(live), self.settings.stop_wait)
        except TimeoutError:
            pass
        for chunk in live:
            if not chunk.ended:  # not an "ended" event: a resume follows it (the provider may still run its rows)
                self._fail_rows(chunk, chunk.rows.values(), "stopped: its provider batch was still being cancelled "
                                f"after batch_stop_wait={self.settings.stop_wait:g} s ({chunk.batch_id})", "stopped")
                chunk.ended = True

    async def _follow_cancels(self, live: list[Chunk]) -> None:
        async def cancel(chunk: Chunk) -> None:
            try:
                self._take(chunk, await self._api.cancel(str(chunk.batch_id)))
            except Exception:  # noqa: BLE001, S110 - ended already (409): followed to its end below
                pass

        await asyncio.gather(*(cancel(c) for c in live))
        while any(not c.ended for c in live):
            for chunk in live:
                if chunk.ended:
                    continue
                try:
                    batch = await self._api.get(str(chunk.batch_id))
                except Exception as err:  # noqa: BLE001 - tried again until the wait is over
                    if gone(err):
                        self._lost(chunk, err, "stopped")
                    continue
                self._take(chunk, batch)
                if chunk.status in FINAL:
                    await self._collect(chunk, batch)
            if any(not c.ended for c in live):
                await asyncio.sleep(min(self.settings.poll, 5.0))

    # -- steering and progress -----------------------------------------------------------------------

    async def steered(self, verb: str, message: str | None) -> None:
        self._wake.set()
        if verb != "interject" or not message:
            return
        self._notes.append(VERBS["interject"].note(message, None) or message)
        self._looked_up = {}
        sent = sum(len(c.rows) for c in self._chunks if not c.ended)
        if sent:
            self._run.emit(ev.Notification, call_id=None, text=(
                f"the interjection applies to the rows not yet submitted; {sent} row(s) already with the provider "
                "are not told (a provider batch cannot be changed once submitted)"))

    def provider_progress(self) -> dict[str, Any] | None:
        return progress_of(self._chunks)

    def inspection(self, handle: Any) -> str:
        p = self.provider_progress() or {}
        return (super().inspection(handle) + f"\n\nIt runs through the provider's Batch API ({p.get('files')} "
                f"file(s), status {p.get('status')}, {p.get('completed')} of {p.get('total')} requests done, within "
                "a 24h window).")
