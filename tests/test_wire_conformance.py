"""Provider conformance over the wire: ``OpenAIModel`` against the streams real providers send.

Each provider family's streams (``provider_streams``, written from the providers' documents)
are served by ``wire_server`` (aiohttp, plus raw asyncio for close-delimited bodies) under
every framing an HTTP server may choose, over both request paths of the model:
``fast_path=True`` and ``fast_path=False`` (the openai client's ``post()``).

The matrix: every family and scenario on the plain framing; every framing for the
``tool_call`` and ``reasoning`` scenarios of every family (and the openai ``text`` one); a
two-step tool loop per family checking what the model sends back; and the HTTP edge cases
(a stream slower than the read timeout, errors in a 200, redirects, bad URLs, refused
connections, closing).

Nothing here sleeps to synchronise: every wait is on the model's own result, bounded by a
timeout. The only pauses are the server's pacing of a slow stream, which is what that test is
about; no assertion is about time.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import warnings

import provider_streams as ps
import pytest
from provider_streams import Expect, ProviderStream
from wire_server import FRAMINGS, KEY, MOVED, PATH, Serve, WireServer

import unity_nb as u
from unity_nb.models import ModelRequest

T = 10.0  # every wait is bounded by this

PATHS = [pytest.param(True, id="fast"), pytest.param(False, id="client")]
REASONING_KEYS = frozenset({"reasoning_content", "reasoning", "reasoning_details", "thinking"})


def get_weather(city: str, unit: str = "celsius") -> str:
    """The current weather in a city."""
    return f"{city}: 21° {unit}"


TOOLS = [u.as_tool(get_weather).schema()]
QUESTION = "Quel temps fait-il à Paris et à 東京 ?"


def ask() -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": QUESTION}], tools=TOOLS)


class Deltas:
    """An ``on_delta`` that also takes reasoning pieces (through its ``thinking`` attribute)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.thought: list[str] = []

    def __call__(self, piece: str) -> None:
        self.text.append(piece)

    def thinking(self, piece: str) -> None:
        self.thought.append(piece)


async def close_model(m) -> None:
    close = getattr(m, "close", None)
    if close is not None:
        await close()
    else:  # the model has no close() yet: at least close its client
        await m.client.close()


@pytest.fixture
async def server():
    async with WireServer() as srv:
        yield srv


