"""The OpenAI-compatible model over real HTTP: the real ``openai`` client talks to a fake server.

Everything synchronises on loop events or on the server's own signals (``wait_for_requests``,
``wait_for_disconnects``), always with a timeout; nothing waits a fixed time and nothing
asserts on durations.
"""

import asyncio
import json
import math
from typing import Any

import openai
import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u
from unity_nb.models import ModelRequest, retry_hook

KEY = "sk-test-123456789"
T = 10.0  # every wait is bounded by this


@pytest.fixture
async def server():
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture(params=[True, False], ids=["lean-http", "client.post"])
async def make_model(server, request):
    """OpenAIModel factory pointed at the server, over both request paths; closes every client it made."""
    made = []

    def make(**kw):
        kw.setdefault("backoff", 0.001)  # keep retries quick; nothing asserts on time
        kw.setdefault("fast_path", request.param)
        m = u.OpenAIModel("m", base_url=server.base_url, api_key=KEY, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        await m.close()


def ask(text="hi"):
    return ModelRequest(messages=[{"role": "user", "content": text}])


def lookup(key: str) -> str:
    """Return the stored value for key."""
    return {"a": "1", "b": "2"}[key]


def retries(h):
    return [e for e in h.events if e.kind == "model_retry"]


# ------------------------------------------------------------------ streaming and assembly


async def test_streams_text_in_pieces_with_usage(server, make_model):
    server.script([R("Hello, streaming world", chunks=4, usage=(11, 4))])
    pieces: list[str] = []
    reply = await make_model().complete(ask("say hello"), on_delta=pieces.append)
    assert len(pieces) == 4 and all(pieces)
    assert "".join(pieces) == "Hello, streaming world"
    assert reply.content == "Hello, streaming world"
    assert reply.tool_calls == []
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (11, 4)
    assert reply.finish_reason == "stop"
    assert reply.model == "m"
    assert len(server.requests) == 1
    body = server.requests[0]
    assert body["model"] == "m"
    assert body["messages"] == [{"role": "user", "content": "say hello"}]
    assert body["stream"] is True
    assert "tools" not in body
    assert server.request_headers[0]["authorization"] == f"Bearer {KEY}"


async def test_model_usage_accumulates_over_calls(server, make_model):
    server.script([R("one", usage=(3, 1)), R("two", usage=(5, 2))])
    m = make_model()
    await m.complete(ask("a"))
    await m.complete(ask("b"))
    assert (m.usage.input_tokens, m.usage.output_tokens) == (8, 3)


async def test_tool_call_deltas_are_assembled(server, make_model):
    args_a = json.dumps({"key": "a", "note": "split across several chunks"})
    args_b = json.dumps({"key": "b", "items": [1, 2, 3], "nested": {"x": "y"}})
    server.script([
        R(tool_calls=[{"name": "lookup", "arguments": args_a, "id": "call_A"},
                      {"name": "other_tool", "arguments": args_b, "id": "call_B"}], chunks=5)
    ])
    pieces: list[str] = []
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    req = ModelRequest(messages=[{"role": "user", "content": "go"}], tools=tools, tool_choice="required")
    reply = await make_model().complete(req, on_delta=pieces.append)
    assert pieces == [] and reply.content is None
    assert [(c.id, c.name) for c in reply.tool_calls] == [("call_A", "lookup"), ("call_B", "other_tool")]
    assert [json.loads(c.arguments) for c in reply.tool_calls] == [json.loads(args_a), json.loads(args_b)]
    assert [c.arguments for c in reply.tool_calls] == [args_a, args_b]
    assert reply.finish_reason == "tool_calls"
    body = server.requests[0]
    assert body["tools"] == tools and body["tool_choice"] == "required"


async def test_options_go_into_the_request(server, make_model):
    server.script([R("ok")])
    req = ask("x")
    req.options = {"max_tokens": 7}
    await make_model(options={"temperature": 0.25}).complete(req)
    body = server.requests[0]
    assert body["temperature"] == 0.25 and body["max_tokens"] == 7


# ------------------------------------------------------------------ a full loop


async def test_full_loop_with_a_python_tool(server, make_model, bus):
    server.script([
        R(tool_calls=[{"name": "lookup", "arguments": '{"key": "a"}', "id": "call_1"}]),
        R("the value of a is 1"),
    ])
    h = u.start_loop("What is a?", model=make_model(), tools=[lookup], bus=bus)
    assert await h.result() == "the value of a is 1"
    assert h.status == "finished"
    assert len(server.requests) == 2
    first, second = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["lookup"]
    assert first["messages"][-1] == {"role": "user", "content": "What is a?"}
    assistant = second["messages"][-2]
    assert assistant["role"] == "assistant"
    assert assistant["tool_calls"][0]["id"] == "call_1"
    assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"key": "a"}'}
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "1"}
    assert h.usage.input_tokens > 0 and h.usage.output_tokens > 0
    deltas = "".join(e.text for e in h.events if isinstance(e, u.events.ModelDelta))
    assert deltas == "the value of a is 1"


