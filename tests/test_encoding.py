"""The OpenAI model encodes each message of a growing history once, and the bytes it sends stay
exactly the JSON of the request.

Requests go over real HTTP to a loopback server (``wire_server``), which records each body's raw
bytes. Every body is compared byte for byte with ``json.dumps(body, ensure_ascii=False,
separators=(",", ":"))`` of the same request (what the model sent before it kept encoded
messages), and the server's parse of it with the request. Nothing here measures time.
"""

from __future__ import annotations

import asyncio
import json

import provider_streams as ps
import pytest
from wire_server import KEY, Serve, WireServer

import unity_nb as u
from unity_nb.models import ModelRequest
from unity_nb.models._openai import WireCache

T = 10.0
TEXT = ps.stream("openai", "text")


def reference(model: u.OpenAIModel, request: ModelRequest) -> bytes:
    """The body as the model built it before: the whole request JSON-encoded at once."""
    body = {"model": model.name, "messages": request.messages, "stream": True,
            "stream_options": {"include_usage": True}}
    if request.tools:
        body["tools"] = request.tools
        body["tool_choice"] = request.tool_choice
    body.update(model.options)
    body.update(request.options)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def tool_turn(i: int) -> list[dict]:
    call = {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "東京"}'}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"ok ☕ {i}"},
    ]


@pytest.fixture
async def server():
    async with WireServer() as srv:
        yield srv


@pytest.fixture
async def model(server):
    m = u.OpenAIModel("m", base_url=server.url(), api_key=KEY, options={"temperature": 0.25}, backoff=0.001)
    yield m
    await m.close()


async def send(server: WireServer, model: u.OpenAIModel, request: ModelRequest) -> bytes:
    """One call; the raw body the server received."""
    server.serve(Serve.of(TEXT))
    before = len(server.requests)
    await asyncio.wait_for(model.complete(request), T)
    assert len(server.requests) == before + 1
    return server.requests[-1].raw


