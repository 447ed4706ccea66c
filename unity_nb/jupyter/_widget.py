"""The live handle widget: one per root handle, showing the whole tree.

State flows one way: handle events mark the widget dirty; a flush at most ``max_hz`` times a
second (latest value wins) recomputes the synced traits from the handles. Clicks come back
as custom messages and call the public handle API, nothing else, so whatever a button does,
code can do. A click may arrive on another thread (a kernel subshell's): it is carried to the
handle's event loop and queued behind earlier clicks (see ``_clicks``). Without a kernel (a
saved notebook, nbconvert, GitHub) the mimebundle's ``text/html`` snapshot shows the
transcript, and ``text/plain`` is the handle's repr.
"""

from __future__ import annotations

import asyncio
import html
import logging
from importlib import resources
from typing import Any

import anywidget
import traitlets

from ..loop._handle import LoopHandle, Message
from ._clicks import Clicks

__all__ = ("HandleWidget", "render_html")

log = logging.getLogger("unity_nb.widget")

_LIMIT = 4000  # characters of one entry kept in widget state; the handle keeps everything


def _asset(name: str) -> str:
    return resources.files("unity_nb._widgets").joinpath(name).read_text(encoding="utf-8")


def _clip(text: str | None, limit: int = _LIMIT) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters]"


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
    return bool(url) and url.lower().startswith(("http://", "https://"))


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
    out: dict[str, Any] = {"role": m.role, "kind": m.kind, "content": _clip(m.content), "error": m.error, "name": m.name}
    if m.tool_calls:
        out["calls"] = [
            {
                "id": c.id,
                "name": c.name,
                "arguments": _clip(c.arguments),
                "result": None if c.result is None else _clip(c.result),
                "error": c.error,
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


def _node(h: LoopHandle, depth: int) -> dict:
    return {
        "id": h.id,
        "name": h.name,
        "depth": depth,
        "parent": h.parent.id if h.parent is not None else None,
        "status": h.status.value,
        "steps": h.steps,
        "tool_calls": h.tool_calls,
        "tokens_in": h.usage.input_tokens,
        "tokens_out": h.usage.output_tokens,
        "elapsed": round(h.elapsed, 1),
        "model": getattr(h.model, "name", type(h.model).__name__),
        "task": _clip(h.task, 500),
        "answer": h.result_value,
        "error": None if h.error is None or h.status.value == "stopped" else f"{type(h.error).__name__}: {h.error}",
        "stop_reason": h.stop_reason,
        "streaming": _clip(h.streaming_text),
        "reasoning": _tail(h.streaming_thinking),
        "clarifications": [
            {"call_id": c["call_id"], "question": c["question"]}
            for c in h.pending_clarifications() if c["loop_id"] == h.id
        ],
        "thinking": h.thinking[-1] if h.thinking else "",
        "references": [
            {"number": r.number, "title": _clip(r.title, 200), "url": r.url if _safe_url(r.url) else None, "text": _clip(r.text, 300)}
            for r in h.references
        ],
        "approvals": [
            {"call_id": cid, "code": _clip(a["code"]), "intent": _clip(a["intent"], 500)}
            for cid, a in getattr(h, "_approvals", {}).items()
        ],
    }


def _tree(root: LoopHandle) -> list[tuple[LoopHandle, int]]:
    out: list[tuple[LoopHandle, int]] = []

    def walk(h: LoopHandle, depth: int) -> None:
        out.append((h, depth))
        for c in h.children:
            walk(c, depth + 1)

    walk(root, 0)
    return out


class HandleWidget(anywidget.AnyWidget):
    """A live view of a handle and its sub-operations, with steering controls."""

    _esm = traitlets.Unicode().tag(sync=True)
    _css = traitlets.Unicode().tag(sync=True)
    nodes = traitlets.List().tag(sync=True)
    entries = traitlets.Dict().tag(sync=True)
    asks = traitlets.List().tag(sync=True)
    notice = traitlets.Unicode("").tag(sync=True)

    def __init__(self, handle: LoopHandle, *, max_hz: float = 10.0, **kwargs: Any) -> None:
        super().__init__(_esm=_asset("handle.js"), _css=_asset("handle.css"), **kwargs)
        self.handle = handle
        self.interval = 1.0 / max_hz
        self.flushes = 0
        """How many times state was sent (for benchmarks)."""
        self._flush_scheduled: asyncio.TimerHandle | None = None
        self._ask_handles: list[tuple[str, str, LoopHandle]] = []
        self._entry_counts: dict[str, tuple[int, int]] = {}
        self._loop = handle.event_loop
        self.clicks = Clicks(self._loop, self._perform, self._report)
        """The clicks received, queued on the handle's loop and performed in arrival order."""
        self.errors: list[str] = []
        """What went wrong with clicks, oldest first (the ``notice`` shows the latest)."""
        self.on_msg(self._on_custom)
        self._unlisten = handle.add_listener(self._on_event)
        self.flush()

    # -- state ------------------------------------------------------------------------------

    def _on_event(self, source: LoopHandle, event: Any) -> None:
        if self._flush_scheduled is not None:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is not self._loop:  # published from another thread: schedule the flush on the handle's loop
            self._loop.call_soon_threadsafe(self._on_event, source, event)
            return
        ended = event.kind in ("loop_finished", "loop_failed") and source is self.handle
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
        nodes = [_node(h, d) for h, d in tree]
        changed_entries = None
        for h, _d in tree:
            signature = (len(h.transcript), h.printed, getattr(h, "displayed", 0))  # a result always appends a message
            if self._entry_counts.get(h.id) != signature:
                changed_entries = changed_entries or dict(self.entries)
                changed_entries[h.id] = [_entry(m) for m in h.transcript]
                self._entry_counts[h.id] = signature
        asks = [
            {"node": nid, "question": q, "status": a.status.value, "answer": a.result_value or a.streaming_text}
            for nid, q, a in self._ask_handles
        ]
        with self.hold_sync():
            self.nodes = nodes
            if changed_entries is not None:
                self.entries = changed_entries
            if asks != self.asks:
                self.asks = asks
        self.flushes += 1
        if self.handle.done() and all(a.done() for _n, _q, a in self._ask_handles):
            self._unlisten()

    # -- clicks -----------------------------------------------------------------------------

    def _find(self, node_id: str) -> LoopHandle:
        for h in self.handle.walk():
            if h.id == node_id:
                return h
        raise ValueError(f"no operation {node_id!r} in the widget of {self.handle.name!r}")

    def _on_custom(self, _widget: Any, content: dict, _buffers: Any) -> None:
        """A click, as the browser sends it; on whichever thread the kernel delivers it."""
        try:
            self.clicks.receive(dict(content) if isinstance(content, dict) else {"action": repr(content)})
        except Exception as err:  # noqa: BLE001 - a click must never raise into the kernel (a closed loop)
            self.errors.append(str(err))
            self.notice = str(err)
            log.warning("widget click not received: %s", err)

    async def _perform(self, click: dict) -> Any:
        """One click, on the handle's loop: steer, and return what is left to wait for (an Ask's answer)."""
        action, text = click.get("action", ""), click.get("text")
        node_id = click.get("node") or self.handle.id
        if action == "ask":
            a = await self._start_ask(self._find(node_id), text or "")
            return self._ask_answered(a)
        await self.act(action, node_id, text, click.get("call_id"))
        return None

    def _report(self, click: dict, error: BaseException | None) -> None:
        """After each click: the notice says what went wrong (until a later click works); then a flush."""
        if error is not None:
            message = str(error) or type(error).__name__
            self.errors.append(f"{click.get('action')}: {message}")
            self.notice = message
        else:
            self.notice = ""
        self.flush()

    def act(self, action: str, node_id: str, text: str | None = None, call_id: str | None = None):
        """What a button does, as a coroutine: the same public handle methods code would call."""
        h = self._find(node_id)
        if action in ("pause", "resume"):
            return getattr(h, action)()
        if action == "stop":
            return h.stop(text or "stopped from the widget")
        if action == "interject":
            return h.interject(text or "")
        if action == "ask":
            return self._ask(h, text or "")
        if action == "answer":
            return h.answer_clarification(call_id or "", text or "")
        if action in ("approve", "skip") and hasattr(h, "approve"):
            return h.approve(call_id) if action == "approve" else h.skip(call_id, text or None)
        raise ValueError(f"unknown widget action {action!r}")

    async def _ask(self, h: LoopHandle, question: str) -> None:
        await self._ask_answered(await self._start_ask(h, question))

    async def _start_ask(self, h: LoopHandle, question: str) -> LoopHandle:
        a = await h.ask(question)
        self._ask_handles.append((h.id, question, a))
        a.add_listener(lambda _s, _e: self._on_event(self.handle, _e))
        self.flush()
        return a

    async def _ask_answered(self, a: LoopHandle) -> None:
        try:
            await a.result()
        finally:
            self.flush()

    # -- without a kernel ----------------------------------------------------------------

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        if isinstance(bundle, tuple):
            bundle = bundle[0]
        bundle = dict(bundle)
        bundle["text/plain"] = repr(self.handle)
        bundle["text/html"] = render_html(self.handle)
        return bundle


_BADGE = {
    "running": "#2563eb", "paused": "#d97706", "waiting": "#9333ea",
    "finished": "#16a34a", "stopped": "#6b7280", "failed": "#dc2626", "idle": "#0891b2",
}


def render_html(root: LoopHandle) -> str:
    """A static snapshot of the handle tree and its transcripts (no scripts, no kernel needed)."""
    parts = ['<div class="unity-nb-snapshot" style="font-family:sans-serif;font-size:13px">']
    for h, depth in _tree(root):
        status = h.status.value
        parts.append(
            f'<div style="margin-left:{depth * 20}px;border-left:3px solid {_BADGE[status]};padding-left:8px;margin-bottom:6px">'
            f"<b>{html.escape(h.name)}</b> "
            f'<span style="background:{_BADGE[status]};color:white;border-radius:8px;padding:0 6px">{status}</span> '
            f"{h.steps} steps, {h.usage.input_tokens}/{h.usage.output_tokens} tokens"
        )
        for m in h.transcript:
            if m.kind in ("system", "context"):
                continue
            label = {"tool": f"tool {m.name}", "user": m.kind if m.kind != "task" else "task"}.get(m.role, m.role)
            text = html.escape(_clip(m.content, 1000))
            calls = "".join(
                f"<div><code>{html.escape(c.name)}({html.escape(_clip(c.arguments, 300))})</code></div>" for c in m.tool_calls
            )
            color = "#dc2626" if m.error else "#374151"
            parts.append(f'<div style="color:{color}"><i>{html.escape(label)}</i>: <span style="white-space:pre-wrap">{text}</span>{calls}</div>')
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)

