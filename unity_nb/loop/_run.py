"""A loop's run: the tree, the events, the ending, steering notes and the request book.

The loop's handle is the person's facade over a :class:`Run`: ``h.events``,
``h.children``, ``h.parent`` and ``h.requests`` read the run's, ``h.publish`` records an event here,
and the loop ends here. The run knows its handle by a weak reference (the ``handle`` its listeners
are told of), so a part holding the run makes no reference cycle; it names the handles above and below
it by a protocol (:class:`_Node`), so this module imports nothing above it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from .. import events as ev
from .._collector import loop_ended
from .._errors import HandleStateError, UnityError, UserError
from .._event_checks import maker
from .._secrets import scrub, scrub_error
from ..models import Model
from ._context import forward_call
from ._conversation import Conversation
from ._options import LoopOptions
from ._records import Message
from ._state import UNSET, LoopState
from ._status import PauseGate, Signal, Status
from ._steering import VERBS, inspection_prompt, quiet, steering_entry, stop_once
from ._tools import render_result

__all__ = ("Run",)

_log = logging.getLogger("unity_nb.loop")

Listener = Callable[[Any, ev.Event], None]
"""``fn(handle, event)``: told of every event of a loop and of its descendants."""


_listening = [0]
"""Listeners added (:meth:`Run.add_listener`) and not removed, in every run of the process: while there is none,
publishing an event walks no tree (a run dropped with its listeners keeps them counted: the walk is done)."""
_listening_lock = threading.Lock()
_child_started = maker(ev.ChildStarted)  # events of every loop, made without the class call's cost
_loop_finished = maker(ev.LoopFinished)


class _Node(Protocol):
    """What a run reads of the handles in its tree: their runs."""

    @property
    def run(self) -> Run: ...


class Run:
    """One loop's tree (``parent``, ``children``), events (``events``, listeners, waiters), ending
    (:meth:`end`, ``ended``), steering notes (:meth:`steer`, :meth:`nudge`) and request book
    (``requests``). The handle owns it; its parts are given it."""

    __slots__ = (
        "__weakref__",
        "_cap",
        "_capped",
        "_handle",
        "_interrupt",
        "_seen_capped",
        "_wake",
        "approvals",
        "bus",
        "children",
        "config",
        "conversation",
        "counted",
        "ended",
        "event_loop",
        "events",
        "gate",
        "id",
        "inspection",
        "late",
        "lineage",
        "listeners",
        "model",
        "name",
        "on_end",
        "parent",
        "parent_call",
        "questions",
        "request_evt",
        "requests",
        "state",
        "tags",
        "waiters",
    )

    def __init__(
        self, handle: Any, config: LoopOptions, id: str, lineage: tuple[str, ...], bus: ev.EventBus, parent: Any,
        event_loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._handle = weakref.ref(handle)
        self.config = config
        """What the loop was started with."""
        self.event_loop = event_loop
        """The event loop it runs on (steering from another thread is handed to it)."""
        self.id = id
        self.name: str = handle.name
        self.lineage = lineage
        self.bus = bus
        """Where this loop's events are published (a child publishes where its parent does)."""
        self.parent: Any = parent
        """The handle whose tool call started this loop (``None`` for a root)."""
        self.parent_call: str | None = None
        """The parent's tool call that started this loop (``None`` if none did)."""
        self.children: list[Any] = []
        self.events: list[ev.Event] = []
        # added through add_listener (counted: see _listening); replaced, never changed in place: a publish walks the
        # tuple it read, so a listener removing itself (or another) as it is called leaves the next one its event
        self.listeners: tuple[Listener, ...] = ()
        self.waiters: ev.Waiters = []
        self.ended = Signal()
        self.counted = True
        """It counts as a live loop for the collector (``unity_nb._collector``); a batch's row counts through its
        batch."""
        self.model: Model = config.model
        self.state = LoopState()
        """What the loop's parts write as it runs (counters, references, status, outcome)."""
        self.gate = PauseGate()
        self.conversation = Conversation()
        self.requests: list[Any] = []
        """The requests of a multi-request loop, in order (the task is the first)."""
        self.request_evt: Signal | None = None  # made when a persistent loop first waits for a request
        self._wake: Signal | None = None
        self.approvals: dict[str, dict] = {}
        self.questions: dict[str, tuple[str, asyncio.Future]] = {}
        """Open questions this loop's tool calls ask the person: ``{call_id: (question, future)}``."""
        """``{call_id: {"tool", "code", "intent", "future"}}`` of this loop's calls waiting for approval now."""
        self.tags: dict[str, Any] = {}
        """What others record about this run (a manager: ``tags["manager"]``, a durable task: ``tags["task_id"]``)."""
        self.on_end: list[Callable[[Any, Status, BaseException | None], None]] = []
        """Called with ``(handle, status, error)`` as the loop ends, before its end is recorded (a batch releases
        what it holds and says why rows never started). A plain function, so the run holds no handle."""
        self.inspection: Callable[[Any], str] = inspection_prompt
        """``fn(handle)``: the system prompt of a loop answering a question about this one (``ask``); a batch
        sets its own. A plain function, so the run holds no handle."""
        self._interrupt: tuple[Any, Any] | None = None  # (weak reference to its object, method name) or (None, fn)
        self._capped: frozenset[str] = frozenset()
        self._cap = 0
        self._seen_capped = 0
        self.late: collections.deque[ev.Event] | tuple[()] = ()
        """Events of capped kinds past the cap (:meth:`cap_events`): the last ones, for :meth:`wait_for` (a deque
        once capped)."""

    def cap_events(self, kinds: frozenset[str], keep: int) -> None:
        """Keep in ``events`` only the first ``keep`` events of ``kinds`` (a batch's rows); the later ones are
        still published (bus, listeners, store) and the last ``keep`` stay in ``late`` for :meth:`wait_for`."""
        self._capped, self._cap = kinds, keep
        self.late = collections.deque(maxlen=keep)

    @property
    def handle(self) -> Any:
        """The handle of this run (what listeners are told of)."""
        return self._handle()

    def publish(self, event: ev.Event) -> None:
        """Record ``event``, tell listeners here and above, and publish it on the bus."""
        self.events.append(event)
        if event.kind in self._capped:
            self._seen_capped += 1
            if self._seen_capped > self._cap:
                self.events.pop()
                self.late.append(event)  # type: ignore[union-attr]  # a deque once capped
        if self.waiters:
            ev.resolve_waiters(self.waiters, event)
        source = None
        # here and above (a plain walk: this runs for every event), unless no run of the process has a listener
        run: Run | None = self if _listening[0] else None
        while run is not None:
            if run.listeners:
                if source is None:
                    source = self._handle()
                for fn in run.listeners:
                    try:
                        fn(source, event)
                    except Exception:  # noqa: BLE001 - a listener's failure is its own: the loop goes on, and ends
                        _log.exception("a listener of loop %r failed on its %s event", self.name, event.kind)
            parent: _Node | None = run.parent
            run = parent.run if parent is not None else None
        self.bus.publish(event)

    def event(self, kind: type[ev.Event], **fields: Any) -> ev.Event:
        """An event of this loop: ``event(ev.ToolStarted, call_id=..., ...)``."""
        return kind(loop_id=self.id, lineage=self.lineage, **fields)

    def emit(self, kind: type[ev.Event], **fields: Any) -> None:
        """Publish an event of this loop: ``emit(ev.ToolStarted, call_id=..., ...)``."""
        self.publish(kind(loop_id=self.id, lineage=self.lineage, **fields))

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(handle, event)`` for every event of this loop and of its descendants; returns its remover."""
        with _listening_lock:
            self.listeners = (*self.listeners, fn)
            _listening[0] += 1

        def remove() -> None:
            with _listening_lock:
                if fn in self.listeners:
                    at = self.listeners.index(fn)
                    self.listeners = self.listeners[:at] + self.listeners[at + 1:]
                    _listening[0] -= 1

        return remove

    async def wait_for(self, pred: Callable[[ev.Event], bool], timeout: float) -> ev.Event:
        """The first event of this loop matching ``pred``, past or future."""
        for e in self.late:
            if pred(e):
                return e
        for e in self.events:
            if pred(e):
                return e
        return await ev.wait_matching(self.waiters, pred, timeout)

    # ------------------------------------------------------------------ the tree

    def require_live(self, verb: str) -> None:
        """Raise :class:`HandleStateError` if the loop has ended (``verb`` says what was attempted)."""
        if self.ended.is_set():
            status = self.state.status.value
            raise HandleStateError(f"cannot {verb} {self.name!r}: the loop is {status}", state=status)

    def live_children(self) -> list[Any]:
        """The children that have not ended."""
        return [c for c in self.children if not c.run.ended.is_set()]

    def adopt(self, child: Any, call_id: str | None, *, new: bool = False) -> None:
        """Make ``child`` (a handle) a child of this loop, started by tool call ``call_id``: steering reaches it.
        ``new``: a loop being made, which cannot be a child yet (not looked for among a batch's hundred rows)."""
        if not new and child in self.children:
            return
        child.run.parent, child.run.parent_call = self._handle(), call_id
        self.children.append(child)
        if call_id is not None:
            rec = self.conversation.find_call(call_id)
            if rec is not None:
                rec.child = child
        self.publish(_child_started(loop_id=self.id, lineage=self.lineage, child_id=child.id, child_name=child.name,
                                     call_id=call_id))
        if self.gate.paused:  # a child started while paused starts paused
            child.run.gate.close()

    # ------------------------------------------------------------------ the request book

    def open_requests(self) -> list[Any]:
        return [r for r in self.requests if not r.done()]

    def find_request(self, request_id: str | None) -> Any:
        return next((r for r in self.requests if r.request_id == request_id), None)

    def request(self, request_id: str) -> Any:
        """The request ``request_id``, or a UserError naming the requests there are."""
        found = self.find_request(request_id)
        if found is not None:
            return found
        known = [r.request_id for r in self.requests] or "none (this loop serves one request)"
        raise UserError(f"{self.name!r} has no request {request_id!r}; its requests: {known}")

    async def wait_for_request(self) -> None:
        """A persistent multi-request loop with nothing open: idle until a request or steering arrives."""
        if self.request_evt is None:
            self.request_evt = Signal()
        self.request_evt.clear()
        self.state.idle = True
        try:
            await self.request_evt.wait()
        finally:
            self.state.idle = False

    # ------------------------------------------------------------------ steering notes

    @property
    def wake(self) -> Signal:
        """Set when a tool call finishes or steering arrives (what the tool runner waits on)."""
        if self._wake is None:
            self._wake = Signal()
        return self._wake

    def steer(
        self, verb: str, message: str | None = None, request_id: str | None = None, by: str | None = None
    ) -> None:
        """Write steering ``verb`` where it happened: its transcript entry, its note to the model, its event.
        ``by``: the tool whose code used the verb (``None``: the person)."""
        v = VERBS[verb]
        text, kind = steering_entry(verb, message, request_id, by)
        self.conversation.record(Message("user", text, kind=kind))
        note = v.note_by(message, request_id, by) if by is not None and v.note_by is not None else v.note(
            message, request_id)
        if note:
            self.conversation.note(note)
        self.emit(ev.Steering, action=verb, message=message, request_id=request_id, by=by)

    def interrupt_with(self, interrupt: Callable[[], None]) -> None:
        """What cancels the model call in flight when steering arrives (the turn's ``interrupt``: its object held
        weakly, as a ``WeakMethod`` would, by a plain weak reference and the method's name, cheaper to make for a
        loop made per row of a batch)."""
        bound_to, func = getattr(interrupt, "__self__", None), getattr(interrupt, "__func__", None)
        if bound_to is None or func is None:  # a plain function: held as it is
            self._interrupt = (None, interrupt)
        else:
            self._interrupt = (weakref.ref(bound_to), func.__name__)

    def nudge(self) -> None:
        """New steering or a new request: wake the loop, and interrupt a model call in flight when the loop's
        options say so (``interrupt_on_interject``)."""
        self.conversation.interjected = True
        if self._wake is not None:
            self._wake.set()
        if self.request_evt is not None:
            self.request_evt.set()
        if self.config.interrupt_on_interject and self._interrupt is not None:
            ref, interrupt = self._interrupt
            if ref is None:
                interrupt()
            elif (bound_to := ref()) is not None:
                getattr(bound_to, interrupt)()

    def post(self, message: str, *, kind: str = "message") -> None:
        """Deliver ``message`` to the model verbatim before its next call (like an interjection, without the
        "from the user" label): a durable task's queue uses it for child completions."""
        self.require_live("post to")
        if not isinstance(message, str) or not message.strip():
            raise UserError("post needs a non-empty message")
        self.conversation.record(Message("user", message, kind=kind))
        self.conversation.note(message)
        self.emit(ev.Notification, call_id=None, text=message)
        self.conversation.heard += 1
        self.nudge()

    async def reach_children(self, verb: str, **kwargs: Any) -> None:
        """Apply steering ``verb`` to every live child, if its entry in :data:`VERBS` ``reaches_children``
        (a child that ends meanwhile is no error)."""
        if VERBS[verb].reaches_children:
            # a child stopping already for a reason of its own keeps it, and nobody is warned: one stop was asked
            await asyncio.gather(*(
                quiet(forward_call(partial(stop_once, c) if verb == "stop" else getattr(c, verb), **kwargs))
                for c in self.live_children()
            ))

    # ------------------------------------------------------------------ ending

    def finish_with(self, value: Any, text: str | None = None) -> None:
        """From inside a tool of this loop: end the loop with ``value`` as its result once the current tool
        calls have their results (``text``: what the transcript shows)."""
        self.state.finishing = (value, scrub(text if text is not None else render_result(value)))

    def outcome(self) -> Any:
        """Once the loop has ended, what its handle's ``result()`` gives: raises the loop's error, else returns the
        value a tool handed it (``finish_with``), else its answer's text."""
        out = self.state
        if out.error is not None:
            raise out.error
        if out.result_object is not UNSET:
            return out.result_object
        return out.answer or ""

    def end(self, status: Status, *, answer: str | None = None, error: BaseException | None = None) -> None:
        """Mark the loop ended (its task does, once)."""
        handle = self._handle()
        for waiting in self.approvals.values():  # a call still waiting (a thread's, a task's) never runs now
            waiting["future"].cancel()
        self.approvals.clear()
        for hook in self.on_end:
            hook(handle, status, error)
        for r in self.open_requests() if self.requests else ():
            r._end(
                status if status is not Status.FINISHED else Status.FAILED,
                error or UnityError(f"the loop ended before answering request {r.request_id}"),
            )
        state = self.state
        state.status = status
        state.answer = answer
        state.error = error = scrub_error(error)  # a secret an error quotes reaches no reason, event or store
        state.ended_at = time.time()
        self.gate.open()
        forget = getattr(self.model, "forget_conversation", None)
        if callable(forget):  # its conversation will not be sent again: a model that kept its encoding drops it
            forget(self.conversation.wire)
        if status is Status.FINISHED:
            self.publish(_loop_finished(loop_id=self.id, lineage=self.lineage, status="finished", result=answer,
                                         steps=state.steps))
        elif status is Status.STOPPED:
            self.emit(ev.LoopFinished, status="stopped", reason=state.stop_reason or "cancelled", steps=state.steps)
        else:
            self.conversation.record(
                Message("assistant", f"[failed] {type(error).__name__}: {error}", kind="error", error=True)
            )
            self.emit(ev.LoopFailed, error=f"{type(error).__name__}: {error}", steps=state.steps)
        if not self.ended.is_set() and self.counted:
            loop_ended(self.event_loop)
        self.ended.set()