# ------------------------------------------------------------------ retries and failures


async def test_429_with_retry_after_is_retried_in_a_loop(server, make_model, bus):
    server.script([R(status=429, headers={"retry-after": "0.01"}), R("after the wait")])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    assert await h.result() == "after the wait"
    assert len(server.requests) == 2
    ev: Any = await h.wait_for("model_retry", timeout=T)
    assert ev.attempt == 1
    assert ev.delay == 0.01
    assert "429" in ev.error and KEY not in ev.error
    assert len(retries(h)) == 1


async def test_retry_hook_is_called_with_the_retry_after_delay(server, make_model):
    server.script([R(status=429, headers={"retry-after-ms": "20"}), R(status=429, headers={"retry-after": "0.01"}),
                   R("ok")])
    seen = []
    token = retry_hook.set(lambda attempt, error, delay: seen.append((attempt, delay)))
    try:
        reply = await make_model().complete(ask())
    finally:
        retry_hook.reset(token)
    assert reply.content == "ok"
    assert seen == [(1, 0.02), (2, 0.01)]
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "value, expected",
    [
        ("soon", None),  # unparseable: our own backoff, but still a retry (was: ValueError escaped)
        ("nan", None),  # was: sleep(nan), which never returns
        ("-5", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # a date in the past
    ],
)
async def test_odd_retry_after_values_still_retry(server, make_model, value, expected):
    server.script([R(status=429, headers={"retry-after": value}), R("ok")])
    seen = []
    token = retry_hook.set(lambda attempt, error, delay: seen.append(delay))
    try:
        reply = await asyncio.wait_for(make_model().complete(ask()), T)
    finally:
        retry_hook.reset(token)
    assert reply.content == "ok"
    assert len(seen) == 1 and math.isfinite(seen[0]) and seen[0] >= 0
    if expected is not None:
        assert seen[0] == expected


async def test_500_then_success(server, make_model, bus):
    server.script([R(status=500), R("recovered")])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    assert await h.result() == "recovered"
    assert len(server.requests) == 2
    assert [e.attempt for e in retries(h)] == [1]


async def test_500_forever_fails_the_loop_with_model_error(server, make_model, bus):
    server.handler = lambda body: R(status=500)
    h = u.start_loop("hi", model=make_model(max_retries=1), bus=bus)
    with pytest.raises(u.ModelError) as err:
        await h.result()
    assert h.status == "failed"
    assert len(server.requests) == 2
    msg = str(err.value)
    assert "500" in msg and "2 attempt" in msg
    assert KEY not in msg
    failed: Any = await h.wait_for("loop_failed", timeout=T)
    assert KEY not in failed.error
    assert all(KEY not in e.error for e in retries(h))


async def test_400_is_not_retried(server, make_model, bus):
    server.script([R(status=400), R("never sent")])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    with pytest.raises(u.ModelError, match="400"):
        await h.result()
    assert h.status == "failed"
    assert len(server.requests) == 1
    assert retries(h) == []


async def test_connection_refused_is_a_model_error(bus):
    # a port that was just free: nothing listens there any more
    srv = FakeOpenAIServer()
    async with srv:
        url = srv.base_url
    m = u.OpenAIModel("m", base_url=url, api_key=KEY, max_retries=1, backoff=0.001)
    try:
        h = u.start_loop("hi", model=m, bus=bus)
        with pytest.raises(u.ModelError) as err:
            await h.result()
        assert KEY not in str(err.value)
        assert len(retries(h)) == 1
    finally:
        await m.client.close()


