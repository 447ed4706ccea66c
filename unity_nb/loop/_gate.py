"""A function marked ``needs_approval`` waits for the person wherever an operation calls it.

``@unity_nb.tool(needs_approval=True)`` (and ``as_tool(fn, needs_approval=True)``, whose ``.fn`` it is) returns
the *gate* of the function (:func:`gate`): the function itself, which asks before it runs. Called inside an
operation (a plan's code, a tool, a primitive, a child loop's tool, a map row's tool, a task that code started, a
thread it started), the call is listed in the running loop's ``h.inbox.approvals`` (and every ancestor's) as its
name and arguments; ``await h.inbox.approve(call_id)`` lets it run, ``skip`` raises :class:`NotApproved` where it
was called (a plan or a tool sees why; the model reads it). A call the loop's tool runner has approved already (a
JSON call of the tool) runs at once: each call is asked once.

Where it is called decides how it waits:

- an async function: ``await f(...)`` waits, on any event loop;
- a sync function in a worker thread (a sync tool, ``asyncio.to_thread``, a thread a plan started): the thread
  blocks until the person decides;
- a sync function on the operation's event loop (a plan calling ``f(...)``): it cannot block there without
  freezing the kernel, so it returns a :class:`PendingCall`: ``await f(...)`` asks and runs it; left unawaited,
  nothing runs and the plan's output says so.

Outside any operation (the person calls it in a cell) it runs at once. A call from a worker thread that carries no
trace of an operation (asyncio's shared executor through ``run_in_executor``, a pool made elsewhere) while a tool
call runs is refused (:class:`NotApproved`): no one can tell which operation asked. An operation that has ended
cannot approve: a call attributed to it is refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import itertools
import reprlib
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from .._errors import NotApproved
from .._output import started_in, tool_output
from ._context import _CALL, _CURRENT, calls_running, current_loop
from ._face import Loop

__all__ = ("PendingCall", "allow_once", "gate", "gated_function")

_RAW: weakref.WeakKeyDictionary[Callable[..., Any], Callable[..., Any]] = weakref.WeakKeyDictionary()
"""Each gate's function (not an attribute of the gate: ``inspect.unwrap`` gives no way round it)."""
_ids = itertools.count(1)
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 160
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 8


@dataclass(slots=True)
class _Ticket:
    fn: Callable[..., Any]
    used: bool = False


_ALLOWED: contextvars.ContextVar[_Ticket | None] = contextvars.ContextVar("unity_nb_approved_call", default=None)


def gated_function(fn: Any) -> Callable[..., Any] | None:
    """The function ``fn`` gates, if ``fn`` is a gate (else ``None``)."""
    try:
        return _RAW.get(fn)
    except TypeError:  # not weak-referenceable
        return None


@contextmanager
def allow_once(fn: Callable[..., Any] | None) -> Iterator[None]:
    """The person approved this call of the marked function ``fn`` (the tool runner asked): its gate lets
    the first call made in this context run without asking again (a second call asks)."""
    if fn is None:
        yield
        return
    token = _ALLOWED.set(_Ticket(fn))
    closed = False
    try:
        yield
    except GeneratorExit:  # the call's event loop was closed under it: closed by the collector, not in its context
        closed = True
        raise
    finally:
        if not closed:
            _ALLOWED.reset(token)


