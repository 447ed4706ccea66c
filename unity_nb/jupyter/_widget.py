"""The live handle widget: one per root handle, showing the whole tree.

State flows one way: handle events mark the widget dirty; a flush at most ``max_hz`` times a
second (latest value wins) recomputes the synced traits from the handles. Clicks come back
as custom messages and call the public handle API, nothing else, so whatever a button does,
code can do. A click may arrive on another thread (a kernel subshell's): it is carried to the
handle's event loop and queued behind earlier clicks (see ``_clicks``). Without a kernel (a
saved notebook, nbconvert, GitHub) the mimebundle's ``text/html`` snapshot shows the
transcript, and ``text/plain`` is the handle's repr.

What a click does is an entry of :data:`COMMANDS` (action name -> :class:`Command`); the steering
verbs' buttons are made from :data:`VERBS` (``verbs``, see ``_buttons``), each calling its method. The
stylesheet is the installed package's, under an anywidget id naming its version (see
:func:`style`), so widget state saved in a notebook cannot restyle a live widget. Beside the
handles' state, the widget keeps what they do not: the retry or the rate limit's wait a loop is
waiting out (from its ``model_retry`` and ``model_wait`` events, cleared when the call proceeds) and
the text a Stop cut off.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anywidget
import traitlets

from .._errors import Stopped, UserError
from ..loop import VERBS, LoopHandle, Message, pending_approvals, stop_once, was_skipped
from ._batch_view import preview
from ._buttons import verb_buttons
from ._clicks import Clicks, watch_cells, watch_interrupts
from ._snapshot import LIMIT as _LIMIT
from ._snapshot import clip as _clip
from ._snapshot import omitted_line, render_html, shown_entries
from ._snapshot import tree as _tree
from ._style import asset, style

__all__ = ("Command", "COMMANDS", "HandleWidget", "render_html", "style", "verb_buttons")

log = logging.getLogger("unity_nb.widget")


def _clip_output(text: str, cut: int, limit: int = _LIMIT) -> str:
    """Printed output: its head and its tail, saying how much of all that was printed is not shown
    (``cut``: what the call record itself dropped from the middle)."""
    if len(text) <= limit and not cut:
        return text
    if len(text) <= limit:
        return text  # the record's own line says what it cut
    half = limit // 2
    hidden = len(text) - 2 * half + cut
    return f"{text[:half]}\n... [{hidden:,} characters not shown] ...\n{text[-half:]}"


def _tail(text: str | None, limit: int = 600) -> str:
    """The newest part of a text that is still streaming."""
    text = text or ""
    return text if len(text) <= limit else "…" + text[-limit:]


def _safe_url(url: str | None) -> bool:
    """Only web links become clickable (never ``javascript:`` and the like)."""
    return url is not None and url.lower().startswith(("http://", "https://"))


_MAX_DISPLAYS = 10
_MAX_DISPLAY_BYTES = 2_000_000


def _display(bundle: dict) -> dict:
    """One rich output for the widget: HTML, an image, or text (oversized ones as text)."""
    data = bundle.get("data", {})
    out: dict[str, str] = {"text/plain": _clip(str(data.get("text/plain", "")), 2000)}
    for mime in ("image/png", "image/jpeg", "text/html"):
        value = data.get(mime)
        if isinstance(value, str) and len(value) <= _MAX_DISPLAY_BYTES:
            out[mime] = value
            break
    return out


def _entry(m: Message) -> dict:
    out: dict[str, Any] = {
        "role": m.role, "kind": m.kind, "content": _clip(m.content), "error": m.error, "name": m.name,
    }
    if m.tool_calls:
        out["calls"] = [
            {
                "id": c.id,
                "name": c.name,
                "arguments": _clip(c.arguments),
                "result": None if c.result is None else _clip(c.result),
                "error": c.error,
                "skipped": was_skipped(c.result),  # the person skipped it: it did not run
                "child": c.child.id if c.child is not None else None,
                "output": _clip_output(c.output, c.output_cut),
                "displays": [_display(d) for d in c.displays[-_MAX_DISPLAYS:]],
            }
            for c in m.tool_calls
        ]
    if m.thinking:
        out["thinking"] = _clip(m.thinking)
    if m.tool_call_id:
        out["call_id"] = m.tool_call_id
    if m.name:
        out["name"] = m.name
    return out


def _retry_line(event: Any, model: Any) -> str:
    """A retry the loop is waiting out, as the widget says it: what failed, when, which attempt."""
    error = str(event.error)
    error = error.split(": ", 1)[1] if re.match(r"^\w+: ", error) else error  # "TransportError: x" -> "x"
    total = getattr(model, "max_retries", None)
    attempt = f"attempt {event.attempt + 1}" + (f" of {total + 1}" if isinstance(total, int) else "")
    return f"{_clip(error, 300)}, retrying in {event.delay:.3g} s, {attempt}"


def _wait_line(event: Any) -> str:
    """A wait for the model's rate limit (a ``model_wait`` event), as the widget says it: how long, and why."""
    return f"waiting {event.seconds:.3g} s before calling the model: {_clip(event.reason, 300)}"


