"""A batch's book: its rows as they end (counts, answers, reasons, totals), and what is read from it (progress, the
result so far, the failures). The engine writes it; the handle and the widget read it (``h.rows``)."""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from typing import Any

from ..models import Usage
from ._rows import Row, RowSource, add_reason, assemble

__all__ = ("NOT_STARTED", "Book", "counts_text")

NOT_STARTED = "not started"
"""The status (and the start of the reason) of a row the batch ended before it started: neither failed nor stopped."""

_KEEP_FAILED = 50
"""Failed and stopped rows kept to be listed (and the first failed ones' loops, to be opened)."""
_WINDOW = 30.0
"""Seconds of ended rows the rate is taken over (from the first row's start until that long has passed)."""


class Book:
    """The rows of one batch, as they start and end: ``h.rows``. Readable at any time: ``total``, ``counts``,
    ``kept``, ``cached``, ``set_aside``, ``started``, ``ended_badly``, :meth:`rate` and :meth:`handle`."""

    def __init__(self, source: RowSource, output: Any, result_name: Any) -> None:
        self.source = source
        self.plan: Any = None
        """What every row is asked and how (the engine's :class:`RowPlan`: ``template``, ``output``, ``config``,
        ``concurrency``, ``cache``)."""
        self._output = output
        self._result_name = result_name
        self.exhausted = False
        """True once every row of the input was made (started, kept or settled)."""
        self.started = 0
        """Rows started (a call made for them) by this run."""
        self.cached = 0
        """Rows answered from the result cache (no call)."""
        self.kept = 0
        """Rows finished by the run this one continues (``done=``), kept and not run again."""
        self.set_aside = 0
        """Rows that run finished which are not kept: asked something else now (data, task or model changed)."""
        self.unasked = 0
        """Rows failed without being asked (no value for what the task names, or a task they cannot fill)."""
        self.first_failure: str | None = None
        """Why the first row that was asked failed (what a batch of which every row failed says)."""
        self.ended_badly: list[Row] = []
        """The first rows that failed or stopped, in the order they ended (what the widget lists)."""
        self.not_started: str | None = None
        """Why rows never started (``"not started: the batch was stopped"``, or failed), once it ended that way."""
        self.over = False
        """True once the batch ended (finished, stopped or failed)."""
        self.first_start: float | None = None
        """When the first row started (``time.monotonic()``): what the first window's rate is taken from."""
        self.tally: collections.Counter[str] = collections.Counter()
        """Rows by status: ``running``, ``finished``, ``failed``, ``stopped``."""
        self.answers: dict[int, Any] = {}  # position -> answer: all a finished row keeps
        self.cut: dict[int, str] = {}
        """Finished rows whose answer the provider cut (the request's max tokens, a content filter), by position:
        used, and said so (``.attrs["cut"]``, the rows' summary)."""
        self.bad: dict[int, tuple[str, str | None]] = {}  # position -> (status, reason), failed or stopped
        self.running: dict[int, Row] = {}
        self.recent: collections.deque[tuple[Any, Any]] = collections.deque(maxlen=20)
        self.ended_rows = 0
        """Rows of this run that ended (kept rows excluded)."""
        self._ended_at: collections.deque[list] = collections.deque()  # [whole second, rows ended in it]
        self._last_end: float | None = None
        # the ended rows' totals (their loops are released as they end)
        self.usage, self.steps, self.tool_calls = Usage(), 0, 0
        self.tree_usage = Usage()
        """Tokens of the ended rows' whole trees (a row's sub-loops too)."""
        self.cost = 0.0
        """Dollars the ended rows' trees spent at known prices (``Spending`` counts the rest by model)."""

    # -- written by the engine -----------------------------------------------------------------

    def finished_without_call(self, row: Row, answer: Any) -> None:
        """A row kept from the run this one continues: finished, counted, no event (the engine says it)."""
        self.answers[row.position] = answer
        self.recent.append((row.key, answer))

    def started_row(self, row: Row) -> None:
        row.status = "running"
        self.tally["running"] += 1
        self.running[row.position] = row
        self.started += 1

    def left(self, row: Row) -> None:
        """``row`` is no longer running (it ended, however)."""
        self.tally["running"] -= 1
        self.running.pop(row.position, None)

    def add_totals(self, usage: Usage, steps: int, tool_calls: int) -> None:
        """An ended row's own tokens, model calls and tool calls (its tree's dollars: ``Spending.count``)."""
        self.usage += usage
        self.steps += steps
        self.tool_calls += tool_calls

    def settled(self, row: Row, *, asked: bool = True) -> None:
        """Count an ended row and keep what it keeps (a finished row its answer; another its reason). ``asked``:
        False for a row that failed without a call (:attr:`unasked`)."""
        self.tally[row.status] += 1
        if row.status == "failed":
            if not asked:
                self.unasked += 1
            elif self.first_failure is None:
                self.first_failure = row.reason
        if row.status == "finished":
            self.answers[row.position] = row.answer
            self.recent.append((row.key, row.answer))
            if row.reason is not None:  # its answer was cut: used, and said so
                self.cut[row.position] = row.reason
        else:
            self.bad[row.position] = (row.status, row.reason)
            if len(self.ended_badly) < _KEEP_FAILED:
                self.ended_badly.append(row)
        now = self._last_end = time.monotonic()
        second = int(now)
        if self._ended_at and self._ended_at[-1][0] == second:
            self._ended_at[-1][1] += 1
        else:
            self._ended_at.append([second, 1])
        self.ended_rows += 1

    # -- read ------------------------------------------------------------------------------------

    @property
    def total(self) -> int | None:
        """Rows in the input: known from the start for a DataFrame, a Series or a list; for a generator once it
        is used up (``None`` until then)."""
        total = self.source.total
        return total if total is not None else (self.source.made if self.exhausted else None)

    @property
    def counts(self) -> Mapping[str, Any]:
        """Rows by status, the one source every count shown is read from; they add up to ``total``:

        - ``finished`` (kept and cached ones too), ``failed``, ``stopped``: rows that ended;
        - ``running``: started, and not waiting for the model;
        - ``queued``: to come: not started yet while the batch goes on, or started and waiting for their turn at
          the model (its rate limit, a one-slot server);
        - ``not_started``: the batch ended (stopped, or failed) before they started.

        ``queued`` (or ``not_started``, once ended) is ``None`` while a generator's length is unknown."""
        c = self.tally
        total = self.total
        ended = c["finished"] + c["failed"] + c["stopped"]
        waiting_turn = sum(1 for r in self.running.values() if r.queued > 0)
        rest = total - ended - c["running"] if total is not None else None
        over = self.not_started is not None  # the batch ended before these rows started
        return {
            "finished": c["finished"], "running": c["running"] - waiting_turn,
            "queued": waiting_turn if over else (None if rest is None else rest + waiting_turn),
            "failed": c["failed"], "stopped": c["stopped"], "not_started": rest if over else 0,
        }

    def rate(self, ended: bool = False) -> float:
        """Rows ended a second: over the last ``_WINDOW`` seconds (from the first row's start until then), at
        least a second; once the batch has ``ended``, over its whole run."""
        if self.first_start is None or not self.ended_rows:
            return 0.0
        if ended:
            return self.ended_rows / max(1.0, (self._last_end or self.first_start) - self.first_start)
        now = time.monotonic()
        while self._ended_at and self._ended_at[0][0] < now - _WINDOW:
            self._ended_at.popleft()
        span = min(_WINDOW, now - self.first_start)
        return sum(n for _s, n in self._ended_at) / max(1.0, span)

    @property
    def cache(self) -> Any:
        """The result cache in use (``problem``, ``flush()``, ``max_rows``, ``max_chars``): ``None`` with
        ``cache=False``, without a store, or for a model whose answers are not a function of its name."""
        return self.plan.cache if self.plan is not None else None

    def handle(self, key: Any) -> Any:
        """The loop of row ``key`` while it runs (or if it failed among the first ones); else ``None``."""
        rows = [*self.running.values(), *self.ended_badly]
        return next((r.child for r in rows if r.key == key and r.child is not None), None)

    def key(self, position: int) -> Any:
        index = self.source.index
        return index[position] if index is not None else position

    def results(self) -> Any:
        """The result so far: rows not finished are missing, and ``.attrs["reasons"]`` says why (``None`` for a
        row still to come); ``.attrs["cut"]`` maps each row whose answer the provider cut (it is used) to what cut
        it."""
        total = self.total if self.total is not None else self.source.made
        index = self.source.index_for(total)
        result = assemble(self.answers, self.reasons(total), index, self._output, self._result_name)
        cut: dict[Any, str | None] = {}
        for p, why in sorted(self.cut.items()):
            if p < len(index):
                add_reason(cut, index[p], why)
        result.attrs["cut"] = cut
        return result

    def reasons(self, total: int | None = None) -> dict[int, str | None]:
        """Why each row without an answer has none, by position (in order; ``None`` for a row still to come): what
        :meth:`results` keys by label (where labels repeat, read this)."""
        if total is None:
            total = self.total if self.total is not None else self.source.made
        reasons: dict[int, str | None] = {p: why for p, (_s, why) in self.bad.items()}
        for p in range(total):
            if p not in self.answers and p not in reasons:
                reasons[p] = self.not_started if p not in self.running else None
        return dict(sorted(reasons.items()))

    @property
    def failures(self) -> Any:
        """Rows that failed or stopped: a DataFrame of ``key``, ``status`` and ``reason``."""
        import pandas as pd

        bad = sorted(self.bad.items())
        return pd.DataFrame({"key": [self.key(p) for p, _ in bad], "status": [s for _, (s, _r) in bad],
                             "reason": [r for _, (_s, r) in bad]})

    def __repr__(self) -> str:
        return f"<rows: {counts_text(self.counts, self.total, ended=self.over, cut=len(self.cut))}>"


