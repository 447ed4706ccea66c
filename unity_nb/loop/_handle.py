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
import enum
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
from ..models._openai import retry_hook
from ._tools import Tool, ToolContext, ToolFailed, as_tool, render_result

__all__ = ("LoopHandle", "Status", "Message", "ToolCallRecord", "start_loop", "current_loop", "forward_call")

ParentContext = Literal["always", "never", "model"]
ToolPolicy = Callable[[int, Sequence[Tool]], "tuple[str, Sequence[Tool | str]]"]


class Status(str, enum.Enum):
    """A loop's lifecycle. The values are plain strings (``h.status == "running"``)."""

    RUNNING = "running"
    PAUSED = "paused"
    WAITING = "waiting"
    """Waiting for a person: a clarification (or, with the actor, an approval)."""
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


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
    output: str = ""
    """What the tool printed while it ran (when the notebook layer routes output)."""
    displays: list[dict] = field(default_factory=list)
    """Rich outputs the call displayed (mime bundles: ``text/html``, ``image/png``, ...)."""


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


# The loop whose tool is running in this context (set around each tool call), so a loop
# started inside a tool becomes that loop's child.
_CALL: contextvars.ContextVar[tuple[LoopHandle, str, bool] | None] = contextvars.ContextVar(
    "unity_nb_tool_call", default=None
)
_CURRENT: contextvars.ContextVar[LoopHandle | None] = contextvars.ContextVar("unity_nb_loop", default=None)
# Inside a tool call, ``tool_output`` says where text the tool prints belongs (its call
# record): see unity_nb._output, which routes sys.stdout/sys.stderr writes there.


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


