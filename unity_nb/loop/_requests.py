"""Several requests served by one loop (``start_loop(..., multi=True)``).

Every request shares the loop's context, and has a handle of its own: a short ``request_id``
(``r1``, ``r2``, ...), its own ``result()``, clarifications, notifications and ``stop()``. The
model sees each request as ``[request r2] ...`` and completes it with the tool
``final_answer(request_id, answer)``; a plain answer completes the only open request. The
loop ends when every request is done, or with ``persist=True`` waits for more until stopped.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol, cast

from .. import events as ev
from .._errors import HandleStateError, Stopped, UserError
from ._face import Loop
from ._records import Message
from ._routing import Mailbox
from ._run import Run
from ._status import Status
from ._steering import steering_entry, stop_once
from ._tools import Tool, ToolFailed, as_tool
from ._views import Inbox

if TYPE_CHECKING:
    from ._turn import Turn

__all__ = ("RequestHandle", "final_answer_tool", "stop_request", "submit_request")


class _Engine(Protocol):
    async def finalize(self, answer: str, answering: Any) -> tuple[bool, str]: ...


class _Loop(Protocol):
    """What the request side reads of the loop it is part of (a :class:`LoopHandle`)."""

    name: str

    @property
    def _turn(self) -> Any: ...  # a Turn (a multi-request loop calls the model)
    @property
    def _engine(self) -> Any: ...  # an Engine (its finalize checks an answer)
    @property
    def run(self) -> Run: ...
    async def stop(self, reason: str | None = None) -> None: ...
    def done(self) -> bool: ...
    async def interject(self, message: str, *, request_id: str | None = None) -> None: ...
    async def ask(self, question: str, **options: Any) -> Loop: ...


class RequestHandle:
    """One request of a multi-request loop. ``await r`` gives its answer."""

    def __init__(self, loop: _Loop, request_id: str, text: str) -> None:
        self.loop = loop
        self.request_id = request_id
        self.text = text
        self._status = Status.RUNNING
        self._done = asyncio.Event()
        self._answer: str | None = None
        self._error: BaseException | None = None
        self.mailbox = Mailbox()
        """Questions and notes from the tool calls serving this request."""
        self.corrections = 0
        """Times an evaluation sent the model back on this request's answer."""

    def __repr__(self) -> str:
        return f"<unity request {self.request_id!r} of {self.loop.name!r}: {self.status.value}>"

    @property
    def status(self) -> Status:
        if self._status is not Status.RUNNING:
            return self._status
        return Status.WAITING if self.mailbox.waiting else Status.RUNNING

    @property
    def answer(self) -> str | None:
        return self._answer

    def done(self) -> bool:
        return self._done.is_set()

    async def result(self) -> str:
        """Wait for this request's answer; raise :class:`Stopped` or the error it failed with. Awaited from another
        thread's event loop, the wait is on the loop's own (its end is set there), as a loop's ``result()`` is."""
        if not self._done.is_set():
            own = self.loop.run.event_loop
            if asyncio.get_running_loop() is own:
                await self._done.wait()
            elif own.is_closed() or not own.is_running():  # its end cannot come
                state = "closed" if own.is_closed() else "not running"
                raise HandleStateError(
                    f"cannot wait for request {self.request_id!r} of {self.loop.name!r}: the event loop it runs on "
                    f"is {state}", state=state,
                )
            else:
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._done.wait(), own))
        if self._error is not None:
            raise self._error
        return self._answer or ""

    def __await__(self):
        return self.result().__await__()

    async def interject(self, message: str) -> None:
        """A message about this request, delivered to the loop's model tagged with its id."""
        if self.done():
            raise HandleStateError(
                f"cannot interject into request {self.request_id!r}: it is {self.status.value}", state=self.status.value
            )
        await self.loop.interject(message, request_id=self.request_id)

    async def stop(self, reason: str | None = None) -> None:
        """Stop this request (the model is told); the last open request of a loop that does not
        persist stops the loop."""
        if self.done():
            return
        stopping = stop_request(self.loop, self, reason or "stopped by the user")
        own = self.loop.run.event_loop
        if asyncio.get_running_loop() is not own and not own.is_closed():  # handed to the loop's own thread
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(stopping, own))
        else:
            await stopping

    async def ask(self, question: str, **options: Any) -> Loop:
        return await self.loop.ask(f"(about request {self.request_id}: {self.text[:200]!r}) {question}", **options)

    @property
    def inbox(self) -> Inbox:
        """What the tool calls serving this request ask the person (``next_question``) and note
        (``next_notification``); ``answer`` takes any of the loop's questions, and ``questions``, ``approvals``,
        ``approve`` and ``skip`` are the whole loop's (a call is not tied to one request)."""
        return Inbox(cast(Any, self.loop), self.mailbox)

    # -- ending (called by the loop) ----------------------------------------------------------

    def _finish(self, answer: str) -> None:
        self._answer = answer
        self._end(Status.FINISHED, None)

    def _end(self, status: Status, error: BaseException | None) -> None:
        if self.done():
            return
        self._status = status
        self._error = error
        self._done.set()
        reason = error.reason if isinstance(error, Stopped) else (str(error) if error else None)
        self.loop.run.emit(
            ev.RequestFinished, request_id=self.request_id, status=status.value, answer=self._answer, reason=reason
        )


