"""A map run on a Ray cluster (``u.map(..., backend="ray")``, ``%unity map ... --backend ray``): the kernel keeps
the batch (its handle, book, spending, events, store and result cache, as for local rows); the rows run in Ray
worker processes, on one machine or many.

:class:`RayEngine` takes the map's :class:`RowPlan`, :class:`Book` and :class:`Spending` like the live
:class:`MapEngine`, whose settling it shares (rows kept from the run this one continues, answered by the result
cache, or failing their template make no request and never leave the kernel). What differs:

- **The cluster.** ``drive`` starts or joins it in a worker thread (``ray_address=``, else ``RAY_ADDRESS``, else a
  local cluster, or the one this kernel already joined); the progress line says so meanwhile, then how many workers.
- **The rows** go to the batch's control actor (``_ray_actors.Control``) in chunks, as the workers lease them:
  the kernel holds at most ``4 x concurrency`` rows (at least 64) not yet leased, and the rows in flight. A Ray
  Dataset or a Parquet path never passes through the kernel (``_ray_source``): it learns block refs and counts.
  Every ``_POLL`` seconds the kernel tells the control actor pause, stop and the budget, and takes its outbox:
  each row that ended is settled into the book once (its position is its key), so ``row_finished`` events, the
  store, the cache, ``await`` and the widget are the local backend's. A row's loop's events (``model_delta`` left
  out, as the store leaves it out) come back with it and are published on the batch's bus before its
  ``row_finished``, the loop a child of the batch: the store keeps its transcript as a local row's.
- **Workers** (``ray_workers=``, else one per CPU of the cluster) each run their share of ``concurrency`` and of
  the rate limit. A worker that dies (its process killed) has its leased rows put back in the queue and a new
  worker started; each row's answer is kept once.
- **A lost cluster** (the control actor unreachable) ends the batch with an error saying so; the rows that
  finished are kept (``h.results()``, the store: ``%unity resume NAME`` asks only the others).
- **Refused**: rows that need this kernel (the CodeAct actor's tools, tools taking variables by reference, tools
  waiting for a person's approval, ``dynamic_tools=``) and ``via="batch"`` up front; a model or a tool that cannot
  be sent to another process (a key given in code is never sent) as the batch starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import importlib.util
import json
import math
import os
import re
import socket
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from .. import events as ev
from .._errors import ModelError, UnityError, UserError
from ..models import Usage, price_of, rate_limit_of
from ._book import counts_text
from ._failures import reason_of
from ._map_engine import MapEngine, RowPlan
from ._ray_actors import Control, RowRecipe, Worker
from ._ray_recipe import needs_kernel, pickled
from ._ray_source import RemoteRows, remote_blocks
from ._rows import Row, parse_answer

__all__ = ("RayEngine", "RaySettings", "ray_settings")

_POLL = 0.15
"""Seconds between the kernel's looks at the control actor's outbox."""
_CHUNK = 1024
"""Rows sent to the control actor in one call."""
_REPLACEMENTS = 3
"""Workers started in place of dead ones, per worker of the batch, before the batch fails (they keep dying)."""
_CALL_TIMEOUT = 30.0
"""Seconds a call to the control actor may take before the cluster counts as lost."""
_STOP_WAIT = 1.2
"""Seconds a stop waits for the workers to report the rows they stopped."""
_INSTALL = "backend='ray' needs Ray: pip install 'unity_nb[ray]'"
_ADDRESS = re.compile(r"(auto|local|(ray|ray\+tls)://[^\s/]+(:\d+)?|[A-Za-z0-9_.\-\[\]:]+:\d+)")

_thread: list[concurrent.futures.ThreadPoolExecutor] = []
_REMOTE: dict[str, Any] = {}


def _remote_classes(ray: Any) -> tuple[Any, Any]:
    """The control actor's and the workers' Ray classes, made once per process (a batch sets its own resources
    with ``.options``): Ray keeps what it learns of each class it is given for the driver's life (its methods'
    metadata, keyed by a hash of that very class), so a class made per batch kept some 30 KiB per batch."""
    if not _REMOTE:
        _REMOTE.update(control=ray.remote(num_cpus=0)(Control), worker=ray.remote(max_restarts=0)(Worker))
    return _REMOTE["control"], _REMOTE["worker"]


def _ray_thread() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread that starts or joins a cluster, kept for the kernel's life: a local cluster's processes
    end with the thread that started them (Linux's parent-death signal), so it never ends."""
    if not _thread:
        _thread.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="unity_nb-ray"))
    return _thread[0]


