"""The steerable tool loop's handle: what people read, and the steering verbs.

A loop is made of parts, each with a narrow interface, that the handle composes:

- :class:`LoopOptions` (``_options.py``): what it was started with, checked when made;
- :class:`Conversation` (``_conversation.py``): the transcript, the wire, and notes waiting for the model;
- :class:`Turn` (``_turn.py``): offered tools and schemas, the model call, caching hints, compression;
- :class:`ToolRunner` (``_runner.py``): tool calls in parallel, references, hand-off, printed output;
- :class:`Router` (``_routing.py``): steering routed down to children, questions and notes bubbled up;
- :class:`Engine` (``_engine.py``): the cycle the loop's task drives, and the answer's checks (a batch's
  engine is a plain :class:`Driver` over a run with no turn: its rows call the model);
- :class:`ToolSource` (``_source.py``): which tools a step offers, which a call names, what is done before
  each step, which calls wait for approval (by default the loop's own tools; the actor's is its own source);
- :data:`VERBS` (``_steering.py``): the steering verbs, one table (``reaches_children`` routes them);
- :class:`LoopState` (``_state.py``): what the parts write (counters, references, status, outcome);
- :class:`LoopPolicy` (``_policy.py``): which tools a step offers and notes after tool results, composable;
- :class:`Run` (``_run.py``): the tree, the events, the ending, steering notes, the request book, the calls
  waiting for approval, and tags others put on the run (a manager, a durable task).

The handle is the person's facade over its :class:`Run` (``tests/test_facade.py`` lists its 29 public names):
who it is, where it stands, its record, its end and the verbs; three small views made when read group the
rest (``_views.py``): ``h.tree`` (it and every loop under it, their totals), ``h.inbox`` (what waits for the
person: approvals, questions, notes) and ``h.requests``; ``h.state`` is what the parts wrote.
Each part is given the run and the parts it works with in its constructor (``Router(run, source)``,
``Turn(run, tools, tool_source, router, source)``, ``ToolRunner(run, turn, router, tool_source, source)``,
``Engine(run, turn, runner, tool_source, source)``) and holds the loop itself only weakly, as the
:class:`Loop` (``_face.py``) tools and policies are shown; a tool reaches its loop through its
:class:`ToolContext`. No part holds or names the handle, and loop/'s imports run one way
(``tests/test_import_graph.py``).

Stopping is cancellation we own: ``stop()`` records a reason and cancels the loop's task;
``result()`` then raises :class:`Stopped`. Cancelling the task from outside is not a stop and
surfaces as ``asyncio.CancelledError``.
"""

from __future__ import annotations

import asyncio
import os
import random
import warnings
from collections.abc import Callable, Iterable
from typing import Any, cast

from .. import events as ev
from .._collector import loop_started
from .._errors import HandleStateError, Stopped, UserError
from .._event_checks import maker
from ..models import Endpoint, Model, Usage, cost_of, endpoint_of, price_of
from ._context import current_call, steered_by
from ._engine import Driver, Engine
from ._face import Loop
from ._options import LoopOptions
from ._records import Message, render_conversation
from ._requests import RequestHandle, final_answer_tool, submit_request
from ._routing import Router
from ._run import Run
from ._runner import ToolRunner
from ._source import ToolSource, as_source
from ._state import LoopState
from ._status import Signal, Status
from ._steering import VERBS, on_own_loop
from ._turn import Turn, own_tools
from ._typed import system_with_output
from ._views import Inbox, Requests, Tree
from ._wake import awake

__all__ = ("LoopHandle", "start_ask")

_ENDED = frozenset({Status.FINISHED, Status.STOPPED, Status.FAILED})
_NONE: dict[str, Any] = {}
_RESUMED = ("max_steps", "multi", "time_awareness", "max_parallel_tools", "context_window", "compress_at", "keep_last")
"""The options an operation's start records (``LoopStarted.settings``), so that ``%unity resume`` keeps them."""
_loop_started = maker(ev.LoopStarted)  # made without the class call's cost (a batch makes one per row)


_ids = random.Random()  # seeded from the OS's randomness: its own, so a person's random.seed() repeats no id
os.register_at_fork(after_in_child=_ids.seed)  # a forked process (a worker) draws ids of its own


