"""A provider batch is created once: a create whose answer was lost (the connection dropped after the provider
recorded it) is not sent again blind, which would start a second batch, billed too; the provider's list of batches
(``GET /v1/batches``) is read for the one carrying the create's tag, and that one is followed."""

import asyncio

import openai
import pytest
from batch_server import BatchServer

import unity_nb as u


@pytest.fixture
async def server():
    async with BatchServer() as s:
        yield s


@pytest.fixture
async def model_of(server):
    clients: list = []

    def make(path):
        if path == "client":  # a client handed in: its own files and batches methods
            clients.append(openai.AsyncOpenAI(api_key="sk-test", base_url=server.url))
            return u.OpenAIModel("gpt-4.1-mini", client=clients[-1], backoff=0.01)
        return u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", backoff=0.01)

    yield make
    for c in clients:
        await c.close()


@pytest.mark.parametrize("path", ["aiohttp", "client"])
async def test_a_create_whose_answer_was_lost_adopts_the_batch_the_provider_made(server, bus, model_of, path):
    server.lose_creates = 1
    items = [f"item {i}" for i in range(5)]
    h = u.map(items, "Say {value}", model=model_of(path), via="batch", batch_poll=0.01, bus=bus)
    result = await asyncio.wait_for(h.result(), 30)
    assert server.creates == 1  # one provider batch, not two billed
    assert list(result) == [f"answer to: Say item {i}" for i in range(5)]
    (made,) = server.batches.values()
    assert made["metadata"]["unity_nb"] == h.name and made["metadata"]["unity_nb_create"]
    created = [e for e in h.events if e.kind == "provider_batch" and e.stage == "created"]
    assert [e.batch_id for e in created] == [made["id"]]


async def test_a_lost_create_whose_batches_cannot_be_listed_is_not_sent_again_and_says_so(server, bus, model_of):
    server.lose_creates = 1
    server.list_status = 403
    h = u.map(["a", "b"], "Say {value}", model=model_of("aiohttp"), via="batch", batch_poll=0.01, bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(h.result(), 30)
    assert server.creates == 1
    (made,) = server.batches.values()
    reasons = h.results().attrs["reasons"]
    assert len(reasons) == 2
    for reason in reasons.values():
        assert "not sent again" in reason and made["metadata"]["unity_nb_create"] in reason
