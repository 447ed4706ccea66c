"""What the model layer must not get silently wrong: a cut-off reply is not recorded as a whole one, a chunk of
the wrong shape is a ModelError saying so, a base URL that cannot work is refused when the model is made, and an
error answer names the address it came from.

Everything synchronises on the server's own signals, always with a timeout; nothing asserts on durations.
"""

import asyncio

import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u
from unity_nb.models import ModelRequest

KEY = "sk-test-123456789"
T = 10.0


@pytest.fixture
async def server():
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture(params=[True, False], ids=["lean-http", "client.post"])
async def make_model(server, request):
    made = []

    def make(**kw):
        kw.setdefault("backoff", 0.001)
        kw.setdefault("fast_path", request.param)
        m = u.OpenAIModel("m", base_url=server.base_url, api_key=KEY, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        await m.close()


def ask(text="hi"):
    return ModelRequest(messages=[{"role": "user", "content": text}])


async def test_a_reply_cut_off_is_not_recorded_and_is_asked_again(server, make_model, tmp_path, monkeypatch):
    monkeypatch.delenv("UNITY_NB_CACHE_MODE", raising=False)
    path = tmp_path / "c.jsonl"
    server.script([R("half of the ans", omit_finish=True, omit_done=True), R("the whole answer")])
    cached = u.CachedModel(make_model(), path, mode="auto")
    first = await asyncio.wait_for(cached.complete(ask()), T)
    assert first.truncated and first.content == "half of the ans"
    second = await asyncio.wait_for(cached.complete(ask()), T)
    assert second.content == "the whole answer" and not second.truncated
    assert len(server.requests) == 2
    cached.save()
    replay = u.CachedModel(make_model(), path, mode="replay")
    assert (await replay.complete(ask())).content == "the whole answer"
