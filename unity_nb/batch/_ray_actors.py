"""What runs inside Ray for a map with ``backend="ray"``: the batch's control actor and its workers.

:class:`Control` (one per batch, an async actor named after the batch's uid) holds what every worker obeys and
what the kernel reads: paused, stopped, the interjections (in order: a worker asks for those after the ones it
heard), the cool-down after a 429 (a wall-clock deadline), the budget and what was spent, the rows not yet
leased, the rows leased to each worker, and the outbox of rows that ended. A finished row is taken into the outbox
only from the worker it is leased to (so a row given to another worker after its first worker died is kept once).

:class:`Worker` (N of them, each a Ray actor of one CPU) leases rows in small batches, runs each as a loop with
its share of the concurrency and of the rate limit, and exchanges with the control actor at least every
``POLL`` seconds (at once when a row ends): it reports the rows that ended, learns pause, stop, the
interjections and the cool-down, and leases rows while it has room. Pause holds every new model request at a gate
(:class:`GatedModel`); a running row gets an interjection before its next request; stop ends its rows (each
reported stopped); a 429 any worker sees is every worker's cool-down.

Nothing here imports ray at import time: the kernel makes these classes remote (``ray.remote(Control)``) when a
batch starts.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ("POLL", "Control", "Ended", "GatedModel", "RowRecipe", "Worker", "rows_in")

POLL = 0.2
"""Seconds between a worker's exchanges with the control actor (at most): pause, stop, interjections and the
cool-down reach every worker within that (plus a request already sent)."""


@dataclass(slots=True)
class RowRecipe:
    """What a worker makes each row's loop from: the model, the rows' loop options as the map was given them (its
    tools included), the answer's fields (``columns`` as names and types, or a pydantic model), the batch's name."""

    model: Any
    options: dict[str, Any]
    columns: Any
    output: Any
    batch: str
    named: bool
    limit: tuple[float | None, float | None] = (None, None)
    """The rate limit's requests and tokens a minute, for the whole batch (each worker takes its share)."""
    parent: tuple[str, tuple[str, ...]] = ("", ())
    """The batch's loop id and lineage: each row's loop is its child (its events are sent back as such)."""
    extra: dict[str, Any] = field(default_factory=dict)


Ended = tuple
"""A row that ended, as a worker reports it: ``(position, status, answer JSON or None, reason, input tokens, output
tokens, steps, tool calls, tree input tokens, tree output tokens, told, cacheable, pid, fatal, asked, kept, events)``
(``kept``: finished by the run this one continues, said by the control actor without a call; ``events``: the row's
loop's events and its descendants', as :func:`row_events` makes them, or ``None``; ``fatal``: for a model error that
may fail every row, ``(whether it does whatever rows finished, its HTTP status, its message, fails_every_call)``,
else false: the kernel decides, from every worker's rows, as the local backend does)."""

_SKIP = frozenset({"model_delta"})
"""What a row's events leave out (as the store does: the streamed pieces of a reply, whole in its response)."""


def row_events(events: list[Any], parent: tuple[str, tuple[str, ...]]) -> bytes:
    """A row's events, oldest first, as the kernel publishes them: a JSON array of each event's fields (the store's
    JSON), each under the batch's lineage, the row's loop a child of the batch (``parent``: its id and lineage), and
    without ``seq`` (the kernel numbers them as it publishes them)."""
    import orjson

    parent_id, lineage = parent
    parts = []
    for event in events:
        data = event.model_dump()
        del data["seq"]
        data["lineage"] = (*lineage, *event.lineage)
        if event.kind == "loop_started" and event.parent_id is None:  # the row's loop: the batch's child
            data["parent_id"] = parent_id
            data.update(base_url=None, price_input=None, price_output=None)  # said by the batch's own start
        try:
            parts.append(orjson.dumps(data))
        except TypeError:  # a value orjson does not take: the standard way (ASCII; what JSON cannot hold as repr)
            parts.append(json.dumps(data, separators=(",", ":"), default=repr).encode())
    return b"[" + b",".join(parts) + b"]"


def rows_in(frame: Any) -> int:
    """A block's rows (run on the cluster, so the block never comes to the kernel)."""
    return len(frame)


def _fields_key(output: Any) -> str:
    return ",".join(output.model_fields) if output is not None else ""


