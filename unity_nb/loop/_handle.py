"""The steerable tool loop and its handle.

One loop is one ``asyncio.Task`` driving this cycle::

    drain steering -> honour pause -> call the model (streaming; tools the policy allows)
      -> run tool calls in parallel (bounded) -> append results -> repeat until an answer

Two records are kept. ``transcript`` is what happened, in order, for people (steering is
written where it happened). The *wire* is the conversation as the model receives it, kept
valid at all times: every assistant tool call is followed by exactly one result, and steering
that arrived mid-step is delivered as one user message at the next step. The wire grows by
appending only, so a request costs no more than the list it sends.

Stopping is cancellation we own: ``stop()`` records a reason and cancels the loop's task;
``result()`` then raises :class:`Stopped`. Cancelling the task from outside is not a stop and
surfaces as ``asyncio.CancelledError``.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import json
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .. import events as ev
from .._errors import HandleStateError, Stopped, UnityError, UserError
from ..models._base import Model, ModelRequest, Reply, ToolCall, Usage
from .._output import tool_output
from .._secrets import SECRET_REF, ScrubStream, get_secret, scrub
from ..models import retry_hook
from ._answers import (
    Evaluation, HandOff, Reference, ToolResult, accepts_positional, call_hook, cited_numbers, evaluate, hook_name,
)
from ._policies import SUMMARY_PROMPT, SUMMARY_TAG, estimate_tokens, render_for_summary, split_for_compression, time_note
from ._requests import MULTI_NOTE, RequestHandle, check_text
from ._status import Status
from ._text import PrintedOutput, TextBuffer
from ._tools import Tool, ToolContext, ToolFailed, as_tool, render_result

__all__ = ("LoopHandle", "Status", "Message", "ToolCallRecord", "start_loop", "current_loop", "forward_call")

ParentContext = Literal["always", "never", "model"]
ToolPolicy = Callable[[int, Sequence[Tool]], "tuple[str, Sequence[Tool | str]]"]


_ENDED = frozenset({Status.FINISHED, Status.STOPPED, Status.FAILED})


@dataclass(slots=True)
class ToolCallRecord:
    """One tool call in the transcript, with its result once it has one."""

    id: str
    name: str
    arguments: str
    result: str | None = None
    error: bool = False
    child: LoopHandle | None = None
    displays: list[dict] = field(default_factory=list)
    """Rich outputs the call displayed (mime bundles: ``text/html``, ``image/png``, ...)."""
    _printed: PrintedOutput = field(default_factory=PrintedOutput, repr=False, compare=False)
    """What :attr:`output` is kept in (scrubbed across writes, bounded, published in order)."""

    @property
    def output(self) -> str:
        """What the tool printed while it ran (when the notebook layer routes output), scrubbed.
        Past a million characters, its first and last half million, with a line saying how many
        characters were cut between them."""
        return self._printed.text

    @output.setter
    def output(self, text: str) -> None:
        self._printed.replace(text)

    @property
    def output_cut(self) -> int:
        """How many printed characters :attr:`output` left out (0 unless the tool printed more than a million)."""
        return self._printed.buffer.cut


@dataclass(slots=True)
class Message:
    """One transcript entry.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool``; ``kind`` says more:
    ``task``, ``interjection``, ``steering`` (pause, resume, stop, ask), ``clarification``,
    ``notification``, ``answer`` (the final assistant message), ``text``, ``tool_result``.
    """

    role: str
    content: str | None
    kind: str = "text"
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    error: bool = False
    ts: float = field(default_factory=time.time)
    thinking: str | None = None
    """The model's reasoning behind an assistant entry, where the provider streams it."""


# The loop whose tool is running in this context (set around each tool call), so a loop
# started inside a tool becomes that loop's child.
_CALL: contextvars.ContextVar[tuple[LoopHandle, str, bool] | None] = contextvars.ContextVar(
    "unity_nb_tool_call", default=None
)
_CURRENT: contextvars.ContextVar[LoopHandle | None] = contextvars.ContextVar("unity_nb_loop", default=None)
# Inside a tool call, ``tool_output`` says where text the tool prints belongs (its call
# record): see unity_nb._output, which routes sys.stdout/sys.stderr writes there.


class _Sink:
    """What a model streams into: answer text by calling it, reasoning through ``.thinking``."""

    __slots__ = ("_text", "thinking")

    def __init__(self, text: Callable[[str], None], thinking: Callable[[str], None]) -> None:
        self._text = text
        self.thinking = thinking

    def __call__(self, text: str) -> None:
        self._text(text)


def current_loop() -> LoopHandle | None:
    """The loop running in this context (inside a tool: the loop that called it)."""
    return _CURRENT.get()


def forward_call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``method`` dropping keyword arguments its signature does not accept."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return method(*args, **kwargs)
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return method(*args, **kwargs)


_UNSET: Any = object()


def _secret_value(name: str) -> str:
    try:
        return get_secret(name)
    except KeyError as err:
        raise ValueError(err.args[0]) from None


def _new_id() -> str:
    """Unique across kernels and time (64 random bits); names show its first 4 digits."""
    return secrets.token_hex(8)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:40] or "loop"


def render_conversation(messages: Iterable[Message], prefix: str) -> str:
    """A transcript as text with roles rewritten (``outer_user``, ``inner_assistant``, ...)."""
    lines = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            lines.append(f"{prefix}_tool[{m.name}]: {m.content}")
            continue
        text = m.content or ""
        if m.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            text = f"{text}\n[calls {calls}]" if text else f"[calls {calls}]"
        role = "user" if m.role == "user" else m.role
        lines.append(f"{prefix}_{role}: {text}")
    return "\n".join(lines)


