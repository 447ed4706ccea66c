"""Typed events and the event bus.

Every loop publishes pydantic events with a literal ``kind`` and the loop's ``lineage``
(for example ``["report(3f2a)", "lookup(7b1c)"]``). The :class:`EventBus` keeps a bounded
history per kind, filters it, calls subscribers, and turns any slice into a DataFrame.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import itertools
import logging
import time
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

__all__ = (
    "Event",
    "LoopStarted",
    "ModelRequested",
    "ModelDelta",
    "ModelResponse",
    "ModelRetry",
    "ToolStarted",
    "ToolFinished",
    "ToolOutput",
    "ToolDisplay",
    "CodeExecuted",
    "VariablesChanged",
    "ApprovalRequested",
    "ApprovalDecided",
    "ChildStarted",
    "Steering",
    "ClarificationRequested",
    "ClarificationAnswered",
    "Notification",
    "LoopFinished",
    "LoopFailed",
    "RequestSubmitted",
    "RequestFinished",
    "ContextCompressed",
    "ThinkingStep",
    "EvaluationRun",
    "ControlHandedOff",
    "AnyEvent",
    "EventBus",
    "default_bus",
)

log = logging.getLogger("unity_nb.events")
_seq = itertools.count(1)


class Event(BaseModel):
    """Base of all events: which loop, where in the tree, when."""

    model_config = ConfigDict(frozen=True)

    kind: str
    loop_id: str
    """The loop's unique id."""
    lineage: tuple[str, ...]
    """The loop's position in the nesting tree, outermost first."""
    ts: float = Field(default_factory=time.time)
    """Wall-clock time of publication (seconds since the epoch)."""
    seq: int = Field(default_factory=lambda: next(_seq))
    """A process-wide increasing sequence number: orders events exactly."""


class LoopStarted(Event):
    kind: Literal["loop_started"] = "loop_started"
    name: str
    task: str
    model: str
    parent_id: str | None = None


class ModelRequested(Event):
    kind: Literal["model_request"] = "model_request"
    step: int
    messages: int
    """How many messages the request carries."""
    tools: tuple[str, ...]
    """Names of the tools offered at this step (empty: the model must answer)."""
    tool_choice: str
    last_user: str | None = None
    """The text of the newest user message in the request (interjections show here)."""


class ModelDelta(Event):
    kind: Literal["model_delta"] = "model_delta"
    step: int
    text: str
    thinking: bool = False
    """True for a piece of the model's reasoning (where the provider streams it), not of its answer."""