async def test_dropped_stream_is_retried_and_partial_text_discarded(server, make_model, bus):
    # chunk 0 is the role delta; chunks 1-2 carry text, then the connection is cut
    server.script([R("PARTIAL-TEXT-DISCARDED", chunks=4, drop_after_chunks=3), R("the retried reply")])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    assert await h.result() == "the retried reply"
    assert len(server.requests) == 2
    retry: Any = await h.wait_for("model_retry", timeout=T)
    assert retry.attempt == 1
    assert h.state.streaming_text == ""
    # the partial text did stream before the drop, and the retry came after it
    partial = [e for e in h.events if isinstance(e, u.events.ModelDelta) and e.seq < retry.seq]
    assert partial and "".join(e.text for e in partial) in "PARTIAL-TEXT-DISCARDED"
    after = [e for e in h.events if isinstance(e, u.events.ModelDelta) and e.seq > retry.seq]
    assert "".join(e.text for e in after) == "the retried reply"
    response: Any = await h.wait_for("model_response", timeout=T)
    assert response.content == "the retried reply"
    assert h.transcript[-1].content == "the retried reply"


async def test_streaming_text_is_reset_by_the_retry(server, make_model, bus):
    server.script([R("PARTIAL", chunks=4, drop_after_chunks=3), R("final", first_byte_delay=30)])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    await h.wait_for("model_retry", timeout=T)
    assert h.state.streaming_text == ""  # the partial text of the dropped attempt is gone
    await server.wait_for_requests(2, timeout=T)
    await h.stop("done looking")
    with pytest.raises(u.Stopped):
        await h.result()


# ------------------------------------------------------------------ cancellation and interjection


async def test_stop_closes_the_http_request(server, make_model, bus):
    server.script([R("too late", first_byte_delay=30)])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    await h.wait_for("model_request", timeout=T)
    await server.wait_for_requests(1, timeout=T)
    await h.stop("enough")
    with pytest.raises(u.Stopped) as err:
        await h.result()
    assert err.value.reason == "enough"
    assert h.status == "stopped"
    await server.wait_for_disconnects(1, timeout=T)
    assert server.disconnects == 1
    assert len(server.requests) == 1


async def test_interjection_interrupts_the_request_and_reissues(server, make_model, bus):
    server.script([R("stale answer", first_byte_delay=30), R("answer with d")])
    h = u.start_loop("list a, b, c", model=make_model(), bus=bus)
    await server.wait_for_requests(1, timeout=T)
    await h.interject("also d")
    await server.wait_for_requests(2, timeout=T)
    last = server.requests[1]["messages"][-1]
    assert last["role"] == "user" and "also d" in last["content"]
    assert not any("also d" in str(m.get("content")) for m in server.requests[0]["messages"])
    await server.wait_for_disconnects(1, timeout=T)
    assert server.disconnects >= 1
    assert await h.result() == "answer with d"
    interrupted: Any = await h.wait_for("model_response", lambda e: getattr(e, "interrupted", False), timeout=T)
    assert interrupted.step == 1
    assert len(server.requests) == 2


# A long stream of small paced chunks (a minute in all): the test acts on the first delta, so the
# stream is certainly still open; nothing here depends on the pacing beyond that.
LONG = "abcdefghij" * 30


def long_stream():
    return R(LONG, chunks=len(LONG), chunk_delay=0.2)


async def test_stop_mid_stream_closes_the_stream(server, make_model, bus):
    server.script([long_stream()])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    await h.wait_for("model_delta", timeout=T)
    assert h.state.streaming_text and LONG.startswith(h.state.streaming_text)
    await h.stop("seen enough")
    with pytest.raises(u.Stopped):
        await h.result()
    await server.wait_for_disconnects(1, timeout=T)
    assert server.disconnects == 1
    # no whole reply: only what had streamed, kept and marked as cut off
    responses = [e for e in h.events if e.kind == "model_response"]
    assert [e.interrupted for e in responses] == [True] and LONG.startswith(responses[0].content)
    assert [m.content for m in h.transcript if m.kind == "interrupted"] == [responses[0].content]


async def test_interjection_mid_stream_reissues_and_keeps_the_partial_text(server, make_model, bus):
    server.script([long_stream(), R("fresh answer")])
    h = u.start_loop("hi", model=make_model(), bus=bus)
    await h.wait_for("model_delta", timeout=T)
    await h.interject("change of plan")
    assert await h.result() == "fresh answer"
    interrupted: Any = await h.wait_for("model_response", lambda e: getattr(e, "interrupted", False), timeout=T)
    assert interrupted.content and LONG.startswith(interrupted.content)
    await server.wait_for_disconnects(1, timeout=T)
    assert len(server.requests) == 2
    assert "change of plan" in server.requests[1]["messages"][-1]["content"]


