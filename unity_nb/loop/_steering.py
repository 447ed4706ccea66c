"""The steering verbs, in one table.

Each :class:`Verb` says what the transcript shows when a person uses it, what the model is told
at its next call, whether it reaches the loop's live children, and the tool through which a
parent's model applies it to a running child (routing). The handle's verb methods, the routing
of steering to children, the store's transcript rebuild, the widget and the magics all read
:data:`VERBS`.

Adding a verb is one entry here (or :func:`register_verb`) plus its method on :class:`LoopHandle`
(which calls ``self.run.steer(name, message)``). The magics then take
``%unity <verb> NAME [MESSAGE]``, and the widget has its button: the widget sends the table to its
front end (``HandleWidget.verbs``), which builds its controls from it, and a click calls the method.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .. import events as ev
from .._errors import HandleStateError
from ._context import for_the_person
from ._face import Loop
from ._records import render_conversation
from ._tools import Tool, as_tool

__all__ = (
    "VERBS", "Verb", "child_tools", "inspection_prompt", "on_own_loop", "quiet", "register_verb", "steering_entry",
    "stop_once", "unregister_verb",
)

Text = Callable[[str | None, str | None], str | None]
"""``(message, request_id) -> text``."""


@dataclass(frozen=True, slots=True)
class Verb:
    """One steering verb."""

    name: str
    """The handle's method, the event's ``action`` and the widget's button."""
    entry: Text
    """What the transcript shows (a ``user`` message)."""
    kind: str = "steering"
    """The transcript entry's kind."""
    note: Text = lambda _m, _r: None
    """What the model is told at its next call (``None``: nothing)."""
    reaches_children: bool = False
    """The verb is applied to every live child too."""
    child_tool: Callable[[Loop], Tool] | None = None
    """The tool a parent's model uses to apply the verb to one running child (routing)."""
    message: Literal["none", "optional", "required"] = "none"
    """Whether the verb takes a message (the widget's text box, the rest of a ``%unity`` line)."""
    doc: str = ""
    """What it does, in a line (the magics' help and the widget's button say it)."""
    status: str | None = None
    """The status the loop is in once the verb has acted (pause: ``paused``), if it sets one: the store records it."""
    undoes: str | None = None
    """The verb whose ``status`` this one ends (resume undoes pause): the widget shows the two as one button,
    which does this one while the loop is in that status."""
    entry_by: Callable[[str | None, str | None, str], str | None] | None = None
    """What the transcript shows when code within a run used the verb (a tool's code), not the person:
    ``(message, request_id, by) -> text``, ``by`` naming the tool (``None``: :attr:`entry`, whoever used it)."""
    note_by: Callable[[str | None, str | None, str], str | None] | None = None
    """What the model is told when a tool's code used the verb (as :attr:`entry_by`; ``None``: :attr:`note`)."""


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:40] or "loop"


def _tool(child: Loop, verb: str, fn: Callable[..., object], description: str) -> Tool:
    tool = as_tool(fn, name=f"{verb}_{_safe(child.name)}")
    tool.description = description
    return tool


def _interject_tool(child: Loop) -> Tool:
    async def fn(message: str) -> str:
        with for_the_person():  # the person's interjection, routed by the parent's model: theirs, not the tool's
            await child.interject(message)
        return f"delivered to {child.name}"

    return _tool(
        child,
        "interject",
        fn,
        f"Send a message to the running sub-operation {child.name!r} (its task: {child.task[:200]!r}).",
    )


def _ask_tool(child: Loop) -> Tool:
    async def fn(question: str) -> str:
        asked = await child.ask(question)
        try:
            return str(await asked.result())
        except asyncio.CancelledError:  # the call was stopped: so is the question's loop (a detached loop)
            await stop_once(asked, "the question was withdrawn: the call asking it was stopped")
            raise

    return _tool(
        child, "ask", fn, f"Ask the running sub-operation {child.name!r} about its progress; returns its answer."
    )


class _Stoppable(Protocol):
    @property
    def run(self) -> Any: ...
    def done(self) -> bool: ...
    async def stop(self, reason: str | None = None) -> None: ...


async def stop_once(loop: _Stoppable, reason: str | None = None) -> None:
    """``loop.stop(reason)`` unless a stop reached ``loop`` already: then only wait for it to end, its first reason
    standing, without the warning a second stop's other reason gets. The library's own stops (a parent's reaching
    its children, a batch stopping its rows, a tool out of time, a question withdrawn) go through it: one stop was
    asked, and a child stopping for a reason of its own keeps it."""
    await loop.stop(reason if loop.run.state.stop_reason is None and not loop.done() else None)


def _stop_tool(child: Loop) -> Tool:
    async def fn(reason: str | None = None) -> str:
        first = child.run.state.stop_reason
        await stop_once(child, reason)
        if first is not None and reason is not None and reason != first:  # the model is told, not the person warned
            return f"{child.name} was stopped already, with the reason {first!r} (yours was not taken)"
        return f"{child.name} stopped"

    return _tool(child, "stop", fn, f"Stop the sub-operation {child.name!r} for good.")


def _plain_tool(verb: Literal["pause", "resume"]) -> Callable[[Loop], Tool]:
    def make(child: Loop) -> Tool:
        async def fn() -> str:
            await getattr(child, verb)()
            return f"{child.name}: {verb}d"

        return _tool(child, verb, fn, f"{verb.capitalize()} the sub-operation {child.name!r}.")

    return make


def _about(request_id: str | None) -> str:
    return f" about request {request_id}" if request_id else ""