def counts_text(counts: Mapping[str, Any], total: int | None, *, ended: bool, kept: int = 0, cached: int = 0,
                cut: int = 0) -> str:
    """The rows as a person reads them, from :attr:`Book.counts`: ``"21 done · 7 failed — 28 of 28 rows ended
    (100%)"``. Rows done always; running and queued while the batch goes on; failed, stopped and not started when
    there are any; the percentage is of the rows that ended (done, failed or stopped) among all of them (a
    generator not read to its end: more rows to come while the batch runs; once it ended, the rest was not read).
    ``cut``: rows done whose answer the provider cut (:attr:`Book.cut`), said beside them."""
    done = f"{counts['finished']} done"
    extra = [f"{n} {what}" for n, what in ((kept, "kept from before"), (cached, "from the cache"),
                                           (cut, "cut off: .attrs['cut']")) if n]
    if extra:
        done += f" ({', '.join(extra)})"
    parts = [done]
    for key, what in (("running", "running"), ("queued", "queued"), ("failed", "failed"), ("stopped", "stopped"),
                      ("not_started", NOT_STARTED)):
        n = counts[key]
        if (key in ("running", "queued") and not ended) or n:
            parts.append(f"{'?' if n is None else n} {what}")
    finished = counts["finished"] + counts["failed"] + counts["stopped"]
    if total is None:  # a generator not read to its end: rows come while it runs; none will once it ended
        rest = "the rest of its input was not read" if ended else "more to come"
        return " · ".join(parts) + f" — {finished} rows ended, {rest}"
    share = 100 * finished // total if total else 100
    return " · ".join(parts) + f" — {finished} of {total} rows ended ({share}%)"