# ------------------------------------------------------------------ configuration


def test_no_key_and_no_server_names_every_way_out(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(u.ModelConfigError) as err:
        u.OpenAIModel("m")
    msg = str(err.value)
    for word in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "api_key", "base_url"):
        assert word in msg


async def test_repr_never_shows_the_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    client = openai.AsyncOpenAI(api_key=KEY, base_url="http://127.0.0.1:9/v1")
    models = [
        u.OpenAIModel("m"),
        u.OpenAIModel("m", api_key=KEY, base_url="http://127.0.0.1:9/v1"),
        u.OpenAIModel("m", client=client),
    ]
    for m in models:
        assert KEY not in repr(m) and KEY not in str(m)
        assert "'m'" in repr(m)
    for m in models:
        await m.client.close()
    await client.close()


def test_sync_client_is_refused():
    client = openai.OpenAI(api_key=KEY, base_url="http://127.0.0.1:9/v1")
    try:
        with pytest.raises(u.ModelConfigError, match="AsyncOpenAI") as err:
            u.OpenAIModel("m", client=client)
        assert KEY not in str(err.value)
    finally:
        client.close()


async def test_a_ready_async_client_is_used(server):
    server.script([R("via client")])
    client = openai.AsyncOpenAI(api_key=KEY, base_url=server.base_url, max_retries=5)
    m = u.OpenAIModel("m", client=client)
    try:
        assert (await m.complete(ask())).content == "via client"
        assert server.request_headers[0]["authorization"] == f"Bearer {KEY}"
    finally:
        await m.client.close()
        await client.close()


# ------------------------------------------------------------------ record / replay


async def test_cached_model_records_then_replays_offline(server, make_model, tmp_path, monkeypatch):
    monkeypatch.delenv("UNITY_NB_CACHE_MODE", raising=False)
    path = tmp_path / "c.json"
    server.script([
        R("recorded answer", usage=(9, 3)),
        R(tool_calls=[{"name": "lookup", "arguments": '{"key": "b"}', "id": "call_X"}]),
    ])
    recorder = u.CachedModel(make_model(), path)
    first = await recorder.complete(ask("what is the answer?"))
    tools_req = ModelRequest(messages=[{"role": "user", "content": "use a tool"}],
                             tools=[{"type": "function",
                                     "function": {"name": "lookup", "parameters": {"type": "object"}}}])
    first_tools = await recorder.complete(tools_req)
    assert len(server.requests) == 2
    assert first.content == "recorded answer"
    # auto mode replays a hit without calling the server
    assert await recorder.complete(ask("what is the answer?")) == first
    assert len(server.requests) == 2

    replayer = u.CachedModel(make_model(), path, mode="replay")
    pieces: list[str] = []
    again = await replayer.complete(ask("what is the answer?"), on_delta=pieces.append)
    assert again == first
    assert "".join(pieces) == "recorded answer"
    assert await replayer.complete(tools_req) == first_tools
    assert first_tools.tool_calls[0].id == "call_X"
    assert len(server.requests) == 2

    with pytest.raises(u.CacheMiss) as err:
        await replayer.complete(ask("a question never recorded"))
    assert "never recorded" in str(err.value)
    assert len(server.requests) == 2

    text = path.read_text(encoding="utf-8")
    assert KEY not in text and "Bearer" not in text


async def test_cached_model_replays_a_whole_loop(server, make_model, tmp_path, bus):
    path = tmp_path / "c.json"
    server.script([
        R(tool_calls=[{"name": "lookup", "arguments": '{"key": "a"}', "id": "call_1"}]),
        R("a is 1"),
    ])
    cached = u.CachedModel(make_model(), path, mode="auto")
    assert await u.start_loop("What is a?", model=cached, tools=[lookup], bus=bus) == "a is 1"
    assert len(server.requests) == 2
    replay = u.CachedModel(make_model(), path, mode="replay")
    assert await u.start_loop("What is a?", model=replay, tools=[lookup], bus=bus) == "a is 1"
    assert (replay.hits, len(server.requests)) == (2, 2)
    assert KEY not in path.read_text(encoding="utf-8")


