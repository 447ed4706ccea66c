"""Traces: the event bus as OpenTelemetry spans, following the GenAI semantic conventions.

``u.trace()`` subscribes to a bus and turns what it publishes into spans, as they happen:

- a loop (an operation, a batch, a batch's row, a child loop) is an ``invoke_agent {name}`` span, under the
  ``execute_tool`` span of the call that started it, or its parent loop's span, with ``gen_ai.provider.name``
  (``openai``, ``anthropic``, ..., ``llama_cpp`` for the local model, ``unity_nb.scripted``) and the model's
  ``server.address`` and ``server.port``;
- a batch's row (``u.map``) is a child span of the batch's, and the batch's span has a ``unity_nb.row_finished``
  event a row (position, status, and the row's ``gen_ai.agent.id``);
- a model call is a ``chat {model}`` span with the same provider and server, ``gen_ai.request.model``,
  ``gen_ai.response.model``, ``gen_ai.response.id`` and ``gen_ai.response.finish_reasons`` (where the provider
  gives them) and ``gen_ai.usage.input_tokens`` / ``output_tokens``;
- a tool call is an ``execute_tool {tool}`` span with ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``;
- steering (pause, resume, interject, stop, ...) is a span event ``unity_nb.steering.{verb}`` on its loop's span.

Only ``opentelemetry-api`` is needed (``pip install 'unity_nb[otel]'``), imported when tracing starts, never
at ``import unity_nb``. Spans go to the global tracer provider unless one is given. No message text,
arguments, results or tasks are recorded unless ``content=True``: a transcript may hold what a person would
not send to a tracing backend.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from ._errors import UserError

__all__ = ("Tracing", "trace")

_SCOPE = "unity_nb"


def _ns(ts: float) -> int:
    return int(ts * 1e9)


@dataclass
class _Loop:
    span: Any
    model: str
    server: dict[str, Any] = field(default_factory=dict)
    """``gen_ai.provider.name``, ``server.address`` and ``server.port``: on its spans and its chat spans."""
    chat: Any = None
    tools: dict[str, Any] = field(default_factory=dict)


class Tracing:
    """An exporter started by :func:`trace`; :meth:`close` (or leaving its ``with`` block) stops it.

    Spans of loops still running when it is closed are ended then, marked ``unity_nb.status = "untraced"``."""

    def __init__(self, bus: ev.EventBus, tracer: Any, content: bool) -> None:
        from opentelemetry import trace as otel_trace

        self._otel = otel_trace
        self._tracer = tracer
        self.content = content
        self._loops: dict[str, _Loop] = {}
        self._calls_of_children: dict[str, tuple[str, str]] = {}  # child loop id -> (parent loop id, call id)
        self._unsubscribe = bus.subscribe(self._on_event)
        self.closed = False

    def __enter__(self) -> Tracing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._loops)} loop(s) open"
        return f"<unity_nb Tracing content={self.content} ({state})>"

    def close(self) -> None:
        """Stop tracing: no more spans; the spans of loops still running end now."""
        if self.closed:
            return
        self.closed = True
        self._unsubscribe()
        for loop in list(self._loops.values()):
            self._end_loop(loop, None, "untraced")
        self._loops.clear()

    # ------------------------------------------------------------------ events

    def _on_event(self, event: ev.Event) -> None:
        handler = getattr(self, "_on_" + event.kind, None)
        if handler is not None:
            handler(event)

    def _start(self, name: str, parent: Any, ts: float, attributes: dict[str, Any], kind: Any = None) -> Any:
        context = self._otel.set_span_in_context(parent) if parent is not None else None
        return self._tracer.start_span(
            name,
            context=context,
            kind=kind if kind is not None else self._otel.SpanKind.INTERNAL,
            start_time=_ns(ts),
            attributes={k: v for k, v in attributes.items() if v is not None},
        )

    def _on_loop_started(self, e: ev.LoopStarted) -> None:
        parent = None
        via = self._calls_of_children.pop(e.loop_id, None)
        if via is not None and via[0] in self._loops:
            owner = self._loops[via[0]]
            parent = owner.tools.get(via[1], owner.span)
        elif e.parent_id is not None and e.parent_id in self._loops:
            parent = self._loops[e.parent_id].span
        server = {
            "gen_ai.provider.name": e.provider or "_OTHER",  # required by the conventions: a loop without one
            "server.address": e.server_address,              # was recorded before providers were (a replay)
            "server.port": e.server_port if e.server_address else None,
        }
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            **server,
            "gen_ai.agent.name": e.name,
            "gen_ai.agent.id": e.loop_id,
            "gen_ai.request.model": e.model,
            "unity_nb.lineage": list(e.lineage),
        }
        if self.content:
            attributes["gen_ai.input.messages"] = json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": e.task}]}], ensure_ascii=False
            )
        span = self._start(f"invoke_agent {e.name}", parent, e.ts, attributes)
        self._loops[e.loop_id] = _Loop(span, e.model, server)

    def _on_child_started(self, e: ev.ChildStarted) -> None:
        if e.call_id is not None:
            self._calls_of_children[e.child_id] = (e.loop_id, e.call_id)

    def _on_model_request(self, e: ev.ModelRequested) -> None:
        loop = self._loops.get(e.loop_id)
        if loop is None:
            return
        if loop.chat is not None:
            loop.chat.end(end_time=_ns(e.ts))
        attributes = {
            "gen_ai.operation.name": "chat",
            **loop.server,
            "gen_ai.request.model": loop.model,
            "unity_nb.step": e.step,
            "unity_nb.tools_offered": list(e.tools),
        }
        loop.chat = self._start(f"chat {loop.model}", loop.span, e.ts, attributes, self._otel.SpanKind.CLIENT)

    def _on_model_response(self, e: ev.ModelResponse) -> None:
        loop = self._loops.get(e.loop_id)
        if loop is None or loop.chat is None:
            return
        span, loop.chat = loop.chat, None
        span.set_attribute("gen_ai.usage.input_tokens", e.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", e.output_tokens)
        span.set_attribute("unity_nb.usage.estimated", e.estimated)
        if e.response_model:
            span.set_attribute("gen_ai.response.model", e.response_model)
        if e.response_id:
            span.set_attribute("gen_ai.response.id", e.response_id)
        if e.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [e.finish_reason])
        if e.interrupted:
            span.set_attribute("unity_nb.interrupted", True)
        if self.content:
            parts: list[dict] = []
            if e.content:
                parts.append({"type": "text", "content": e.content})
            parts.extend(
                {"type": "tool_call", "id": c.get("id"), "name": c.get("name"), "arguments": c.get("arguments")}
                for c in e.tool_calls
            )
            span.set_attribute(
                "gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": parts}], ensure_ascii=False)
            )
        span.end(end_time=_ns(e.ts))

    def _on_tool_started(self, e: ev.ToolStarted) -> None:
        loop = self._loops.get(e.loop_id)
        if loop is None:
            return
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": e.name,
            "gen_ai.tool.call.id": e.call_id,
            "gen_ai.tool.type": "function",
        }
        if self.content:
            attributes["gen_ai.tool.call.arguments"] = e.arguments
        loop.tools[e.call_id] = self._start(f"execute_tool {e.name}", loop.span, e.ts, attributes)

    def _on_tool_finished(self, e: ev.ToolFinished) -> None:
        loop = self._loops.get(e.loop_id)
        span = loop.tools.pop(e.call_id, None) if loop is not None else None
        if span is None:
            return
        if self.content:
            span.set_attribute("gen_ai.tool.call.result", e.result)
        if e.error:
            span.set_attribute("error.type", "tool_error")
            span.set_status(self._otel.Status(self._otel.StatusCode.ERROR))
        span.end(end_time=_ns(e.ts))

    def _on_steering(self, e: ev.Steering) -> None:
        loop = self._loops.get(e.loop_id)
        if loop is None:
            return
        attributes: dict[str, Any] = {"unity_nb.steering.action": e.action}
        if e.request_id is not None:
            attributes["unity_nb.request_id"] = e.request_id
        if self.content and e.message is not None:
            attributes["unity_nb.steering.message"] = e.message
        loop.span.add_event(f"unity_nb.steering.{e.action}", attributes=attributes, timestamp=_ns(e.ts))

    def _on_row_finished(self, e: ev.RowFinished) -> None:
        batch = self._loops.get(e.loop_id)  # the row's own span has ended by now: the batch's span says it
        if batch is not None:
            attributes: dict[str, Any] = {"unity_nb.row.position": e.position, "unity_nb.row.status": e.status,
                                          "unity_nb.row.kept": e.kept}
            if e.child_id is not None:
                attributes["gen_ai.agent.id"] = e.child_id
            batch.span.add_event("unity_nb.row_finished", attributes=attributes, timestamp=_ns(e.ts))

    def _on_loop_finished(self, e: ev.LoopFinished) -> None:
        loop = self._loops.pop(e.loop_id, None)
        if loop is not None:
            if self.content and e.result is not None:
                loop.span.set_attribute(
                    "gen_ai.output.messages",
                    json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": e.result}]}],
                               ensure_ascii=False),
                )
            loop.span.set_attribute("unity_nb.steps", e.steps)
            self._end_loop(loop, e.ts, e.status)

    def _on_loop_failed(self, e: ev.LoopFailed) -> None:
        loop = self._loops.pop(e.loop_id, None)
        if loop is not None:
            loop.span.set_attribute("error.type", e.error.split(":", 1)[0][:100])
            loop.span.set_status(self._otel.Status(self._otel.StatusCode.ERROR))
            loop.span.set_attribute("unity_nb.steps", e.steps)
            self._end_loop(loop, e.ts, "failed")

    def _end_loop(self, loop: _Loop, ts: float | None, status: str) -> None:
        end = _ns(ts) if ts is not None else None
        for span in [loop.chat, *loop.tools.values()]:
            if span is not None:
                span.set_attribute("unity_nb.status", "ended with its loop")
                span.end(end_time=end)
        loop.chat = None
        loop.tools.clear()
        loop.span.set_attribute("unity_nb.status", status)
        loop.span.end(end_time=end)


def trace(*, tracer_provider: Any = None, content: bool = False, bus: ev.EventBus | None = None) -> Tracing:
    """Export every loop on ``bus`` (the default bus) as OpenTelemetry spans (GenAI semantic conventions).

    ``tracer_provider`` defaults to OpenTelemetry's global one (set by your SDK or your tracing vendor's
    setup). ``content=True`` adds tasks, replies, tool arguments and results and steering messages to the
    spans; without it, spans carry names, ids, models, token counts and timings only. Returns a
    :class:`Tracing`: ``.close()`` (or a ``with`` block) stops it. Needs ``opentelemetry-api``
    (``pip install 'unity_nb[otel]'``)."""
    try:
        from opentelemetry import trace as otel_trace
    except ImportError:
        raise UserError(
            "u.trace() needs OpenTelemetry's API: pip install 'unity_nb[otel]' (or opentelemetry-api)"
        ) from None
    from ._version import __version__

    provider = tracer_provider if tracer_provider is not None else otel_trace.get_tracer_provider()
    tracer = provider.get_tracer(_SCOPE, __version__)
    return Tracing(bus if bus is not None else ev.default_bus(), tracer, content)
