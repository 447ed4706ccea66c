"""CachedModel's key holds what besides a request decides a reply: the wrapped model's own options
(``OpenAIModel(options=...)``, a temperature) and its server (its base URL), so a recording made at one
temperature or server is not replayed for another. A recording made before the key held them (the committed
replay of notebooks/05_reproducible_runs) still replays for a model with neither, and is refused, saying why,
for one with either."""

import shutil
from pathlib import Path

import pytest
from fake_openai import FakeOpenAIServer

import unity_nb as u
from notebooks.replays.record_05 import TASK, forecast
from unity_nb.models import ModelRequest

DEMO = Path(__file__).resolve().parents[1] / "notebooks" / "replays" / "05_demo.json"


@pytest.fixture
async def servers():
    one = await FakeOpenAIServer(lambda body: f"from one at {body.get('temperature')}").start()
    two = await FakeOpenAIServer(lambda body: f"from two at {body.get('temperature')}").start()
    yield one, two
    await one.stop()
    await two.stop()


def ask() -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": "Is it going to rain?"}])


async def test_a_recording_is_replayed_only_at_its_options_and_its_server(servers, tmp_path):
    one, two = servers
    path = tmp_path / "replay.jsonl"
    models = []

    def model(server, **options):
        models.append(u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test",
                                    options=options or None))
        return models[-1]

    try:
        recorded = await u.CachedModel(model(one, temperature=0), path, mode="auto").complete(ask())
        assert recorded.content == "from one at 0"
        same = await u.CachedModel(model(one, temperature=0), path, mode="replay").complete(ask())
        assert same.content == "from one at 0"
        for other in (model(one, temperature=1), model(one), model(two, temperature=0)):
            with pytest.raises(u.CacheMiss):
                await u.CachedModel(other, path, mode="replay").complete(ask())
        hot = await u.CachedModel(model(one, temperature=1), path, mode="auto").complete(ask())
        assert hot.content == "from one at 1"  # asked, not the recording made at 0
        assert len(one.requests) == 2 and not two.requests
    finally:
        for m in models:
            await m.close()


async def test_a_recording_made_before_the_key_held_options_replays_for_a_model_with_none(tmp_path):
    path = tmp_path / "05_demo.json"
    shutil.copy(DEMO, path)
    plain = u.OpenAIModel("gpt-4.1-mini", api_key="unused: replay never calls the model")
    try:
        answer = await u.start_loop(TASK, model=u.CachedModel(plain, path, mode="replay"), tools=[forecast])
        assert answer.startswith("Pack it for Paris")
    finally:
        await plain.close()


async def test_a_recording_made_before_the_key_held_options_is_refused_for_a_model_with_them(tmp_path):
    path = tmp_path / "05_demo.json"
    shutil.copy(DEMO, path)
    warm = u.OpenAIModel("gpt-4.1-mini", api_key="unused", options={"temperature": 0.9})
    try:
        h = u.start_loop(TASK, model=u.CachedModel(warm, path, mode="replay"), tools=[forecast])
        with pytest.raises(u.CacheMiss, match="temperature") as err:
            await h.result()
        assert "re-record" in str(err.value).lower()
    finally:
        await warm.close()