async def test_an_error_inside_the_stream_is_retried(server, make_model):
    server.script([R(content="partial text here", stream_error_after=2), R(content="complete reply")])
    h = u.start_loop("go", model=make_model())
    assert await asyncio.wait_for(h.result(), 10) == "complete reply"
    assert len(retries(h)) == 1 and KEY not in retries(h)[0].error
    assert len(server.requests) == 2


REFUSED = {
    "context_length_exceeded": {"message": "This model's maximum context length is 8192 tokens.", "param": "messages",
                                "type": "invalid_request_error", "code": "context_length_exceeded"},
    "invalid_api_key": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                        "code": "invalid_api_key"},
    "invalid_request_error": {"message": "Unrecognized request argument supplied: x",
                              "type": "invalid_request_error", "code": None},
}


@pytest.mark.parametrize("code", list(REFUSED))
async def test_an_error_inside_the_stream_that_refuses_the_request_is_not_retried(server, make_model, code):
    """A code that says the request itself is bad was retried as if it passed: the same request, refused again."""
    error = REFUSED[code]
    server.script([R(content="partial text here", stream_error_after=2, stream_error=error), R("never asked for")])
    with pytest.raises(u.ModelError) as err:
        await asyncio.wait_for(make_model().complete(ask()), T)
    said = str(err.value)
    assert repr(code) in said and error["message"] in said and "not retried" in said and KEY not in said
    assert len(server.requests) == 1


@pytest.mark.parametrize("error", [
    {"message": "The server had an error processing your request.", "type": "server_error", "code": "server_error"},
    {"message": "Rate limit reached for requests.", "type": "requests", "code": "rate_limit_exceeded"},
    {"message": "Overloaded", "type": "overloaded_error"},
    {"message": "The model is overloaded.", "status": "UNAVAILABLE"},
], ids=["server_error", "rate_limit_exceeded", "overloaded_error", "UNAVAILABLE"])
async def test_an_error_inside_the_stream_that_passes_is_retried(server, make_model, error):
    server.script([R(content="partial text here", stream_error_after=2, stream_error=error), R("complete reply")])
    reply = await asyncio.wait_for(make_model().complete(ask()), T)
    assert reply.content == "complete reply" and len(server.requests) == 2


async def test_the_tokens_a_failed_attempt_was_counted_are_in_the_reply_and_the_models_usage(server, make_model):
    """An attempt the provider counted (its usage came) and that then failed was retried, and its tokens lost."""
    # its usage came (some servers send it before the end), then the connection broke before its finish_reason
    server.script([R("the first, cut before its end", usage=(30, 7), omit_finish=True, drop_before_done=True),
                   R("the whole answer", usage=(31, 5))])
    m = make_model()
    h = u.start_loop("go", model=m)
    assert await asyncio.wait_for(h.result(), T) == "the whole answer"
    assert len(retries(h)) == 1 and len(server.requests) == 2
    [response] = [e for e in h.events if e.kind == "model_response"]
    assert (response.input_tokens, response.output_tokens) == (61, 12)
    assert any("1 failed attempt" in w and "30 tokens in and 7 out" in w for w in response.warnings)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (61, 12)
    assert (h.usage.input_tokens, h.usage.output_tokens) == (61, 12)


async def test_the_tokens_of_attempts_that_all_failed_are_in_the_models_usage_and_said(server, make_model):
    server.script([R("cut before its end", usage=(30, 7), omit_finish=True, drop_before_done=True)])
    m = make_model(max_retries=0)
    with pytest.raises(u.ModelError) as err:
        await asyncio.wait_for(m.complete(ask()), T)
    assert "counted 30 tokens in and 7 out for 1 of the failed attempts" in str(err.value)
    assert (m.usage.input_tokens, m.usage.output_tokens) == (30, 7)


async def test_a_stream_that_breaks_off_after_its_finish_reason_is_used_not_asked_again(server, make_model):
    """The reply ended (its finish_reason and usage came), then the connection broke before [DONE]: asked again, it
    was paid for twice."""
    server.script([R("the whole answer", usage=(30, 7), drop_before_done=True), R("never asked for")])
    m = make_model()
    h = u.start_loop("go", model=m)
    assert await asyncio.wait_for(h.result(), T) == "the whole answer"
    assert retries(h) == [] and len(server.requests) == 1
    [response] = [e for e in h.events if e.kind == "model_response"]
    assert (response.input_tokens, response.output_tokens) == (30, 7)
    assert any("broke off after its finish_reason" in w for w in response.warnings)