class Control:
    """The state of one batch on the cluster (see the module's docstring)."""

    def __init__(self, budget: float | None, spent: float, price: tuple[float, float] | None) -> None:
        self.paused = False
        self.stopped: str | None = None
        self.notes: list[str] = []
        self.cooldown_until = 0.0  # time.time() before which no worker sends a request
        self.budget = budget
        self.spent = spent
        self.price = price  # dollars per million input and output tokens
        self.queue: collections.deque[tuple[int, str, str]] = collections.deque()
        self.leases: dict[int, dict[int, tuple[int, str, str]]] = {}
        self.outbox: list[Ended] = []
        self.leased_new: list[int] = []
        self.fed_all = False
        self.pids: dict[int, int] = {}
        self.exchanges = 0
        self.blocks: collections.deque[tuple[Any, int, int]] = collections.deque()
        # template, model, fields, done, system prompt
        self.block_plan: tuple[str, str, str, dict[str, Any], str | None] | None = None
        self._expanding: asyncio.Lock | None = None

    # -- the kernel's side -----------------------------------------------------------------------------

    async def feed(self, rows: list[tuple[int, str, str]], last: bool) -> int:
        """More rows to lease (``(position, task, label)``); ``last``: the input has no more."""
        self.queue.extend(rows)
        self.fed_all = self.fed_all or last
        return len(self.queue)

    async def feed_blocks(self, blocks: list[tuple[Any, int, int]], template: str, model_name: str, fields: str,
                          done: dict[str, Any], system: str | None = None) -> int:
        """Rows read on the cluster: blocks (an object ref of a DataFrame, its first position, its rows), made into
        rows one block at a time as the queue runs low. A row ``done`` holds (asked the same) is kept, no call."""
        self.blocks.extend(blocks)
        self.block_plan = (template, model_name, fields, done, system)
        self.fed_all = True
        return sum(n for _r, _s, n in blocks)

    async def _expand(self, want: int) -> None:
        """Make the next blocks' rows while fewer than ``want`` wait (one block in this actor's memory at a time)."""
        if self._expanding is None:
            self._expanding = asyncio.Lock()
        async with self._expanding:
            while self.blocks and len(self.queue) < want and self.block_plan is not None:
                ref, start, _n = self.blocks.popleft()
                frame = await ref
                self._rows_of(frame, start)

    def _rows_of(self, frame: Any, start: int) -> None:
        from ._rows import RowSource, asked_hash, row_id, row_key

        assert self.block_plan is not None
        template, model_name, fields, done, system = self.block_plan
        for row in RowSource(frame, template):
            position = start + row.position
            if row.reason is not None:  # its values do not fit the template: it fails, no call
                self.outbox.append((position, "failed", None, row.reason, 0, 0, 0, 0, 0, 0, 0, False, 0, False,
                                    None, False, None))
                continue
            asked = asked_hash(row.task, model_name, fields, system)
            if done:
                answer = done.get(row_id(position, row_key(position), asked))
                if answer is not None:
                    self.outbox.append((position, "finished", json.dumps(answer), None, 0, 0, 0, 0, 0, 0, 0, False,
                                        0, False, asked, True, None))
                    continue
            self.queue.append((position, row.task, str(position)))

    async def interject(self, text: str) -> int:
        self.notes.append(text)
        return len(self.notes)

    async def take(self, paused: bool, stopped: str | None, budget: float | None) -> dict[str, Any]:
        """The kernel's poll: it says pause, stop and the budget; it takes the outbox and the rows leased since."""
        self.paused = paused
        if stopped is not None:
            self.stopped = stopped
        self.budget = budget
        out, self.outbox = self.outbox, []
        leased, self.leased_new = self.leased_new, []
        return {"ended": out, "leased": leased, "queued": len(self.queue), "spent": self.spent,
                "in_flight": sum(len(v) for v in self.leases.values()), "pids": dict(self.pids),
                "cooldown_until": self.cooldown_until, "exchanges": self.exchanges}

    async def requeue(self, worker: int) -> list[int]:
        """A worker died: the rows leased to it go back to the front of the queue (each answered once); their
        positions."""
        lost = self.leases.pop(worker, {})
        for row in sorted(lost.values(), reverse=True):
            self.queue.appendleft(row)
        return sorted(lost)

    # -- the workers' side -----------------------------------------------------------------------------

    def _over_budget(self) -> bool:
        return self.budget is not None and self.spent >= self.budget

    async def exchange(self, worker: int, pid: int, ended: list[Ended], want: int, heard: int,
                       cooldown_until: float) -> dict[str, Any]:
        """A worker's poll: the rows it ended, how many it would lease, the interjections it heard so far and the
        cool-down it saw; it learns pause, stop, the interjections after those, the cool-down and its new rows."""
        self.exchanges += 1
        self.pids[worker] = pid
        mine = self.leases.setdefault(worker, {})
        for row in ended:
            if mine.pop(row[0], None) is None:
                continue  # not leased to this worker (any more): taken once, from the worker that holds it
            self.outbox.append(row)
            if self.price is not None:
                self.spent += (row[8] * self.price[0] + row[9] * self.price[1]) / 1_000_000
        if cooldown_until > self.cooldown_until:
            self.cooldown_until = cooldown_until
        rows: list[tuple[int, str, str]] = []
        if self.blocks and len(self.queue) < 4 * max(want, 1) and self.stopped is None:
            await self._expand(4 * max(want, 1))
        if not self.paused and self.stopped is None and not self._over_budget():
            while self.queue and len(rows) < want:
                row = self.queue.popleft()
                mine[row[0]] = row
                rows.append(row)
            self.leased_new.extend(r[0] for r in rows)
        return {"paused": self.paused, "stopped": self.stopped, "notes": self.notes[heard:],
                "cooldown_until": self.cooldown_until, "rows": rows,
                "done": self.stopped is not None or (self.fed_all and not self.queue and not self.blocks)}


