"""Typed events and the event bus.

Every loop publishes events with a literal ``kind`` and the loop's ``lineage`` (for example
``("report(3f2a)", "lookup(7b1c)")``). The :class:`EventBus` keeps a bounded history per kind,
filters it, calls subscribers, and turns any slice into a DataFrame.

Events are frozen, slotted dataclasses: a loop keeps every event it published (``h.events``), so
with many loops alive their size and the garbage collector's work over them count. Each is one
object of about a hundred bytes plus its values (a pydantic model was four objects and about
a kilobyte).

The kinds are here; their base, :class:`Event` (fields, comparison, ``model_dump`` and the rest), is in
:mod:`._event_base`, and the bus in :mod:`._bus`: both re-exported here.
"""

from __future__ import annotations

import json
import logging
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field  # for AnyEvent's discriminator: pydantic.TypeAdapter(AnyEvent) parses any event

from ._event_base import CONTAINERS, KINDS, Event, field_names, kind_of, next_seq
from ._event_checks import CHECKS as _CHECKS
from ._event_checks import fast_init as _fast_init

__all__ = (
    "Event",
    "LoopStarted",
    "ModelRequested",
    "ModelDelta",
    "ModelResponse",
    "ModelRetry",
    "ModelWait",
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
    "RowFinished",
    "BudgetReached",
    "SpendingCarried",
    "ProviderBatch",
    "AnyEvent",
    "EventBus",
    "default_bus",
    "BUILTIN_STEERING_ACTIONS",
    "steering_actions",
    "allow_steering_action",
    "forget_steering_action",
    "Predicate",
    "Waiters",
    "resolve_waiters",
    "wait_matching",
)