@pytest.fixture
async def models():
    """``make(base_url, fast_path, **kw)``: an OpenAIModel, closed after the test."""
    made = []

    def make(base_url: str, fast_path: bool, **kw):
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", T)
        m = u.OpenAIModel("m", base_url=base_url, api_key=KEY, fast_path=fast_path, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        await close_model(m)


def retries(h):
    return [e for e in h.events if e.kind == "model_retry"]


# ------------------------------------------------------------------------------ checking a reply


def check_reply(reply, expect: Expect, deltas: Deltas) -> None:
    assert reply.content == expect.content
    assert getattr(reply, "thinking", None) == expect.thinking
    assert getattr(reply, "refusal", None) == expect.refusal
    got = [(c.name, c.arguments, c.id, getattr(c, "extra", None) or {}) for c in reply.tool_calls]
    assert got == [(c.name, c.arguments, c.id, c.extra) for c in expect.tool_calls]
    allowed = expect.finish_reason if isinstance(expect.finish_reason, tuple) else (expect.finish_reason,)
    assert reply.finish_reason in allowed
    if expect.usage is not None:
        assert (reply.usage.input_tokens, reply.usage.output_tokens) == expect.usage
    if expect.refusal is None:  # answer text, and only answer text, streams to on_delta
        assert "".join(deltas.text) == (expect.content or "")
    assert "".join(deltas.thought) == (expect.thinking or "")


async def run_stream(server: WireServer, models, s: ProviderStream, framing: str, fast: bool) -> None:
    server.serve(Serve.of(s, framing))
    m = models(server.url(framing), fast)
    deltas = Deltas()
    if s.expect.error is not None:
        with pytest.raises(u.ModelError) as err:
            await asyncio.wait_for(m.complete(ask(), deltas), T)
        assert s.expect.error in str(err.value)
        assert KEY not in str(err.value)
    else:
        reply = await asyncio.wait_for(m.complete(ask(), deltas), T)
        check_reply(reply, s.expect, deltas)
    if framing == "redirect307":
        assert [r.path for r in server.requests] == [PATH, MOVED]
        assert server.requests[1].json == server.requests[0].json  # the body was posted again
    else:
        assert [r.path for r in server.requests] == [PATH]
    body = server.requests[0].json
    assert body["model"] == "m" and body["stream"] is True
    assert body["messages"] == [{"role": "user", "content": QUESTION}]
    assert body["tools"] == TOOLS
    server.assert_clean()


# ------------------------------------------------------------------------------ the matrix

ALL = ps.streams_for()
FRAMED = ps.streams_for("tool_call", "reasoning") + [ps.stream("openai", "text")]
OTHER_FRAMINGS = [f for f in FRAMINGS if f != "plain"]


@pytest.mark.parametrize("fast", PATHS)
@pytest.mark.parametrize("s", ALL, ids=[s.id for s in ALL])
async def test_every_scenario(server, models, s, fast):
    await run_stream(server, models, s, "plain", fast)


@pytest.mark.parametrize("fast", PATHS)
@pytest.mark.parametrize("s", FRAMED, ids=[s.id for s in FRAMED])
@pytest.mark.parametrize("framing", OTHER_FRAMINGS)
async def test_every_framing(server, models, framing, s, fast):
    await run_stream(server, models, s, framing, fast)


# ------------------------------------------------------------------------------ a tool loop


def check_echo(req, first: ProviderStream, family: ps.Family) -> None:
    """The second request of a loop: what the model sends back after its tool calls."""
    messages = req.json["messages"]
    calls = first.expect.tool_calls
    turns = [m for m in messages if m.get("role") == "assistant" and m.get("tool_calls")]
    assert len(turns) == 1, f"one assistant message with tool_calls, got {len(turns)}"
    turn = turns[0]
    assert [c.get("id") for c in turn["tool_calls"]] == [c.id for c in calls], "the tool call ids, in order"
    for echoed, call in zip(turn["tool_calls"], calls):
        assert echoed.get("type") == "function", echoed
        assert echoed.get("function") == {"name": call.name, "arguments": call.arguments}, echoed
        for key, value in call.extra.items():
            assert echoed.get(key) == value, f"{key} of call {call.id} must be echoed as received: {echoed}"
        if not call.extra:
            assert "extra_content" not in echoed, f"call {call.id} had no extra_content: {echoed}"
    after = messages[messages.index(turn) + 1 :]
    results = [m for m in after if m.get("role") == "tool"]
    assert sorted(m.get("tool_call_id") for m in results) == sorted(c.id for c in calls), "one tool message per call"
    assert all(isinstance(m.get("content"), str) for m in results)
    for m in messages:
        content = m.get("content")
        assert content is None or isinstance(content, str), f"content must be a string or null, not {content!r}"
        if m.get("role") != "assistant":
            continue
        sent = REASONING_KEYS & set(m)
        if family.echo_reasoning is not None and m is turn:
            # DeepSeek thinking mode: "for turns that do perform tool calls, the reasoning_content
            # must be fully passed back to the API in all subsequent requests" (else HTTP 400)
            assert m.get(family.echo_reasoning) == first.expect.thinking, f"{family.echo_reasoning} must be sent back"
            sent -= {family.echo_reasoning}
        assert not sent, f"reasoning sent back to {family.name}: {sorted(sent)}"


@pytest.mark.parametrize("fast", PATHS)
@pytest.mark.parametrize("family", list(ps.FAMILIES))
async def test_a_tool_loop_sends_back_what_the_provider_needs(server, models, family, fast):
    first, final = ps.stream(family, "parallel_tool_calls"), ps.stream(family, "text")
    server.serve(Serve.of(first), Serve.of(final))
    server.check(2, lambda req: check_echo(req, first, ps.FAMILIES[family]))
    h = u.start_loop(QUESTION, model=models(server.url(), fast), tools=[get_weather])
    assert await asyncio.wait_for(h.result(), T) == final.expect.content
    assert len(server.requests) == 2
    server.assert_clean()


# ------------------------------------------------------------------------------ HTTP edge cases


def _slow_events(n: int) -> tuple[list[str], str]:
    pieces = [f"mot{i} ☕ " for i in range(n)]
    chunk = {"id": "chatcmpl-slow", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [ps.data({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}]})]
    events += [ps.data({**chunk, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]})
               for p in pieces]
    events += [ps.data({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), ps.DONE]
    return events, "".join(pieces)


@pytest.mark.parametrize("fast", PATHS)
async def test_a_stream_longer_than_the_read_timeout_that_keeps_sending_completes(server, models, fast):
    events, text = _slow_events(12)  # about 1.3 s in all, a write every 0.1 s; the timeout is 0.5 s
    server.serve(Serve(events=events, event_delay=0.1))
    m = models(server.url(), fast, timeout=0.5, max_retries=2, backoff=0.001)
    h = u.start_loop("hi", model=m)
    assert await asyncio.wait_for(h.result(), T) == text
    assert retries(h) == []
    assert len(server.requests) == 1
    server.assert_clean()


@pytest.mark.parametrize("fast", PATHS)
async def test_http_200_with_a_json_error_body_is_a_model_error(server, models, fast):
    server.serve(Serve(body=b'{"error": {"message": "quota exceeded"}}', content_type="application/json"))
    m = models(server.url(), fast)
    with pytest.raises(u.ModelError, match="quota exceeded"):
        await asyncio.wait_for(m.complete(ask()), T)
    server.assert_clean()


@pytest.mark.parametrize("fast", PATHS)
async def test_a_data_line_that_is_not_json_is_a_model_error(server, models, fast):
    good = ps.stream("openai", "text").events
    events = [good[0], good[1], "data: <html><body>502 Bad Gateway</body></html>\n\n", *good[2:]]
    server.serve(Serve(events=events))
    m = models(server.url(), fast)
    with pytest.raises(u.ModelError) as err:  # not a JSONDecodeError
        await asyncio.wait_for(m.complete(ask()), T)
    assert KEY not in str(err.value)
    server.assert_clean()


@pytest.mark.parametrize("fast", PATHS)
@pytest.mark.parametrize("status", [302, 307])
async def test_a_redirect_without_location_is_an_error_not_an_empty_reply(server, models, status, fast):
    server.serve(Serve(status=status, location=None))
    m = models(server.url(), fast)
    with pytest.raises(u.ModelError) as err:
        await asyncio.wait_for(m.complete(ask()), T)
    assert str(status) in str(err.value)
    assert len(server.requests) == 1
    server.assert_clean()


@pytest.mark.parametrize("fast", PATHS)
def test_an_unusable_base_url_is_refused_at_construction(fast):
    with pytest.raises((u.ModelConfigError, ValueError)) as err:
        u.OpenAIModel("m", base_url="ftp://x", api_key=KEY, fast_path=fast)
    assert "ftp://x" in str(err.value)
    assert KEY not in str(err.value)


@pytest.mark.parametrize("fast", PATHS)
async def test_a_refused_connection_names_the_host_and_port(models, fast):
    with socket.socket() as sock:  # a port that was just free: nothing listens there now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    m = models(f"http://127.0.0.1:{port}/v1", fast)
    with pytest.raises(u.ModelError) as err:
        await asyncio.wait_for(m.complete(ask()), T)
    assert "127.0.0.1" in str(err.value) and str(port) in str(err.value)
    assert KEY not in str(err.value)


@pytest.mark.parametrize("fast", PATHS)
async def test_async_with_and_close_leave_no_unclosed_session(server, fast):
    s = ps.stream("openai", "text")
    server.serve(Serve.of(s), Serve.of(s))
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    old_handler = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with u.OpenAIModel("m", base_url=server.url(), api_key=KEY, fast_path=fast, max_retries=0) as m:
                first = await asyncio.wait_for(m.complete(ask()), T)
            other = u.OpenAIModel("m", base_url=server.url(), api_key=KEY, fast_path=fast, max_retries=0)
            second = await asyncio.wait_for(other.complete(ask()), T)
            await other.close()
            del m, other
            for _ in range(3):
                gc.collect()
                await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(old_handler)
    assert first.content == second.content == s.expect.content
    unclosed = [str(w.message) for w in caught
                if issubclass(w.category, ResourceWarning) or "nclosed" in str(w.message)]
    assert unclosed == []
    assert [c.get("message") for c in reported if "nclosed" in str(c.get("message"))] == []
    server.assert_clean()


def test_the_streams_are_what_they_claim():
    """A guard on the test data itself: the JSON in every data line parses, and the expected
    text is what the events carry."""
    for s in ps.STREAMS.values():
        for ev in s.events:
            for line in ev.split("\n"):
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[len("data: ") :])
        assert s.scenario in (*ps.SCENARIOS, "refusal", "tool_call_split", "parallel_same_chunk"), s.id
        assert ps.FAMILIES[s.family].source
    for family in ps.FAMILIES:
        for scenario in ("text", "tool_call", "parallel_tool_calls", "error"):
            assert (family, scenario) in ps.STREAMS, (family, scenario)