def _new_id() -> str:
    """Unique across kernels and time (64 random bits); names show its first 4 digits."""
    return _ids.getrandbits(64).to_bytes(8, "big").hex()  # 16 hex digits (an f-string's format took twice as long)


class LoopHandle(Loop):
    """A live, steerable reference to a running tool loop. ``await h`` gives its answer.

    Steering verbs are coroutines (see :data:`VERBS`): :meth:`pause`, :meth:`resume`,
    :meth:`interject`, :meth:`stop` (returns once the loop has ended), :meth:`ask` (returns a
    handle whose result is a ``str``). Readable at any time: ``status``, ``name``, ``steps``,
    ``tool_calls``, ``usage``, ``cost``, ``transcript``, ``children``, ``events``; ``state`` holds the rest
    of what it has done (references, printed characters, the text streaming in, how it ended); ``tree``
    is it and every loop under it (their totals). What waits for the person (approvals, questions,
    notes) is in ``inbox``; a multi-request loop's ``requests`` take more with ``submit``.

    What a loop offers its model comes from its :class:`ToolSource` (``tool_source=``; by default its
    own tools): the actor's computes them from the notebook's namespace. Its parts work with its
    :class:`Run` (``h.run``), never with the handle.
    """

    __slots__ = tuple(
        """
        __weakref__ _engine _router _runner _task _turn id model name run task
        """.split()
    )
    """A live loop keeps dozens of attributes: in slots, not a dict per handle."""

    kind = "loop"
    """What this handle is (``loop``, ``actor``, ``map``): its default name starts with it."""

    def __init__(
        self,
        task: str,
        *,
        parent: LoopHandle | None = None,
        detached: bool = False,
        _kind: str | None = None,
        _context: list[dict] | None = None,
        _lineage: tuple[str, ...] | None = None,
        tool_source: ToolSource | None = None,
        engine: type[Driver] | Callable[[Run, Loop], Driver] = Engine,
        _name: str | None = None,
        _endpoint: Endpoint | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(task, str) or not task.strip():
            raise UserError("start_loop needs a task: a non-empty string saying what to do")
        config = options.pop("config", None)
        if config is not None:  # options checked once for many loops (a batch's rows)
            if not isinstance(config, LoopOptions) or options:
                raise UserError("config= takes a LoopOptions, and no other option beside it")
            cfg = config
        else:
            cfg = LoopOptions.make(**options)
        try:
            event_loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UserError(
                "start_loop needs a running event loop: call it inside `async def main(): ...` run by "
                "asyncio.run(main()), or in a notebook cell (Jupyter runs one)"
            ) from None
        kind = _kind or self.kind
        if cfg.tools or cfg.multi or cfg.first_step_tools:
            tools = own_tools(cfg, kind, final_answer_tool(self) if cfg.multi else None)
        else:  # no tools (a batch's row, say): nothing to check
            tools = {}
        self.task = task
        self.model: Model = cfg.model
        self.id = _new_id()
        self.name = _name or cfg.name or f"{kind}-{self.id[:4]}"

        call = current_call()
        adopt_call, share_context = None, False
        if parent is None and call is not None and not detached:
            parent, adopt_call, share_context = cast(LoopHandle, call.loop), call.call_id, call.share_context
        base = _lineage if _lineage is not None else (parent.run.lineage if parent else ())
        # a child publishes where its parent does
        bus = cfg.bus or (parent.run.bus if parent is not None else ev.default_bus())
        self.run = run = Run(self, cfg, self.id, (*base, f"{self.name}({self.id})"), bus, parent, event_loop)
        """The tree, the events, the ending, steering notes, the request book and the state the parts write."""
        # a batch's row counts as a live loop through its batch (``hold_loops``), not once more by itself
        run.counted = parent is None or not parent._engine.batch
        self._router = Router(run, self)
        self._engine: Driver
        approval, own = None, _NONE
        if isinstance(engine, type) and issubclass(engine, Engine):  # a loop that calls the model: a turn, ...
            source = as_source(tool_source, tools)
            approval, own = source.approval, source.settings
            source.bind(run)
            self._turn: Turn | None = Turn(run, tools, source, self._router, self)
            self._runner: ToolRunner | None = ToolRunner(run, self._turn, self._router, source, self)
            self._engine = engine(run, self._turn, self._runner, source, self)
            run.interrupt_with(self._turn.interrupt)
        else:  # a batch: its engine drives its rows, which are loops; it calls no model itself
            self._turn = self._runner = None
            self._engine = cast(Callable[[Run, Loop], Driver], engine)(run, self)
        outer = render_conversation(parent.transcript, "outer") if share_context and parent else None
        system = system_with_output(cfg.system, cfg.output)
        context = [*cfg.history, *_context] if _context else cfg.history
        run.conversation.open(task, system, context, outer, multi=cfg.multi)
        if cfg.multi:
            run.requests.append(RequestHandle(self, "r1", task))

        if parent is not None:
            parent.run.adopt(self, adopt_call, new=True)
        endpoint = _endpoint or endpoint_of(cfg.model)  # a batch says its rows' once
        remembered = _remembered(cfg.model) if parent is None else _NONE
        started = _loop_started(
            loop_id=self.id,
            lineage=run.lineage,
            name=self.name,
            task=task,
            model=getattr(cfg.model, "name", type(cfg.model).__name__),
            parent_id=parent.id if parent else None,
            loop_kind=kind,
            batch=self._engine.batch,
            approval=approval,
            provider=endpoint.provider,
            server_address=endpoint.address,
            server_port=endpoint.port,
            base_url=remembered.get("base_url"),
            price_input=remembered.get("price_input"),
            price_output=remembered.get("price_output"),
            settings={**{k: getattr(cfg, k) for k in _RESUMED}, **own} if parent is None else None,
        )
        run.publish(started)
        if cfg.multi:
            self.run.emit(ev.RequestSubmitted, request_id="r1", text=task)
        self._task = self.run.event_loop.create_task(self._engine.run(), name=f"unity_nb:{self.name}")
        self._task.add_done_callback(self._on_task_done)
        if run.counted:  # many live loops: the collector runs less often (unity_nb._collector)
            loop_started(run.event_loop)

    def _on_task_done(self, task: asyncio.Task) -> None:
        # a task cancelled before its first step never enters run(): end the handle anyway
        if not self._ended.is_set():
            why = self.run.state.stop_reason
            self.run.end(Status.STOPPED, error=Stopped(why) if why else asyncio.CancelledError())

    # ------------------------------------------------------------------ reading

    @property
    def parent(self) -> LoopHandle | None:
        """The loop whose tool call started this one (``None`` for a root)."""
        return self.run.parent

    @property
    def children(self) -> list[LoopHandle]:
        """The loops this one's tool calls started, in order."""
        return self.run.children

    @property
    def events(self) -> list[ev.Event]:
        """This loop's events, in order."""
        return self.run.events

    @property
    def state(self) -> LoopState:
        """What the loop has done so far, as its parts wrote it: ``references``, ``all_references``,
        ``printed``, ``compressions``, ``called_tools``, ``thinking``, ``evaluation_results``, ``answer``,
        ``error``, ``stop_reason``, ``started_at``, ``ended_at``, ``elapsed``, and the model call in flight
        as streamed so far (``streaming_text``, ``streaming_thinking``). A batch sums ``steps``,
        ``tool_calls`` and ``usage`` over its rows: read those on the handle."""
        return self.run.state

    @property
    def steps(self) -> int:
        """Model calls made so far (an interrupted and re-issued call counts)."""
        return self.run.state.steps

    @property
    def tool_calls(self) -> int:
        """Tool calls completed so far."""
        return self.run.state.tool_calls

    @property
    def usage(self) -> Usage:
        """Input and output tokens of this loop's own model calls."""
        return self.run.state.usage

    @property
    def _ended(self) -> Signal:
        return self.run.ended

    @property
    def status(self) -> Status:
        state = self.run.state
        if state.status in _ENDED:
            return state.status
        if self.run.gate.paused:
            return Status.PAUSED
        if self._router.mailbox.waiting:
            return Status.WAITING
        if state.idle:
            return Status.IDLE
        return Status.RUNNING

    @property
    def transcript(self) -> list[Message]:
        """What happened, in order, for people (steering is written where it happened)."""
        return self.run.conversation.transcript

    @property
    def messages(self) -> list[dict]:
        """A copy of the conversation as the model receives it (OpenAI wire format): always valid,
        every tool call followed by its result; compressed when the loop compresses."""
        return [dict(m) for m in self.run.conversation.wire]

    def dataframe(self, kind: str | Iterable[str] | None = None) -> Any:
        """This loop's events as a pandas DataFrame (one row per event, ``kind`` first); ``kind`` filters."""
        kinds = {kind} if isinstance(kind, str) else set(kind) if kind is not None else None
        return ev.EventBus.to_dataframe(e for e in self.events if kinds is None or e.kind in kinds)

    def done(self) -> bool:
        """True once the loop has finished, stopped or failed."""
        return self._ended.is_set()

    async def result(self) -> Any:
        """Wait for the answer; raise :class:`Stopped` if stopped, or the error it failed with.

        The answer is the model's final text, or the object a tool handed to
        ``Run.finish_with`` (the actor's ``final_answer(value)``).
        """
        own = self.run.event_loop
        if self._ended.is_set() or asyncio.get_running_loop() is own:
            with awake(own, self):  # an interrupt of the awaiting cell is seen at once (ipykernel#881)
                await self._ended.wait()
        elif own.is_closed() or not own.is_running():  # awaited from another event loop: its end cannot come
            state = "closed" if own.is_closed() else "not running"
            raise HandleStateError(f"cannot wait for {self.name!r}: the event loop it runs on is {state}", state=state)
        else:  # from another thread's event loop: wait on the loop's own, the end handed over
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._ended.wait(), own))
        return self.run.outcome()

    def __await__(self):
        return self.result().__await__()

    def __repr__(self) -> str:
        return f"<unity handle {self.name!r}: {self.status.value}, {self.steps} steps>"

    @property
    def tree(self) -> Tree:
        """This loop and every loop under it: ``for x in h.tree`` walks them depth first (``h`` first);
        ``h.tree.usage`` and ``h.tree.cost`` are their totals, ``h.tree.lineage`` where ``h`` sits."""
        return Tree(self)

    @property
    def cost(self) -> float | None:
        """Dollars of this loop's own tokens at its model's price (``u.set_price``); ``None`` when unknown."""
        return cost_of(self.usage, self.model)

    async def wait_for(
        self, kind: str | None = None, where: Callable[[ev.Event], bool] | None = None, *, timeout: float = 10.0
    ) -> ev.Event:
        """The first event of this loop matching ``kind`` and ``where``, past or future."""

        def pred(e: ev.Event) -> bool:
            return (kind is None or e.kind == kind) and (where is None or where(e))

        return await self.run.wait_for(pred, timeout)

    # ------------------------------------------------------------------ steering

    @on_own_loop
    async def pause(self) -> None:
        """No new model call or tool start until :meth:`resume`; in-flight work finishes. Reaches all live children."""
        self.run.require_live("pause")
        if not self.run.gate.paused:
            self.run.gate.close()
            self.run.steer("pause", by=steered_by(self))
        await self.run.reach_children("pause")

    @on_own_loop
    async def resume(self) -> None:
        """Undo :meth:`pause`; work that completed meanwhile is processed first. Reaches all live children."""
        self.run.require_live("resume")
        why = self._engine.refusal("resume")
        if why is not None:
            raise UserError(f"cannot resume {self.name!r}: {why}")
        await self.run.reach_children("resume")
        if self.run.gate.paused:
            self.run.steer("resume", by=steered_by(self))
            self.run.gate.open()

    @on_own_loop
    async def interject(self, message: str, *, request_id: str | None = None) -> None:
        """Deliver ``message`` to the model before its next call (cancelling and re-issuing one in flight
        when ``interrupt_on_interject``). While tools run, the model may route it to a live child.
        In a multi-request loop ``request_id`` tags it with the request it is about."""
        self.run.require_live("interject")
        if not isinstance(message, str) or not message.strip():
            raise UserError("interject needs a non-empty message")
        if request_id is not None:
            self.run.request(request_id)
        self.run.steer("interject", message, request_id, by=steered_by(self))
        self.run.conversation.heard += 1
        self.run.nudge()
        await self._engine.steered("interject", message)

    @on_own_loop
    async def stop(self, reason: str | None = None) -> None:
        """Cancel the model call, running tools and every child; return once the loop has ended.

        Stopping an ended loop does nothing (stop is idempotent). ``result()`` then raises
        :class:`Stopped` with ``reason``. A loop stopped (or stopping) already keeps its first reason: a stop
        giving another one warns that it was not taken (``UserWarning``). Called by a tool's code (the loop's own
        tool, or another loop's), the transcript and the event say that tool stopped it, not the person; without a
        reason, the reason says so too.
        """
        if self.done() or self.run.state.stop_reason is not None:
            first = self.run.state.stop_reason
            if reason is not None and first is not None and reason != first:
                where = "was stopped" if self.done() else "is stopping"
                warnings.warn(
                    f"{self.name!r} {where} already, with the reason {first!r}: this stop's reason {reason!r} "
                    "was not taken (result() raises Stopped with the first)",
                    UserWarning,
                    stacklevel=3,  # the caller's line (through on_own_loop)
                )
            if not self.done() and asyncio.current_task() is not self._task:
                await self._ended.wait()
            return
        by = steered_by(self)  # a tool's code stopping this loop, or (None) the person
        self.run.state.stop_reason = reason or f"stopped by {by or 'the user'}"
        self.run.steer("stop", reason, by=by)
        await self.run.reach_children("stop", reason=reason)
        self._task.cancel()
        if asyncio.current_task() is not self._task:
            await self._ended.wait()

    @on_own_loop
    async def ask(self, question: str, **options: Any) -> LoopHandle:
        """A new read-only loop answering ``question`` from a snapshot of this one's transcript.

        The snapshot's roles are rewritten (``inner_user``, ``inner_assistant``, ...) so the
        inspecting model can tell that conversation from its own; it gets an ``ask_<child>``
        tool for each live child to drill down. Its result is a ``str``.
        """
        return start_ask(self, question, **options)

    # ------------------------------------------------------------------ what waits for the person, requests

    @property
    def inbox(self) -> Inbox:
        """What waits for the person here and below: calls to approve or skip (``approvals``, ``approve``,
        ``skip``), questions tools ask (``questions``, ``next_question``, ``answer``), progress notes
        (``next_notification``). The widget's Run / Skip / Answer and ``%unity approve|skip|answer`` use it."""
        return Inbox(self, self._router.mailbox)

    @property
    def requests(self) -> Requests:
        """The requests of a multi-request loop (``start_loop(..., multi=True)``), in order: the task is the
        first; ``h.requests.submit(text)`` adds one, which shares the loop's context and gets its own handle."""
        return Requests(self, submit_request)