def _node(h: LoopHandle, depth: int, retry: str = "", cut_off: str = "") -> dict:
    status, err = h.status.value, h.state.error
    return {
        "id": h.id,
        "name": h.name,
        "kind": h.kind,  # what the operation is: map, filter, actor, an operator registered later
        "depth": depth,
        "parent": h.parent.id if h.parent is not None else None,
        "status": status,
        "steps": h.steps,
        "tool_calls": h.tool_calls,
        "tokens_in": h.usage.input_tokens,
        "tokens_out": h.usage.output_tokens,
        "tokens_estimated": h.usage.estimated,  # the provider reported none: counted from the text (shown "≈")
        "elapsed": round(h.state.elapsed, 1),
        "model": getattr(h.model, "name", type(h.model).__name__),
        "task": _clip(h.task, 500),
        "answer": None if h.state.answer is None else _clip(h.state.answer),  # (the handle keeps it whole)
        "error": None if err is None or status == "stopped" else _clip(f"{type(err).__name__}: {err}"),
        "stop_reason": None if h.state.stop_reason is None else _clip(h.state.stop_reason, 500),
        "streaming": "" if h.done() else _clip(h.state.streaming_text),
        "reasoning": _tail(h.state.streaming_thinking),
        "retry": retry,
        "cut_off": _clip(cut_off),
        "clarifications": [
            {"call_id": call_id, "question": question}
            for call_id, (question, _future) in h.run.questions.items()  # this node's own: no walk of its subtree
        ],
        "thinking": _clip(h.state.thinking[-1]) if h.state.thinking else "",
        "references": [
            {
                "number": r.number, "title": _clip(r.title, 200),
                "url": r.url if _safe_url(r.url) else None, "text": _clip(r.text, 300),
            }
            for r in h.state.references
        ],
        "approvals": [
            {"call_id": a["call_id"], "code": _clip(a["code"]), "intent": _clip(a["intent"], 500)}
            | ({"tool": a["tool"]} if "tool" in a else {})
            for a in pending_approvals([h])  # this node's own
        ],
        **_batch(h),
    }


def _batch(h: LoopHandle) -> dict:
    """A batch's progress and its first failures (``u.map``): what its bar and its list of failures show."""
    progress = getattr(h, "progress", None)
    if not isinstance(progress, dict):
        return {}
    rows = getattr(h, "rows", None)
    # kept by the batch as rows end: no walk over every row
    failed = (rows.ended_badly if rows is not None else getattr(h, "ended_badly", []))[:20]
    return {
        "progress": progress,
        "preview": preview(h),  # the first rows of its result, once it has ended
        "failures": [
            {"key": _clip(str(r.key), 80), "status": r.status, "reason": _clip(r.reason or "", 300),
             "node": r.child.id if r.child is not None else None}
            for r in failed
        ],
    }


Steer = Callable[["HandleWidget", LoopHandle, dict], Awaitable[Any]]