log = logging.getLogger("unity_nb.events")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class LoopStarted(Event):
    kind: Literal["loop_started"] = "loop_started"
    name: str
    task: str
    model: str
    parent_id: str | None = None
    loop_kind: str = "loop"
    """What the loop is (``loop``, ``actor``, ``ask``, ``map``, ``filter``, ...): the store keeps it, and
    ``%unity resume`` starts the operation of that kind again (never read from the task's text)."""
    batch: bool = False
    """Its children are a batch's rows (a map, or an operator's map): history lists it as one line."""
    approval: str | None = None
    """How the loop's plans wait for the person (an actor's ``never``, ``first`` or ``always``; ``None``: it runs
    no plans). Recorded so that ``%unity resume`` keeps it."""
    provider: str | None = None
    """Its model's provider as traces name it (``openai``, ``anthropic``, ``llama_cpp``: ``models.endpoint_of``)."""
    server_address: str | None = None
    """The host its model's server is at (``None``: a model with no server, a ``ScriptedModel``)."""
    server_port: int | None = None
    base_url: str | None = None
    """The server its model answered from (an operation's top loop; never a key: no credentials, no query), so
    that ``%unity resume`` in a new kernel can say how to configure that model again."""
    price_input: float | None = None
    """Its model's price for input tokens when it started (dollars per million; an operation's top loop; ``None``:
    unknown), for the same reason."""
    price_output: float | None = None
    """And for output tokens."""
    settings: dict[str, Any] | None = None
    """An operation's top loop: the options it was started with that ``%unity resume`` starts it with again
    (``max_steps``, ``multi``, ``time_awareness``, ``max_parallel_tools``, the context window's, and its source's: an
    actor's ``code_timeout``, and ``managers``: made by ``%unity act --managers``). ``None``: a loop under another, or
    recorded before it was."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
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


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ModelDelta(Event):
    kind: Literal["model_delta"] = "model_delta"
    step: int
    text: str
    thinking: bool = False
    """True for a piece of the model's reasoning (where the provider streams it), not of its answer."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ModelResponse(Event):
    kind: Literal["model_response"] = "model_response"
    step: int
    content: str | None
    tool_calls: tuple[dict, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    """True when the provider reported no usage and the tokens were estimated."""
    interrupted: bool = False
    """True when an interjection cancelled this call; it is re-issued."""
    thinking: str | None = None
    """The model's reasoning, where the provider streams it."""
    refusal: str | None = None
    """The model declined: its words (or the provider's content filter said so)."""
    truncated: bool = False
    """The stream ended with neither a finish_reason nor ``[DONE]``: the reply may be cut off (never cached)."""
    warnings: tuple[str, ...] = ()
    """What the model's client noticed and set right (usage that was not a count of tokens, ...)."""
    response_model: str | None = None
    """The model the provider says answered (it may name a dated snapshot of the one asked for)."""
    response_id: str | None = None
    """The provider's id of the reply (``chatcmpl-...``)."""
    finish_reason: str | None = None
    """Why the reply ended: ``stop``, ``tool_calls``, ``length``, ``content_filter``."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ModelRetry(Event):
    kind: Literal["model_retry"] = "model_retry"
    attempt: int
    error: str
    delay: float


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ModelWait(Event):
    """The next model call waits ``seconds`` for the model's rate limit (a pause a provider asked for, or
    requests spaced out); announced when the wait is longer than a few seconds."""

    kind: Literal["model_wait"] = "model_wait"
    seconds: float
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ToolStarted(Event):
    kind: Literal["tool_started"] = "tool_started"
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ToolFinished(Event):
    kind: Literal["tool_finished"] = "tool_finished"
    call_id: str
    name: str
    result: str
    error: bool = False
    duration: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ToolOutput(Event):
    kind: Literal["tool_output"] = "tool_output"
    call_id: str
    name: str
    text: str
    """Text the tool printed (routed here by the notebook layer instead of into a cell)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ToolDisplay(Event):
    kind: Literal["tool_display"] = "tool_display"
    call_id: str
    mime_types: tuple[str, ...]
    """A rich output (a DataFrame, a figure) a plan displayed; it shows in the widget."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
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
    threads: tuple[str, ...] = ()
    """The names of threads the plan started that still ran when it ended (it did not wait for them)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class VariablesChanged(Event):
    kind: Literal["variables_changed"] = "variables_changed"
    call_id: str | None
    """The plan or tool call that changed them (``None``: a change made outside, in a cell)."""
    created: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ApprovalRequested(Event):
    kind: Literal["approval_requested"] = "approval_requested"
    call_id: str
    code: str
    intent: str
    tool: str | None = None
    """The tool whose call waits (``execute_code``: an actor's plan, its code in ``code``; else the
    call's JSON arguments are in ``code``)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ApprovalDecided(Event):
    kind: Literal["approval_decided"] = "approval_decided"
    call_id: str
    approved: bool
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ChildStarted(Event):
    kind: Literal["child_started"] = "child_started"
    child_id: str
    child_name: str
    call_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Steering(Event):
    kind: Literal["steering"] = "steering"
    action: str
    """A steering verb: one of :func:`steering_actions` (``register_verb`` adds its own)."""
    message: str | None = None
    request_id: str | None = None
    """The request an interjection or a stop is about (multi-request loops)."""
    by: str | None = None
    """Who steered, when it was code within a run and not the person: the tool whose code called the verb
    (``"the tool end_early"``, or ``"the tool stop_kid of boss"`` for another loop's tool). ``None``: the person."""

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        if self.action not in _steering_actions:
            raise ValueError(f"Steering.action takes one of {sorted(_steering_actions)}, not {self.action!r}")


BUILTIN_STEERING_ACTIONS = frozenset({"pause", "resume", "interject", "stop", "ask"})
"""The steering verbs every loop has (``unity_nb.loop.VERBS`` holds an entry for each)."""
_steering_actions: set[str] = set(BUILTIN_STEERING_ACTIONS)


def steering_actions() -> frozenset[str]:
    """The verbs a :class:`Steering` event may name: the built-in ones and those registered since."""
    return frozenset(_steering_actions)


def allow_steering_action(name: str) -> None:
    """Let :class:`Steering` events name ``name`` (``unity_nb.loop.register_verb`` does, for its verb)."""
    _steering_actions.add(name)


def forget_steering_action(name: str) -> None:
    """Undo :func:`allow_steering_action` (a built-in verb stays)."""
    if name not in BUILTIN_STEERING_ACTIONS:
        _steering_actions.discard(name)


def __getattr__(name: str) -> Any:
    if name == "STEERING_ACTIONS":  # the old name: a snapshot now (this module owns the list)
        return steering_actions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ClarificationRequested(Event):
    kind: Literal["clarification_requested"] = "clarification_requested"
    call_id: str
    question: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ClarificationAnswered(Event):
    kind: Literal["clarification_answered"] = "clarification_answered"
    call_id: str
    answer: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class Notification(Event):
    kind: Literal["notification"] = "notification"
    call_id: str | None
    text: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class LoopFinished(Event):
    kind: Literal["loop_finished"] = "loop_finished"
    status: Literal["finished", "stopped"]
    result: str | None = None
    reason: str | None = None
    steps: int = 0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class LoopFailed(Event):
    kind: Literal["loop_failed"] = "loop_failed"
    error: str
    steps: int = 0


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class RequestSubmitted(Event):
    """A request reached a multi-request loop (the first one is the task)."""

    kind: Literal["request_submitted"] = "request_submitted"
    request_id: str
    text: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class RequestFinished(Event):
    kind: Literal["request_finished"] = "request_finished"
    request_id: str
    status: Literal["finished", "stopped", "failed"]
    answer: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
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


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ThinkingStep(Event):
    """A short progress line for people watching the loop."""

    kind: Literal["thinking_step"] = "thinking_step"
    text: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class EvaluationRun(Event):
    kind: Literal["evaluation_run"] = "evaluation_run"
    name: str
    passed: bool
    feedback: str = ""
    attempt: int = 1
    sent_back: bool = False
    """True when the failure sent the model back to correct its answer."""
    note: str = ""
    """What the model was told when sent back (on the last failed evaluation of the answer): the transcript's entry,
    which the store rebuilds from here."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False, repr=False)
class ControlHandedOff(Event):
    kind: Literal["control_handed_off"] = "control_handed_off"
    call_id: str
    child_id: str
    child_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RowFinished(Event):
    """One row of a batch (``u.map``, ``%unity map``) ended; the store keeps it, so a resumed batch skips it."""

    kind: Literal["row_finished"] = "row_finished"
    row: str
    """The row's key (its index label), JSON-encoded."""
    position: int
    """Where the row is in the input."""
    status: Literal["finished", "failed", "stopped"]
    answer: str | None = None
    """The row's result, JSON-encoded (``None`` unless finished)."""
    reason: str | None = None
    """Why the row failed or stopped."""
    child_id: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    asked: str | None = None
    """What the row was asked (a hash of its task, the model's name and the answer's fields): a resumed batch
    keeps a finished row only if it would ask the same."""
    kept: bool = False
    """Finished by the run this one continues (``%unity resume``, ``done=``), not run again."""
    cached: bool = False
    """Answered from the result cache (the same model, prompt and options answered it before): no call made."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetReached(Event):
    """A batch's spending reached its budget: no new row starts (rows in flight finish) until the cap is lifted."""

    kind: Literal["budget_reached"] = "budget_reached"
    budget: float
    """The cap, in dollars."""
    spent: float
    """Dollars spent when it was reached."""
    message: str = ""
    """What the person reads: how much was spent and how to lift the cap."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendingCarried(Event):
    """A batch continues an earlier run (``%unity resume`` after its kernel died): what that run spent counts
    against its budget."""

    kind: Literal["spending_carried"] = "spending_carried"
    dollars: float
    """Dollars the runs it continues spent."""
    origin: str | None = None
    """The store's uid of the run it continues."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderBatch(Event):
    """A batch run through a provider's Batch API (``via="batch"``) moved: its input file was uploaded (``stage``
    ``uploaded``), the batch created (``created``), its status changed (``status``) or it ended (``ended``). The
    store commits it at once, so a new kernel finds the provider's batch (``%unity resume``) instead of submitting
    its rows again."""

    kind: Literal["provider_batch"] = "provider_batch"
    stage: Literal["uploaded", "created", "status", "ended"]
    chunk: int
    """Which of the batch's files (0, 1, ...): a batch over more rows than the provider takes at once is split."""
    file_id: str
    batch_id: str | None = None
    positions: str = ""
    """The rows in it, as ranges of positions (``0-999,1005``): set as it is uploaded."""
    status: str | None = None
    """The provider's status (validating, in_progress, finalizing, completed, failed, expired, cancelling,
    cancelled)."""
    completed: int = 0
    failed: int = 0
    total: int = 0
    message: str | None = None
    """What the provider said (a failed batch's errors), or what happened to its rows."""
    input_tokens: int = 0
    output_tokens: int = 0
    """On ``ended``: the tokens of its results no row took (the provider charged for them; a row's own tokens are
    on its ``row_finished``)."""


AnyEvent = Annotated[
    (
        LoopStarted | ModelRequested | ModelDelta | ModelResponse | ModelRetry | ModelWait | ToolStarted |
        ToolFinished | ToolOutput | ToolDisplay | CodeExecuted | VariablesChanged | ApprovalRequested |
        ApprovalDecided | ChildStarted | Steering | ClarificationRequested | ClarificationAnswered | Notification |
        LoopFinished | LoopFailed | RequestSubmitted | RequestFinished | ContextCompressed | ThinkingStep |
        EvaluationRun | ControlHandedOff | RowFinished | BudgetReached | SpendingCarried | ProviderBatch
    ),
    Field(discriminator="kind"),
]
"""The discriminated union of every event: ``TypeAdapter(AnyEvent)`` parses any of them."""


def _register() -> None:
    for cls in typing.get_args(typing.get_args(AnyEvent)[0]):
        hints = typing.get_type_hints(cls)
        kind = kind_of(cls)
        KINDS[kind] = cls
        tuples = tuple(n for n in field_names(cls) if n != "lineage" and typing.get_origin(hints[n]) is tuple)
        CONTAINERS[cls] = tuple(n for n in tuples if typing.get_args(hints[n])[:1] == (dict,))
        choices = tuple(
            (n, frozenset(typing.get_args(hints[n]))) for n in field_names(cls)
            if n != "kind" and typing.get_origin(hints[n]) is Literal
        )
        _CHECKS[cls] = (kind, tuples, choices)
        if cls.__post_init__ is Event.__post_init__:  # a kind that checks more (Steering) keeps its own
            cls.__init__ = _fast_init(cls, next_seq)


_register()


def parse_event(data: dict | str | bytes) -> Event:
    """An event from its ``model_dump()`` dict or its JSON (``Event.model_validate``)."""
    return Event.model_validate(json.loads(data) if isinstance(data, (str, bytes)) else data)


# the bus, waiting on events, the process-wide default: in _bus.py, one module's worth each
from ._bus import EventBus, Predicate, Waiters, default_bus, resolve_waiters, wait_matching  # noqa: E402