def start_ask(loop: LoopHandle, question: str, **options: Any) -> LoopHandle:
    """``loop.ask(question)`` without the ``await``: start the read-only loop answering ``question`` from a
    snapshot of ``loop`` (its run's ``inspection``) and return its handle (named ``ask-<loop's name>`` unless
    ``name=`` says otherwise)."""
    if not isinstance(question, str) or not question.strip():
        raise UserError("ask needs a non-empty question")
    run = loop.run
    snapshot = run.inspection(loop)
    run.steer("ask", question, by=steered_by(loop))
    ask_tool = VERBS["ask"].child_tool
    live = run.live_children()[:20]  # a batch may have a hundred rows running: the first twenty
    tools = [ask_tool(c) for c in live] if ask_tool is not None else []
    model, max_steps = options.pop("model", loop.model), options.pop("max_steps", 6)
    return LoopHandle(
        question, model=model, tools=tools, system=snapshot, name=options.pop("name", None) or f"ask-{loop.name}",
        bus=run.bus,
        _kind="ask", _lineage=loop.run.lineage, detached=True, max_steps=max_steps, **options,
    )


def _remembered(model: Any) -> dict[str, Any]:
    """What a new kernel needs to make an operation's model again, beside its name (``LoopStarted`` carries it):
    the server it answers from, without credentials or query (never a key), and its price now."""
    from urllib.parse import urlsplit, urlunsplit

    out: dict[str, Any] = {}
    url = getattr(model, "base_url", None)  # an OpenAIModel's, as its openai client has it (not made for this)
    if not isinstance(url, str):
        url = getattr(getattr(model, "client", None), "base_url", None)
    if url:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc += f":{parts.port}"
        out["base_url"] = urlunsplit((parts.scheme, netloc, parts.path, "", "")).rstrip("/")
    try:
        price = price_of(model)
    except Exception:  # noqa: BLE001 - a remembered price is a convenience, never a failure to start
        price = None
    if price is not None:
        out.update(price_input=price.input, price_output=price.output)
    return out