async def test_a_failed_attempt_without_usage_adds_nothing_it_cannot_know(server, make_model):
    server.script([R(content="partial text here", drop_after_chunks=2), R("the whole answer", usage=(31, 5))])
    m = make_model()
    reply = await asyncio.wait_for(m.complete(ask()), T)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (31, 5) and reply.warnings == []
    assert (m.usage.input_tokens, m.usage.output_tokens) == (31, 5)


async def test_a_stream_that_ends_cleanly_without_a_finish_reason_is_accepted(server, make_model):
    server.script([R(content="all of it", omit_finish=True), R(content="never asked for")])
    h = u.start_loop("go", model=make_model())
    assert await asyncio.wait_for(h.result(), T) == "all of it"
    assert retries(h) == [] and len(server.requests) == 1


async def test_a_stale_keep_alive_connection_is_replaced_without_a_retry(server, make_model):
    m = make_model()
    server.script([R(content="first", close_after=True), R(content="second")])
    assert await asyncio.wait_for(u.start_loop("a", model=m).result(), T) == "first"
    h = u.start_loop("b", model=m)  # its pooled connection was closed by the server meanwhile
    assert await asyncio.wait_for(h.result(), T) == "second"
    assert retries(h) == []


async def test_the_request_deadline_ends_a_hung_call_and_it_is_retried(server, make_model):
    m = make_model(timeout=0.5)
    server.script([R(content="never", first_byte_delay=30), R(content="after the deadline")])
    h = u.start_loop("go", model=m)
    assert await asyncio.wait_for(h.result(), T) == "after the deadline"
    assert len(retries(h)) == 1


async def test_an_error_status_whose_body_stalls_is_said_with_its_status_and_not_retried_if_it_says_so(
        server, make_model):
    """A status whose body then stalled ended as "no progress": its status lost, and a 400 retried as if it passed
    (on both paths: the openai client unity_nb makes read an error's body itself, out of reach, before raising)."""
    server.script([R(status=400, stall_body=True), R("never asked for")])
    m = make_model(timeout=0.5)
    with pytest.raises(u.ModelError) as err:
        await asyncio.wait_for(m.complete(ask()), T)
    assert err.value.status == 400 and "HTTP 400" in str(err.value) and "stalled" in str(err.value)
    assert "fake error" in str(err.value)  # what arrived of the body is said
    assert len(server.requests) == 1


async def test_a_retried_status_whose_body_stalls_is_retried_and_named(server, make_model):
    server.script([R(status=503, stall_body=True), R(status=429, stall_body=True, headers={"retry-after": "0"}),
                   R("after the stalls")])
    seen: list[str] = []
    token = retry_hook.set(lambda attempt, error, delay: seen.append(error))
    try:
        reply = await asyncio.wait_for(make_model(timeout=0.5).complete(ask()), T)
    finally:
        retry_hook.reset(token)
    assert reply.content == "after the stalls" and len(seen) == 2
    assert "503" in seen[0] and "429" in seen[1] and all("stalled" in e for e in seen)


async def test_model_client_used_directly_keeps_the_openai_packages_own_errors(server):
    # the model's requests read an error status themselves (above); a person's own call through model.client does not
    import openai

    server.script([R(status=400)])
    async with u.OpenAIModel("m", base_url=server.base_url, api_key=KEY, fast_path=False) as m:
        with pytest.raises(openai.BadRequestError, match="fake error 400"):
            await asyncio.wait_for(m.client.chat.completions.create(model="m", messages=[]), T)


async def test_https_with_certificate_verification(tmp_path, monkeypatch):
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(  # noqa: ASYNC221 - a second's setup before the test's event loop work
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    async with FakeOpenAIServer(ssl=ctx) as srv:
        srv.script([R(content="over tls")])
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust our throwaway certificate
        m = u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY)
        assert srv.base_url.startswith("https://")
        assert await asyncio.wait_for(u.start_loop("go", model=m).result(), T) == "over tls"
        monkeypatch.delenv("SSL_CERT_FILE")  # an untrusted certificate is refused, and said so
        m2 = u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, max_retries=0)
        h = u.start_loop("go", model=m2)
        with pytest.raises(u.ModelError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await asyncio.wait_for(h.result(), T)
