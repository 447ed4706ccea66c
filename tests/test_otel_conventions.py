"""u.trace()'s spans against OpenTelemetry's GenAI semantic conventions (issue 39 item 8): the attributes the
conventions require of an inference (``chat``) span and an ``invoke_agent`` span, and the recommended ones the
model's reply and server give, over real loopback HTTP.

The lists are the conventions' (semantic-conventions ``docs/gen-ai/gen-ai-spans.md``, "Inference", and
``gen-ai-agent-spans.md``, "Invoke agent"); the names are spelled by the ``opentelemetry-semantic-conventions``
package's constants, and ``gen_ai.provider.name`` takes one of its well-known values where one applies."""

from __future__ import annotations

import asyncio

import pytest
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u

pytest.importorskip("opentelemetry.sdk")
genai = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
server_attributes = pytest.importorskip("opentelemetry.semconv.attributes.server_attributes")
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

PROVIDER = genai.GEN_AI_PROVIDER_NAME
ADDRESS, PORT = server_attributes.SERVER_ADDRESS, server_attributes.SERVER_PORT

# Required, and the Conditionally Required whose condition holds here (a model is asked for, a server is set)
CHAT_REQUIRED = {genai.GEN_AI_OPERATION_NAME, PROVIDER, genai.GEN_AI_REQUEST_MODEL, PORT}
CHAT_RECOMMENDED = {
    genai.GEN_AI_RESPONSE_FINISH_REASONS, genai.GEN_AI_RESPONSE_ID, genai.GEN_AI_RESPONSE_MODEL,
    genai.GEN_AI_USAGE_INPUT_TOKENS, genai.GEN_AI_USAGE_OUTPUT_TOKENS, ADDRESS,
}
AGENT_REQUIRED = {genai.GEN_AI_OPERATION_NAME, PROVIDER, genai.GEN_AI_AGENT_ID, genai.GEN_AI_AGENT_NAME,
                  genai.GEN_AI_REQUEST_MODEL, PORT}
AGENT_RECOMMENDED = {ADDRESS}
WELL_KNOWN = {v.value for v in genai.GenAiProviderNameValues}


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def test_chat_and_invoke_agent_spans_carry_what_the_conventions_ask_for():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bus = u.EventBus()
    async with FakeOpenAIServer() as server:
        server.script([
            Reply(tool_calls=[{"name": "weather", "arguments": '{"city": "Paris"}'}], model="gpt-4.1-mini-2025-04-14"),
            Reply(content="Sunny.", model="gpt-4.1-mini-2025-04-14"),
        ])
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        with u.trace(tracer_provider=provider, bus=bus):
            h = u.start_loop("Weather in Paris?", model=model, tools=[weather], bus=bus, name="forecast")
            assert await asyncio.wait_for(h.result(), 10) == "Sunny."
        await model.close()
    spans = exporter.get_finished_spans()
    chats = [s for s in spans if s.attributes.get(genai.GEN_AI_OPERATION_NAME) == "chat"]
    (agent,) = [s for s in spans if s.attributes.get(genai.GEN_AI_OPERATION_NAME) == "invoke_agent"]
    assert len(chats) == 2
    for span in chats:
        missing = (CHAT_REQUIRED | CHAT_RECOMMENDED) - set(span.attributes)
        assert not missing, f"{span.name} lacks {sorted(missing)}"
        assert span.attributes[PROVIDER] == "openai" and span.attributes[PROVIDER] in WELL_KNOWN
        assert (span.attributes[ADDRESS], span.attributes[PORT]) == ("127.0.0.1", port)
        assert span.attributes[genai.GEN_AI_RESPONSE_MODEL] == "gpt-4.1-mini-2025-04-14"  # the snapshot answered
        assert span.attributes[genai.GEN_AI_RESPONSE_ID].startswith("chatcmpl-")
    assert [tuple(s.attributes[genai.GEN_AI_RESPONSE_FINISH_REASONS]) for s in chats] == [("tool_calls",), ("stop",)]
    assert chats[0].attributes[genai.GEN_AI_RESPONSE_ID] != chats[1].attributes[genai.GEN_AI_RESPONSE_ID]
    missing = (AGENT_REQUIRED | AGENT_RECOMMENDED) - set(agent.attributes)
    assert not missing, f"{agent.name} lacks {sorted(missing)}"
    assert (agent.attributes[PROVIDER], agent.attributes[ADDRESS], agent.attributes[PORT]) == ("openai", "127.0.0.1",
                                                                                                 port)


@pytest.mark.parametrize(("make", "provider", "address"), [
    (lambda: u.OpenAIModel("claude-3-5-haiku", base_url="https://api.anthropic.com/v1/", api_key="k"), "anthropic",
     "api.anthropic.com"),
    (lambda: u.OpenAIModel("gpt-4o", base_url="https://res.openai.azure.com/openai/v1", api_key="k"),
     "azure.ai.openai", "res.openai.azure.com"),
    (lambda: u.OpenAIModel("deepseek-chat", base_url="https://api.deepseek.com", api_key="k"), "deepseek",
     "api.deepseek.com"),
    (lambda: u.ScriptedModel(lambda m, t: "done"), "unity_nb.scripted", None),
])
async def test_the_provider_is_named_from_the_models_server(make, provider, address, tmp_path):
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    bus = u.EventBus()
    model = make()
    if isinstance(model, u.OpenAIModel):  # replayed from an empty recording: nothing is sent anywhere
        (tmp_path / "empty.jsonl").write_text("")
        model = u.CachedModel(model, tmp_path / "empty.jsonl", mode="replay")
    with u.trace(tracer_provider=tracer_provider, bus=bus):
        h = u.start_loop("Say hello.", model=model, bus=bus)
        try:
            await asyncio.wait_for(h.result(), 10)
        except u.UnityError:
            pass
    spans = exporter.get_finished_spans()
    assert {s.attributes[genai.GEN_AI_OPERATION_NAME] for s in spans} == {"invoke_agent", "chat"}
    for span in spans:
        assert span.attributes[PROVIDER] == provider
        assert span.attributes.get(ADDRESS) == address
        if address is not None:
            assert provider in WELL_KNOWN and span.attributes[PORT] == 443