def _new_id() -> str:
    return secrets.token_hex(2)


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
        self._first_step_tools = list(first_step_tools) if first_step_tools else []
        for n in self._first_step_tools:
            if n not in self._tools:
                raise UserError(f"first_step_tools names {n!r}, which is not among the tools: {sorted(self._tools)}")

        self.task = task
        self.model = model
        self.id = _new_id()
        self.name = name or f"{_kind}-{self.id}"
        self.max_steps = max_steps
        self.interrupt_on_interject = interrupt_on_interject
        self.tool_policy = tool_policy
        self.parent_context = parent_context
        self.bus = bus or ev.default_bus()
        self.options = dict(options or {})

        call = _CALL.get()
        self.parent: LoopHandle | None = _parent
        share_context = False
        if self.parent is None and call is not None and _adopt:
            self.parent, parent_call_id, share_context = call
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
        self.streaming_text = ""
        """The assistant text of the model call in flight, as streamed so far."""
        self.printed = 0
        """Characters tools have printed so far (routed to their call records)."""

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
        return Status.RUNNING

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

    async def interject(self, message: str) -> None:
        """Deliver ``message`` to the model before its next call (cancelling and re-issuing one in flight
        when ``interrupt_on_interject``). While tools run, the model may route it to a live child."""
        self._require_live("interject")
        if not isinstance(message, str) or not message.strip():
            raise UserError("interject needs a non-empty message")
        self.transcript.append(Message("user", message, kind="interjection"))
        self._pending_notes.append(f"[interjection from the user] {message}")
        self._interjected = True
        self._publish(ev.Steering(loop_id=self.id, lineage=self.lineage, action="interject", message=message))
        self._wake.set()
        task = self._model_task
        if self.interrupt_on_interject and task is not None and not task.done():
            self._interrupted = True
            task.cancel()

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
            {"call_id": cid, "question": q, "loop": h.name}
            for h in self.walk()
            for cid, (q, _f) in h._clarifications.items()
        ]

    async def next_notification(self) -> dict:
        """Wait for the next progress note from a tool here or in any descendant: ``{"call_id", "text", "loop", "tool"}``."""
        return await self._note_queue.get()

    async def _clarify(self, call_id: str, question: str) -> str:
        fut = self._loop.create_future()
        self._clarifications[call_id] = (question, fut)
        self.transcript.append(Message("assistant", question, kind="clarification", tool_call_id=call_id))
        item = {"call_id": call_id, "question": question, "loop": self.name, "tool": self._tool_name(call_id), "handle": self}
        chain = list(self._ancestry())
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
        self.transcript.append(Message("user", answer, kind="clarification", tool_call_id=call_id))
        self._publish(ev.ClarificationAnswered(loop_id=self.id, lineage=self.lineage, call_id=call_id, answer=answer))
        return answer

    def _notify(self, call_id: str | None, text: str) -> None:
        self.transcript.append(Message("tool", text, kind="notification", tool_call_id=call_id, name=self._tool_name(call_id)))
        item = {"call_id": call_id, "text": text, "loop": self.name, "tool": self._tool_name(call_id)}
        for h in self._ancestry():
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

    async def _checkpoint(self) -> None:
        while self._paused:
            await self._resume_evt.wait()
        self._before_step()
        self._drain_notes()

    def _available_tools(self) -> list[Tool]:
        """The tools this step may offer (derived loops compute them from state)."""
        return list(self._tools.values())

    def _tool_named(self, name: str) -> Tool | None:
        """The tool a call names (derived loops may know tools not offered this step)."""
        return self._tools.get(name)

    def _before_step(self) -> None:
        """Called before each model call, after pause and before steering is drained."""

    def _offered(self) -> tuple[list[Tool], str | dict]:
        if self._turns >= self.max_steps - 1:
            return [], "none"
        tools = self._available_tools()
        by_name = {t.name: t for t in tools}
        if self._turns == 0 and self._first_step_tools:
            return [by_name[n] for n in self._first_step_tools if n in by_name], "required"
        if self.tool_policy is not None:
            mode, chosen = self.tool_policy(self._turns, tools)
            picked = [by_name[t] if isinstance(t, str) else t for t in chosen]
            return picked, mode
        return tools, "auto"

    def finish_with(self, value: Any, text: str | None = None) -> None:
        """From inside a tool of this loop: end the loop with ``value`` as its result once the
        current tool calls have their results (``text`` is what the transcript shows)."""
        self._finish = (value, text if text is not None else render_result(value))

    def _schemas(self, tools: Sequence[Tool]) -> list[dict]:
        cache = self._schema_cache
        out = []
        extra = (
            {"include_parent_context": {"type": "boolean", "description": "true: a sub-operation this tool starts sees this conversation as context"}}
            if self.parent_context == "model" else None
        )
        for t in tools:
            if self._tools.get(t.name) is not t:  # a steering tool made for this step: not cached
                out.append(t.schema(extra_properties=extra))
                continue
            s = cache.get(t.name)
            if s is None:
                s = cache[t.name] = t.schema(extra_properties=extra)
            out.append(s)
        return out

    def _on_delta(self, text: str) -> None:
        self.streaming_text += text
        self._publish(ev.ModelDelta(loop_id=self.id, lineage=self.lineage, step=self.steps, text=text))

    def _on_retry(self, attempt: int, error: str, delay: float) -> None:
        self.streaming_text = ""
        self._publish(ev.ModelRetry(loop_id=self.id, lineage=self.lineage, attempt=attempt, error=error, delay=delay))

    async def _call_model(self, messages: list[dict], tools: Sequence[Tool], choice: str | dict) -> Reply | None:
        """One model call; ``None`` when an interjection interrupted it (the caller re-issues)."""
        self.steps += 1
        step = self.steps
        last_user = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
        request = ModelRequest(messages=messages, tools=self._schemas(tools), tool_choice=choice if tools else "none", options=self.options)
        self._publish(
            ev.ModelRequest(
                loop_id=self.id, lineage=self.lineage, step=step, messages=len(messages),
                tools=tuple(t.name for t in tools), tool_choice=choice if isinstance(choice, str) else "function",
                last_user=last_user if isinstance(last_user, str) else None,
            )
        )
        self.streaming_text = ""
        self._interrupted = False
        task = self._loop.create_task(self.model.complete(request, self._on_delta))
        self._model_task = task
        try:
            reply = await task
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if self._interrupted and me is not None and not me.cancelling():
                self._publish(ev.ModelResponse(loop_id=self.id, lineage=self.lineage, step=step, content=self.streaming_text or None, interrupted=True))
                return None
            raise
        finally:
            self._model_task = None
        self.usage += reply.usage
        self._publish(
            ev.ModelResponse(
                loop_id=self.id, lineage=self.lineage, step=step, content=reply.content,
                tool_calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls),
                input_tokens=reply.usage.input_tokens, output_tokens=reply.usage.output_tokens,
            )
        )
        self.streaming_text = ""
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
            await self._checkpoint()
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
            self.transcript.append(Message("assistant", reply.content, kind="answer" if final else "text", tool_calls=records))
            wire_msg: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                wire_msg["tool_calls"] = [c.to_wire() for c in reply.tool_calls]
            self._wire.append(wire_msg)
            if final:
                return reply.content or ""
            if not reply.tool_calls:
                continue
            if not tools:
                why = f"its last step (max_steps={self.max_steps})" if self._turns >= self.max_steps else "a step"
                raise UnityError(
                    f"the model called {[c.name for c in reply.tool_calls]} at {why} where no tools were "
                    "offered, instead of answering"
                )
            await self._run_tools(records, wire_msg)
            if self._finish is not None:
                value, text = self._finish
                self._result_obj = value
                self.transcript.append(Message("assistant", text, kind="answer"))
                return text

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
            reply = await self._call_model([*self._wire, wire_msg, *placeholders, *deferred, note], tools, "auto")
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
                await self._execute(rec, self._tool_named(rec.name))
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
        try:
            arguments = rec.arguments
            share = self.parent_context == "always"
            if self.parent_context == "model":
                raw = json.loads(arguments or "{}")
                share = bool(raw.pop("include_parent_context", False)) if isinstance(raw, dict) else False
                arguments = json.dumps(raw)
            kwargs = tool.parse(arguments)
        except (ValueError, json.JSONDecodeError) as err:
            self._finish_call(rec, f"error: {err}", True, time.perf_counter() - t0)
            return
        if tool.ctx_param:
            kwargs[tool.ctx_param] = ToolContext(self, rec.id, rec.name, rec)
        token = _CALL.set((self, rec.id, share))
        out_token = tool_output.set(lambda text, _stream="stdout": self._tool_printed(rec, text))
        try:
            if tool.is_async:
                value = await tool.fn(**kwargs)
            else:
                value = await asyncio.to_thread(tool.fn, **kwargs)
            if inspect.isawaitable(value) and not isinstance(value, LoopHandle):
                value = await value
            if isinstance(value, LoopHandle):
                self._adopt_child(value, rec.id)
                rec.child = value
                value = await value.result()
            result, error = render_result(value), False
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

    def _tool_printed(self, rec: ToolCallRecord, text: str) -> None:
        rec.output += text
        self.printed += len(text)
        try:
            here = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # a sync tool in its worker thread
            here = False
        if here:
            self._publish_output(rec, text)
        else:
            self._loop.call_soon_threadsafe(self._publish_output, rec, text)

    def _publish_output(self, rec: ToolCallRecord, text: str) -> None:
        self._publish(ev.ToolOutput(loop_id=self.id, lineage=self.lineage, call_id=rec.id, name=rec.name, text=text))

    def _finish_call(self, rec: ToolCallRecord, result: str, error: bool, duration: float) -> None:
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