@dataclass(frozen=True, slots=True)
class RaySettings:
    """The ``ray_*`` options of a map run with ``backend="ray"``."""

    address: str | None = None
    workers: int | None = None


def ray_settings(options: dict[str, Any]) -> RaySettings | None:
    """Take ``backend`` and the ``ray_*`` options out of a map's ``options``: the settings for ``backend="ray"``,
    ``None`` for the local backend (which takes none of them)."""
    backend = options.pop("backend", None) or "local"
    given = {k: options.pop(k) for k in ("ray_address", "ray_workers") if k in options}
    if backend not in ("local", "ray"):
        raise UserError(f"backend takes 'local' (rows run in this kernel) or 'ray' (on a Ray cluster), not "
                        f"{backend!r}")
    if backend == "local":
        given = {k: v for k, v in given.items() if v is not None}
        if given:
            raise UserError(f"{', '.join(sorted(given))} go with backend='ray' only")
        return None
    if importlib.util.find_spec("ray") is None:
        raise UserError(_INSTALL)
    address = given.get("ray_address")
    if address is not None and (not isinstance(address, str) or not _ADDRESS.fullmatch(address.strip())):
        raise UserError(f"ray_address takes a Ray cluster's address (ray://HOST:10001 for Ray Client, HOST:6379 "
                        f"for its head node, or auto), not {address!r}")
    workers = given.get("ray_workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise UserError(f"ray_workers takes a whole number of at least 1, not {workers!r}")
    return RaySettings(address.strip() if isinstance(address, str) else None, workers)


def _connect(settings: RaySettings) -> str:
    """Start or join the cluster (in the Ray thread); what it joined, as a person reads it."""
    import ray

    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        wanted = settings.address
        if wanted not in (None, "auto") and wanted.split("://")[-1] != current:
            raise UserError(f"this kernel is already joined to the Ray cluster at {current}; ray_address={wanted!r} "
                            "cannot be joined beside it (ray.shutdown() first, or leave out ray_address)")
        return f"the Ray cluster at {current}"
    where = settings.address or os.environ.get("RAY_ADDRESS")
    if where:
        _reachable(where)
    try:
        ray.init(address=settings.address, include_dashboard=False, log_to_driver=False,
                 ignore_reinit_error=True)
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = settings.address or os.environ.get("RAY_ADDRESS")
        raise UserError(f"the Ray cluster at {where!r} could not be joined: {err}") from None
    return f"the Ray cluster at {ray.get_runtime_context().gcs_address}"


def _reachable(address: str) -> None:
    """A UserError at once when nothing listens at ``address`` (``ray.init`` would retry for minutes)."""
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5.0):
            pass
    except (OSError, ValueError) as err:
        raise UserError(f"nothing answers at the Ray cluster's address {address!r} ({err}): start the cluster "
                        "(ray start --head), or fix ray_address= (or RAY_ADDRESS)") from None


_CLASSES: dict[str, type[ev.Event]] = {}


def _event_classes() -> dict[str, type[ev.Event]]:
    """Each event class by its kind (made once)."""
    if not _CLASSES:
        for cls in typing.get_args(typing.get_args(ev.AnyEvent)[0]):
            kind = next(f.default for f in dataclasses.fields(cls) if f.name == "kind")
            _CLASSES[str(kind)] = cls
    return _CLASSES