async def test_a_growing_history_is_sent_byte_for_byte_and_encoded_once(server, model):
    wire = [{"role": "system", "content": "Tu es utile. «»"}, {"role": "user", "content": "Quel temps à 東京 ?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    for i in range(6):
        request = ModelRequest(list(wire), tools, "auto", {"seed": 7, "metadata": {"step": i}})
        raw = await send(server, model, request)
        assert raw == reference(model, request)
        sent = server.requests[-1].json
        assert sent["messages"] == wire and sent["temperature"] == 0.25 and sent["seed"] == 7
        assert sent["metadata"] == {"step": i} and sent["tools"] == tools and sent["tool_choice"] == "auto"
        wire += tool_turn(i)
    # the first request encoded its history; each later one reused it and encoded only its new messages
    assert (model.wire_cache.misses, model.wire_cache.hits) == (1, 5)
    server.assert_clean()


async def test_an_option_may_replace_the_messages_or_the_model(server, model):
    wire = [{"role": "user", "content": "a"}]
    request = ModelRequest(wire, options={"model": "other", "messages": [{"role": "user", "content": "b"}]})
    raw = await send(server, model, request)
    assert raw == reference(model, request)
    assert server.requests[-1].json["messages"] == [{"role": "user", "content": "b"}]
    assert server.requests[-1].json["model"] == "other"


async def test_a_message_mutated_in_place_is_sent_as_it_is_now(server, model):
    wire = [{"role": "system", "content": "s"}, {"role": "user", "content": "go"}, *tool_turn(0), *tool_turn(1)]
    await send(server, model, ModelRequest(list(wire)))
    wire[3]["content"] = "a new result"  # a top-level value
    wire[4]["tool_calls"][0]["function"]["arguments"] = '{"city": "Paris"}'  # deep inside
    wire += tool_turn(2)
    request = ModelRequest(list(wire))
    raw = await send(server, model, request)
    assert raw == reference(model, request)
    assert server.requests[-1].json["messages"][3]["content"] == "a new result"
    assert server.requests[-1].json["messages"][4]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    wire[1]["extra"] = 1  # a key added
    request = ModelRequest(list(wire))
    assert await send(server, model, request) == reference(model, request)
    assert server.requests[-1].json["messages"][1]["extra"] == 1


async def test_a_replaced_history_and_a_different_message_in_its_place(server, model):
    system = {"role": "system", "content": "s"}
    wire = [system, {"role": "user", "content": "go"}, *tool_turn(0), *tool_turn(1), *tool_turn(2)]
    await send(server, model, ModelRequest(list(wire)))
    # a context compression: the list is replaced, its first message kept, a summary after it
    wire = [system, {"role": "user", "content": "[summary] the weather was asked"}, *tool_turn(2)]
    request = ModelRequest(list(wire))
    assert await send(server, model, request) == reference(model, request)
    # a different dict (equal or not) at a place the cache has seen
    wire[2] = {"role": "assistant", "content": "plain text now"}
    request = ModelRequest(list(wire))
    assert await send(server, model, request) == reference(model, request)
    # a shorter list than the last one sent
    request = ModelRequest(wire[:2])
    assert await send(server, model, request) == reference(model, request)


async def test_values_marshal_cannot_take_are_encoded_whole(server, model):
    class Text(str):
        pass

    wire = [{"role": "user", "content": Text("a str subclass")}]
    request = ModelRequest(list(wire))
    assert await send(server, model, request) == reference(model, request)
    wire.append({"role": "assistant", "content": "ok"})
    request = ModelRequest(list(wire))
    assert await send(server, model, request) == reference(model, request)


async def test_loops_sharing_one_model_interleave_without_mixing_their_histories(server, model):
    """Twelve conversations on one model, their requests in flight together, six of them sharing one
    system message object (so their first message leads to the same cache entry)."""
    shared = {"role": "system", "content": "shared"}
    wires = [[shared if n < 6 else {"role": "system", "content": f"own {n}"}, {"role": "user", "content": f"task {n}"}]
             for n in range(12)]
    sent: list[tuple[int, ModelRequest]] = []

    async def conversation(n: int) -> None:
        for i in range(5):
            request = ModelRequest(list(wires[n]), options={"user": f"c{n}"})
            sent.append((n, request))
            await asyncio.wait_for(model.complete(request), T)
            wires[n] += tool_turn(100 * n + i)

    for _ in range(12 * 5):
        server.serve(Serve(events=TEXT.events, event_delay=0.001))  # each answer spans several loop turns
    await asyncio.gather(*(conversation(n) for n in range(12)))
    assert len(server.requests) == 60
    by_user: dict[str, list[bytes]] = {}
    for req in server.requests:
        by_user.setdefault(req.json["user"], []).append(req.raw)
    for n in range(12):
        expected = [reference(model, r) for m, r in sent if m == n]
        assert by_user[f"c{n}"] == expected
    assert model.wire_cache.hits >= 12 * 4 - 6  # at most the shared-system ones ever miss a turn
    server.assert_clean()


async def test_a_tool_loop_sends_exactly_the_json_of_its_requests(server, model):
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city} ☀"

    for _ in range(4):
        server.serve(Serve.of(ps.stream("openai", "tool_call")))
    server.serve(Serve.of(TEXT))
    h = u.start_loop("Quel temps ?", model=model, tools=[get_weather], bus=u.EventBus(), max_steps=10)
    await asyncio.wait_for(h.result(), T)
    assert len(server.requests) == 5
    for req in server.requests:
        assert req.raw == json.dumps(req.json, ensure_ascii=False, separators=(",", ":")).encode()
    for before, after in zip(server.requests, server.requests[1:], strict=False):
        grown = after.json["messages"]
        assert grown[: len(before.json["messages"])] == before.json["messages"]
        added = grown[len(before.json["messages"]):]
        # the provider's id is kept (a repeat in a later turn gets a suffix, the same in the call and its result)
        call_id = added[-2]["tool_calls"][0]["id"]
        assert call_id.startswith("call_Q1w2E3r4T5y6")
        assert added[-1] == {"role": "tool", "tool_call_id": call_id, "content": "sunny in 東京 ☀"}
    assert model.wire_cache.hits == 4
    assert model.wire_cache.vouched == 4  # on the loop's word (ModelRequest.continues): nothing marshalled


async def test_a_loop_offering_no_tools_keeps_no_encoding_and_is_sent_the_same_when_it_goes_on(server, model):
    """A loop's first call offering no tools (a map row's) is expected to end the loop: its encoding is not kept
    (``ModelRequest.once``). When the loop goes on after all (an empty reply asked again), every request is still
    the exact JSON of the conversation."""
    server.serve(Serve.of(TEXT))
    h = u.start_loop("Say hi.", model=model, bus=u.EventBus())
    assert await asyncio.wait_for(h.result(), T)
    assert (model.wire_cache.hits, model.wire_cache.misses, len(model.wire_cache)) == (0, 0, 0)
    empty = {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]}
    server.serve(Serve(events=[ps.data(empty), ps.DONE]))  # an empty reply: the loop asks once more
    server.serve(Serve.of(TEXT))
    h = u.start_loop("Say hi again.", model=model, bus=u.EventBus())
    assert await asyncio.wait_for(h.result(), T)
    first, second = server.requests[-2:]
    for req in (first, second):
        assert req.raw == json.dumps(req.json, ensure_ascii=False, separators=(",", ":")).encode()
    assert second.json["messages"][: len(first.json["messages"])] == first.json["messages"]
    assert len(second.json["messages"]) > len(first.json["messages"])


