"""Where code runs: the loop and the tool call of the current context, and what a tool's value resolves to.

A loop sets its handle as the current loop for everything its task runs, and around each tool
call it sets the call. A loop started inside a tool becomes that call's child; the actor, the
managers and tools ask :func:`current_call` instead of reading a loop's state.

Both name the loop by a weak reference. A context outlives its loop wherever something copied it: a thread
started inside a call (``unity_nb._output`` keeps its context for the thread's life), a timer or callback a
library armed in the call (aiohttp's keep-alive timer, a connection's reader). Holding the handle there kept
it, its tools and its transcript alive as long as those did. While a loop runs, its task holds it.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from ._face import Loop

__all__ = (
    "CallInfo", "current_call", "current_loop", "for_the_person", "forward_call", "resolve_tool_value", "steered_by",
)


def loop_of(ref: weakref.ref[Loop], call_id: str) -> Loop:
    """The loop a weak reference a call holds names; ``ReferenceError`` once it was freed."""
    loop = ref()
    if loop is None:
        raise ReferenceError(f"the loop of tool call {call_id!r} has ended and was freed")
    return loop


class CallInfo:
    """The tool call code runs in: its loop, its id, and whether a loop it starts sees the caller's conversation.
    The loop is held weakly (see the module's docstring): :attr:`loop` raises ``ReferenceError`` once it was
    freed, which :func:`current_call` never gives (it gives ``None`` then)."""

    __slots__ = ("_loop", "call_id", "share_context", "tool")

    def __init__(self, loop: Loop, call_id: str, share_context: bool = False, tool: str | None = None) -> None:
        self._loop = weakref.ref(loop)
        self.call_id = call_id
        self.share_context = share_context
        self.tool = tool
        """The name of the tool called (``None`` when whoever made this did not say)."""

    @property
    def loop(self) -> Loop:
        """The loop that made the call."""
        return loop_of(self._loop, self.call_id)

    @property
    def gone(self) -> bool:
        """Whether its loop was freed (a thread or callback outlived it)."""
        return self._loop() is None

    def __repr__(self) -> str:
        return (f"CallInfo(loop={self._loop()!r}, call_id={self.call_id!r}, share_context={self.share_context!r}, "
                f"tool={self.tool!r})")

    def acting_on(self, loop: Loop) -> str:
        """Who acts when code of this call steers ``loop``: ``"the tool NAME"``, and ``" of LOOP"`` when the call
        is another loop's (a parent's model stopping its child through its ``stop_CHILD`` tool)."""
        who = f"the tool {self.tool}" if self.tool else f"the tool call {self.call_id}"
        return who if self._loop() is loop else f"{who} of {self.loop.name}"


_CALL: contextvars.ContextVar[CallInfo | None] = contextvars.ContextVar("unity_nb_tool_call", default=None)
_CURRENT: contextvars.ContextVar[weakref.ref[Loop] | None] = contextvars.ContextVar("unity_nb_loop", default=None)
_running = [0]  # tool calls running now, in every loop of the process


def calls_running() -> int:
    """How many tool calls run now, in every loop of the process (a marked function called from a thread
    that carries no trace of its operation is refused while any does: see ``_gate``)."""
    return _running[0]


def current_call() -> CallInfo | None:
    """The tool call running in this context (``None`` outside any tool call, or once its loop was freed)."""
    call = _CALL.get()
    return None if call is None or call._loop() is None else call


def current_loop() -> Loop | None:
    """The loop running in this context (inside a tool: the loop that called it; ``None`` once it was freed)."""
    ref = _CURRENT.get()
    return None if ref is None else ref()


def steered_by(loop: Loop) -> str | None:
    """Who steers ``loop`` from this context: the tool whose code runs here (``CallInfo.acting_on``), or ``None``
    for the person (a cell, the widget, a magic, or a tool passing the person's message on: :func:`for_the_person`)."""
    call = current_call()
    return call.acting_on(loop) if call is not None else None


@contextlib.contextmanager
def for_the_person() -> Iterator[None]:
    """Steering inside is the person's, though a tool's code does it: a parent's model routing the person's
    interjection to a child (its ``interject_CHILD`` tool) passes their message on."""
    token = _CALL.set(None)
    try:
        yield
    finally:
        _CALL.reset(token)


def enter_call(call: CallInfo) -> contextvars.Token:
    """Mark ``call`` as the running tool call (the tool runner does, around each call)."""
    _running[0] += 1
    return _CALL.set(call)


def leave_call(token: contextvars.Token, *, closed: bool = False) -> None:
    """The call ended. ``closed``: its coroutine was closed by the collector, its event loop closed under it; that
    runs in whatever context the collection happens in (a reset there raises), and the call's own context is gone
    with its task: nothing to undo."""
    _running[0] -= 1
    if not closed:
        _CALL.reset(token)


def enter_loop(handle: Loop) -> contextvars.Token:
    """Mark ``handle`` as the loop of this context (its task does, once, at its start)."""
    return _CURRENT.set(weakref.ref(handle))


def leave_loop(token: contextvars.Token) -> None:
    """The loop's task ends: its context no longer holds the handle (so the handle is freed with its last
    reference, not by a full garbage collection)."""
    _CURRENT.reset(token)


def forward_call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``method`` dropping keyword arguments its signature does not accept."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return method(*args, **kwargs)
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return method(*args, **kwargs)


async def resolve_tool_value(value: Any) -> Any:
    """What a tool's return value stands for: an awaitable is awaited; a loop handle becomes a child
    of the running call's loop (unless it has a parent already) and its result is awaited."""
    if inspect.isawaitable(value) and not isinstance(value, Loop):
        value = await value
    if isinstance(value, Loop):
        call = current_call()
        if call is not None and value.parent in (None, call.loop):
            call.loop.run.adopt(value, call.call_id)
        value = await value.result()
    return value