def check_text(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise UserError("submit needs a request: a non-empty string")
    return text


def final_answer_tool(loop: _Loop) -> Tool:
    """The tool through which a multi-request loop's model completes one request."""

    async def final_answer(request_id: str, answer: str) -> str:
        """Complete the request `request_id` with `answer` (what the person who asked receives)."""
        req = loop.run.find_request(request_id)
        if req is None:
            open_ids = [r.request_id for r in loop.run.open_requests()]
            raise ToolFailed(f"error: there is no request {request_id!r}; open requests: {open_ids}")
        if req.done():
            raise ToolFailed(f"error: request {request_id} is already {req.status.value}; answer only open requests")
        engine: _Engine = loop._engine
        ok, text = await engine.finalize(answer, req)
        if not ok:
            raise ToolFailed(f"error: request {request_id} is still open. {text}")
        req._finish(text)
        loop.run.conversation.record(Message("assistant", text, kind="answer", name=request_id))
        return f"request {request_id} completed"

    return as_tool(final_answer)


def submit_request(loop: _Loop, text: str) -> RequestHandle:
    """A new request of ``loop`` (``h.requests.submit(text)``): recorded, noted for the model, budgeted afresh."""
    run = loop.run
    if not run.config.multi:
        raise UserError(f"{loop.name!r} serves one request; start it with multi=True to submit more")
    run.require_live("submit to")
    check_text(text)
    req = RequestHandle(loop, f"r{len(run.requests) + 1}", text)
    run.requests.append(req)
    run.conversation.record(Message("user", text, kind="request", name=req.request_id))
    run.conversation.note(f"[request {req.request_id}] {text}")
    turn: Turn = loop._turn
    turn.budget_start = turn.count
    run.emit(ev.RequestSubmitted, request_id=req.request_id, text=text)
    loop.run.nudge()
    return req


async def stop_request(loop: _Loop, req: RequestHandle, reason: str) -> None:
    """Stop one request; the model is told, and the last open request of a loop that does not persist stops it."""
    loop.run.require_live("stop a request of")
    req._end(Status.STOPPED, Stopped(reason))
    if not loop.run.open_requests() and not loop.run.config.persist:
        text, kind = steering_entry("stop", reason, req.request_id)
        loop.run.conversation.record(Message("user", text, kind=kind))
        loop.run.emit(ev.Steering, action="stop", message=reason, request_id=req.request_id)
        await stop_once(loop, f"its last open request ({req.request_id}) was stopped: {reason}")
        return
    loop.run.steer("stop", reason, req.request_id)
    loop.run.nudge()
