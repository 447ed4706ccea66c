"""JSON nested too deep (issue 37, item 17). ``json.loads`` raises a RecursionError past Python's stack, which no
caller expected: a tool call whose arguments nest 100,000 deep read "cancelled" (the loop died), and a 500 whose body
is 70,000 ``[`` raised a RecursionError instead of being retried. Now JSON from outside nested more than 200 levels
is text that is not JSON like any other: the model is told (it must act), a hostile error body is an ordinary 5xx.
The wire tests run over real HTTP on 127.0.0.1 (raw sockets: the bytes are the ones written here)."""

import asyncio
import json

import pytest
from conftest import tool_messages
from test_wire_hostile import KEY, STREAM_HEAD, HostileServer, answer, ask, chunk

import unity_nb as u
from unity_nb.events import ModelRetry, ToolFinished
from unity_nb.models import ToolCall

T = 30.0
PATHS = pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
DEEP = "[" * 100_000 + "]" * 100_000


def lookup(key: str) -> str:
    """Look a key up."""
    return "found " + key


@pytest.mark.parametrize(
    ("how", "arguments"),
    [
        ("loop", '{"key": ' + DEEP + "}"),
        ("loop, parent context offered", '{"key": ' + DEEP + "}"),  # read before the tool's own check
        ("actor's JSON tool", '{"key": ' + DEEP + "}"),
        ("actor's JSON tool", DEEP),
    ],
)
async def test_a_tool_call_nested_too_deep_is_an_error_result_the_model_acts_on(how, arguments):
    seen: list[str] = []

    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return ToolCall(name="lookup", arguments=arguments)
        seen.append(done[0]["content"])
        return "told, and acting on it"

    model, bus = u.ScriptedModel(script), u.EventBus()
    if how.startswith("actor"):
        h = u.act("look it up", model=model, namespace={}, tools=[lookup], bus=bus)
    elif "parent context" in how:
        h = u.start_loop("look it up", model=model, tools=[lookup], bus=bus, parent_context="model")
    else:
        h = u.start_loop("look it up", model=model, tools=[lookup], bus=bus)
    assert await asyncio.wait_for(h.result(), T) == "told, and acting on it"
    (told,) = seen
    assert told.startswith("error: invalid arguments for lookup"), told
    assert "nested more than 200 levels deep" in told or "recursion limit exceeded" in told, told  # pydantic's
    (finished,) = [e for e in h.events if isinstance(e, ToolFinished)]
    assert finished.error and "cancelled" not in finished.result


def hostile_500(body: bytes):
    async def respond(writer, n):
        if n <= 2:
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
        else:
            await answer(writer, "the real answer")

    return respond


@PATHS
@pytest.mark.parametrize("body", [b"[" * 70_000, b'{"error": {"message": ' + b"[" * 900 + b"]" * 900 + b"}}"],
                         ids=["70,000 [", "an error message nested 900 deep"])
async def test_a_500_whose_body_nests_too_deep_is_retried_as_any_500(fast_path, body):
    async with HostileServer(hostile_500(body)) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, backoff=0.001) as m:
            h = u.start_loop("go", model=m)
            assert await asyncio.wait_for(h.result(), T) == "the real answer"
    retries = [e for e in h.events if isinstance(e, ModelRetry)]
    assert len(retries) == 2 and all("500" in r.error for r in retries)
    assert len(srv.requests) == 3


@PATHS
async def test_a_500_nested_too_deep_every_time_fails_saying_500_after_the_retries(fast_path):
    body = b"[" * 70_000

    async def respond(writer, n):
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, backoff=0.001,
                                 max_retries=2) as m:
            with pytest.raises(u.ModelError) as err:
                await asyncio.wait_for(m.complete(ask()), T)
    assert err.value.status == 500 and "after 3 attempt(s)" in str(err.value)
    assert len(str(err.value)) < 3000  # the body's text, cut: not 70,000 characters
    assert len(srv.requests) == 3


@PATHS
@pytest.mark.parametrize("where", ["a stream's data line", "a JSON body"])
async def test_a_reply_nested_too_deep_is_a_reply_that_is_not_json_not_a_recursion_error(fast_path, where):
    deep = b'{"choices": ' + b"[" * 70_000 + b"]" * 70_000 + b"}"

    async def respond(writer, n):
        if where == "a JSON body":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(deep), deep))
        else:
            writer.write(STREAM_HEAD + b"\r\n")
            writer.write(chunk(b"data: " + deep + b"\n\n") + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, backoff=0.001) as m:
            with pytest.raises(u.ModelError, match=r"not a Chat Completions stream: a .* not JSON") as err:
                await asyncio.wait_for(m.complete(ask()), T)
    assert err.value.status is None and len(str(err.value)) < 1000
    assert len(srv.requests) == 1  # as any reply that is not JSON: the same request would get the same


def test_json_nested_within_the_bound_reads_as_json_does():
    from unity_nb._json import MAX_DEPTH, loads

    within = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(within) == json.loads(within) and loads(within.encode()) == json.loads(within)
    many = json.dumps({"rows": [[i, {"a": [i]}] for i in range(1000)]})  # many brackets, shallow
    assert loads(many) == json.loads(many)
    for beyond in ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), DEEP, '{"a": ' + DEEP + "}"):
        with pytest.raises(json.JSONDecodeError, match=f"nested more than {MAX_DEPTH} levels deep"):
            loads(beyond)
