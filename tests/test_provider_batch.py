"""u.map(..., via="batch") / %unity map --via batch: a map through the provider's Batch API, against a loopback
server implementing the documented endpoints and states (tests/batch_server.py), on both request paths."""

import asyncio
import json

import openai
import pandas as pd
import pytest
from batch_server import BatchServer

import unity_nb as u


@pytest.fixture
async def server():
    async with BatchServer() as s:
        yield s


def model_for(server, path):
    if path == "client":  # a client handed in: the client's own files and batches methods
        return u.OpenAIModel("gpt-4.1-mini", client=openai.AsyncOpenAI(api_key="sk-test", base_url=server.url))
    return u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test")


async def test_the_server_speaks_the_documented_shapes_to_the_openai_package(server):
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.url)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    f = await client.files.create(file=("in.jsonl", json.dumps(line).encode() + b"\n"), purpose="batch")
    assert f.purpose == "batch" and f.status == "processed"
    server.hold = True
    b = await client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert b.status == "validating" and b.request_counts.total == 1
    b = await client.batches.retrieve(b.id)
    assert b.status == "in_progress"
    b = await client.batches.cancel(b.id)
    assert b.status == "cancelling"
    server.cancel_finishes = 1
    b = await client.batches.retrieve(b.id)
    assert b.status == "cancelled" and b.output_file_id and b.request_counts.completed == 1
    out = json.loads((await client.files.content(b.output_file_id)).content)
    assert out["custom_id"] == "a" and out["response"]["body"]["choices"][0]["message"]["content"] == "answer to: hi"


@pytest.mark.parametrize("path", ["aiohttp", "client"])
async def test_a_thousand_rows_come_back_on_the_input_index_with_no_live_call(server, bus, path):
    items = pd.Series([f"item {i}" for i in range(1000)], index=[f"k{i}" for i in range(1000)], name="text")
    h = u.map(items, "Say {text}", model=model_for(server, path), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 30)
    assert list(result.index) == list(items.index)
    assert result["k7"] == "answer to: Say item 7" and result["k999"] == "answer to: Say item 999"
    assert server.live_calls == 0 and server.uploads == 1 and server.creates == 1
    assert h.progress["done"] == 1000 and h.progress["provider_batch"]["completed"] == 1000
    stages = [e.stage for e in h.events if e.kind == "provider_batch"]
    assert stages[:2] == ["uploaded", "created"] and stages[-1] == "ended"
    assert h.rows.counts["finished"] == 1000