def _rendered(name: str, args: tuple, kwargs: dict) -> str:
    parts = [_repr.repr(a) for a in args] + [f"{k}={_repr.repr(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _where(fn: Callable[..., Any]) -> tuple[Loop, str] | None:
    """The loop a call of ``fn``'s gate is asked in, and the id its request gets: ``None`` to run at once
    (approved already, or outside any operation); raises :class:`NotApproved` when no one can be asked."""
    ticket = _ALLOWED.get()
    if ticket is not None and ticket.fn is fn and not ticket.used:
        ticket.used = True
        return None
    name = getattr(fn, "__name__", "the function")
    call = _CALL.get()
    if call is None:  # a thread started inside a tool call keeps that call (unity_nb._output)
        ctx = started_in()
        call = ctx.get(_CALL) if ctx is not None else None
    ran_in = _CURRENT.get()
    if (call is not None and call.gone) or (call is None and ran_in is not None and ran_in() is None):
        # called from code its operation left behind (a thread, a timer), once that operation was freed
        raise NotApproved(
            f"{name} did not run: the operation that called it has ended, so no one can approve it"
        )
    loop = call.loop if call is not None else current_loop()
    if loop is None:
        if threading.current_thread() is threading.main_thread() or not calls_running():
            return None  # the person's own call (a cell, a script)
        raise NotApproved(
            f"{name} waits for the person's approval at each call inside an operation, and this thread carries no "
            f"trace of which operation called it (asyncio's run_in_executor, a thread pool made elsewhere), so it "
            f"did not run: call it as `await {name}(...)`, or through `await asyncio.to_thread({name}, ...)`"
        )
    if loop.run.ended.is_set():
        raise NotApproved(
            f"{name} did not run: the operation {loop.name!r} that called it has ended, so no one can approve it"
        )
    return loop, f"{call.call_id if call is not None else 'loop'}.{name}.{next(_ids)}"


async def _ask(loop: Loop, call_id: str, name: str, code: str) -> None:
    """Ask the person in ``loop`` (on its event loop); raise :class:`NotApproved` unless they approve."""
    from ._approval import wait_for_approval

    run = loop.run
    router = getattr(loop, "_router", None)
    awaiting = router.awaiting_person if router is not None else nullcontext
    waiting = asyncio.ensure_future(wait_for_approval(run, awaiting, call_id, tool=name, code=code))
    ended = asyncio.ensure_future(run.ended.wait())
    try:
        await asyncio.wait((waiting, ended), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not run.event_loop.is_closed():  # (a closed event loop is closing this coroutine: nothing to cancel)
            for t in (waiting, ended):
                if not t.done():
                    t.cancel()
    if not waiting.done() or waiting.cancelled():
        raise NotApproved(f"{name} did not run: the operation {loop.name!r} ended while it waited for approval")
    approved, reason = waiting.result()
    if not approved:
        raise NotApproved(f"the person skipped this call to {name}; it did not run{': ' + reason if reason else ''}")


async def _ask_anywhere(loop: Loop, call_id: str, name: str, code: str) -> None:
    """:func:`_ask` from any event loop (a gate awaited on another thread's loop waits on the operation's)."""
    if asyncio.get_running_loop() is loop.run.event_loop:
        await _ask(loop, call_id, name, code)
        return
    await asyncio.wrap_future(_submit(loop, call_id, name, code))


def _submit(loop: Loop, call_id: str, name: str, code: str) -> concurrent.futures.Future:
    try:
        return asyncio.run_coroutine_threadsafe(_ask(loop, call_id, name, code), loop.run.event_loop)
    except RuntimeError:  # its event loop is closed
        raise NotApproved(f"{name} did not run: the operation {loop.name!r} that called it is gone") from None


def _ask_blocking(loop: Loop, call_id: str, name: str, code: str) -> None:
    """From a worker thread: block until the person decides. The wait wakes twice a second, so a stop that
    interrupts the thread (a tool's) is delivered; leaving it withdraws the request."""
    fut = _submit(loop, call_id, name, code)
    try:
        while True:
            try:
                fut.result(timeout=0.5)
                return
            except concurrent.futures.TimeoutError:
                if loop.run.event_loop.is_closed():  # the request can never be answered: the thread is let go
                    raise NotApproved(
                        f"{name} did not run: the event loop of the operation {loop.name!r} that called it was "
                        "closed while it waited for approval"
                    ) from None
    finally:
        fut.cancel()


class PendingCall:
    """What a marked sync function returns when called on its operation's event loop (a plan's ``f(...)``): it
    has not run. ``await`` it to ask the person and run it; left unawaited, nothing runs, and the call's output
    says so when it is dropped."""

    __slots__ = ("_args", "_awaited", "_call_id", "_fn", "_kwargs", "_loop", "_name", "_write")

    def __init__(self, fn: Callable[..., Any], name: str, args: tuple, kwargs: dict, loop: Loop, call_id: str) -> None:
        self._fn, self._name, self._args, self._kwargs = fn, name, args, kwargs
        self._loop, self._call_id = loop, call_id
        self._awaited = False
        self._write = tool_output.get()

    def __await__(self) -> Any:
        self._awaited = True
        return self._run().__await__()

    async def _run(self) -> Any:
        await _ask_anywhere(self._loop, self._call_id, self._name, _rendered(self._name, self._args, self._kwargs))
        return self._fn(*self._args, **self._kwargs)

    def _hint(self) -> str:
        return (f"{self._name}(...) needs the person's approval, so it has not run: write `await {self._name}(...)` "
                "to ask and run it")

    def __repr__(self) -> str:
        return f"<{self._hint()}>"

    def __del__(self) -> None:
        try:
            write = self._write
            if not self._awaited and write is not None and tool_output.get() is write:  # dropped in the call itself
                write(f"note: {self._hint()}\n", "stderr")
        except Exception:  # noqa: BLE001, S110 - a note, never an error of its own
            pass


def gate(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` marked ``needs_approval``: a function that asks the person before each call made inside an
    operation (see the module's docstring). A gate of a gate is itself."""
    if gated_function(fn) is not None:
        return fn
    name = getattr(fn, "__name__", None) or type(fn).__name__
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004

        async def marked_async(*args: Any, **kwargs: Any) -> Any:
            where = _where(fn)
            if where is not None:
                await _ask_anywhere(where[0], where[1], name, _rendered(name, args, kwargs))
            return await fn(*args, **kwargs)

        wrapper: Callable[..., Any] = marked_async
    else:

        def marked(*args: Any, **kwargs: Any) -> Any:
            where = _where(fn)
            if where is None:
                return fn(*args, **kwargs)
            loop, call_id = where
            try:
                here = asyncio.get_running_loop() is loop.run.event_loop
            except RuntimeError:
                here = False
            if here:
                return PendingCall(fn, name, args, kwargs, loop, call_id)
            _ask_blocking(loop, call_id, name, _rendered(name, args, kwargs))
            return fn(*args, **kwargs)

        wrapper = marked
    functools.update_wrapper(wrapper, fn)
    del wrapper.__wrapped__  # type: ignore[attr-defined]
    try:
        wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        pass
    _RAW[wrapper] = fn
    return wrapper