@dataclass(frozen=True)
class Command:
    """What one button does: ``steer(widget, handle, click)`` calls the public handle API.

    The coroutine it returns is awaited in the click queue, so it should only *steer*; if it
    returns an awaitable, that is the rest of the click (an Ask's answer), run as a task of its
    own without holding up later clicks. ``click`` is the message the browser sent:
    ``{"action", "node", "text", "call_id"}``.
    """

    steer: Steer
    doc: str = ""
    verb: str = ""
    """The steering verb of :data:`VERBS` it applies, if any (a verb unregistered since is no longer a button)."""


def _text(click: dict) -> str:
    return click.get("text") or ""


async def _ask(w: HandleWidget, h: LoopHandle, click: dict) -> Awaitable[None]:
    a = await w._start_ask(h, _text(click))
    return w._ask_answered(a)


async def _stop(h: LoopHandle, click: dict) -> None:
    """Stop ``h`` with the reason typed (or "stopped from the widget"). One stopped already keeps its first reason:
    a reason typed that is another is said in the widget's notice (not a warning in the kernel's log)."""
    typed, first = _text(click), h.state.stop_reason
    if first is None:
        await h.stop(typed or "stopped from the widget")
        return
    await stop_once(h)  # stopping already: wait for its end, as a stop does
    if typed and typed != first:
        raise UserError(f"{h.name!r} was stopped already, with the reason {first!r}: yours ({typed!r}) was not taken")


def _verb(name: str) -> Command:
    """The button of a steering verb of the loop's table: its message, if it takes one, is the text box
    (an optional one left empty: none)."""
    verb = VERBS[name]

    def steer(w: HandleWidget, h: LoopHandle, c: dict) -> Awaitable[Any]:
        method = getattr(h, name)
        if verb.message == "none":
            return method()
        return method(_text(c) if verb.message == "required" else _text(c) or None)

    return Command(steer, verb.doc, name)


COMMANDS: dict[str, Command] = {
    **{name: _verb(name) for name in VERBS},  # every steering verb; ask and stop say more below
    "stop": Command(lambda w, h, c: _stop(h, c), "stop it, from any state", "stop"),
    "ask": Command(_ask, "ask about it without disturbing it (the answer shows in the widget)", "ask"),
    "stop_ask": Command(lambda w, h, c: h.stop("stopped from the widget"), "stop an Ask shown in the widget"),
    "answer": Command(
        lambda w, h, c: h.inbox.answer(c.get("call_id") or "", _text(c)), "answer a tool's question"
    ),
    # a plan, or a call of a tool marked needs_approval, waiting for the person
    "approve": Command(lambda w, h, c: h.inbox.approve(c.get("call_id")), "run a waiting plan or tool call"),
    "skip": Command(lambda w, h, c: h.inbox.skip(c.get("call_id"), _text(c) or None), "skip it, with a reason"),
    "allow": Command(
        lambda w, h, c: h.inbox.approve(c.get("call_id"), always=True),
        "run a waiting tool call, and that tool's later calls in this operation without asking",
    ),
}
"""What the widget's clicks do, by the action name the browser sends. A steering verb needs no entry:
the front end makes its button from the widget's ``verbs`` (:func:`verb_buttons`, from :data:`VERBS`),
and its click calls the handle's method of that name (:func:`_verb`), also for a verb registered after
the widget was made. Another button is one entry here (and its button in ``widgets/handle.js``); a
widget's own ``commands`` may add or override entries."""

# events the widget keeps track of itself (for every loop in its tree), beside flushing
_TRACKED = frozenset({
    "model_retry", "model_wait", "model_delta", "model_request", "model_response", "tool_started",
    "loop_finished", "loop_failed",
})