VERBS: dict[str, Verb] = {
    v.name: v
    for v in (
        Verb(
            "interject",
            entry=lambda m, _r: m,
            kind="interjection",
            note=lambda m, r: f"[interjection from the user{_about(r)}] {m}",
            note_by=lambda m, r, by: f"[interjection from {by}{_about(r)}] {m}",
            child_tool=_interject_tool,
            message="required",
            doc="Send MESSAGE to the operation NAME while it runs.",
        ),
        Verb(
            "ask", entry=lambda m, _r: f"[asked by the user] {m}", entry_by=lambda m, _r, by: f"[asked by {by}] {m}",
            child_tool=_ask_tool, message="required",
            doc="Ask the operation NAME a question without disturbing it; returns the answer's handle.",
        ),
        Verb(
            "pause",
            entry=lambda _m, _r: "[paused by the user]",
            note=lambda _m, _r: "[paused by the user]",
            entry_by=lambda _m, _r, by: f"[paused by {by}]",
            note_by=lambda _m, _r, by: f"[paused by {by}]",
            reaches_children=True,
            child_tool=_plain_tool("pause"),
            doc="Pause the operation NAME (and its sub-operations).",
            status="paused",
        ),
        Verb(
            "resume",
            entry=lambda _m, _r: "[resumed by the user]",
            note=lambda _m, _r: "[resumed by the user]",
            entry_by=lambda _m, _r, by: f"[resumed by {by}]",
            note_by=lambda _m, _r, by: f"[resumed by {by}]",
            reaches_children=True,
            child_tool=_plain_tool("resume"),
            doc="Resume the paused operation NAME.",
            status="running",
            undoes="pause",
        ),
        Verb(
            "stop",
            entry=lambda m, r: (
                f"[request {r} stopped by the user: {m}]" if r else f"[stopped by the user{': ' + m if m else ''}]"
            ),
            entry_by=lambda m, r, by: (
                f"[request {r} stopped by {by}: {m}]" if r else f"[stopped by {by}{': ' + m if m else ''}]"
            ),
            note=lambda m, r: (
                f"[request {r} was stopped by the user ({m}): do not work on it any further]" if r else None
            ),
            reaches_children=True,
            child_tool=_stop_tool,
            message="optional",
            doc="Stop the operation NAME and everything under it (MESSAGE: the reason).",
        ),
    )
}


def register_verb(verb: Verb) -> Verb:
    """Add a steering verb (with its method on a handle class, calling ``self.run.steer(verb.name, ...)``
    and, for a verb that ``reaches_children``, ``await self.run.reach_children(verb.name, ...)``)."""
    if not verb.name.isidentifier() or verb.name.startswith("_"):
        raise ValueError(f"a verb's name is an identifier a handle has as a method, not {verb.name!r}")
    VERBS[verb.name] = verb
    ev.allow_steering_action(verb.name)
    return verb


def unregister_verb(name: str) -> None:
    """Remove a verb :func:`register_verb` added (the built-in ones stay)."""
    if name not in ev.BUILTIN_STEERING_ACTIONS:
        VERBS.pop(name, None)
        ev.forget_steering_action(name)


def steering_entry(
    action: str, message: str | None, request_id: str | None = None, by: str | None = None
) -> tuple[str, str]:
    """``(text, kind)`` of the transcript entry a steering event stands for (the store rebuilds with it); ``by``:
    the tool whose code steered (the event's ``by``), ``None`` for the person."""
    verb = VERBS.get(action)
    if verb is None:
        return message or f"[{action}]", "steering"
    if by is not None and verb.entry_by is not None:
        return verb.entry_by(message, request_id, by) or "", verb.kind
    return verb.entry(message, request_id) or "", verb.kind


def child_tools(child: Loop) -> list[Tool]:
    """The tools through which a parent's model steers the running ``child``, one per verb."""
    return [v.child_tool(child) for v in VERBS.values() if v.child_tool is not None]


def inspection_prompt(handle: Loop) -> str:
    """The system prompt of a loop answering a question about ``handle`` (``ask``): a snapshot of its
    transcript, roles rewritten (``inner_user``, ...) so the inspecting model tells it from its own."""
    snapshot = render_conversation(list(handle.transcript), "inner")
    streaming = handle.state.streaming_text
    if streaming:
        snapshot += f"\ninner_assistant (still streaming): {streaming}"
    drill = " Use the ask_* tools to question its running sub-operations." if handle.run.live_children() else ""
    return (
        f"You are inspecting another, running conversation (the loop {handle.name!r}, status "
        f"{handle.status.value}, {handle.steps} model calls, {handle.tool_calls} tool calls so far). "
        "Its messages are below with roles prefixed inner_. Answer the user's question about it "
        f"concisely and truthfully; you cannot change it.{drill}\n\n{snapshot}"
    )


async def quiet(awaitable: Any) -> None:
    """Forward steering to a child that may end meanwhile: its ended state is not our error."""
    try:
        await awaitable
    except HandleStateError:
        pass


def on_own_loop(method: Callable[..., Any]) -> Callable[..., Any]:
    """A steering verb called from another thread's event loop is handed to the loop's own thread."""

    @functools.wraps(method)
    async def verb(self: Loop, *args: Any, **kwargs: Any) -> Any:
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        own = self.run.event_loop
        if here is not None and here is not own:
            if own.is_closed():
                raise HandleStateError(f"cannot steer {self.name!r}: its event loop is closed", state="closed")
            return await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(method(self, *args, **kwargs), own)
            )
        return await method(self, *args, **kwargs)

    return verb
