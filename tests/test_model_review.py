"""What the model layer must not get silently wrong: a cut-off reply is not recorded as a whole one, a chunk of
the wrong shape is a ModelError saying so, a base URL that cannot work is refused when the model is made, and an
error answer names the address it came from.

Everything synchronises on the server's own signals, always with a timeout; nothing asserts on durations.
"""

import asyncio
import json

import pytest
import test_openai_model
from fake_openai import Reply as R

import unity_nb as u

# the model's own tests' server, model factory (over both request paths) and request
server, make_model = test_openai_model.server, test_openai_model.make_model
ask, KEY, T = test_openai_model.ask, test_openai_model.KEY, test_openai_model.T


async def stream_error(stream: bytes, fast_path: bool) -> str:
    """The ModelError's text of one call to a server that answers ``stream`` (an event stream's bytes) whole."""

    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n"
                     b"content-length: %d\r\n\r\n" % len(stream) + stream)
        await writer.drain()
        writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        port = srv.sockets[0].getsockname()[1]
        model = u.OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0,
                              fast_path=fast_path)
        with pytest.raises(u.ModelError) as err:
            await asyncio.wait_for(model.complete(ask()), T)
        await model.close()
        return str(err.value)
    finally:
        srv.close()


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


async def test_one_batch_row_whose_reply_is_too_long_fails_alone(bus):
    from batch_server import BatchServer

    async with BatchServer() as server:
        server.answer = lambda body: {"role": "assistant", "content": (
            "x" * 5000 if body["messages"][-1]["content"] == "Say b" else "said")}
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.url, api_key="sk-test", max_reply_chars=1024)
        h = u.map(["a", "b", "c"], "Say {value}", model=model, via="batch", batch_poll=0.01, bus=bus)
        result = await asyncio.wait_for(h.result(), 20)
        assert result.tolist() == ["said", None, "said"]
        assert "max_reply_chars=1024" in result.attrs["reasons"][1]
        await model.close()


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean-http", "client.post"])
@pytest.mark.parametrize("choices", [5, True, {"index": 0}])
async def test_a_chunk_whose_choices_is_not_a_list_is_a_model_error_saying_so(fast_path, choices):
    body = json.dumps({"id": "c1", "choices": choices}).encode()
    assert "choices is not a list" in await stream_error(b"data: " + body + b"\n\ndata: [DONE]\n\n", fast_path)


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean-http", "client.post"])
def test_a_base_url_with_credentials_is_refused_without_showing_them(fast_path, monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(u.ModelConfigError, match="credentials") as err:
        u.OpenAIModel("m", base_url="http://alice:hunter2-password@127.0.0.1:9/v1", api_key=KEY, fast_path=fast_path)
    assert "hunter2-password" not in str(err.value) and "127.0.0.1:9" in str(err.value)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://alice:hunter2-password@127.0.0.1:9/v1")
    with pytest.raises(u.ModelConfigError, match="credentials") as err:
        u.OpenAIModel("m", api_key=KEY, fast_path=fast_path)
    assert "hunter2-password" not in str(err.value)


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean-http", "client.post"])
def test_a_base_url_with_a_query_is_refused_naming_it(fast_path):
    with pytest.raises(u.ModelConfigError, match=r"/v1\?api-version=2024-06-01. has a query"):
        u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1?api-version=2024-06-01", api_key=KEY, fast_path=fast_path)


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean-http", "client.post"])
async def test_a_404_names_the_address_it_came_from(fast_path):
    from aiohttp import web

    async def not_found(request):
        return web.Response(status=404, text="404 page not found")  # Ollama's words, at a base URL without /v1

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = site._server.sockets[0].getsockname()[1]
        model = u.OpenAIModel("m", base_url=f"http://127.0.0.1:{port}", api_key=KEY, fast_path=fast_path)
        with pytest.raises(u.ModelError) as err:
            await asyncio.wait_for(model.complete(ask()), T)
        assert err.value.status == 404
        assert f"http://127.0.0.1:{port}/chat/completions" in str(err.value) and KEY not in str(err.value)
        await model.close()
    finally:
        await runner.cleanup()


async def test_a_retry_after_past_the_cap_is_said_not_silently_shortened(server, make_model):
    server.script([R(status=429, headers={"retry-after": "3600"})])
    seen: list[tuple[int, str, float]] = []
    heard = asyncio.Event()

    def hook(attempt, error, delay):
        seen.append((attempt, error, delay))
        heard.set()

    token = u.models.retry_hook.set(hook)
    try:
        call = asyncio.ensure_future(make_model().complete(ask()))
        await asyncio.wait_for(heard.wait(), T)
        call.cancel()  # it would now wait the capped minute
        with pytest.raises(asyncio.CancelledError):
            await call
    finally:
        u.models.retry_hook.reset(token)
    [(attempt, error, delay)] = seen
    assert attempt == 1 and delay == 60.0
    assert "asked to wait 3600 s" in error and "at most 60 s" in error


async def test_the_last_429s_retry_after_is_in_the_model_error(server, make_model):
    server.script([R(status=429, headers={"retry-after": "3600"})])
    with pytest.raises(u.ModelError) as err:
        await asyncio.wait_for(make_model(max_retries=0).complete(ask()), T)
    assert err.value.status == 429 and "asked to wait 3600 s" in str(err.value)


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean-http", "client.post"])
async def test_a_data_line_that_is_not_utf8_is_said_to_be_so_not_said_to_be_not_json(fast_path):
    said = await stream_error(b'data: {"choices":[{"index":0,"delta":{"content":"caf\xe9"}}]}\n\ndata: [DONE]\n\n',
                              fast_path)
    assert "not UTF-8" in said and "not JSON" not in said
