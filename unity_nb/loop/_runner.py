"""Running a step's tool calls: in parallel (bounded), each with exactly one result, whatever happens.

A call's value may be a loop handle (it becomes the call's child and its result is the call's),
a :class:`HandOff` (the loop ends and the child goes on), or a :class:`ToolResult` with references
(numbered and shown to the model). What a tool prints is routed to its call record, scrubbed as it
accumulates. A tool that outlives its timeout fails with an error the model sees.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import events as ev
from .._errors import Stopped, UserError
from .._json import loads
from .._output import tool_output
from .._secrets import SECRET_REF, get_secret, scrub
from ._answers import HandOff, Reference, ToolResult
from ._approval import skipped_result, wait_for_approval
from ._context import CallInfo, enter_call, leave_call, resolve_tool_value
from ._face import Loop
from ._gate import allow_once
from ._policy import Step
from ._records import Message, ToolCallRecord
from ._signals import from_signal
from ._steering import stop_once
from ._tools import Tool, ToolContext, ToolFailed, render_result
from ._workers import ToolExit, in_worker

if TYPE_CHECKING:
    from ._routing import Router
    from ._run import Run
    from ._source import ToolSource
    from ._turn import Turn

__all__ = ("ToolRunner",)


def _secret_value(name: str) -> str:
    try:
        return get_secret(name)
    except KeyError as err:
        raise ValueError(err.args[0]) from None


def _cut(result: str, limit: int) -> str:
    """A result past ``max_result_chars``: its first and last half of ``limit`` characters, saying what was cut."""
    head, tail = result[: limit // 2], result[len(result) - (limit - limit // 2) :]
    cut = len(result) - len(head) - len(tail)
    return (f"{head}\n[... {cut:,} of the result's {len(result):,} characters cut: a tool result keeps "
            f"max_result_chars={limit:,} ...]\n{tail}")


class ToolRunner:
    """Executes tool calls for one loop. It is given the loop's :class:`Run` (options, state,
    conversation, gate, events), its turn (which tool a call names), its router (steering routed to
    children, questions and notes up), its :class:`ToolSource` (the tools offered, which calls need
    approval) and, held weakly, the loop itself as :class:`Loop` (what a tool's context and the calls
    it starts see). A tool's :class:`ToolContext` reaches the loop through this runner."""

    __slots__ = ("__weakref__", "_router", "_run", "_sem", "_source", "_tools", "_turn", "call_requests", "handoff")

    def __init__(self, run: Run, turn: Turn, router: Router, tools: ToolSource, source: Loop) -> None:
        self._run = run
        self._turn = turn
        self._router = router
        self._tools = tools
        self._source = weakref.ref(source)
        self._sem: asyncio.Semaphore | None = None  # made when a call first runs (most rows of a batch call none)
        self.handoff: Loop | None = None
        """The child a tool handed control to (the loop ends with it as result)."""
        self.call_requests: dict[str, str] = {}
        """Which request each call served (multi-request loops)."""

    @property
    def turn(self) -> Turn:
        """The loop's turn (the router's routing call goes through it)."""
        return self._turn

    # -- what a tool's context reaches (ToolContext) ----------------------------------------------

    def finish_with(self, value: Any, text: str | None = None) -> None:
        self._run.finish_with(value, text)

    def emit(self, kind: type[ev.Event], **fields: Any) -> None:
        self._run.emit(kind, **fields)

    def notify(self, call_id: str | None, text: str, request_id: str | None = None) -> None:
        self._router.notify(call_id, text, request_id)

    async def clarify(self, call_id: str, question: str, request_id: str | None = None) -> str:
        return await self._router.clarify(call_id, question, request_id)

    async def wait_for_approval(
        self, call_id: str, *, tool: str, code: str, intent: str | None = None
    ) -> tuple[bool, str | None]:
        return await wait_for_approval(
            self._run, self._router.awaiting_person, call_id, tool=tool, code=code, intent=intent
        )

    @property
    def source(self) -> Loop:
        """The loop whose tools this runner runs (held weakly: the loop holds its runner)."""
        source = self._source()
        if source is None:  # only reachable through a runner kept after its loop was dropped
            raise ReferenceError("this runner's loop is gone")
        return source

    async def run(
        self, records: list[ToolCallRecord], wire_msg: dict, offered: Sequence[Tool] | None = None
    ) -> None:
        """Run a step's calls; steering that arrives meanwhile with live children is routed to them.

        ``offered``: the tools this step offered. A call naming any other tool (one a policy hid, say)
        does not run: its result tells the model which tools it may call now."""
        h = self._run
        names = None if offered is None else frozenset(t.name for t in offered)
        tasks = [h.event_loop.create_task(self.run_one(rec, names)) for rec in records]
        deferred: list[dict] = []
        wake = h.wake  # set by each finished call, and by an interjection to route
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
                if h.conversation.interjected and h.live_children():
                    await self._router.route(self, records, deferred)
                    continue
                await wake.wait()
        finally:
            if not h.event_loop.is_closed():  # (a closed event loop is closing this coroutine: nothing to wait for)
                for t in tasks:
                    if not t.done():
                        t.cancel()
                if remaining:
                    await asyncio.wait(tasks)  # each records its own result, also when cancelled
            h.conversation.add_results(records, deferred)
            for policy in h.config.chain:
                step = Step(self._turn.count, [], h.state.called_tools, h.state.started_at, self.source)
                note = policy.after_tools(step)
                if note:
                    h.conversation.add({"role": "user", "content": note})

    async def run_one(self, rec: ToolCallRecord, offered: frozenset[str] | None = None) -> None:
        h = self._run
        try:
            if self._sem is None:
                self._sem = asyncio.Semaphore(self._run.config.max_parallel_tools)
            async with self._sem:
                await h.gate.wait()  # no new tool starts while paused
                if offered is not None and rec.name not in offered:
                    self._refuse(rec, offered)
                    return
                await self.execute(rec, self._turn.lookup(rec.name))
        finally:
            if rec.result is None:  # cancelled before or while running: still exactly one result
                self.finish_call(rec, f"cancelled: {h.state.stop_reason or 'the loop was cancelled'}", True, 0.0,
                                 cut=True)

    def _refuse(self, rec: ToolCallRecord, offered: frozenset[str]) -> None:
        """A call of a tool this step did not offer: it does not run, and the model is told what it may call."""
        h = self._run
        h.emit(ev.ToolStarted, call_id=rec.id, name=rec.name, arguments=rec.arguments)
        now = ", ".join(sorted(offered)) or "none"
        if self._turn.lookup(rec.name) is None:
            why = f"there is no tool named {rec.name!r}"
        else:
            why = f"{rec.name} is not available at this step, so it did not run"
        self.finish_call(rec, f"error: {why}; the tools you may call now: {now}", True, 0.0)

    def _arguments(self, rec: ToolCallRecord, tool: Tool) -> tuple[dict[str, Any], bool, str | None]:
        """``(kwargs, share_context, request_id)`` from the call's JSON arguments."""
        h = self._run
        arguments = rec.arguments
        share = h.config.parent_context == "always"
        request_id = None
        extras = self._turn.extra_properties(tool)
        if extras:
            try:
                raw = loads(arguments or "{}")
            except ValueError as err:
                raise ValueError(f"invalid arguments for {tool.name}: not JSON ({err})") from None
            if isinstance(raw, dict):
                if "include_parent_context" in extras:
                    share = bool(raw.pop("include_parent_context", False))
                if "request_id" in extras:
                    request_id = raw.pop("request_id", None)
                    if request_id is not None:
                        h.request(str(request_id))
                arguments = json.dumps(raw)
        # the values go to a tool a person wrote only (never to an answer or a built-in tool, which would
        # write them out); the record keeps the references
        if "<<secret:" in arguments and tool.takes_secrets:
            arguments = SECRET_REF.sub(lambda m: json.dumps(_secret_value(m[1]))[1:-1], arguments)
        return tool.parse(arguments), share, request_id

    async def execute(self, rec: ToolCallRecord, tool: Tool | None) -> None:
        h = self._run
        h.emit(ev.ToolStarted, call_id=rec.id, name=rec.name, arguments=rec.arguments)
        t0 = time.perf_counter()
        if tool is None:
            known = ", ".join(sorted(t.name for t in self._tools.available())) or "none"
            self.finish_call(rec, f"error: there is no tool named {rec.name!r}; available: {known}", True, 0.0)
            return
        try:
            kwargs, share, request_id = self._arguments(rec, tool)
        except (ValueError, UserError) as err:
            self.finish_call(rec, f"error: {err}", True, time.perf_counter() - t0)
            return
        if request_id is None and h.config.multi:
            open_now = h.open_requests()
            request_id = open_now[0].request_id if len(open_now) == 1 else None
        if request_id is not None:
            self.call_requests[rec.id] = request_id
        if tool.ctx_param:
            kwargs[tool.ctx_param] = ToolContext(self.source, rec.id, rec.name, rec, request_id, calls=self)
        approved = False
        if self._tools.needs_approval(tool):  # the wait is the person's, not the tool's: outside its timeout
            approved, reason = await self.wait_for_approval(rec.id, tool=rec.name, code=rec.arguments or "{}")
            if not approved:
                self.finish_call(rec, skipped_result(rec.name, reason), False, time.perf_counter() - t0)
                return
            t0 = time.perf_counter()
        timeout = getattr(tool, "timeout", None) or h.config.tool_timeout
        token = enter_call(CallInfo(self.source, rec.id, share, rec.name))
        def write(text: str, _stream: str = "stdout") -> None:
            self.printed(rec, text)

        out_token = tool_output.set(write)
        cut = closed = False
        try:
            # approved here: the marked function's gate lets this call run without asking again
            with allow_once(tool.gated if approved else None):
                async with asyncio.timeout(timeout):
                    result, error = await self._call(rec, tool, kwargs), False
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or task.cancelling():  # a stop, or the runner cancelling its calls
                raise
            # nothing cancelled this call: the tool raised it itself, and the loop goes on
            result = f"error: {rec.name} raised CancelledError, though nothing cancelled it; the call failed"
            error = True
        except TimeoutError:
            if rec.child is not None and not rec.child.done():
                await stop_once(rec.child, f"the tool {rec.name} ran out of time")
            cut = True
            result, error = (
                f"error: {rec.name} did not finish within its timeout of {timeout:g} s and was stopped",
                True,
            )
        except Stopped as err:
            result, error = f"error: the sub-operation was stopped ({err.reason})", True
        except ToolFailed as err:
            result, error = str(err), True
        except ToolExit as err:  # a sync tool's SystemExit or KeyboardInterrupt (raised in its worker thread)
            result, error = f"error: {rec.name} {err}", True
        except (SystemExit, KeyboardInterrupt) as err:  # an async tool's: it would end the event loop, not this call
            if from_signal(err):  # a person's Ctrl-C, a signal handler's exit: the program's, not the call's
                raise
            result, error = f"error: {rec.name} {ToolExit(err)}", True
        except Exception as err:  # noqa: BLE001 - the model sees it and may correct itself
            result, error = f"error: {type(err).__name__}: {err}", True
        except GeneratorExit:  # its event loop was closed under it: closed by the collector, not in its context
            closed = True
            raise
        finally:
            leave_call(token, closed=closed)
            if not closed:
                tool_output.reset(out_token)
        self.finish_call(rec, result, error, time.perf_counter() - t0, cut=cut)

    async def _call(self, rec: ToolCallRecord, tool: Tool, kwargs: dict[str, Any]) -> str:
        value = await tool.fn(**kwargs) if tool.is_async else await in_worker(tool.fn, kwargs)
        if inspect.isawaitable(value) and not isinstance(value, Loop):
            value = await value
        if isinstance(value, HandOff):
            return self._take_handoff(rec, value.handle)
        value = await resolve_tool_value(value)
        self._run.state.called_tools.add(rec.name)
        if isinstance(value, ToolResult):
            return self._with_references(rec, value)
        return render_result(value)

    def _take_handoff(self, rec: ToolCallRecord, loop: Loop) -> str:
        h, child = self._run, loop
        h.adopt(child, rec.id)
        rec.child = child
        self.handoff = child
        h.emit(ev.ControlHandedOff, call_id=rec.id, child_id=child.id, child_name=child.name)
        return f"control handed to {child.name!r}: it goes on by itself, and this loop ends"

    def _with_references(self, rec: ToolCallRecord, value: ToolResult) -> str:
        """Number the result's references and show them to the model with it."""
        h = self._run
        text = render_result(value.content)
        lines = []
        for ref in value.references:
            if not isinstance(ref, Reference):
                raise TypeError(f"ToolResult.references holds Reference objects, not {type(ref).__name__}")
            # a copy: a tool may return the same object again (a fixed corpus), which must not renumber this one
            ref = dataclasses.replace(
                ref,
                title=scrub(ref.title),
                text=scrub(ref.text),
                url=scrub(ref.url),
                number=len(h.state.all_references) + 1,
                tool=rec.name,
            )
            h.state.all_references.append(ref)
            body = ref.text if len(ref.text) <= 2000 else ref.text[:2000] + " ..."
            lines.append(
                f"[{ref.number}] {ref.title}" + (f" ({ref.url})" if ref.url else "") + (f": {body}" if body else "")
            )
        if lines:
            text += "\nReferences (cite them as [n] where you use them):\n" + "\n".join(lines)
        return text

    # -- what tools print ----------------------------------------------------------------------

    def printed(self, rec: ToolCallRecord, text: str) -> None:
        """Route text a tool printed to its call record (from the loop's thread or a worker thread)."""
        # scrubbed as it accumulates: a value written in pieces is caught, and an end that could
        # start one is held back (published with the next write, or when the call ends)
        h = self._run
        h.state.printed += rec.printed.write(text)
        try:
            here = asyncio.get_running_loop() is h.event_loop
        except RuntimeError:  # a sync tool in its worker thread
            here = False
        if here and not rec.printed.ended:
            self._publish_output(rec)
        else:
            h.event_loop.call_soon_threadsafe(self._publish_output, rec)

    def _publish_output(self, rec: ToolCallRecord) -> None:
        h = self._run
        printed = rec._printed
        if printed is None:
            return
        if printed.ended:  # printed after its call ended (and the writer had its turn): release what is held
            h.state.printed += printed.release()
        text = printed.take()
        if text:
            h.emit(ev.ToolOutput, call_id=rec.id, name=rec.name, text=text)

    def finish_call(self, rec: ToolCallRecord, result: str, error: bool, duration: float, *, cut: bool = False) -> None:
        """The call's one result. ``cut``: it was stopped or ran out of time, maybe mid-write: an end of what it
        printed that could start a secret value is never shown."""
        h = self._run
        if rec._printed is not None or cut:  # cut: so is what a thread it left running prints later
            h.state.printed += rec.printed.end(cut=cut)
            self._publish_output(rec)
        result = scrub(result)
        if len(result) > h.config.max_result_chars:
            result = _cut(result, h.config.max_result_chars)
        rec.result = result
        rec.error = error
        h.state.tool_calls += 1
        h.conversation.record(
            Message("tool", result, kind="tool_result", tool_call_id=rec.id, name=rec.name, error=error)
        )
        h.emit(ev.ToolFinished, call_id=rec.id, name=rec.name, result=result, error=error, duration=duration)