def start_loop(
    task: str,
    *,
    model: Model,
    tools: Iterable[Callable[..., Any] | Tool] = (),
    system: str | None = None,
    max_steps: int = 30,
    max_parallel_tools: int = 8,
    interrupt_on_interject: bool = True,
    first_step_tools: Iterable[str] | None = None,
    tool_policy: ToolPolicy | None = None,
    parent_context: ParentContext = "never",
    name: str | None = None,
    bus: ev.EventBus | None = None,
    options: dict | None = None,
) -> LoopHandle:
    """Start a steerable tool loop on the running event loop and return its handle at once.

    ``tools`` are plain functions (sync ones run in a worker thread) with type hints and a
    docstring. The last of ``max_steps`` model calls offers no tools, so an answer always
    comes. ``first_step_tools`` forces those tools on the first step; ``tool_policy(step,
    tools) -> (mode, tools)`` chooses per step. Called inside a tool of another loop, the new
    loop becomes that loop's child (steering reaches it); ``parent_context`` says whether
    children of *this* loop see its conversation: ``"always"``, ``"never"``, or ``"model"``
    (each tool gets an ``include_parent_context`` flag the model sets).
    """
    return LoopHandle(
        task, model=model, tools=tools, system=system, name=name, max_steps=max_steps,
        max_parallel_tools=max_parallel_tools, interrupt_on_interject=interrupt_on_interject,
        first_step_tools=first_step_tools, tool_policy=tool_policy, parent_context=parent_context,
        bus=bus, options=options,
    )
