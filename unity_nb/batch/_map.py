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
Each ended row is a ``row_finished`` event, committed by the store at once, with what it was asked (a hash of its
task, the model's name, the answer's fields and the system prompt, when one was given). ``done=``
(:func:`finished_rows` over a store) continues one earlier run: a row it finished is kept only at the same position,
under the same label, asked the same; kept rows are written again as this run's events, so the newest run holds all
of them.

Rows are made as they start (:class:`RowSource`): a 10,000,000-row generator starts at once, and a batch holds its
running rows plus, per finished row, its answer. Spending: ``h.cost`` (dollars so far), ``progress``'s projection
for the whole batch, ``budget=`` (no new row starts once spending reaches it), ``cache=`` (a store whose
``map_cache`` table answers a row asked before without a call; see :mod:`._cache`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic

from .. import events as ev
from .._errors import UserError
from ..loop import LoopHandle, LoopOptions, Tree
from ..models import RateLimit, Usage, default_model, format_dollars, set_rate_limit
from ._book import Book, counts_text
from ._cache import ResultCache, model_identity, options_fingerprint
from ._estimate import Estimate, estimate_map, tokens_out
from ._map_engine import MapEngine, RowPlan
from ._provider_batch import ProviderBatchEngine, batch_settings
from ._ray_actors import RowRecipe
from ._ray_engine import RayEngine, ray_settings
from ._ray_source import RemoteRows, is_remote
from ._rows import RowSource, answer_tool, check_text_answer, finished_rows, output_model
from ._spend import Spending

__all__ = ("Estimate", "MapHandle", "check_map_options", "estimate_map", "finished_rows", "map_rows")

_KEEP_ROW_EVENTS = 2000
"""Rows' events a batch keeps in ``h.events`` (the first ones) and, past those, for ``wait_for`` (the last ones)."""
_ROW_EVENTS = frozenset({"row_finished", "child_started"})


class MapHandle(LoopHandle):
    """The handle of a batch: one steerable operation whose children are its running rows. Beside the loop
    handle's names it has ``progress``, :meth:`results`, ``failures``, ``rows`` (its :class:`Book`: counts,
    kept, cached, the rows that ended badly, a running row's loop), ``spending`` (budget, whether it was
    reached, the note said before the start) and :meth:`set_budget`. Its engine (:class:`MapEngine`) owns the
    row work; the steering verbs are the loop's own."""

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
        kind: str | None = None,
        **row_options: Any,
    ) -> None:
        _check_concurrency(concurrency)
        if expected_output_tokens is not None:
            tokens_out(None, expected_output_tokens)  # a UserError now, not once the rows run
        if kind is not None:
            _check_kind(kind)
            self.kind = kind
        model = model if model is not None else default_model("map")
        model_name = str(getattr(model, "name", type(model).__name__))
        fields = output_model(output, columns)
        via = batch_settings(row_options)  # via="batch": the provider's Batch API (None: live calls)
        on_ray = ray_settings(row_options)  # backend="ray": rows on a Ray cluster (None: in this kernel)
        _check_backends(on_ray, via)
        sent_options = dict(row_options)  # what a Ray worker makes each row's loop from
        remote = on_ray is not None and is_remote(items)  # a Ray Dataset or a Parquet path: read on the cluster
        source: Any = RemoteRows(items, task) if remote else RowSource(items, task)
        tools = list(row_options.pop("tools", ()) or ())
        if fields is not None:
            tools.append(answer_tool(fields))
        options = {"tools": tools, **row_options}
        fingerprint = options_fingerprint(options, fields)
        checked = dict(options)
        if fields is not None:  # an answer in text that does not validate is sent back once
            checked["evaluations"] = [*row_options.get("evaluations", ()), check_text_answer(fields)]
        config = LoopOptions.make(model=model, **checked)  # checked once, for every row
        if rate is not None:
            set_rate_limit(model, rate)
        identity = model_identity(model)
        _check_cache(cache)
        results_cache = (ResultCache(cache, identity, fingerprint)
                         if identity is not None and cache not in (True, False, None) else None)
        # a Series' name names the answers (a DataFrame's .name is its column 'name', if it has one: not a name)
        named = fields is None and not remote and source.single
        book = Book(source, fields, items.name if named else None)
        spending = Spending(book, model, model_name, budget)
        plan = RowPlan(task, fields, config, "name" in row_options, model_name, concurrency, results_cache)
        self._rows: MapEngine
        if on_ray is not None:
            recipe = RowRecipe(model, sent_options, columns if output is None else None, output, name or "map",
                               "name" in row_options)
            self._rows = RayEngine(plan, book, spending, on_ray, recipe, items=items, done=done)
        elif via is not None:
            self._rows = ProviderBatchEngine(plan, book, spending, via, items=items, done=done)
        else:
            self._rows = MapEngine(plan, book, spending, items=items, done=done)
        # what the whole batch would cost against its budget, before it starts (what raises here leaves none running)
        spending.project(source, book.kept, options, fields, expected_output_tokens, batch=via is not None)
        super().__init__(
            label or task, model=model, name=name, bus=bus, max_steps=1, parent=parent, engine=self._rows.bind,
        )
        # past its first rows' events (row_finished, child_started), h.events stops growing with the rows
        self.run.cap_events(_ROW_EVENTS, _KEEP_ROW_EVENTS)
        self.run.inspection = self._rows.inspection  # what a question about the batch is answered from
        self._rows.start()

    # -- what it adds to the loop handle ---------------------------------------------------------------

    @property
    def rows(self) -> Book:
        """Its rows: ``total``, ``counts``, ``kept``, ``cached``, ``set_aside``, ``started``, ``ended_badly``,
        ``rate()``, ``handle(key)`` (a running row's loop)."""
        return self._rows.book

    @property
    def spending(self) -> Spending:
        """Its money: ``budget``, ``reached``, ``note``, ``message()``; ``cost()`` and ``usage()`` of every row."""
        return self._rows.spending

    def set_budget(self, dollars: float | None) -> None:
        """Change the cap on dollars spent (``None`` lifts it). A batch paused at its budget stays paused until
        :meth:`resume`, which a cap above what was spent allows."""
        self._rows.spending.set(dollars)

    def results(self) -> Any:
        """The result so far (what ``await`` gives once the batch ends): rows not finished are missing, and
        ``.attrs["reasons"]`` says why (``None`` for a row still to come)."""
        return self._rows.book.results()

    @property
    def failures(self) -> Any:
        """Rows that failed or stopped: a DataFrame of ``key``, ``status`` and ``reason``."""
        return self._rows.book.failures

    @property
    def progress(self) -> dict[str, Any]:
        """The batch's rows and money, read from one source (``rows.counts``): ``done`` (``kept`` of them from the
        run this one continues, ``cached`` from the result cache), ``running``, ``queued`` (to come, or waiting for
        their turn at the model), ``failed``, ``stopped`` and ``not_started`` (the batch ended first) add up to
        ``total`` (``queued`` is ``None`` while a generator's length is unknown); ``ended`` (done, failed or stopped)
        and ``percent``, the share of ``total`` that ended; rows a second lately; seconds left while it runs; tokens
        and dollars so far (``cost``, ``None`` when the price is unknown) and ``projected_cost`` for the whole batch
        from the rows ended so far (never below ``cost``); the ``budget`` and whether it was reached; ``outcome``,
        the status as a person reads it; ``rows_text``, the rows as a person reads them, and ``text``, all of it
        as the widget shows it."""
        book, spending = self._rows.book, self._rows.spending
        counts = book.counts
        ended_batch = self.done()
        rate = book.rate(ended_batch)
        queued = counts["queued"]
        left = None if queued is None else queued + counts["running"]
        moving = not ended_batch and not self.run.gate.paused and self.run.state.stop_reason is None
        usage = self.usage
        cost = spending.cost()
        ended = book.ended_rows  # rows of this run that ended (kept rows excluded)
        projected = None
        if cost is not None and left is not None:
            projected = cost + (book.cost / ended * left if ended else 0.0) if left else cost
            if left and not ended:
                projected = None
        if projected is not None and cost is not None:
            projected = max(projected, cost)  # what is spent is spent: running rows count before they end
        outcome = self.status.value
        if outcome == "finished" and (counts["failed"] or counts["stopped"]):
            outcome = "finished with failures"
        total = book.total
        finished = counts["finished"] + counts["failed"] + counts["stopped"]
        p = {
            "total": total, "done": counts["finished"], "kept": book.kept, "cached": book.cached,
            "running": counts["running"], "queued": queued, "failed": counts["failed"], "stopped": counts["stopped"],
            "not_started": counts["not_started"], "ended": finished,
            "percent": (100 * finished // total if total else 100) if total is not None else None,
            "rows_per_second": round(rate, 2),
            "eta_seconds": round(left / rate, 1) if rate and left and moving else None,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
            "tokens_estimated": usage.estimated, "outcome": outcome,
            "cost": None if cost is None else round(cost, 6),
            "projected_cost": None if projected is None else round(projected, 6),
            "budget": spending.budget, "budget_reached": spending.reached,
            **({"provider_batch": p} if (p := getattr(self._rows, "provider_progress", lambda: None)()) else {}),
            **({"ray": r} if (r := getattr(self._rows, "ray_progress", lambda: None)()) else {}),
        }
        p["rows_text"] = counts_text(counts, total, ended=book.over, kept=book.kept, cached=book.cached,
                                     cut=len(book.cut))
        p["text"] = progress_text(p)
        return p

    # -- one source for the batch's totals: the rows that ended (the book), and those running ----------

    @property
    def usage(self) -> Usage:
        """Tokens of every row of this run (ended and running)."""
        done = self._rows.book.usage
        out = Usage(done.input_tokens, done.output_tokens, done.estimated)
        for c in self.run.live_children():
            out += c.usage
        return out

    @property
    def steps(self) -> int:
        """Model calls of every row of this run."""
        return self._rows.book.steps + sum(c.steps for c in self.run.live_children())

    @property
    def tool_calls(self) -> int:
        """Tool calls of every row of this run."""
        return self._rows.book.tool_calls + sum(c.tool_calls for c in self.run.live_children())

    @property
    def tree(self) -> Tree:
        """The batch and its running rows (iterate it; rows that ended are released); ``usage`` and ``cost``
        count every row of this run and every loop under a row, ended or running."""
        spending = self._rows.spending
        return Tree(self, lambda: (spending.usage(), spending.cost()))

    @property
    def cost(self) -> float | None:
        """Dollars spent so far (a batch's own usage is its rows'): ``tree.cost``."""
        return self._rows.spending.cost()

    def __repr__(self) -> str:
        book = self._rows.book
        rows = counts_text(book.counts, book.total, ended=book.over, kept=book.kept, cached=book.cached,
                           cut=len(book.cut))
        return f"<unity {self.kind} {self.name!r}: {self.progress['outcome']}, {rows}>"


def _check_concurrency(concurrency: Any) -> None:
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UserError(f"concurrency takes a whole number of at least 1, not {concurrency!r}")


def _check_kind(kind: Any) -> None:
    if not isinstance(kind, str) or not kind.isidentifier():
        raise UserError(f"kind takes a name (an identifier, e.g. 'sentiment'), not {kind!r}")


def _check_backends(on_ray: Any, via: Any) -> None:
    if on_ray is not None and via is not None:
        raise UserError("backend='ray' runs live rows on a cluster; via='batch' sends them to the provider's "
                        "Batch API: give one of them")


def _check_cache(cache: Any) -> None:
    if cache not in (True, False, None) and not callable(getattr(cache, "query", None)):
        raise UserError(f"cache takes True, False or a store (u.Store), not {cache!r}")


def check_map_options(model: Any, options: Mapping[str, Any]) -> None:
    """A UserError now for an option every map of an operation would refuse (``concurrency``, ``rate``, ``cache``,
    ``via``/``backend`` and theirs, a row's loop options): what an operator of several maps checks before it starts,
    not once its first map does (a join's after reading and indexing both sides). Nothing is set: ``rate`` is read,
    not shared yet."""
    row_options = dict(options)
    _check_concurrency(row_options.pop("concurrency", 8))
    if (kind := row_options.pop("kind", None)) is not None:
        _check_kind(kind)
    if (rate := row_options.pop("rate", None)) is not None:
        RateLimit.parse(rate)
    _check_cache(row_options.pop("cache", True))
    if (expected := row_options.pop("expected_output_tokens", None)) is not None:
        tokens_out(None, expected)
    _check_backends(ray_settings(row_options), batch_settings(row_options))
    tools = list(row_options.pop("tools", ()) or ())
    LoopOptions.make(model=model, tools=tools, **row_options)


def progress_text(p: Mapping[str, Any]) -> str:
    """A batch's progress as a person reads it (the widget's line): its rows (``rows_text``), rows a second and
    time left while it runs, tokens, and money (:func:`format_dollars`: two significant digits at least)."""
    parts = [p["rows_text"]]
    pb = p.get("provider_batch")
    if pb:  # through the provider's Batch API: its status and window, as the provider counts its requests
        parts.append(f"provider batch ({pb['files']} file(s)): {pb['status']}, {pb['completed']:,} of {pb['total']:,} "
                     f"requests done, {pb['failed']:,} failed, within its {pb['window']} window")
    if p.get("ray"):  # on a Ray cluster: starting or joining it, then its workers
        parts.append(p["ray"]["text"])
    ended = p["outcome"] not in ("running", "paused", "waiting")
    if not ended:
        parts.append(f"{p['rows_per_second']:g} rows/s")
    if p["eta_seconds"] is not None:
        parts.append(f"about {math.ceil(p['eta_seconds'])} s left")
    approx = "≈" if p["tokens_estimated"] else ""
    parts.append(f"{approx}{p['input_tokens']:,}/{p['output_tokens']:,} tokens{' (estimated)' if approx else ''}")
    if p["cost"] is not None and (p["input_tokens"] or p["output_tokens"] or p["budget"] is not None):
        money = f"{format_dollars(p['cost'])} so far"
        if p["projected_cost"] is not None and not ended:
            money += f", ≈{format_dollars(p['projected_cost'])} projected"
        parts.append(money)
    elif p["input_tokens"]:
        parts.append("$ unknown (no price for this model)")
    if p["budget_reached"]:
        parts.append(f"paused at its budget of {format_dollars(p['budget'])}")
    elif p["budget"] is not None:
        parts.append(f"budget {format_dollars(p['budget'])}")
    return " · ".join(parts)


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