def test_the_cache_is_bounded_in_conversations_and_bytes():
    cache = WireCache(max_conversations=8, max_bytes=1 << 30)
    for n in range(50):
        msgs = [{"role": "system", "content": f"s{n}"}, {"role": "user", "content": "x" * 100}]
        body = {"model": "m", "messages": msgs}
        assert cache.body(body, msgs) == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
    assert len(cache) <= 8
    small = WireCache(max_bytes=10_000)
    for n in range(50):
        msgs = [{"role": "system", "content": f"s{n}"}, {"role": "user", "content": "x" * 1000}]
        small.body({"messages": msgs}, msgs)
    assert len(small) <= 2 * 10  # two keys per conversation, each conversation over a kilobyte
    small.clear()
    assert len(small) == 0


def _json(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_request_that_vouches_for_its_earlier_messages_is_encoded_from_its_new_ones_only():
    cache = WireCache()
    wire: list[dict] = [{"role": "system", "content": "s"}, {"role": "user", "content": "täsk ☀"}]
    body = {"model": "m", "messages": list(wire), "stream": True}
    assert cache.body(body, body["messages"]) == _json(body)
    for i in range(5):
        sent = len(wire)
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        wire += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": f"r{i} \"q\""}]
        body = {"model": "m", "messages": list(wire), "stream": True}
        assert cache.body(body, body["messages"], continues=sent) == _json(body)
    assert (cache.misses, cache.hits, cache.vouched) == (1, 5, 5)
    body = {"model": "m", "messages": list(wire), "stream": True}  # no word given: checked, then encoded whole
    assert cache.body(body, body["messages"]) == _json(body)
    assert (cache.misses, cache.vouched) == (2, 5)


def test_a_vouch_that_does_not_end_where_the_kept_messages_end_is_checked_instead():
    cache = WireCache()
    wire = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"}]
    cache.body({"messages": wire}, wire)
    other = [wire[0], {"role": "user", "content": "b"}, {"role": "user", "content": "c"}]
    assert cache.body({"messages": other}, other, continues=2) == _json({"messages": other})
    assert cache.vouched == 0


def test_the_cache_serves_threads_at_once():
    """Event loops in several threads may share one model: each body is still its request's JSON."""
    import threading

    cache = WireCache(max_conversations=16)  # small: evictions happen while other threads work
    shared = {"role": "system", "content": "shared"}
    failures: list[str] = []

    def conversation(n: int) -> None:
        wire = [shared, {"role": "user", "content": f"task {n}"}]
        for i in range(200):
            body = {"model": "m", "messages": list(wire), "stream": True, "user": f"t{n}"}
            expected = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
            if cache.body(body, body["messages"]) != expected:
                failures.append(f"thread {n} step {i}")
            wire += tool_turn(i)
            if i % 50 == 49:
                wire = wire[:2] + wire[-4:]  # replaced now and then, as a compression does

    threads = [threading.Thread(target=conversation, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(T)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert cache.hits > 0