class ModelResponse(Event):
    kind: Literal["model_response"] = "model_response"
    step: int
    content: str | None
    tool_calls: tuple[dict, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    interrupted: bool = False
    """True when an interjection cancelled this call; it is re-issued."""
    thinking: str | None = None
    """The model's reasoning, where the provider streams it."""
    refusal: str | None = None
    """The model declined: its words (or the provider's content filter said so)."""


class ModelRetry(Event):
    kind: Literal["model_retry"] = "model_retry"
    attempt: int
    error: str
    delay: float


class ToolStarted(Event):
    kind: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    arguments: str


class ToolFinished(Event):
    kind: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    result: str
    error: bool = False
    duration: float = 0.0


class ToolOutput(Event):
    kind: Literal["tool_output"] = "tool_output"
    call_id: str
    name: str
    text: str
    """Text the tool printed (routed here by the notebook layer instead of into a cell)."""


class ToolDisplay(Event):
    kind: Literal["tool_display"] = "tool_display"
    call_id: str
    mime_types: tuple[str, ...]
    """A rich output (a DataFrame, a figure) a plan displayed; it shows in the widget."""


class CodeExecuted(Event):
    kind: Literal["code_executed"] = "code_executed"
    call_id: str
    intent: str
    code: str
    success: bool
    error: str | None = None
    stdout_chars: int = 0
    stderr_chars: int = 0
    final: bool = False


class VariablesChanged(Event):
    kind: Literal["variables_changed"] = "variables_changed"
    call_id: str | None
    """The plan or tool call that changed them (``None``: a change made outside, in a cell)."""
    created: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


class ApprovalRequested(Event):
    kind: Literal["approval_requested"] = "approval_requested"
    call_id: str
    code: str
    intent: str


class ApprovalDecided(Event):
    kind: Literal["approval_decided"] = "approval_decided"
    call_id: str
    approved: bool
    reason: str | None = None


class ChildStarted(Event):
    kind: Literal["child_started"] = "child_started"
    child_id: str
    child_name: str
    call_id: str | None = None


class Steering(Event):
    kind: Literal["steering"] = "steering"
    action: Literal["pause", "resume", "interject", "stop", "ask"]
    message: str | None = None
    request_id: str | None = None
    """The request an interjection or a stop is about (multi-request loops)."""


class ClarificationRequested(Event):
    kind: Literal["clarification_requested"] = "clarification_requested"
    call_id: str
    question: str


class ClarificationAnswered(Event):
    kind: Literal["clarification_answered"] = "clarification_answered"
    call_id: str
    answer: str


class Notification(Event):
    kind: Literal["notification"] = "notification"
    call_id: str | None
    text: str


class LoopFinished(Event):
    kind: Literal["loop_finished"] = "loop_finished"
    status: Literal["finished", "stopped"]
    result: str | None = None
    reason: str | None = None
    steps: int = 0


class LoopFailed(Event):
    kind: Literal["loop_failed"] = "loop_failed"
    error: str
    steps: int = 0


class RequestSubmitted(Event):
    """A request reached a multi-request loop (the first one is the task)."""

    kind: Literal["request_submitted"] = "request_submitted"
    request_id: str
    text: str


class RequestFinished(Event):
    kind: Literal["request_finished"] = "request_finished"
    request_id: str
    status: Literal["finished", "stopped", "failed"]
    answer: str | None = None
    reason: str | None = None


class ContextCompressed(Event):
    """The older part of the conversation the model receives was replaced by a summary
    (the transcript keeps everything)."""

    kind: Literal["context_compressed"] = "context_compressed"
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summarised: int
    """How many messages the summary replaced."""


class ThinkingStep(Event):
    """A short progress line for people watching the loop."""

    kind: Literal["thinking_step"] = "thinking_step"
    text: str


class EvaluationRun(Event):
    kind: Literal["evaluation_run"] = "evaluation_run"
    name: str
    passed: bool
    feedback: str = ""
    attempt: int = 1
    sent_back: bool = False
    """True when the failure sent the model back to correct its answer."""


class ControlHandedOff(Event):
    kind: Literal["control_handed_off"] = "control_handed_off"
    call_id: str
    child_id: str
    child_name: str


AnyEvent = Annotated[
    Union[
        LoopStarted, ModelRequested, ModelDelta, ModelResponse, ModelRetry, ToolStarted,
        ToolFinished, ToolOutput, ToolDisplay, CodeExecuted, VariablesChanged, ApprovalRequested,
        ApprovalDecided, ChildStarted, Steering, ClarificationRequested, ClarificationAnswered,
        Notification, LoopFinished, LoopFailed, RequestSubmitted, RequestFinished, ContextCompressed,
        ThinkingStep, EvaluationRun, ControlHandedOff,
    ],
    Field(discriminator="kind"),
]
"""The discriminated union of every event: ``TypeAdapter(AnyEvent)`` parses any of them."""

Predicate = Callable[[Event], bool]
Waiters = list[tuple[Predicate, asyncio.Future]]


async def wait_matching(waiters: Waiters, pred: Predicate, timeout: float | None) -> Event:
    """Register a waiter for the next event matching ``pred`` (see :func:`resolve_waiters`)."""
    fut = asyncio.get_running_loop().create_future()
    entry = (pred, fut)
    waiters.append(entry)
    try:
        return await asyncio.wait_for(fut, timeout)
    finally:
        if entry in waiters:
            waiters.remove(entry)


def resolve_waiters(waiters: Waiters, event: Event) -> None:
    """Wake every waiter whose predicate matches ``event``."""
    for entry in list(waiters):
        pred, fut = entry
        if not fut.done() and pred(event):
            fut.set_result(event)
            waiters.remove(entry)


def _observe(callback: Callable[[Event], Any], task: asyncio.Future) -> None:
    """An async subscriber's failure is logged like a sync one's, never left unobserved."""
    if not task.cancelled() and task.exception() is not None:
        log.error("event subscriber %r failed", callback, exc_info=task.exception())


class EventBus:
    """In-process pub/sub for loop events, with a bounded history per kind.

    ``subscribe(callback)`` registers a function (sync, or async: scheduled as a task) called
    with each event; an exception in a callback is logged, never raised into the loop.
    """

    def __init__(self, *, history: int = 2000) -> None:
        self._limit = history
        self._history: dict[str, collections.deque[Event]] = {}
        self._subscribers: list[tuple[Callable[[Event], Any], frozenset[str] | None]] = []
        self._waiters: Waiters = []

    def publish(self, event: Event) -> None:
        hist = self._history.get(event.kind)
        if hist is None:
            hist = self._history[event.kind] = collections.deque(maxlen=self._limit)
        hist.append(event)
        for callback, kinds in self._subscribers:
            if kinds is None or event.kind in kinds:
                try:
                    out = callback(event)
                    if inspect.isawaitable(out):
                        asyncio.ensure_future(out).add_done_callback(functools.partial(_observe, callback))
                except Exception:  # a subscriber must never break a loop
                    log.exception("event subscriber %r failed", callback)
        if self._waiters:
            resolve_waiters(self._waiters, event)

    def subscribe(
        self, callback: Callable[[Event], Any], *, kinds: Iterable[str] | None = None
    ) -> Callable[[], None]:
        """Call ``callback(event)`` for every event (of ``kinds`` if given); returns an unsubscribe function."""
        entry = (callback, frozenset(kinds) if kinds is not None else None)
        self._subscribers.append(entry)

        def unsubscribe() -> None:
            if entry in self._subscribers:
                self._subscribers.remove(entry)

        return unsubscribe

    def history(
        self,
        kind: str | Iterable[str] | None = None,
        *,
        loop_id: str | None = None,
        lineage: Iterable[str] | None = None,
        where: Predicate | None = None,
    ) -> list[Event]:
        """Past events, oldest first: of a kind (or kinds), of one loop, under a lineage prefix."""
        if kind is None:
            kinds = list(self._history)
        elif isinstance(kind, str):
            kinds = [kind]
        else:
            kinds = list(kind)
        prefix = tuple(lineage) if lineage is not None else None
        out = [
            e
            for k in kinds
            for e in self._history.get(k, ())
            if (loop_id is None or e.loop_id == loop_id)
            and (prefix is None or e.lineage[: len(prefix)] == prefix)
            and (where is None or where(e))
        ]
        out.sort(key=lambda e: e.seq)
        return out

    async def wait_for(
        self, kind: str | None = None, where: Predicate | None = None, *, timeout: float | None = 10.0
    ) -> Event:
        """Wait for the next published event matching ``kind`` and ``where``."""

        def pred(e: Event) -> bool:
            return (kind is None or e.kind == kind) and (where is None or where(e))

        return await wait_matching(self._waiters, pred, timeout)

    def clear(self) -> None:
        """Forget the history (subscribers stay)."""
        self._history.clear()

    @staticmethod
    def to_dataframe(events: Iterable[Event]):
        """A pandas DataFrame with one row per event and one column per field (``kind`` first)."""
        import pandas as pd  # lazily: pandas is heavy and only this needs it

        rows = [e.model_dump() for e in events]
        df = pd.DataFrame(rows)
        if not df.empty:
            df["lineage"] = df["lineage"].map(lambda t: "/".join(t))
            df["ts"] = pd.to_datetime(df["ts"], unit="s")
            first = ["seq", "ts", "kind", "loop_id", "lineage"]
            df = df[first + [c for c in df.columns if c not in first]]
        return df

    def dataframe(self, kind: str | Iterable[str] | None = None, **filters: Any):
        """``to_dataframe(history(kind, **filters))``."""
        return self.to_dataframe(self.history(kind, **filters))


_DEFAULT = EventBus()


def default_bus() -> EventBus:
    """The process-wide bus loops publish to unless given another."""
    return _DEFAULT