class RayEngine(MapEngine):
    """Drives a map's rows on a Ray cluster (see the module's docstring)."""

    __slots__ = ("_blocks", "_control", "_fed_last", "_joined", "_made", "_pending_notes", "_pids", "_queued",
                 "_ray", "_recipe", "_remote", "_sent", "_stage", "_started", "_worker_args", "_workers", "settings")

    def __init__(self, plan: RowPlan, book: Any, spending: Any, settings: RaySettings, recipe: RowRecipe, *,
                 items: Any = None, done: Mapping[str, Any] | None = None) -> None:
        why = needs_kernel(recipe.options.get("tools"))
        if why is not None:
            raise UserError(f"backend='ray' runs rows in other processes, and these rows need this kernel: {why}. "
                            "Run it with the local backend (leave out backend='ray')")
        if plan.config.dynamic_tools is not None:
            raise UserError("backend='ray' runs rows in other processes: dynamic_tools= needs this kernel; run it "
                            "with the local backend")
        super().__init__(plan, book, spending, items=items, done=done)
        self.settings = settings
        limit = rate_limit_of(plan.config.model)
        if limit is not None and not limit.learned:
            recipe.limit = (limit.requests_per_minute, limit.tokens_per_minute)
        self._recipe = recipe
        self._sent: dict[int, Row] = {}  # rows sent to the cluster and not ended, by position
        self._queued = 0  # of those, rows not leased yet
        self._fed_last = False
        self._control: Any = None
        self._workers: dict[int, tuple[Any, Any]] = {}  # worker id -> (actor, its run's ref)
        self._started = self._made = 0  # workers the batch started; workers made (replacements too)
        self._worker_args: tuple = ()
        self._pids: set[int] = set()
        self._pending_notes: list[str] = []
        where = settings.address or os.environ.get("RAY_ADDRESS")
        self._stage = f"joining {where}" if where else "starting a local Ray cluster (or joining this machine's)"
        self._joined = ""
        self._ray: Any = None
        self._remote = isinstance(book.source, RemoteRows)  # a Dataset or Parquet: rows made on the cluster
        self._blocks: list[tuple[Any, int, int]] = []  # their refs, held while the batch runs (only)
        if self._remote and plan.cache is not None:
            self.plan = RowPlan(plan.template, plan.output, plan.config, plan.named, plan.model_name,
                                plan.concurrency, None)  # the cache keys on a row's task, which stays on the cluster
            book.plan = self.plan

    # -- what the progress line says ----------------------------------------------------------------------

    def ray_progress(self) -> dict[str, Any]:
        text = f"Ray: {self._stage}"
        if self._workers or self._pids:
            text = f"on Ray: {len(self._workers)} worker(s) live, {len(self._pids)} process(es) ran rows"
        return {"stage": self._stage, "workers": len(self._workers), "processes": len(self._pids),
                "pids": sorted(self._pids),
                "cluster": self._joined, "text": text}

    # -- the drive ------------------------------------------------------------------------------------------

    async def drive(self) -> str:
        book = self.book
        book.first_start = time.monotonic()
        loop = asyncio.get_running_loop()
        try:
            self._joined = await loop.run_in_executor(_ray_thread(), _connect, self.settings)
            import ray

            self._ray = ray
            self._stage = f"starting workers on {self._joined}"
            await asyncio.to_thread(self._start)
            while True:
                await self._feed()
                await self._poll()
                if self.fatal is not None:
                    raise self.fatal
                if book.exhausted and self._fed_last and not self._sent and self._all_ended():
                    break
                await asyncio.sleep(_POLL)
        except asyncio.CancelledError:  # a stop, or its task cancelled from outside (no reason): its rows stop
            await self._stopping(self._stop_reason())
            raise
        except BaseException as err:  # the batch fails: its rows still out stop with it
            self._abandon(f"stopped: the batch failed ({reason_of(err)})")
            raise
        finally:
            if self._control is not None:
                await asyncio.to_thread(self._end_actors)
            # the recipe's and the blocks' object refs: held, they kept them in the cluster's object store for as
            # long as the handle lived (a Parquet path's rows read into the store as pandas blocks, all of them)
            self._worker_args, self._blocks = (), []
        self.conclude()
        return counts_text(book.counts, book.total, ended=True, kept=book.kept, cached=book.cached, cut=len(book.cut))

    def _start(self) -> None:
        """Make the control actor and the workers (in a thread: Ray's calls block)."""
        ray = self._ray
        self._recipe.batch = self._run.name
        self._recipe.parent = (self._run.id, self._run.lineage)  # each row's loop is the batch's child
        try:
            blob = pickled(ray.cloudpickle, self._recipe)
        except UserError:
            raise
        except Exception as err:  # noqa: BLE001 - what cannot be pickled, said so a person can act
            raise UserError(f"backend='ray' sends each row's model, tools and options to other processes, and "
                            f"they cannot be sent: {type(err).__name__}: {err}. Use importable functions and "
                            "models made with base_url=, or the local backend") from None
        price = price_of(self.plan.config.model)
        spending = self.spending
        budget = None if spending.budget is None else spending.budget - spending.spent_before
        control_cls, worker_cls = _remote_classes(ray)
        self._control = control_cls.options(name=f"unity_nb-{self._run.id}").remote(
            budget, 0.0, (price.input, price.output) if price is not None else None)
        for note in self._pending_notes:
            self._control.interject.remote(note)
        if self._remote:  # read before the workers take the CPUs Ray Data's tasks need
            self._feed_blocks()
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        n = self.settings.workers or max(1, int(cpus))
        share = min(1.0, cpus / n) if cpus else 1.0
        per = math.ceil(self.plan.concurrency / n)
        self._worker_args = (worker_cls.options(num_cpus=share), ray.put(blob), per, 1.0 / n)
        self._started = n
        for _ in range(n):
            self._new_worker()
        self._stage = f"{n} worker(s) on {self._joined}"

    def _all_ended(self) -> bool:
        """Every row ended: those sent from here (none left out), or, for rows made on the cluster, all of them."""
        if not self._remote:
            return True
        tally, total = self.book.tally, self.book.source.total or 0
        return tally["finished"] + tally["failed"] + tally["stopped"] >= total

    def _feed_blocks(self) -> None:
        """A Dataset's or a Parquet path's blocks to the control actor (counted on the cluster: only refs and
        counts pass through here)."""
        source, book, plan = self.book.source, self.book, self.plan
        assert isinstance(source, RemoteRows)
        self._stage = f"reading the rows' blocks on {self._joined}"
        self._blocks, source.total = remote_blocks(self._ray, source.items, source.parsed)
        fields = ",".join(plan.output.model_fields) if plan.output is not None else ""
        done, self._done_lazy = self._still_answers(self._done_lazy or {}), None  # the others asked again
        self._call(self._control.feed_blocks.remote(self._blocks, source.template, plan.model_name, fields, done,
                                                    plan.config.system))
        book.exhausted = True
        self._fed_last = True

    def _new_worker(self) -> None:  # each with an id of its own, never one a worker had before
        cls, blob, per, share = self._worker_args
        wid, self._made = self._made, self._made + 1
        actor = cls.remote(self._control, wid, blob, per, share)
        self._workers[wid] = (actor, actor.run.remote())

    def _call(self, ref: Any) -> Any:
        """A call's result (in a thread), or the batch ends: the control actor is unreachable."""
        ray = self._ray
        try:
            return ray.get(ref, timeout=_CALL_TIMEOUT)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ray.exceptions.RaySystemError,
                ConnectionError) as err:
            kept = self.book.counts["finished"]
            raise UnityError(
                f"the Ray cluster was lost (its control actor is unreachable: {type(err).__name__}); {kept} row(s) "
                f"finished and are kept (h.results(), and the store: %unity resume {self._run.name} asks only the "
                "others)") from None

    async def _feed(self) -> None:
        """Send the next rows to the control actor while fewer than a few leases' worth wait there (in chunks of
        at most ``_CHUNK`` rows a call)."""
        book = self.book
        target = max(64, 4 * self.plan.concurrency)
        settled = 0
        while True:
            chunk: list[tuple[int, str, str]] = []
            while self._queued + len(chunk) < target and len(chunk) < _CHUNK:
                row = self._next_row()
                if row is None:
                    break
                if self._settle(row):  # kept, from the cache, or a template it cannot fill: never sent
                    settled += 1
                    if settled % 256 == 0:
                        await asyncio.sleep(0)
                    continue
                book.started_row(row)
                row.queued = 1  # queued until a worker leases it
                self._sent[row.position] = row
                chunk.append((row.position, row.task, str(row.key)))
            last = book.exhausted
            if not chunk and (not last or self._fed_last):
                return
            await asyncio.to_thread(self._call, self._control.feed.remote(chunk, last))
            self._queued += len(chunk)
            self._fed_last = last
            if last or self._queued >= target:
                return

    async def _poll(self) -> None:
        run, spending = self._run, self.spending
        spending.check()
        budget = None if spending.budget is None else spending.budget - spending.spent_before
        state = await asyncio.to_thread(self._take, run.gate.paused, None, budget)
        self._take_state(state)  # the rows that ended are settled first, also in the poll that fails the batch
        if state.get("failure") is not None:
            raise state["failure"]

    def _take(self, paused: bool, stopped: str | None, budget: float | None) -> dict[str, Any]:
        """One look (in a thread): the control actor's outbox, and the workers that ended or died (a failure in
        ``state["failure"]``)."""
        state = self._call(self._control.take.remote(paused, stopped, budget))
        refs = {ref: wid for wid, (_a, ref) in self._workers.items()}
        if refs and stopped is None:
            try:  # a failure is the state's: the rows it took from the outbox are settled before it is raised
                self._workers_ended(refs, state)
            except UnityError as err:
                state["failure"] = err
        return state

    def _workers_ended(self, refs: dict[Any, int], state: dict[str, Any]) -> None:
        """The workers whose run ended: a dead one's rows requeued (``state``) and a new one started; a
        UnityError when one failed, or they keep dying."""
        ray = self._ray
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            wid = refs[ref]
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:  # its process died: its rows go to the others
                state.setdefault("requeued", []).extend(self._call(self._control.requeue.remote(wid)))
                replaced = self._made - self._started  # of the workers it started, not those still live
                if replaced >= self._started * _REPLACEMENTS:
                    raise UnityError(f"the batch's Ray workers keep dying ({replaced} replaced; the last: {err}); "
                                     "the rows that finished are kept") from None
                self._new_worker()
            except ray.exceptions.RayTaskError as err:  # its cause in one line, not Ray's traceback
                cause = getattr(err, "cause", None) or err
                raise UnityError(f"a Ray worker of the batch failed: {type(cause).__name__}: {cause}") from None
            del self._workers[wid]

    def _take_state(self, state: dict[str, Any]) -> None:
        for position in state["leased"]:
            row = self._sent.get(position)
            if row is None and self._remote and position not in self.book.answers:  # made on the cluster
                row = self._sent[position] = Row(position, position, {}, "")
                self.book.started_row(row)
            elif row is not None and row.queued:
                row.queued = 0
                self._queued -= 1
        for position in state.get("requeued") or ():  # a dead worker's rows: queued until leased anew
            row = self._sent.get(position)
            if row is not None and not row.queued:
                row.queued = 1
                self._queued += 1
        for pid in state["pids"].values():
            self._pids.add(pid)
        for ended in state["ended"]:
            self._ended(ended)
        if state["ended"]:
            self.spending.check()

    def _ended(self, ended: tuple) -> None:
        """Settle one row a worker ended (once: a position not sent, or settled already, is ignored)."""
        (position, status, answer, reason, tin, tout, steps, tool_calls, tree_in, tree_out, told, cacheable, pid,
         fatal, asked, kept, events) = ended
        book, plan = self.book, self.plan
        row = self._sent.pop(position, None)
        unasked = row is None and asked is None and status == "failed"  # made on the cluster, failed without a call
        if row is None:
            if not self._remote or position in book.answers or position in book.bad:
                return  # settled already: each row once
            row = Row(position, position, {}, "")  # made on the cluster, ended without a worker (kept, or failed)
            row.asked = asked
            if kept:
                row.status, row.answer, row.kept = "finished", parse_answer(json.loads(answer), plan.output), True
                book.finished_without_call(row, row.answer)
                book.kept += 1
                book.tally["finished"] += 1
                self._emit_row(row, None, kept=True)
                return
            book.started_row(row)
        if asked is not None and row.asked is None:
            row.asked = asked
        if pid:
            self._pids.add(pid)
        if row.queued:
            self._queued -= 1
            row.queued = 0
        book.left(row)
        row.status, row.reason, row.tokens = status, reason, (tin, tout)
        if status == "finished":
            try:
                row.answer = parse_answer(json.loads(answer), plan.output)
            except ValueError as err:
                row.status, row.reason = "failed", str(err)
        book.add_totals(Usage(tin, tout), steps, tool_calls)
        self.spending.count_usage(Usage(tree_in, tree_out), plan.config.model)  # no price: the cost is unknown
        cache = plan.cache
        if row.status == "finished" and cache is not None and cacheable:
            cache.put(cache.key(row.task, self._notes[:told]), answer, plan.model_name)
        loop_id = self._publish(events) if events else None
        self._settled(row, None, child_id=loop_id, asked=not unasked)
        if fatal and self.fatal is None:  # as the local backend: a 400 fails every row only before any row finished
            always, status, message, every_call = fatal
            if always or book.tally["finished"] <= book.kept + book.cached:
                self.fatal = ModelError(message, status=status, fails_every_call=every_call)

    def _publish(self, blob: bytes) -> str | None:
        """Publish a row's events (:func:`row_events`: its loop's, a child of the batch, and those under it) on the
        batch's bus, in order, as a local row's loop publishes them: the batch says the row's loop started (capped
        in ``h.events`` with the rows' other events), then each of them. The row's loop id, or ``None``."""
        run = self._run
        bus, parent, loop_id = run.bus, run.id, None
        try:
            items = orjson.loads(blob)
        except orjson.JSONDecodeError:
            return None
        classes = _event_classes()
        for data in items:
            cls = classes.get(data.get("kind"))
            try:  # the fields a worker of this version sent: the class at once (half of model_validate's time)
                event = cls(**data) if cls is not None else ev.Event.model_validate(data)
            except (TypeError, ValueError):
                try:  # fields this version does not have (a worker of another version): the others kept
                    event = ev.Event.model_validate(data)
                except ValueError:  # a kind this kernel does not know: left out
                    continue
            if loop_id is None and isinstance(event, ev.LoopStarted) and event.parent_id == parent:
                loop_id = event.loop_id
                run.emit(ev.ChildStarted, child_id=loop_id, child_name=event.name, ts=event.ts)
            bus.publish(event)
        return loop_id

    async def _stopping(self, reason: str) -> None:
        """Stop: every worker stops its rows (each reported stopped); rows never leased are not started."""
        deadline = time.monotonic() + _STOP_WAIT
        try:
            while self._control is not None:
                state = await asyncio.to_thread(self._take, True, reason, None)
                self._take_state(state)
                if state["in_flight"] == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
        except UnityError:
            pass
        finally:  # every row still out ends so, also when this is cancelled or the cluster is gone
            self._abandon(reason)

    def _abandon(self, reason: str) -> None:
        """The rows still out as the batch ends otherwise than finished: a leased one stopped, the others not
        started."""
        book = self.book
        for row in list(self._sent.values()):
            self._sent.pop(row.position)
            book.left(row)
            if row.queued:  # never leased: not started
                book.started -= 1
                continue
            row.status, row.reason = "stopped", reason
            self._settled(row, None)

    def _end_actors(self) -> None:
        ray = self._ray
        for actor in [a for a, _ref in self._workers.values()] + [self._control]:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - gone already (a lost cluster)
                pass
        self._workers = {}

    # -- steering -----------------------------------------------------------------------------------------

    async def steered(self, verb: str, message: str | None) -> None:
        await super().steered(verb, message)
        if verb != "interject" or not message:
            return
        if self._control is None:
            self._pending_notes.append(message)
            return
        await asyncio.to_thread(self._call, self._control.interject.remote(message))

    def inspection(self, handle: Any) -> str:
        return super().inspection(handle) + f"\n\nIts rows run on Ray ({self.ray_progress()['text']})."