class GatedModel:
    """A worker's model: every request waits at the worker's gate first (closed while the batch is paused)."""

    def __init__(self, inner: Any, gate: asyncio.Event) -> None:
        self._inner = inner
        self._gate = gate

    async def complete(self, request: Any, on_delta: Any = None) -> Any:
        await self._gate.wait()
        return await self._inner.complete(request, on_delta)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Worker:
    """Runs rows of one batch on its share (see the module's docstring): :meth:`run` until the batch's rows are
    all leased and its own ended, or the batch stops."""

    def __init__(self, control: Any, worker: int, recipe: bytes, concurrency: int, share: float) -> None:
        self.control = control
        self.worker = worker
        self.recipe_bytes = recipe
        self.concurrency = max(1, concurrency)
        self.share = share
        self.pid = os.getpid()

    def ping(self) -> int:
        return self.pid

    async def run(self) -> int:
        """Lease and run rows until the batch is done or stopped; the number of rows this worker ran."""
        from ray import cloudpickle

        from .. import events as ev
        from .._errors import Stopped
        from .._secrets import scrub
        from ..loop import VERBS, LoopHandle, LoopOptions, stop_once
        from ..models import RateLimit, rate_limit_of, set_rate_limit
        from ._cache import cacheable, cut_reply
        from ._failures import fails_every_row, label_of, reason_of
        from ._rows import answer_tool, asked_hash, check_text_answer, output_model, parse_answer, to_json

        try:
            recipe: RowRecipe = cloudpickle.loads(self.recipe_bytes)
        except Exception as err:  # noqa: BLE001 - said so a person can act
            raise RuntimeError(f"the rows' model, tools or options could not be loaded in a Ray worker ({err}): a "
                               "tool from a package the workers lack must be installed on every node") from None
        fields = output_model(recipe.output, recipe.columns)
        model = recipe.model
        rpm, tpm = recipe.limit
        if rpm is not None or tpm is not None:  # this worker's share of the batch's rate limit
            set_rate_limit(model, RateLimit(rpm * self.share if rpm else None, tpm * self.share if tpm else None))
        limit = rate_limit_of(model, create=True)
        gate = asyncio.Event()
        gate.set()
        options = dict(recipe.options)
        tools = list(options.pop("tools", ()) or ())
        if fields is not None:
            tools.append(answer_tool(fields))
            options["evaluations"] = [*options.get("evaluations", ()), check_text_answer(fields)]
        # the rows' loops publish on a bus of their own: each row's events (its loop's and those under it, by the
        # first name of their lineage) are kept until it ends, then sent back with it
        bus = ev.EventBus(history=1)
        kept_events: dict[str, list[Any]] = {}

        def keep(event: Any) -> None:
            if event.kind not in _SKIP:
                kept_events.setdefault(event.lineage[0], []).append(event)

        bus.subscribe(keep)
        config = LoopOptions.make(model=GatedModel(model, gate), tools=tools, bus=bus, **options)
        model_name, fields_key = str(getattr(model, "name", type(model).__name__)), _fields_key(fields)

        def asked(task: str) -> str:
            return asked_hash(task, model_name, fields_key, config.system)

        notes: list[str] = []  # the interjections as a row not started yet is told them
        running: dict[int, tuple[asyncio.Task, list]] = {}
        ended: list[Ended] = []
        wake = asyncio.Event()
        stop_reason: list[str] = []
        ran = 0

        async def one(position: int, task: str, label: str, holder: list) -> None:
            try:
                await run_row(position, task, label, holder)
            except Exception as err:  # noqa: BLE001 - its loop could not be made or read: reported, never lost
                # (a row leased and never reported held the batch open for good once its worker ended)
                ended.append((position, "failed", None, f"the row could not run on a Ray worker: {reason_of(err)}",
                              0, 0, 0, 0, 0, 0, 0, False, self.pid, False, asked(task),
                              False, None))
                wake.set()

        async def run_row(position: int, task: str, label: str, holder: list) -> None:
            cfg = config if recipe.named else config.named(f"{recipe.batch}[{label_of(label)}]")
            child = LoopHandle(task, config=cfg)
            holder.append(child)
            root = child.run.lineage[0]
            told = len(notes)
            for note in notes:
                child.run.conversation.note(note)
            status, answer, reason, fatal = "stopped", None, None, None
            try:
                value = await child.result()
                parsed = parse_answer(value, fields)
                answer = to_json(parsed.model_dump(mode="json") if hasattr(parsed, "model_dump") else parsed)
                status = "finished"
                reason = cut_reply(child)  # a reply the provider cut: the answer is used, and said cut
            except Stopped as err:
                reason = err.reason
            except asyncio.CancelledError:
                reason = stop_reason[0] if stop_reason else "the batch was stopped"
                if not child.done():
                    await stop_once(child, reason)
            except Exception as err:  # noqa: BLE001 - the row failed; the batch goes on (unless every row would)
                status, reason = "failed", reason_of(err)
                if fails_every_row(err, False):  # whether it fails every row is the kernel's to say (all rows')
                    fatal = (fails_every_row(err, True), getattr(err, "status", None), scrub(str(err)),
                             bool(getattr(err, "fails_every_call", False)))
            usage, tree = child.usage, child.tree.usage
            used_tools = any(c.name != "submit_answer" for m in child.transcript for c in m.tool_calls)
            kept_by_cache = status == "finished" and not used_tools and cacheable(child)
            events = row_events(kept_events.pop(root, []), recipe.parent)
            ended.append((position, status, answer, reason, usage.input_tokens, usage.output_tokens, child.steps,
                          child.tool_calls, tree.input_tokens, tree.output_tokens, told, kept_by_cache, self.pid,
                          fatal, asked(task), False, events))
            wake.set()

        def row_done(position: int) -> Any:
            def done(_task: asyncio.Task) -> None:
                running.pop(position, None)
                wake.set()
            return done

        heard = 0
        seen_cooldown = 0.0
        done = False
        while True:
            # a cool-down this worker's model began (a 429) goes to every worker
            own = limit.resume_at if limit is not None else 0.0
            local_until = time.time() + (own - time.monotonic()) if own > time.monotonic() else 0.0
            want = 0 if done else self.concurrency - len(running)
            wake.clear()
            sent, ended = ended, []
            state = await self.control.exchange.remote(self.worker, self.pid, sent, want, heard, local_until)
            until = state["cooldown_until"]
            if until > seen_cooldown and limit is not None:
                seen_cooldown = until
                left = until - time.time()
                if left > 0 and own < time.monotonic() + left - 0.05:
                    limit.cooldown(left, f"a 429 seen by a worker of the batch: every worker waits {left:.3g} s")
            if state["paused"]:
                gate.clear()
            else:
                gate.set()
            for text in state["notes"]:
                heard += 1
                notes.append(VERBS["interject"].note(text, None) or text)
                for _task, held in list(running.values()):
                    if held and not held[0].done():
                        try:
                            await held[0].interject(text)
                        except Exception:  # noqa: BLE001, S110 - the row ended meanwhile
                            pass
            if state["stopped"] is not None:
                stop_reason[:] = [state["stopped"]]
                gate.set()
                tasks = [t for t, _h in running.values()]
                for t in tasks:
                    t.cancel()
                if tasks:
                    await asyncio.wait(tasks)
                await self.control.exchange.remote(self.worker, self.pid, ended, 0, heard, 0.0)
                return ran
            for position, task, label in state["rows"]:
                holder: list = []
                t = asyncio.get_running_loop().create_task(one(position, task, label, holder))
                running[position] = (t, holder)
                t.add_done_callback(row_done(position))
                ran += 1
            done = state["done"]
            if done and not running and not ended and not state["rows"]:
                return ran
            await _pause(wake, limit, limit.resume_at if limit is not None else 0.0)


async def _pause(wake: asyncio.Event, limit: Any, seen: float) -> None:
    """Wait until the next exchange: ``POLL`` seconds, or less when a row ended or this worker's model began a
    cool-down (a 429: the other workers learn of it at once)."""
    deadline = time.monotonic() + POLL
    while not wake.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or (limit is not None and limit.resume_at > seen):
            return
        try:
            await asyncio.wait_for(wake.wait(), min(left, POLL / 4))
        except TimeoutError:
            pass
