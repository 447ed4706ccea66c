"""What a loop makes of providers' replies: reasoning shown as the model's thinking (streamed, in the
transcript and the events, never sent back) and a refusal shown as a refusal. Streams are the
providers' own formats (``provider_streams``) served over HTTP by ``wire_server``."""

from __future__ import annotations

import asyncio

import provider_streams as ps
import pytest
from wire_server import KEY, Serve, WireServer

import unity_nb as u
from unity_nb.events import ModelDelta, ModelResponse

T = 10.0


@pytest.fixture
async def server():
    async with WireServer() as srv:
        yield srv


@pytest.mark.parametrize("family", ["deepseek", "mistral", "openrouter", "vllm"])
async def test_reasoning_streams_as_thinking_and_lands_in_the_transcript_and_events(server, family):
    stream = ps.stream(family, "reasoning")
    server.serve(Serve.of(stream))
    async with u.OpenAIModel("m", base_url=server.url(), api_key=KEY, max_retries=0) as m:
        h = u.start_loop("think first", model=m)
        assert await asyncio.wait_for(h.result(), T) == stream.expect.content
    deltas = [e for e in h.events if isinstance(e, ModelDelta)]
    assert "".join(e.text for e in deltas if e.thinking) == stream.expect.thinking
    assert "".join(e.text for e in deltas if not e.thinking) == stream.expect.content
    response = next(e for e in h.events if isinstance(e, ModelResponse))
    assert response.thinking == stream.expect.thinking and response.refusal is None
    answer = h.transcript[-1]
    assert (answer.kind, answer.content, answer.thinking) == ("answer", stream.expect.content, stream.expect.thinking)
    assert h.state.streaming_thinking == ""  # nothing in flight any more


async def test_a_refusal_is_the_answer_marked_as_a_refusal(server):
    stream = ps.stream("openai", "refusal")
    server.serve(Serve.of(stream))
    async with u.OpenAIModel("m", base_url=server.url(), api_key=KEY, max_retries=0) as m:
        h = u.start_loop("do something bad", model=m)
        answer = await asyncio.wait_for(h.result(), T)
    assert answer == f"[refused] {stream.expect.refusal}"
    assert h.transcript[-1].error and h.transcript[-1].content == answer
    assert next(e for e in h.events if isinstance(e, ModelResponse)).refusal == stream.expect.refusal
