"""u.trace(): loops, model calls, tools, rows and steering as OpenTelemetry spans (GenAI conventions)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

import unity_nb as u

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SECRET_TASK = "plum-task-text-that-must-not-leave"
SECRET_REPLY = "quince-reply-text-that-must-not-leave"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _by_name(finished):
    return {s.name: s for s in finished}


def _everything(finished) -> str:
    parts = []
    for s in finished:
        parts.append(json.dumps(dict(s.attributes or {}), default=str))
        parts.extend(json.dumps(dict(e.attributes or {}), default=str) for e in s.events)
    return " ".join(parts)


async def test_a_loop_its_tool_and_the_child_loop_the_tool_started_nest_with_genai_attributes(spans):
    provider, exporter = spans
    bus = u.EventBus()

    async def research(topic: str) -> str:
        """Research a topic."""
        return await u.start_loop(f"{SECRET_TASK} {topic}", model=u.ScriptedModel(lambda m, t: SECRET_REPLY),
                                  bus=bus, name="child")

    def script(messages, tools):
        if messages[-1]["role"] == "user":
            return u.call_tool("research", topic="plums")
        return SECRET_REPLY

    with u.trace(tracer_provider=provider, bus=bus) as tracing:
        h = u.start_loop(SECRET_TASK, model=u.ScriptedModel(script), tools=[research], bus=bus, name="top")
        assert await asyncio.wait_for(h, 10) == SECRET_REPLY
    assert tracing.closed
    finished = exporter.get_finished_spans()
    names = sorted(s.name for s in finished)
    assert names == sorted(
        ["invoke_agent top", "chat scripted", "execute_tool research", "invoke_agent child", "chat scripted",
         "chat scripted"]
    ), names
    top, tool, child = (_by_name(finished)[n] for n in ("invoke_agent top", "execute_tool research",
                                                         "invoke_agent child"))
    assert top.parent is None
    assert tool.parent.span_id == top.context.span_id
    assert child.parent.span_id == tool.context.span_id  # the child loop nests under the call that started it
    assert {s.parent.span_id for s in finished if s.name == "chat scripted"} == {
        top.context.span_id, child.context.span_id
    }
    assert len({s.context.trace_id for s in finished}) == 1
    assert top.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert top.attributes["gen_ai.agent.name"] == "top"
    assert top.attributes["unity_nb.status"] == "finished"
    assert tool.attributes["gen_ai.tool.name"] == "research"
    assert tool.attributes["gen_ai.tool.call.id"]
    chat = next(s for s in finished if s.name == "chat scripted" and s.parent.span_id == child.context.span_id)
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "scripted"
    assert chat.attributes["gen_ai.usage.input_tokens"] >= 0 and "gen_ai.usage.output_tokens" in chat.attributes
    assert "unity_nb.usage.estimated" in chat.attributes
    assert all(s.start_time <= s.end_time for s in finished)
    everything = _everything(finished)
    assert SECRET_TASK not in everything and SECRET_REPLY not in everything and "plums" not in everything


async def test_content_true_adds_the_task_replies_and_tool_arguments(spans):
    provider, exporter = spans
    bus = u.EventBus()

    def shout(word: str) -> str:
        """Shout a word."""
        return word.upper()

    def script(messages, tools):
        if messages[-1]["role"] == "user":
            return u.call_tool("shout", word="plums")
        return SECRET_REPLY

    tracing = u.trace(tracer_provider=provider, bus=bus, content=True)
    await asyncio.wait_for(u.start_loop(SECRET_TASK, model=u.ScriptedModel(script), tools=[shout], bus=bus), 10)
    tracing.close()
    everything = _everything(exporter.get_finished_spans())
    assert SECRET_TASK in everything and SECRET_REPLY in everything and "PLUMS" in everything


async def test_a_map_is_a_span_with_one_child_span_a_row(spans):
    provider, exporter = spans
    bus = u.EventBus()
    with u.trace(tracer_provider=provider, bus=bus):
        h = u.map(["a", "b", "c"], "Label {value}", model=u.ScriptedModel(lambda m, t: "ok"), name="labels", bus=bus)
        await asyncio.wait_for(h, 10)
    finished = exporter.get_finished_spans()
    batch = _by_name(finished)["invoke_agent labels"]
    rows = [s for s in finished if s.name.startswith("invoke_agent") and s is not batch]
    assert len(rows) == 3
    assert all(r.parent.span_id == batch.context.span_id for r in rows)
    ended = [e.attributes for e in batch.events if e.name == "unity_nb.row_finished"]
    assert sorted(e["unity_nb.row.position"] for e in ended) == [0, 1, 2]
    assert {e["unity_nb.row.status"] for e in ended} == {"finished"}
    assert {e["gen_ai.agent.id"] for e in ended} == {r.attributes["gen_ai.agent.id"] for r in rows}
    chats = [s for s in finished if s.name == "chat scripted"]
    assert {c.parent.span_id for c in chats} == {r.context.span_id for r in rows}


async def test_steering_is_span_events_and_a_stop_ends_the_loop_and_its_tool(spans):
    provider, exporter = spans
    bus = u.EventBus()
    never = asyncio.Event()

    async def wait() -> str:
        """Wait."""
        await never.wait()
        return "never"

    def script(messages, tools):
        return u.call_tool("wait")

    with u.trace(tracer_provider=provider, bus=bus):
        h = u.start_loop("wait for it", model=u.ScriptedModel(script), tools=[wait], bus=bus, name="waiter")
        await asyncio.wait_for(h.wait_for("tool_started"), 10)
        await h.pause()
        await h.resume()
        await h.stop("no longer needed")
        with pytest.raises(u.Stopped):
            await asyncio.wait_for(h, 10)
    finished = _by_name(exporter.get_finished_spans())
    loop = finished["invoke_agent waiter"]
    assert loop.attributes["unity_nb.status"] == "stopped"
    actions = [e.name for e in loop.events]
    assert actions[-3:] == ["unity_nb.steering.pause", "unity_nb.steering.resume", "unity_nb.steering.stop"]
    assert "no longer needed" not in _everything(finished.values())  # a steering message is content
    assert finished["execute_tool wait"].parent.span_id == loop.context.span_id


def test_import_unity_nb_does_not_import_opentelemetry():
    code = "import sys, unity_nb; print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


async def test_a_chat_span_says_whether_its_token_counts_were_estimated(spans):
    provider, exporter = spans
    bus = u.EventBus()

    class Counted:
        def __init__(self, name, estimated):
            self.name, self.estimated = name, estimated

        async def complete(self, request, on_delta=None):
            return u.Reply(content="ok", usage=u.Usage(10, 5, self.estimated), model=self.name)

    with u.trace(tracer_provider=provider, bus=bus):
        await asyncio.wait_for(u.start_loop("a", model=Counted("reported", False), bus=bus), 10)
        await asyncio.wait_for(u.start_loop("b", model=Counted("guessed", True), bus=bus), 10)
    chats = {s.name: s.attributes for s in exporter.get_finished_spans() if s.name.startswith("chat")}
    assert chats["chat reported"]["unity_nb.usage.estimated"] is False
    assert chats["chat guessed"]["unity_nb.usage.estimated"] is True
    guessed = chats["chat guessed"]
    assert (guessed["gen_ai.usage.input_tokens"], guessed["gen_ai.usage.output_tokens"]) == (10, 5)