class LoopHandle:
    """A live, steerable reference to a running tool loop. ``await h`` gives its answer.

    Steering verbs are coroutines: :meth:`pause`, :meth:`resume`, :meth:`interject`,
    :meth:`stop` (returns once the loop has ended), :meth:`ask` (returns a handle whose
    result is a ``str``). Readable at any time: ``status``, ``name``, ``steps``,
    ``tool_calls``, ``usage``, ``transcript``, ``children``, ``lineage``, ``events``.
    """

    def __init__(
        self,
        task: str,
        *,
        model: Model,
        tools: Iterable[Callable[..., Any] | Tool] = (),
        system: str | None = None,
        name: str | None = None,
        max_steps: int = 30,
        max_parallel_tools: int = 8,
        interrupt_on_interject: bool = True,
        first_step_tools: Iterable[str] | None = None,
        tool_policy: ToolPolicy | None = None,
        parent_context: ParentContext = "never",
        bus: ev.EventBus | None = None,
        options: dict | None = None,
        multi: bool = False,
        persist: bool = False,
        context_window: int | None = None,
        compress_at: float = 0.8,
        keep_last: int = 8,
        count_tokens: Callable[[list[dict]], int] | None = None,
        dynamic_tools: Callable[[LoopHandle], Iterable[Callable[..., Any] | Tool]] | None = None,
        time_awareness: bool = False,
        prompt_cache: bool | Literal["openai", "anthropic"] = False,
        evaluations: Sequence[Callable[..., Any]] = (),
        max_corrections: int = 1,
        postprocessors: Sequence[Callable[..., Any]] = (),
        _kind: str = "loop",
        _context: list[dict] | None = None,
        _lineage: tuple[str, ...] | None = None,
        _parent: LoopHandle | None = None,
        _adopt: bool = True,
    ) -> None:
        if not isinstance(task, str) or not task.strip():
            raise UserError("start_loop needs a task: a non-empty string saying what to do")
        if model is None or not callable(getattr(model, "complete", None)):
            raise UserError(
                "start_loop needs model=...: an OpenAIModel('gpt-4.1-mini'), a ScriptedModel(fn), "
                "or anything with `async def complete(request, on_delta)`"
            )
        if max_steps < 1:
            raise UserError(f"max_steps must be at least 1, not {max_steps}")
        if max_parallel_tools < 1:
            raise UserError(f"max_parallel_tools must be at least 1, not {max_parallel_tools}")
        if parent_context not in ("always", "never", "model"):
            raise UserError(f"parent_context must be 'always', 'never' or 'model', not {parent_context!r}")
        if persist and not multi:
            raise UserError("persist=True needs multi=True: only a multi-request loop waits for more requests")
        if context_window is not None and (not isinstance(context_window, int) or context_window < 64):
            raise UserError(f"context_window is the model's window in tokens (at least 64), not {context_window!r}")
        if not 0.1 <= compress_at <= 1.0:
            raise UserError(f"compress_at is a fraction of the context window between 0.1 and 1, not {compress_at!r}")
        if keep_last < 1:
            raise UserError(f"keep_last must be at least 1, not {keep_last}")
        if max_corrections < 0:
            raise UserError(f"max_corrections must be 0 or more, not {max_corrections}")
        if prompt_cache not in (False, True, "openai", "anthropic"):
            raise UserError(f"prompt_cache must be False, True ('openai') or 'anthropic', not {prompt_cache!r}")
        for label, hooks in (("evaluations", evaluations), ("postprocessors", postprocessors)):
            for fn in hooks:
                if not callable(fn):
                    raise UserError(f"{label} must be functions fn(answer, loop), not {type(fn).__name__}")
        if dynamic_tools is not None and not callable(dynamic_tools):
            raise UserError("dynamic_tools must be a function fn(loop) returning the extra tools of a step")
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UserError(
                "start_loop needs a running event loop: call it inside `async def main(): ...` run by "
                "asyncio.run(main()), or in a notebook cell (Jupyter runs one)"
            ) from None
        tool_list = [as_tool(t) for t in tools]
        if _kind != "actor":
            for t in tool_list:
                if t.ref_only:
                    raise UserError(
                        f"tool {t.name!r} takes {', '.join(t.ref_only)} as an object no JSON can carry: offer it "
                        "through the actor (unity_nb.act or unity_nb.Actor), which passes variables by reference"
                    )
        self._tools: dict[str, Tool] = {}
        for t in tool_list:
            if t.name in self._tools:
                raise UserError(f"two tools are named {t.name!r}; tool names must be unique")
            self._tools[t.name] = t
        self._multi = multi
        if multi:
            if "final_answer" in self._tools:
                raise UserError("a multi-request loop brings its own final_answer tool; rename yours")
            self._tools["final_answer"] = self._final_answer_tool()
        self._first_step_tools = list(first_step_tools) if first_step_tools else []
        # a policy gets (step, tools, loop) if it takes three arguments, else (step, tools)
        self._policy_takes_loop = tool_policy is not None and accepts_positional(tool_policy, 3, unknown=False)
        for n in self._first_step_tools:
            if n not in self._tools:
                raise UserError(f"first_step_tools names {n!r}, which is not among the tools: {sorted(self._tools)}")

        self.task = task
        self.model = model
        self.id = _new_id()
        self.name = name or f"{_kind}-{self.id[:4]}"
        self.max_steps = max_steps
        self.interrupt_on_interject = interrupt_on_interject
        self.tool_policy = tool_policy
        self.parent_context = parent_context
        self.options = dict(options or {})
        self.persist = persist
        self.context_window = context_window
        self.compress_at = compress_at
        self.keep_last = keep_last
        self.count_tokens = count_tokens
        self.dynamic_tools = dynamic_tools
        self.time_awareness = time_awareness
        self.prompt_cache = "openai" if prompt_cache is True else prompt_cache
        self.evaluations = list(evaluations)
        self.max_corrections = max_corrections
        self.postprocessors = list(postprocessors)

        call = _CALL.get()
        self.parent: LoopHandle | None = _parent
        share_context = False
        if self.parent is None and call is not None and _adopt:
            self.parent, parent_call_id, share_context = call
        # a child publishes where its parent does
        self.bus = bus or (self.parent.bus if self.parent is not None else ev.default_bus())
        base = _lineage if _lineage is not None else (self.parent.lineage if self.parent else ())
        self.lineage: tuple[str, ...] = (*base, f"{self.name}({self.id})")

        self.steps = 0
        """Model calls made so far (an interrupted and re-issued call counts)."""
        self.tool_calls = 0
        """Tool calls completed so far."""
        self.usage = Usage()
        """Input and output tokens of this loop's own model calls."""
        self.transcript: list[Message] = []
        self.children: list[LoopHandle] = []
        self.events: list[ev.Event] = []
        self.started_at = time.time()
        self.ended_at: float | None = None
        self._reset_streaming()
        self.printed = 0
        """Characters tools have printed so far (routed to their call records)."""
        self.called_tools: set[str] = set()
        """Names of the tools called successfully so far (what policies like discovery-first read)."""
        self.requests: list[RequestHandle] = []
        """The requests of a multi-request loop, in order (the task is the first)."""
        self.all_references: list[Reference] = []
        """Every reference tools returned, numbered in order of arrival."""
        self.references: list[Reference] = []
        """The references the final answer cites."""
        self.thinking: list[str] = []
        """Short progress lines (what the model said it was doing, which tools it called)."""
        self.evaluation_results: list[Evaluation] = []
        """Every evaluation verdict, in order (failed ones that sent the model back included)."""
        self.compressions = 0
        """How many times the context was compressed."""

        self._status = Status.RUNNING
        self._paused = False
        self._resume_evt = asyncio.Event()
        self._resume_evt.set()
        self._wake = asyncio.Event()
        self._ended = asyncio.Event()
        self._answer: str | None = None
        self._error: BaseException | None = None
        self._stop_reason: str | None = None
        self._pending_notes: list[str] = []
        self._interjected = False
        self._interrupted = False
        self._model_task: asyncio.Task | None = None
        self._sem = asyncio.Semaphore(max_parallel_tools)
        self._schema_cache: dict[str, dict] = {}
        self._turns = 0
        self._clarifications: dict[str, tuple[str, asyncio.Future]] = {}
        self._waiting = 0
        self._clar_queue: asyncio.Queue[dict] = asyncio.Queue()
        self._note_queue: asyncio.Queue[dict] = asyncio.Queue()
        self._waiters: ev.Waiters = []
        self._listeners: list[Callable[[LoopHandle, ev.Event], None]] = []
        self._finish: tuple[Any, str] | None = None
        self._result_obj: Any = _UNSET
        self._handoff: LoopHandle | None = None
        self._dynamic: dict[str, Tool] = {}
        self._budget_start = 0
        self._corrections = 0
        self._request_evt = asyncio.Event()
        self._summary_failed_at = -1
        self._idle = False
        self._call_requests: dict[str, str] = {}
        self._parent_call: str | None = None

        wire: list[dict] = []
        if system:
            wire.append({"role": "system", "content": system})
            self.transcript.append(Message("system", system, kind="system"))
        if _context:
            wire.extend(_context)
        if share_context and self.parent is not None:
            outer = render_conversation(self.parent.transcript, "outer")
            note = (
                "Context: the conversation of the loop that called you, for reference only. Its roles "
                f"are prefixed outer_; your own conversation follows.\n{outer}"
            )
            wire.append({"role": "system", "content": note})
            self.transcript.append(Message("system", note, kind="context"))
        if multi:
            wire.append({"role": "system", "content": MULTI_NOTE})
            first = RequestHandle(self, "r1", task)
            self.requests.append(first)
            wire.append({"role": "user", "content": f"[request r1] {task}"})
        else:
            wire.append({"role": "user", "content": task})
        self.transcript.append(Message("user", task, kind="task"))
        self._wire = wire

        if self.parent is not None:
            self.parent._adopt_child(self, parent_call_id if call is not None and _parent is None else None)
        self._publish(
            ev.LoopStarted(
                loop_id=self.id, lineage=self.lineage, name=self.name, task=task,
                model=getattr(model, "name", type(model).__name__),
                parent_id=self.parent.id if self.parent else None,
            )
        )
        if multi:
            self._publish(ev.RequestSubmitted(loop_id=self.id, lineage=self.lineage, request_id="r1", text=task))
        self._task = self._loop.create_task(self._run(), name=f"unity_nb:{self.name}")
        self._task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task) -> None:
        # a task cancelled before its first step never enters _run: end the handle anyway
        if not self._ended.is_set():
            self._end(Status.STOPPED, error=Stopped(self._stop_reason) if self._stop_reason else asyncio.CancelledError())

    # ------------------------------------------------------------------ reading

    @property
    def status(self) -> Status:
        if self._status in _ENDED:
            return self._status
        if self._paused:
            return Status.PAUSED
        if self._waiting:
            return Status.WAITING
        if self._idle:
            return Status.IDLE
        return Status.RUNNING

    @property
    def messages(self) -> list[dict]:
        """A copy of the conversation as the model receives it (OpenAI wire format): always valid,
        every tool call followed by its result; compressed when the loop compresses."""
        return [dict(m) for m in self._wire]

    @property
    def result_value(self) -> str | None:
        """The final answer once finished (``None`` before, or if it did not finish)."""
        return self._answer

    @property
    def error(self) -> BaseException | None:
        """Why the loop failed or stopped (``Stopped``), once it has."""
        return self._error

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def elapsed(self) -> float:
        return (self.ended_at or time.time()) - self.started_at

    def done(self) -> bool:
        """True once the loop has finished, stopped or failed."""
        return self._ended.is_set()

    async def result(self) -> Any:
        """Wait for the answer; raise :class:`Stopped` if stopped, or the error it failed with.

        The answer is the model's final text, or the object a tool handed to
        :meth:`finish_with` (the actor's ``final_answer(value)``).
        """
        await self._ended.wait()
        if self._error is not None:
            raise self._error
        if self._result_obj is not _UNSET:
            return self._result_obj
        return self._answer or ""

    def __await__(self):
        return self.result().__await__()

    def __repr__(self) -> str:
        return f"<unity handle {self.name!r}: {self.status.value}, {self.steps} steps>"

    @property
    def multi(self) -> bool:
        """True for a multi-request loop (``start_loop(..., multi=True)``)."""
        return self._multi

    @property
    def pending_notes(self) -> tuple[str, ...]:
        """Steering and messages waiting to reach the model at its next call, in order."""
        return tuple(self._pending_notes)

    @property
    def pending_approvals(self) -> list[dict]:
        """Plans waiting for the person's approval (an actor's; a plain loop has none)."""
        return []

    def dataframe(self, kind: str | Iterable[str] | None = None) -> Any:
        """This loop's events as a pandas DataFrame (one row per event, ``kind`` first); ``kind`` filters."""
        kinds = {kind} if isinstance(kind, str) else set(kind) if kind is not None else None
        return ev.EventBus.to_dataframe(e for e in self.events if kinds is None or e.kind in kinds)

    def live_children(self) -> list[LoopHandle]:
        return [c for c in self.children if not c.done()]

    def walk(self) -> Iterable[LoopHandle]:
        """This handle and every descendant, depth first."""
        yield self
        for c in self.children:
            yield from c.walk()

    async def wait_for(
        self, kind: str | None = None, where: Callable[[ev.Event], bool] | None = None, *, timeout: float = 10.0
    ) -> ev.Event:
        """The first event of this loop matching ``kind`` and ``where``, past or future."""

        def pred(e: ev.Event) -> bool:
            return (kind is None or e.kind == kind) and (where is None or where(e))

        for e in self.events:
            if pred(e):
                return e
        return await ev.wait_matching(self._waiters, pred, timeout)

    def add_listener(self, fn: Callable[[LoopHandle, ev.Event], None]) -> Callable[[], None]:
        """Call ``fn(handle, event)`` for every event of this loop and of its descendants."""
        self._listeners.append(fn)
        return lambda: fn in self._listeners and self._listeners.remove(fn)  # type: ignore[func-returns-value]

    # ------------------------------------------------------------------ steering

    def _require_live(self, verb: str) -> None:
        if self.done():
            raise HandleStateError(
                f"cannot {verb} {self.name!r}: the loop is {self.status.value}", state=self.status.value
            )

    async def pause(self) -> None:
        """No new model call or tool start until :meth:`resume`; in-flight work finishes. Reaches all live children."""
        self._require_live("pause")
        if not self._paused:
            self._paused = True
            self._resume_evt.clear()
            self._steering("pause", None, "[paused by the user]")
        await asyncio.gather(*(_quiet(forward_call(c.pause)) for c in self.live_children()))

    async def resume(self) -> None:
        """Undo :meth:`pause`; work that completed meanwhile is processed first. Reaches all live children."""
        self._require_live("resume")
        await asyncio.gather(*(_quiet(forward_call(c.resume)) for c in self.live_children()))
        if self._paused:
            self._paused = False
            self._steering("resume", None, "[resumed by the user]")
            self._resume_evt.set()

    async def interject(self, message: str, *, request_id: str | None = None) -> None:
        """Deliver ``message`` to the model before its next call (cancelling and re-issuing one in flight
        when ``interrupt_on_interject``). While tools run, the model may route it to a live child.
        In a multi-request loop ``request_id`` tags it with the request it is about."""
        self._require_live("interject")
        if not isinstance(message, str) or not message.strip():
            raise UserError("interject needs a non-empty message")
        if request_id is not None:
            self._request(request_id)
        self.transcript.append(Message("user", message, kind="interjection"))
        about = f" about request {request_id}" if request_id else ""
        self._pending_notes.append(f"[interjection from the user{about}] {message}")
        self._publish(ev.Steering(loop_id=self.id, lineage=self.lineage, action="interject", message=message, request_id=request_id))
        self._nudge()

    def post(self, message: str, *, kind: str = "message") -> None:
        """Deliver ``message`` to the model verbatim before its next call (like an interjection,
        without the "from the user" label): a durable task's queue uses it for child completions."""
        self._require_live("post to")
        if not isinstance(message, str) or not message.strip():
            raise UserError("post needs a non-empty message")
        self.transcript.append(Message("user", message, kind=kind))
        self._pending_notes.append(message)
        self._publish(ev.Notification(loop_id=self.id, lineage=self.lineage, call_id=None, text=message))
        self._nudge()

    def _nudge(self) -> None:
        """New steering or a new request: wake the loop, and interrupt a model call in flight."""
        self._interjected = True
        self._wake.set()
        self._request_evt.set()
        task = self._model_task
        if self.interrupt_on_interject and task is not None and not task.done():
            self._interrupted = True
            task.cancel()

    # ------------------------------------------------------------------ multi-request loops

    def submit(self, text: str) -> RequestHandle:
        """Add a request to a multi-request loop (``start_loop(..., multi=True)``); it shares the
        loop's context and gets a handle of its own."""
        if not self._multi:
            raise UserError(f"{self.name!r} serves one request; start it with multi=True to submit more")
        self._require_live("submit to")
        check_text(text)
        req = RequestHandle(self, f"r{len(self.requests) + 1}", text)
        self.requests.append(req)
        self.transcript.append(Message("user", text, kind="request", name=req.request_id))
        self._pending_notes.append(f"[request {req.request_id}] {text}")
        self._budget_start = self._turns
        self._publish(ev.RequestSubmitted(loop_id=self.id, lineage=self.lineage, request_id=req.request_id, text=text))
        self._nudge()
        return req

    def open_requests(self) -> list[RequestHandle]:
        return [r for r in self.requests if not r.done()]

    def _find_request(self, request_id: str | None) -> RequestHandle | None:
        return next((r for r in self.requests if r.request_id == request_id), None)

    def _request(self, request_id: str) -> RequestHandle:
        found = self._find_request(request_id)
        if found is not None:
            return found
        known = [r.request_id for r in self.requests] or "none (this loop serves one request)"
        raise UserError(f"{self.name!r} has no request {request_id!r}; its requests: {known}")

    async def _stop_request(self, req: RequestHandle, reason: str) -> None:
        self._require_live("stop a request of")
        req._end(Status.STOPPED, Stopped(reason))
        self.transcript.append(Message("user", f"[request {req.request_id} stopped by the user: {reason}]", kind="steering"))
        self._publish(ev.Steering(loop_id=self.id, lineage=self.lineage, action="stop", message=reason, request_id=req.request_id))
        if not self.open_requests() and not self.persist:
            await self.stop(f"its last open request ({req.request_id}) was stopped: {reason}")
            return
        self._pending_notes.append(f"[request {req.request_id} was stopped by the user ({reason}): do not work on it any further]")
        self._nudge()

    def _final_answer_tool(self) -> Tool:
        loop = self

        async def final_answer(request_id: str, answer: str) -> str:
            """Complete the request `request_id` with `answer` (what the person who asked receives)."""
            req = loop._find_request(request_id)
            if req is None:
                raise ToolFailed(
                    f"error: there is no request {request_id!r}; open requests: {[r.request_id for r in loop.open_requests()]}"
                )
            if req.done():
                raise ToolFailed(f"error: request {request_id} is already {req.status.value}; answer only open requests")
            ok, text = await loop._finalize(answer, req)
            if not ok:
                raise ToolFailed(f"error: request {request_id} is still open. {text}")
            req._finish(text)
            loop.transcript.append(Message("assistant", text, kind="answer", name=request_id))
            return f"request {request_id} completed"

        return as_tool(final_answer)

    async def stop(self, reason: str | None = None) -> None:
        """Cancel the model call, running tools and every child; return once the loop has ended.

        Stopping an ended loop does nothing (stop is idempotent). ``result()`` then raises
        :class:`Stopped` with ``reason``.
        """
        if self.done() or self._stop_reason is not None:
            if not self.done() and asyncio.current_task() is not self._task:
                await self._ended.wait()
            return
        self._stop_reason = reason or "stopped by the user"
        self._steering("stop", reason, None)
        await asyncio.gather(*(_quiet(forward_call(c.stop, reason=reason)) for c in self.live_children()))
        self._task.cancel()
        if asyncio.current_task() is not self._task:
            await self._ended.wait()

    async def ask(self, question: str, **options: Any) -> LoopHandle:
        """A new read-only loop answering ``question`` from a snapshot of this one's transcript.

        The snapshot's roles are rewritten (``inner_user``, ``inner_assistant``, ...) so the
        inspecting model can tell that conversation from its own; it gets an ``ask_<child>``
        tool for each live child to drill down. Its result is a ``str``.
        """
        return self.start_ask(question, **options)

    def start_ask(self, question: str, **options: Any) -> LoopHandle:
        """:meth:`ask` without the ``await``: start the inspection loop and return its handle."""
        if not isinstance(question, str) or not question.strip():
            raise UserError("ask needs a non-empty question")
        snapshot = render_conversation(list(self.transcript), "inner")
        if self.streaming_text:
            snapshot += f"\ninner_assistant (still streaming): {self.streaming_text}"
        self.transcript.append(Message("user", f"[asked by the user] {question}", kind="steering"))
        self._publish(ev.Steering(loop_id=self.id, lineage=self.lineage, action="ask", message=question))
        system = (
            f"You are inspecting another, running conversation (the loop {self.name!r}, status "
            f"{self.status.value}, {self.steps} model calls, {self.tool_calls} tool calls so far). "
            "Its messages are below with roles prefixed inner_. Answer the user's question about it "
            "concisely and truthfully; you cannot change it."
            + (" Use the ask_* tools to question its running sub-operations." if self.live_children() else "")
            + f"\n\n{snapshot}"
        )
        tools = [self._child_tool(c, "ask") for c in self.live_children()]
        return LoopHandle(
            question, model=options.pop("model", self.model), tools=tools, system=system,
            name=f"ask-{self.name}", bus=self.bus, _kind="ask",
            _lineage=self.lineage, _adopt=False, max_steps=options.pop("max_steps", 6), **options,
        )

    # ------------------------------------------------------------------ clarifications, notifications

    async def next_clarification(self) -> dict:
        """Wait for the next question a tool (here or in any descendant) asks the person.

        Returns ``{"call_id", "question", "loop", "tool"}``; answer it with :meth:`answer_clarification`.
        """
        while True:
            item = await self._clar_queue.get()
            owner: LoopHandle = item["handle"]
            if item["call_id"] in owner._clarifications:
                return {k: v for k, v in item.items() if k != "handle"}

    async def answer_clarification(self, call_id: str, answer: str) -> None:
        """Answer the question asked by tool call ``call_id`` (here or in any descendant)."""
        for h in self.walk():
            pending = h._clarifications.get(call_id)
            if pending is not None:
                question, fut = pending
                if not fut.done():
                    fut.set_result(answer)
                return
        asked = [cid for h in self.walk() for cid in h._clarifications]
        raise UserError(f"no open clarification with call_id {call_id!r} in {self.name!r}; open: {asked or 'none'}")

    def pending_clarifications(self) -> list[dict]:
        """Open questions in this loop and its descendants."""
        return [
            {"call_id": cid, "question": q, "loop": h.name, "loop_id": h.id}
            for h in self.walk()
            for cid, (q, _f) in h._clarifications.items()
        ]

    async def next_notification(self) -> dict:
        """Wait for the next progress note from a tool here or in any descendant: ``{"call_id", "text", "loop", "tool"}``."""
        return await self._note_queue.get()

    def _bubble(self, call_id: str | None, request_id: str | None) -> list[Any]:
        """Where a question or note from tool call ``call_id`` goes: this loop, its ancestors, and
        the request each multi-request loop among them was serving with the call that led here."""
        out: list[Any] = []
        h: LoopHandle | None = self
        via = call_id
        while h is not None:
            out.append(h)
            if h._multi:
                rid = request_id if h is self else h._call_requests.get(via or "")
                req = h._find_request(rid)
                if req is not None:
                    out.append(req)
            via = h._parent_call
            h = h.parent
        return out

    async def _clarify(self, call_id: str, question: str, request_id: str | None = None) -> str:
        question = scrub(question)
        fut = self._loop.create_future()
        self._clarifications[call_id] = (question, fut)
        self.transcript.append(Message("assistant", question, kind="clarification", tool_call_id=call_id))
        item = {"call_id": call_id, "question": question, "loop": self.name, "tool": self._tool_name(call_id), "handle": self}
        if request_id is not None:
            item["request_id"] = request_id
        chain = self._bubble(call_id, request_id)
        for h in chain:
            h._waiting += 1
            h._clar_queue.put_nowait(item)
        self._publish(ev.ClarificationRequested(loop_id=self.id, lineage=self.lineage, call_id=call_id, question=question))
        try:
            answer = await fut
        finally:
            self._clarifications.pop(call_id, None)
            for h in chain:
                h._waiting -= 1
        shown = scrub(answer)  # the tool gets the answer itself; people and the store see it scrubbed
        self.transcript.append(Message("user", shown, kind="clarification", tool_call_id=call_id))
        self._publish(ev.ClarificationAnswered(loop_id=self.id, lineage=self.lineage, call_id=call_id, answer=shown))
        return answer

    def _notify(self, call_id: str | None, text: str, request_id: str | None = None) -> None:
        text = scrub(text)
        self.transcript.append(Message("tool", text, kind="notification", tool_call_id=call_id, name=self._tool_name(call_id)))
        item = {"call_id": call_id, "text": text, "loop": self.name, "tool": self._tool_name(call_id)}
        if request_id is not None:
            item["request_id"] = request_id
        for h in self._bubble(call_id, request_id):
            h._note_queue.put_nowait(item)
        self._publish(ev.Notification(loop_id=self.id, lineage=self.lineage, call_id=call_id, text=text))

    def _ancestry(self) -> Iterable[LoopHandle]:
        h: LoopHandle | None = self
        while h is not None:
            yield h
            h = h.parent

    def _tool_name(self, call_id: str | None) -> str | None:
        for m in reversed(self.transcript):
            for c in m.tool_calls:
                if c.id == call_id:
                    return c.name
        return None

    # ------------------------------------------------------------------ internals

    def _publish(self, event: ev.Event) -> None:
        self.events.append(event)
        if self._waiters:
            ev.resolve_waiters(self._waiters, event)
        for h in self._ancestry():
            for fn in h._listeners:
                fn(self, event)
        self.bus.publish(event)

    def _steering(self, action: str, message: str | None, note: str | None) -> None:
        text = {"pause": "[paused by the user]", "resume": "[resumed by the user]"}.get(action)
        if action == "stop":
            text = f"[stopped by the user{': ' + message if message else ''}]"
        self.transcript.append(Message("user", text or message, kind="steering"))
        if note:
            self._pending_notes.append(note)
        self._publish(ev.Steering(loop_id=self.id, lineage=self.lineage, action=action, message=message))  # type: ignore[arg-type]

    def _adopt_child(self, child: LoopHandle, call_id: str | None) -> None:
        if child in self.children:
            return
        child.parent = self
        child._parent_call = call_id
        self.children.append(child)
        if call_id is not None:
            for m in reversed(self.transcript):
                for c in m.tool_calls:
                    if c.id == call_id:
                        c.child = child
        self._publish(ev.ChildStarted(loop_id=self.id, lineage=self.lineage, child_id=child.id, child_name=child.name, call_id=call_id))
        if self._paused:  # a child started while paused starts paused
            child._paused = True
            child._resume_evt.clear()

    def _drain_notes(self) -> None:
        self._interjected = False
        if self._pending_notes:
            self._wire.append({"role": "user", "content": "\n".join(self._pending_notes)})
            self._pending_notes.clear()

    async def _checkpoint(self) -> bool:
        """Before each model call: honour pause, wait for requests (persistent multi-request
        loops), deliver steering, compress. True when a multi-request loop is done."""
        while True:
            while self._paused:
                await self._resume_evt.wait()
            if not self._multi or self.open_requests() or self._pending_notes:
                break
            if not self.persist:
                return True
            self._request_evt.clear()
            self._idle = True
            try:
                await self._request_evt.wait()
            finally:
                self._idle = False
        self._before_step()
        self._drain_notes()
        await self._maybe_compress()
        return False

    def _available_tools(self) -> list[Tool]:
        """The tools this step may offer (derived loops compute them from state)."""
        return list(self._tools.values())

    def _tool_named(self, name: str) -> Tool | None:
        """The tool a call names (derived loops may know tools not offered this step)."""
        return self._tools.get(name)

    def _before_step(self) -> None:
        """Called before each model call, after pause and before steering is drained."""

    def _last_step(self) -> bool:
        return self._turns - self._budget_start >= self.max_steps - 1

    def _offered(self) -> tuple[list[Tool], str | dict]:
        if self._last_step():  # the last step offers no tools, so an answer comes
            if self._multi and len(self.open_requests()) > 1:
                return [self._tools["final_answer"]], "required"
            return [], "none"
        tools = self._available_tools()
        if self._multi and "final_answer" not in {t.name for t in tools}:
            tools.append(self._tools["final_answer"])
        if self.dynamic_tools is not None:
            self._dynamic = {}
            for obj in self.dynamic_tools(self) or ():
                t = as_tool(obj)
                if any(x.name == t.name for x in tools):
                    raise UserError(f"dynamic_tools made a tool named {t.name!r}, which the loop already has")
                self._dynamic[t.name] = t
                tools.append(t)
        by_name = {t.name: t for t in tools}
        if self._turns == 0 and self._first_step_tools:
            return [by_name[n] for n in self._first_step_tools if n in by_name], "required"
        if self.tool_policy is not None:
            args = (self._turns, tools, self) if self._policy_takes_loop else (self._turns, tools)
            mode, chosen = self.tool_policy(*args)
            picked = [by_name[t] if isinstance(t, str) else t for t in chosen]
            return picked, mode
        return tools, "auto"

    def _lookup(self, name: str) -> Tool | None:
        """The tool a call names: a dynamic tool of this step, the loop's own, or final_answer."""
        found = self._dynamic.get(name) or self._tool_named(name)
        if found is None and self._multi and name == "final_answer":
            found = self._tools["final_answer"]
        return found

    def finish_with(self, value: Any, text: str | None = None) -> None:
        """From inside a tool of this loop: end the loop with ``value`` as its result once the
        current tool calls have their results (``text`` is what the transcript shows)."""
        self._finish = (value, scrub(text if text is not None else render_result(value)))

    def _extra_properties(self, tool: Tool) -> dict | None:
        """Parameters the loop adds to a tool's schema (and takes out of its arguments)."""
        extra: dict[str, dict] = {}
        if self.parent_context == "model":
            extra["include_parent_context"] = {
                "type": "boolean", "description": "true: a sub-operation this tool starts sees this conversation as context",
            }
        if self._multi and tool.name != "final_answer" and "request_id" not in tool.params.model_fields:
            extra["request_id"] = {"type": "string", "description": "the id of the request this call serves (e.g. r2)"}
        return extra or None

    def _schemas(self, tools: Sequence[Tool]) -> list[dict]:
        cache = self._schema_cache
        out = []
        for t in tools:
            if self._tools.get(t.name) is not t:  # a steering or dynamic tool made for this step: not cached
                out.append(t.schema(extra_properties=self._extra_properties(t)))
                continue
            s = cache.get(t.name)
            if s is None:
                s = cache[t.name] = t.schema(extra_properties=self._extra_properties(t))
            out.append(s)
        return out

    def _cache_hints(self, request: ModelRequest) -> ModelRequest:
        """Prompt-caching hints: OpenAI's ``prompt_cache_key`` (one per loop tree, so its requests
        share a cache), or Anthropic-style ``cache_control`` breakpoints on the system prompt and
        the newest message (for OpenAI-compatible gateways that pass them on)."""
        if self.prompt_cache == "openai":
            root = self
            while root.parent is not None:
                root = root.parent
            return ModelRequest(request.messages, request.tools, request.tool_choice,
                                {**request.options, "prompt_cache_key": f"unity_nb-{root.id}"})
        messages = list(request.messages)
        marks = [i for i, m in enumerate(messages) if m.get("role") == "system"][:1]
        if messages and messages[-1].get("role") in ("user", "system") and len(messages) - 1 not in marks:
            marks.append(len(messages) - 1)
        for i in marks:
            m = messages[i]
            if isinstance(m.get("content"), str):
                messages[i] = {**m, "content": [{"type": "text", "text": m["content"], "cache_control": {"type": "ephemeral"}}]}
        return ModelRequest(messages, request.tools, request.tool_choice, request.options)

    @property
    def streaming_text(self) -> str:
        """The assistant text of the model call in flight, as streamed so far (scrubbed: an end that
        could be the start of a secret value shows once the next piece settles it)."""
        return self._streaming.text

    @property
    def streaming_thinking(self) -> str:
        """The reasoning of the model call in flight, as far as it has streamed (where the provider streams it)."""
        return self._streaming_thinking.text

    def _reset_streaming(self) -> None:
        # pieces joined when read (appending to a str is quadratic), scrubbed as they accumulate
        self._streaming, self._streaming_scrub = TextBuffer(), ScrubStream()
        self._streaming_thinking, self._thinking_scrub = TextBuffer(), ScrubStream()

    def _on_delta(self, text: str) -> None:
        text = self._streaming_scrub.feed(text)
        if text:
            self._streaming.append(text)
            self._publish(ev.ModelDelta(loop_id=self.id, lineage=self.lineage, step=self.steps, text=text))

    def _on_thinking(self, text: str) -> None:
        text = self._thinking_scrub.feed(text)
        if text:
            self._streaming_thinking.append(text)
            self._publish(ev.ModelDelta(loop_id=self.id, lineage=self.lineage, step=self.steps, text=text, thinking=True))

    def _flush_streaming(self) -> None:
        """The model call ended: publish what the scrubbers held back (an unfinished start of a value)."""
        for scrubber, buffer, thinking in (
            (self._streaming_scrub, self._streaming, False), (self._thinking_scrub, self._streaming_thinking, True),
        ):
            text = scrubber.flush()
            if text:
                buffer.append(text)
                self._publish(ev.ModelDelta(loop_id=self.id, lineage=self.lineage, step=self.steps, text=text, thinking=thinking))

    def _on_retry(self, attempt: int, error: str, delay: float) -> None:
        self._reset_streaming()
        self._publish(ev.ModelRetry(loop_id=self.id, lineage=self.lineage, attempt=attempt, error=error, delay=delay))

    async def _call_model(self, messages: list[dict], tools: Sequence[Tool], choice: str | dict) -> Reply | None:
        """One model call; ``None`` when an interjection interrupted it (the caller re-issues)."""
        self.steps += 1
        step = self.steps
        last_user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
        request = ModelRequest(messages=messages, tools=self._schemas(tools), tool_choice=choice if tools else "none", options=self.options)
        if self.prompt_cache:
            request = self._cache_hints(request)
        self._publish(
            ev.ModelRequested(
                loop_id=self.id, lineage=self.lineage, step=step, messages=len(messages),
                tools=tuple(t.name for t in tools), tool_choice=choice if isinstance(choice, str) else "function",
                last_user=last_user if isinstance(last_user, str) else None,
            )
        )
        self._reset_streaming()
        self._interrupted = False
        task = self._loop.create_task(self.model.complete(request, _Sink(self._on_delta, self._on_thinking)))
        self._model_task = task
        try:
            reply = await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if self._interrupted and me is not None and not me.cancelling():
                self._flush_streaming()
                self._publish(ev.ModelResponse(loop_id=self.id, lineage=self.lineage, step=step, content=self.streaming_text or None, interrupted=True))
                return None
            raise
        finally:
            self._model_task = None
        self._flush_streaming()
        self.usage += reply.usage
        reply.content = scrub(reply.content)
        reply.thinking = scrub(getattr(reply, "thinking", None))
        reply.refusal = scrub(getattr(reply, "refusal", None))
        self._publish(
            ev.ModelResponse(
                loop_id=self.id, lineage=self.lineage, step=step, content=reply.content,
                tool_calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls),
                input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens,
                thinking=reply.thinking, refusal=reply.refusal,
            )
        )
        if reply.refusal and not reply.content:  # a refusal is what the model said: shown and kept as such
            reply.content = f"[refused] {reply.refusal}"
        self._reset_streaming()
        return reply

    async def _run(self) -> None:
        _CURRENT.set(self)
        retry_hook.set(self._on_retry)
        try:
            answer = await self._drive()
        except asyncio.CancelledError as err:
            if self._stop_reason is not None:
                self._end(Status.STOPPED, error=Stopped(self._stop_reason))
            else:  # cancelled from outside: not a stop of ours
                self._end(Status.STOPPED, error=err)
            return
        except Exception as err:  # noqa: BLE001 - the run failed: result() raises it
            self._end(Status.FAILED, error=err)
            return
        self._end(Status.FINISHED, answer=answer)

    def _end(self, status: Status, *, answer: str | None = None, error: BaseException | None = None) -> None:
        for r in self.open_requests():
            r._end(status if status is not Status.FINISHED else Status.FAILED,
                   error or UnityError(f"the loop ended before answering request {r.request_id}"))
        self._status = status
        self._answer = answer
        self._error = error
        self.ended_at = time.time()
        self._paused = False
        self._resume_evt.set()
        if status is Status.FINISHED:
            self._publish(ev.LoopFinished(loop_id=self.id, lineage=self.lineage, status="finished", result=answer, steps=self.steps))
        elif status is Status.STOPPED:
            self._publish(ev.LoopFinished(loop_id=self.id, lineage=self.lineage, status="stopped", reason=self._stop_reason or "cancelled", steps=self.steps))
        else:
            self.transcript.append(Message("assistant", f"[failed] {type(error).__name__}: {error}", kind="error", error=True))
            self._publish(ev.LoopFailed(loop_id=self.id, lineage=self.lineage, error=f"{type(error).__name__}: {error}", steps=self.steps))
        self._ended.set()

    async def _drive(self) -> str:
        while True:
            if await self._checkpoint():  # a multi-request loop with nothing left to do
                return self._multi_answer()
            last = self._last_step()
            budget = self._budget_start

            def still_last() -> bool:
                """This was the last step, and no request submitted meanwhile restarted the budget."""
                return last and self._budget_start == budget

            tools, choice = self._offered()
            reply = await self._call_model(list(self._wire), tools, choice)
            if reply is None:  # interrupted by an interjection: re-issue with it
                continue
            while self._paused:  # a reply that lands while paused is processed on resume
                await self._resume_evt.wait()
            self._turns += 1
            records = [ToolCallRecord(c.id, c.name, c.arguments) for c in reply.tool_calls]
            # an answer written before the latest interjection is not final: the model sees it next
            final = not reply.tool_calls and not self._interjected
            if final and self._multi and len(self.open_requests()) > 1:
                final = False
                if not still_last():  # at the last step they fail below
                    self._pending_notes.append(
                        f"[{len(self.open_requests())} requests are still open: "
                        f"{', '.join(r.request_id for r in self.open_requests())}. Complete each with final_answer(request_id, answer).]"
                    )
            entry = Message("assistant", reply.content, kind="answer" if final else "text", tool_calls=records,
                            thinking=reply.thinking, error=bool(reply.refusal))
            self.transcript.append(entry)
            wire_msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                wire_msg["tool_calls"] = [c.to_wire() for c in reply.tool_calls]
            for key, value in (getattr(reply, "echo", None) or {}).items():
                wire_msg[key] = scrub(value) if isinstance(value, str) else value
            self._wire.append(wire_msg)
            if reply.tool_calls:
                self._think(reply.content or reply.thinking, [c.name for c in reply.tool_calls])
            if final:
                # corrections are counted per answer owner: in a multi-request loop, the request it completes
                owner = (self.open_requests() or [self])[0] if self._multi else self
                ok, text = await self._finalize(reply.content or "", owner)
                if not ok:  # an evaluation sent the model back with its feedback
                    entry.kind = "text"
                    self._pending_notes.append(text)
                    continue
                if text != (reply.content or ""):
                    entry.kind = "text"
                    self.transcript.append(Message("assistant", text, kind="answer"))
                self.references = self._cited(text)
                if not self._multi:
                    return text
                open_now = self.open_requests()
                if open_now:
                    open_now[0]._finish(text)
                if still_last():
                    self._fail_open(f"the loop reached max_steps={self.max_steps} before answering it")
                continue
            if not reply.tool_calls:
                if self._multi and still_last():  # a plain reply at the last step
                    self._fail_open(f"the loop reached max_steps={self.max_steps} before answering it")
                continue
            if not tools:
                why = f"its last step (max_steps={self.max_steps})" if last else "a step"
                raise UnityError(
                    f"the model called {[c.name for c in reply.tool_calls]} at {why} where no tools were "
                    "offered, instead of answering"
                )
            await self._run_tools(records, wire_msg)
            if self._handoff is not None:
                child = self._handoff
                self._result_obj = child
                text = f"[control handed to {child.name!r}, which goes on by itself]"
                self.transcript.append(Message("assistant", text, kind="answer"))
                return text
            if self._finish is not None:
                value, text = self._finish
                self._result_obj = value
                self.transcript.append(Message("assistant", text, kind="answer"))
                return text
            if self._multi and still_last():
                self._fail_open(f"the loop reached max_steps={self.max_steps} before answering it")

    # ------------------------------------------------------------------ answers

    def _think(self, content: str | None, calls: list[str]) -> None:
        line = (content or "").strip().split("\n", 1)[0]
        line = line if len(line) <= 160 else line[:157] + "..."
        text = line or f"calling {', '.join(dict.fromkeys(calls))}"
        self.thinking.append(text)
        self._publish(ev.ThinkingStep(loop_id=self.id, lineage=self.lineage, text=text))

    def _cited(self, text: str) -> list[Reference]:
        by_number = {r.number: r for r in self.all_references}
        return [by_number[n] for n in cited_numbers(text) if n in by_number]

    async def _finalize(self, answer: str, owner: Any) -> tuple[bool, str]:
        """Evaluations, then post-processors. ``(False, feedback)`` sends the model back (at most
        ``max_corrections`` times per answer owner: the loop, or one request); else ``(True, answer)``."""
        verdicts = [await evaluate(fn, answer, self) for fn in self.evaluations]
        self.evaluation_results.extend(verdicts)
        failed = [v for v in verdicts if not v.passed]
        send_back = bool(failed) and owner._corrections < self.max_corrections
        for verdict in verdicts:
            self._publish(ev.EvaluationRun(
                loop_id=self.id, lineage=self.lineage, name=verdict.name, passed=verdict.passed,
                feedback=verdict.feedback, attempt=owner._corrections + 1, sent_back=send_back and not verdict.passed,
            ))
        if send_back:
            owner._corrections += 1
            problems = "; ".join(f"{v.name}: {v.feedback}" for v in failed)
            note = f"[your answer did not pass evaluation ({problems}). Correct it and answer again.]"
            self.transcript.append(Message("user", note, kind="evaluation"))
            return False, note
        for fn in self.postprocessors:
            try:
                value = await call_hook(fn, answer, self)
            except Exception as err:  # noqa: BLE001 - the answer stands; the failure is recorded
                self._notify(None, f"post-processor {hook_name(fn)} failed: {type(err).__name__}: {err}")
                continue
            if isinstance(value, str):
                answer = value
        return True, answer

    def _multi_answer(self) -> str:
        answers = {r.request_id: r.answer for r in self.requests if r.status is Status.FINISHED}
        self._result_obj = answers
        return f"completed requests: {', '.join(answers) or 'none'}"

    def _fail_open(self, why: str) -> None:
        for r in self.open_requests():
            r._end(Status.FAILED, UnityError(f"request {r.request_id}: {why}"))

    async def _maybe_compress(self) -> None:
        """Summarise the older part of the wire when it nears the context window."""
        if not self.context_window:
            return
        count = self.count_tokens or estimate_tokens
        before = count(self._wire)
        if before < self.compress_at * self.context_window:
            return
        head, middle, tail = split_for_compression(self._wire, self.keep_last)
        if not middle or (len(middle) == 1 and str(middle[0].get("content", "")).startswith(SUMMARY_TAG)):
            return  # nothing older than the kept turns to summarise
        if self._summary_failed_at == self._turns:
            return
        request = ModelRequest(
            messages=[{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": render_for_summary(middle)}],
            tools=[], tool_choice="none", options=self.options,
        )
        try:
            reply = await self.model.complete(request, None)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - go on uncompressed; the model may still cope
            self._summary_failed_at = self._turns
            self._notify(None, f"context compression failed ({type(err).__name__}: {err}); continuing uncompressed")
            return
        self.usage += reply.usage
        summary = {"role": "user", "content": f"{SUMMARY_TAG}\n{reply.content or ''}"}
        self._wire = [*head, summary, *tail]
        self.compressions += 1
        after = count(self._wire)
        self.transcript.append(Message(
            "system", f"[context compressed: {len(middle)} earlier messages summarised for the model; the transcript keeps them]",
            kind="compression",
        ))
        self._publish(ev.ContextCompressed(
            loop_id=self.id, lineage=self.lineage, messages_before=len(head) + len(middle) + len(tail),
            messages_after=len(self._wire), tokens_before=before, tokens_after=after, summarised=len(middle),
        ))

    async def _run_tools(self, records: list[ToolCallRecord], wire_msg: dict) -> None:
        tasks = [self._loop.create_task(self._run_one(rec)) for rec in records]
        deferred: list[dict] = []
        wake = self._wake  # set by each finished call, and by an interjection to route
        remaining = len(tasks)

        def finished(_task: asyncio.Task) -> None:
            nonlocal remaining
            remaining -= 1
            wake.set()

        for t in tasks:
            t.add_done_callback(finished)
        try:
            while True:
                wake.clear()
                if not remaining:
                    break
                # children may be born inside the tools, so check for them on every wake
                if self._interjected and self.live_children():
                    await self._route(records, wire_msg, deferred)
                    continue
                await wake.wait()
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            if remaining:
                await asyncio.wait(tasks)  # each records its own result, also when cancelled
            for rec in records:
                self._wire.append({"role": "tool", "tool_call_id": rec.id, "content": rec.result or ""})
            self._wire.extend(deferred)
            if self.time_awareness:
                self._wire.append({"role": "user", "content": time_note(self.started_at)})

    async def _route(self, records: list[ToolCallRecord], wire_msg: dict, deferred: list[dict]) -> None:
        """Steering arrived while tools (with live children) run: let the model route it."""
        while self._paused:
            await self._resume_evt.wait()
        self._interjected = False
        if not self._pending_notes:
            return
        deferred.append({"role": "user", "content": "\n".join(self._pending_notes)})
        self._pending_notes.clear()
        live = self.live_children()
        if not live:
            return
        tools = [self._child_tool(c, verb) for c in live for verb in ("interject", "ask", "pause", "resume", "stop")]
        placeholders = [
            {"role": "tool", "tool_call_id": r.id, "content": r.result if r.result is not None else "[still running]"}
            for r in records
        ]
        note = {
            "role": "system",
            "content": "Tool calls above are still running as sub-operations. Route the user's new message to "
            "them with the steering tools if it concerns them; otherwise reply briefly. Their results will follow.",
        }
        for _ in range(3):
            # the wire ends with wire_msg (the running calls): their placeholders follow it
            reply = await self._call_model([*self._wire, *placeholders, *deferred, note], tools, "auto")
            if reply is None:  # interrupted by another interjection: include it and re-issue
                self._interjected = False
                deferred.append({"role": "user", "content": "\n".join(self._pending_notes)})
                self._pending_notes.clear()
                continue
            break
        else:
            return
        recs = [ToolCallRecord(c.id, c.name, c.arguments) for c in reply.tool_calls]
        self.transcript.append(Message("assistant", reply.content, kind="routing", tool_calls=recs))
        msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            msg["tool_calls"] = [c.to_wire() for c in reply.tool_calls]
        deferred.append(msg)
        by_name = {t.name: t for t in tools}
        for rec in recs:
            await self._execute(rec, by_name.get(rec.name))
            deferred.append({"role": "tool", "tool_call_id": rec.id, "content": rec.result or ""})

    def _child_tool(self, child: LoopHandle, verb: str) -> Tool:
        """A tool through which this loop's model steers one live child."""
        if verb == "interject":

            async def fn(message: str) -> str:
                await child.interject(message)
                return f"delivered to {child.name}"

            desc = f"Send a message to the running sub-operation {child.name!r} (its task: {child.task[:200]!r})."
        elif verb == "ask":

            async def fn(question: str) -> str:
                return await (await child.ask(question)).result()

            desc = f"Ask the running sub-operation {child.name!r} about its progress; returns its answer."
        elif verb == "stop":

            async def fn(reason: str | None = None) -> str:
                await child.stop(reason)
                return f"{child.name} stopped"

            desc = f"Stop the sub-operation {child.name!r} for good."
        else:

            async def fn() -> str:
                await getattr(child, verb)()
                return f"{child.name}: {verb}d"

            desc = f"{verb.capitalize()} the sub-operation {child.name!r}."
        tool = as_tool(fn, name=f"{verb}_{_safe(child.name)}")
        tool.description = desc
        return tool

    async def _run_one(self, rec: ToolCallRecord) -> None:
        try:
            async with self._sem:
                while self._paused:  # no new tool starts while paused
                    await self._resume_evt.wait()
                await self._execute(rec, self._lookup(rec.name))
        finally:
            if rec.result is None:  # cancelled before or while running: still exactly one result
                self._finish_call(rec, f"cancelled: {self._stop_reason or 'the loop was cancelled'}", True, 0.0)

    async def _execute(self, rec: ToolCallRecord, tool: Tool | None) -> None:
        self._publish(ev.ToolStarted(loop_id=self.id, lineage=self.lineage, call_id=rec.id, name=rec.name, arguments=rec.arguments))
        t0 = time.perf_counter()
        if tool is None:
            known = ", ".join(sorted(t.name for t in self._available_tools())) or "none"
            self._finish_call(rec, f"error: there is no tool named {rec.name!r}; available: {known}", True, 0.0)
            return
        request_id = None
        try:
            arguments = rec.arguments
            share = self.parent_context == "always"
            extras = self._extra_properties(tool)
            if extras:
                raw = json.loads(arguments or "{}")
                if isinstance(raw, dict):
                    if "include_parent_context" in extras:
                        share = bool(raw.pop("include_parent_context", False))
                    if "request_id" in extras:
                        request_id = raw.pop("request_id", None)
                        if request_id is not None:
                            self._request(str(request_id))
                    arguments = json.dumps(raw)
            if "<<secret:" in arguments:  # the values go to the tool only; the record keeps the references
                arguments = SECRET_REF.sub(lambda m: json.dumps(_secret_value(m[1]))[1:-1], arguments)
            kwargs = tool.parse(arguments)
        except (ValueError, json.JSONDecodeError, UserError) as err:
            self._finish_call(rec, f"error: {err}", True, time.perf_counter() - t0)
            return
        if request_id is None and self._multi:
            open_now = self.open_requests()
            request_id = open_now[0].request_id if len(open_now) == 1 else None
        if request_id is not None:
            self._call_requests[rec.id] = request_id
        if tool.ctx_param:
            kwargs[tool.ctx_param] = ToolContext(self, rec.id, rec.name, rec, request_id)
        token = _CALL.set((self, rec.id, share))
        out_token = tool_output.set(lambda text, _stream="stdout": self._tool_printed(rec, text))
        try:
            if tool.is_async:
                value = await tool.fn(**kwargs)
            else:
                value = await asyncio.to_thread(tool.fn, **kwargs)
            if inspect.isawaitable(value) and not isinstance(value, LoopHandle):
                value = await value
            if isinstance(value, HandOff):
                result, error = self._take_handoff(rec, value.handle), False
            else:
                if isinstance(value, LoopHandle):
                    self._adopt_child(value, rec.id)
                    rec.child = value
                    value = await value.result()
                if isinstance(value, ToolResult):
                    result = self._with_references(rec, value)
                else:
                    result = render_result(value)
                error = False
                self.called_tools.add(rec.name)
        except asyncio.CancelledError:
            raise
        except Stopped as err:
            result, error = f"error: the sub-operation was stopped ({err.reason})", True
        except ToolFailed as err:
            result, error = str(err), True
        except Exception as err:  # noqa: BLE001 - the model sees it and may correct itself
            result, error = f"error: {type(err).__name__}: {err}", True
        finally:
            _CALL.reset(token)
            tool_output.reset(out_token)
        self._finish_call(rec, result, error, time.perf_counter() - t0)

    def _take_handoff(self, rec: ToolCallRecord, child: LoopHandle) -> str:
        self._adopt_child(child, rec.id)
        rec.child = child
        self._handoff = child
        self._publish(ev.ControlHandedOff(loop_id=self.id, lineage=self.lineage, call_id=rec.id, child_id=child.id, child_name=child.name))
        return f"control handed to {child.name!r}: it goes on by itself, and this loop ends"

    def _with_references(self, rec: ToolCallRecord, value: ToolResult) -> str:
        """Number the result's references and show them to the model with it."""
        text = render_result(value.content)
        lines = []
        for ref in value.references:
            if not isinstance(ref, Reference):
                raise TypeError(f"ToolResult.references holds Reference objects, not {type(ref).__name__}")
            # a copy: a tool may return the same object again (a fixed corpus), which must not renumber this one
            ref = dataclasses.replace(
                ref, title=scrub(ref.title), text=scrub(ref.text), url=scrub(ref.url),
                number=len(self.all_references) + 1, tool=rec.name,
            )
            self.all_references.append(ref)
            body = ref.text if len(ref.text) <= 2000 else ref.text[:2000] + " ..."
            lines.append(f"[{ref.number}] {ref.title}" + (f" ({ref.url})" if ref.url else "") + (f": {body}" if body else ""))
        if lines:
            text += "\nReferences (cite them as [n] where you use them):\n" + "\n".join(lines)
        return text

    def _tool_printed(self, rec: ToolCallRecord, text: str) -> None:
        # scrubbed as it accumulates: a value written in pieces is caught, and an end that could
        # start one is held back (published with the next write, or when the call ends)
        self.printed += rec._printed.write(text)
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # a sync tool in its worker thread
            here = False
        if here and not rec._printed.ended:
            self._publish_output(rec)
        else:
            self._loop.call_soon_threadsafe(self._publish_output, rec)

    def _publish_output(self, rec: ToolCallRecord) -> None:
        if rec._printed.ended:  # printed after its call ended (and the writer had its turn): release what is held
            self.printed += rec._printed.release()
        text = rec._printed.take()
        if text:
            self._publish(ev.ToolOutput(loop_id=self.id, lineage=self.lineage, call_id=rec.id, name=rec.name, text=text))

    def _finish_call(self, rec: ToolCallRecord, result: str, error: bool, duration: float) -> None:
        self.printed += rec._printed.end()
        self._publish_output(rec)
        result = scrub(result)
        rec.result = result
        rec.error = error
        self.tool_calls += 1
        self.transcript.append(Message("tool", result, kind="tool_result", tool_call_id=rec.id, name=rec.name, error=error))
        self._publish(ev.ToolFinished(loop_id=self.id, lineage=self.lineage, call_id=rec.id, name=rec.name, result=result, error=error, duration=duration))


async def _quiet(awaitable: Any) -> None:
    """Forward steering to a child that may end meanwhile: its ended state is not our error."""
    try:
        await awaitable
    except HandleStateError:
        pass


def start_loop(task: str, **options: Any) -> LoopHandle:
    """Start a steerable tool loop on the running event loop and return its handle at once.

    ``tools`` are plain functions (sync ones run in a worker thread) with type hints and a
    docstring. The last of ``max_steps`` model calls offers no tools, so an answer always
    comes. ``first_step_tools`` forces those tools on the first step; ``tool_policy(step,
    tools) -> (mode, tools)`` chooses per step. Called inside a tool of another loop, the new
    loop becomes that loop's child (steering reaches it); ``parent_context`` says whether
    children of *this* loop see its conversation: ``"always"``, ``"never"``, or ``"model"``
    (each tool gets an ``include_parent_context`` flag the model sets).

    Policies (see ``unity_nb.discovery_first``): ``tool_policy`` may also take the loop as a
    third argument; ``dynamic_tools(loop)`` adds tools computed from state at each step;
    ``time_awareness`` notes the wall-clock time after each batch of tool results;
    ``prompt_cache`` adds caching hints (``True``/``"openai"``: a ``prompt_cache_key``;
    ``"anthropic"``: ``cache_control`` breakpoints).

    ``multi=True`` serves several requests in one context: the task is the first,
    ``h.submit(text)`` adds more (each a :class:`RequestHandle`), the model completes each with
    ``final_answer(request_id, answer)``; the loop ends when all are done (its result is
    ``{request_id: answer}``), or with ``persist=True`` waits for more until stopped.
    ``max_steps`` then counts from the latest request.

    ``context_window`` (tokens) turns on compression: when the next request would exceed
    ``compress_at`` of it (``count_tokens(messages)``, by default about four characters a
    token), the model summarises all but the head and the last ``keep_last`` messages; the
    transcript and events keep everything.

    Around the final answer: ``evaluations`` (``fn(answer, loop)`` returning an
    :class:`Evaluation`, ``True``/``None`` to pass, or feedback text to fail) send the model back
    at most ``max_corrections`` times; ``postprocessors`` (``fn(answer, loop) -> str``) transform
    it. A tool that returns ``unity_nb.handoff(handle)`` ends the loop with that handle as result.
    """
    private = sorted(k for k in options if k.startswith("_"))
    if private:
        raise UserError(f"start_loop takes no private options ({', '.join(private)})")
    return LoopHandle(task, **options)


# start_loop's signature is LoopHandle's, without the private parameters: one list, shown by help()
start_loop.__signature__ = inspect.signature(LoopHandle.__init__).replace(  # type: ignore[attr-defined]
    parameters=[p for n, p in inspect.signature(LoopHandle.__init__).parameters.items() if n != "self" and not n.startswith("_")],
    return_annotation="LoopHandle",
)