class HandleWidget(anywidget.AnyWidget):
    """A live view of a handle and its sub-operations, with steering controls."""

    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)
    nodes: traitlets.List[dict] = traitlets.List().tag(sync=True)
    verbs: traitlets.List[dict] = traitlets.List().tag(sync=True)
    """The steering verbs' buttons (:func:`verb_buttons`): the front end builds its controls from them."""
    entries = traitlets.Dict().tag(sync=True)
    asks: traitlets.List[dict] = traitlets.List().tag(sync=True)
    notice = traitlets.Unicode("").tag(sync=True)
    subshells = traitlets.Bool(True).tag(sync=True)
    """Whether the kernel takes clicks while a cell runs (kernel subshells); else they act when it is idle."""
    cell_running = traitlets.Bool(False).tag(sync=True)
    """A cell runs now (kept only where ``subshells`` is false): a click then waits until it ends."""

    def __init__(self, handle: LoopHandle, *, max_hz: float = 10.0,
                 ask: Callable[[LoopHandle, str], LoopHandle] | None = None, **kwargs: Any) -> None:
        anywidget_id, css = style()
        # the id names the version (anywidget's default is the class's dotted name), so a notebook
        # saved with another version cannot replace this one's stylesheet; given here, it is in the
        # state the widget opens with, before any view renders
        super().__init__(
            _esm=asset("handle.js"), _css=css, _anywidget_id=anywidget_id, verbs=verb_buttons(), **kwargs
        )
        self.handle = handle
        self.commands: dict[str, Command] = {**{n: _verb(n) for n in VERBS}, **COMMANDS}
        """This widget's buttons (a copy of :data:`COMMANDS`)."""
        self.interval = 1.0 / max_hz
        self.flushes = 0
        """How many times state was sent (for benchmarks)."""
        self._flush_scheduled: asyncio.TimerHandle | None = None
        self._ask_handles: list[tuple[str, str, LoopHandle]] = []
        self._ask = ask  # how the Ask button starts one (the magics': listed, stopped by name); else h.ask
        self._entry_counts: dict[str, tuple[int, int, int]] = {}
        self._retries: dict[str, Any] = {}  # loop id -> the retry it is waiting out (a model_retry event)
        self._streamed: dict[str, list[str]] = {}  # loop id -> text streamed in the model call under way
        self._cut_off: dict[str, str] = {}  # loop id -> the fragment a Stop cut off
        self._loop = handle.run.event_loop
        self.clicks = Clicks(self._loop, self._perform, self._report)
        """The clicks received, queued on the handle's loop and performed in arrival order."""
        self.errors: list[str] = []
        """What went wrong with clicks, oldest first (the ``notice`` shows the latest)."""
        self._failed = ""  # the notice a failed steering call set (a click that works clears that one only)
        self._under_failure = ""  # the notice it replaced, shown again then
        self.on_msg(self._on_custom)
        watch_cells(self)
        self._unlisten = handle.run.add_listener(self._on_event)
        self._cancelled_seen = handle.state.cancelled_waits
        self._retired = False
        watch_interrupts(self)
        self.flush()

    # -- state ------------------------------------------------------------------------------

    def _on_event(self, source: LoopHandle, event: Any) -> None:
        kind = event.kind
        if self._flush_scheduled is not None and kind not in _TRACKED:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is not self._loop:  # published from another thread: carried to the handle's loop
            self._loop.call_soon_threadsafe(self._on_event, source, event)
            return
        if kind in _TRACKED:
            self._track(source, event)
        self._schedule(ended=kind in ("loop_finished", "loop_failed") and source is self.handle)

    def _track(self, source: LoopHandle, event: Any) -> None:
        """What the handle does not keep: the retry being waited out, and the text a Stop cut off."""
        kind, lid = event.kind, source.id
        if kind == "model_delta":
            if not getattr(event, "thinking", False):
                self._streamed.setdefault(lid, []).append(event.text)
            self._retries.pop(lid, None)  # the call proceeds
        elif kind == "model_retry":
            self._retries[lid] = _retry_line(event, source.model)
            self._streamed.pop(lid, None)  # a retry starts the reply again
        elif kind == "model_wait":  # shown like a retry, until the call proceeds
            self._retries[lid] = _wait_line(event)
        elif kind == "model_response" and getattr(event, "interrupted", False):
            pass  # the call was cut off: what streamed stays, to be shown as cut off if the loop stopped
        elif kind == "loop_finished" and getattr(event, "status", None) == "stopped":
            fragment = "".join(self._streamed.pop(lid, ()))
            if fragment:
                self._cut_off[lid] = fragment
            self._retries.pop(lid, None)
        else:  # a new call, a whole reply, a tool, or the end: nothing waits and nothing is cut off
            self._retries.pop(lid, None)
            self._streamed.pop(lid, None)

    def _schedule(self, ended: bool = False) -> None:
        if self._flush_scheduled is not None:
            return
        # flushes run in the context the widget was made in, whatever event (or click) led to
        # them: each update names the same parent, so the kernel routes clicks to one place
        self._flush_scheduled = self._loop.call_later(
            0 if ended else self.interval, self.flush, context=self.clicks.context.copy()
        )

    def flush(self) -> None:
        """Send the current state (called by the throttle; call it directly to force one)."""
        if self._flush_scheduled is not None:
            self._flush_scheduled.cancel()
            self._flush_scheduled = None
        tree = _tree(self.handle)
        nodes = [_node(h, d, self._retries.get(h.id, ""), self._cut_off.get(h.id, "")) for h, d in tree]
        changed_entries = None
        shown = {h.id for h, _d in tree}
        gone = [nid for nid in self._entry_counts if nid not in shown]  # a batch's ended rows: no node of it now
        if gone:  # their transcripts leave the state (it is sent whole, and saved with the notebook)
            changed_entries = {nid: e for nid, e in self.entries.items() if nid in shown}
            for nid in gone:
                del self._entry_counts[nid]
                self._cut_off.pop(nid, None)
        for h, _d in tree:
            # a result always appends a message
            signature = (len(h.transcript), h.state.printed, getattr(h, "displayed", 0))
            if self._entry_counts.get(h.id) != signature:
                if changed_entries is None:
                    changed_entries = dict(self.entries)
                head, tail, omitted = shown_entries(h.transcript)  # (bounded: a long run's whole would be saved)
                changed_entries[h.id] = [_entry(m) for m in head] + (
                    [{"role": "user", "kind": "omitted", "content": omitted_line(omitted, h.name), "error": False,
                      "name": None}, *(_entry(m) for m in tail)] if omitted else [])
                self._entry_counts[h.id] = signature
        asks = [
            {"node": nid, "id": a.id, "question": _clip(q, 500), "status": a.status.value,
             "answer": _clip(a.state.answer or a.state.streaming_text)}
            for nid, q, a in self._ask_handles
        ]
        verbs = verb_buttons()  # a verb registered (or unregistered) since: a button more (or less)
        with self.hold_sync():
            if verbs != self.verbs:
                self.verbs = verbs
            self.nodes = nodes
            if changed_entries is not None:
                self.entries = changed_entries
            if asks != self.asks:
                self.asks = asks
        self.flushes += 1
        if self.handle.done() and all(a.done() for _n, _q, a in self._ask_handles):
            self._unlisten()
            if self._retired:
                self.close()

    @property
    def retired(self) -> bool:
        """Whether :meth:`retire` was called (the widget closes once its operation is done)."""
        return self._retired

    def retire(self) -> None:
        """Close this widget once its operation and the questions asked in it are done (at once, if they are): a
        newer widget took its place. ipywidgets keeps every widget until it is closed, and with it the handle and
        its transcript; the cell it was shown in keeps the snapshot shown beside it."""
        self._retired = True
        if self.handle.done() and all(a.done() for _n, _q, a in self._ask_handles):
            self.flush()  # its last state, then closed

    def close(self) -> None:
        """Close the widget and its layout (ipywidgets would keep the layout), and stop listening to the handle."""
        self._unlisten()
        if self._flush_scheduled is not None:
            self._flush_scheduled.cancel()
            self._flush_scheduled = None
        layout = self.layout
        super().close()
        if layout is not None:
            layout.close()

    def _after_cell(self, result: Any = None) -> None:
        """After each cell: if a cell awaiting the operation was interrupted, say that the operation goes on.
        (ipykernel ends an interrupted async cell with no result; a wait cancelled by code, a timeout, is not said.)"""
        waits = self.handle.state.cancelled_waits
        if waits > self._cancelled_seen:
            self._cancelled_seen = waits
            error = getattr(result, "error_in_exec", None)
            interrupted = result is None or isinstance(error, (KeyboardInterrupt, asyncio.CancelledError))
            if interrupted and not self.handle.done():
                name = self.handle.name
                self.notice = (
                    f"The cell awaiting {name!r} was interrupted; the operation goes on: "
                    f"stop it with the Stop button (or %unity stop {name})."
                )

    # -- clicks -----------------------------------------------------------------------------

    def _find(self, node_id: str) -> LoopHandle:
        for h in self.handle.tree:
            if h.id == node_id:
                return h
        for _n, _q, a in self._ask_handles:  # an Ask shown here (its Stop button)
            if a.id == node_id:
                return a
        raise ValueError(f"no operation {node_id!r} in the widget of {self.handle.name!r}")

    def _on_custom(self, _widget: Any, content: dict, _buffers: Any) -> None:
        """A click, as the browser sends it; on whichever thread the kernel delivers it. A ping (the view asking
        whether a kernel is behind it) is answered at once, on that thread."""
        if isinstance(content, dict) and content.get("action") == "ping":
            self.send({"pong": True})
            return
        try:
            self.clicks.receive(dict(content) if isinstance(content, dict) else {"action": repr(content)})
        except Exception as err:  # a click must never raise into the kernel (a closed loop)
            self.errors.append(str(err))
            self.steering_failed(str(err))
            log.warning("widget click not received: %s", err)

    def _command(self, action: Any) -> Command:
        command = self.commands.get(action) if isinstance(action, str) else None
        if command is None and isinstance(action, str) and action in VERBS:  # a verb registered since
            command = _verb(action)
        elif command is not None and command.verb and command.verb not in VERBS:  # one unregistered since
            command = None
        if command is None:
            raise ValueError(f"unknown widget action {action!r}")
        return command

    async def _perform(self, click: dict) -> Any:
        """One click, on the handle's loop: steer, and return what is left to wait for (an Ask's answer)."""
        command = self._command(click.get("action"))
        rest = await command.steer(self, self._find(click.get("node") or self.handle.id), click)
        return rest if isinstance(rest, Awaitable) else None

    def _report(self, click: dict, error: BaseException | None) -> None:
        """After each click: the notice says what went wrong (until a later click works: then it is cleared, and only
        it: a notice saying something else, the store's problem or a budget, still holds); then a flush."""
        if error is not None:
            message = str(error) or type(error).__name__
            self.errors.append(f"{click.get('action')}: {message}")
            self.steering_failed(message)
        elif self._failed and self.notice == self._failed:
            self.notice, self._failed = self._under_failure, ""
        self.flush()

    def steering_failed(self, message: str) -> None:
        """Show that a steering call (a click, or a ``%unity`` line) failed: the notice says it until a click works,
        then says again what it said before."""
        if not self._failed or self.notice != self._failed:
            self._under_failure = self.notice
        self.notice = self._failed = message

    async def act(self, action: str, node_id: str, text: str | None = None, call_id: str | None = None) -> None:
        """What a button does, start to end (an Ask's answer included): the public handle methods code would call."""
        click = {"action": action, "node": node_id, "text": text, "call_id": call_id}
        rest = await self._command(action).steer(self, self._find(node_id), click)
        if isinstance(rest, Awaitable):
            await rest

    async def _start_ask(self, h: LoopHandle, question: str) -> LoopHandle:
        a = self._ask(h, question) if self._ask is not None else await h.ask(question)
        self._ask_handles.append((h.id, question, a))
        a.run.add_listener(lambda _s, _e: self._on_ask_event())
        self.flush()
        return a

    def _on_ask_event(self) -> None:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is not self._loop:
            self._loop.call_soon_threadsafe(self._on_ask_event)
        elif self._flush_scheduled is None:
            self._schedule()

    async def _ask_answered(self, a: LoopHandle) -> None:
        try:
            await a.result()
        except Stopped:  # stopped by the person (its Stop, %unity stop): its entry says so, no click failed
            pass
        finally:
            self.flush()

    # -- without a kernel ----------------------------------------------------------------

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        """The widget's bundle whole: its data (with the snapshot as ``text/html`` and the handle's repr), and the
        metadata anywidget adds, which Colab's custom widget manager needs to render the view (anywidget#63)."""
        shown: Any = super()._repr_mimebundle_(**kwargs) or {}
        data, metadata = shown if isinstance(shown, tuple) else (shown, {})
        data = dict(data)
        data["text/plain"] = repr(self.handle)
        data["text/html"] = render_html(self.handle)
        return data, dict(metadata or {})
