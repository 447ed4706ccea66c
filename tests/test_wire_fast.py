"""The shortcuts on the per-chunk path of ``OpenAIModel`` give what the general path gives.

- ``unity_nb._json.loads`` (orjson where it reads what ``json`` reads, else ``json``) is ``json.loads`` on bytes: the
  same value, or an error where it raises one, whatever the bytes (another encoding, a BOM, a NUL, not JSON, an
  integer past 64 bits); ``unity_nb._json.dumps`` writes what ``json.dumps`` writes, in meaning;
- ``SSEDecoder.feed_raw``/``end_raw`` give the fields of the events ``feed``/``end`` give;
- the assembler's shortcut for a delta of only ``role`` and ``content`` builds the reply the general
  ``_delta`` builds, for any value of ``content``;
- the body of an aiohttp response is read by a plain async iterator: a reader stopping at ``[DONE]`` leaves
  no async generator for the event loop to close.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import sys
from typing import Any

import pytest
from fake_openai import FakeOpenAIServer, Reply
from hypothesis import given, settings
from hypothesis import strategies as st

import unity_nb as u
from unity_nb._json import dumps
from unity_nb._json import loads as _loads
from unity_nb.models import ModelRequest, _assemble
from unity_nb.models._assemble import Assembler
from unity_nb.models._openai import _event
from unity_nb.models._sse import SSEDecoder

T = 10.0

json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def same_as_json_loads(data: bytes) -> None:
    try:
        expected = json.loads(data)
    except ValueError as err:
        try:
            got = _loads(data)
        except ValueError as mine:
            assert type(mine) is type(err) and str(mine) == str(err)
        else:
            raise AssertionError(f"_loads({data!r}) gave {got!r} where json.loads raised {err!r}")
        return
    got = _loads(data)
    assert repr(got) == repr(expected)  # NaN too


@settings(max_examples=400, deadline=None)
@given(value=json_value, encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be",
                                                    "utf-32", "utf-32-le", "utf-32-be"]),
       pad=st.sampled_from(["", " ", "\n", " \t"]))
def test_loads_is_json_loads_for_json_in_any_encoding_json_loads_reads(value, encoding, pad):
    text = pad + json.dumps(value, ensure_ascii=False) + pad
    same_as_json_loads(text.encode(encoding, "surrogatepass"))


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=40) | st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_loads_is_json_loads_for_any_bytes(data):
    same_as_json_loads(data)


def test_loads_edge_cases():
    for data in [b"18446744073709551616", b"-9223372036854775809", b'{"n": 123456789012345678901234567890}',
                 b"[1e400, -1e400, 1.7976931348623157e309]", b'"\\ud800"', b'{"a": 1, "a": 2}', b"-0", b"1E2",
                 b"0.1e1", b"[1.0, 5e-324]", b"", b" ", b"{", b"{}", b'{"a": 1}', b"[DONE]",
                 codecs.BOM_UTF8 + b'{"a": 1}', b'{"a": 1}\x00',
                 b'\x00{"a": 1}', b'{\x00"a": 1}', b"1\x00", b'"\xff"', b'{"a": "\xc3\xa9"}', b"NaN", b"-Infinity",
                 '{"a": "東京"}'.encode("utf-16"), b'{"a": 1} x']:
        same_as_json_loads(data)


@settings(max_examples=400, deadline=None)
@given(value=json_value | st.floats() | st.lists(st.floats() | st.integers(), max_size=4))
def test_dumps_writes_what_json_dumps_writes(value):
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    got = dumps(value)
    assert repr(json.loads(got)) == repr(json.loads(expected))  # NaN and infinities written as json writes them
    if b"e" not in expected:  # a float's exponent may be written another way (1e-05 as 0.00001)
        assert got == expected


def test_dumps_refuses_and_writes_as_json_does():
    for value in [{1: "a"}, {"a": 2**64}, [float("nan"), float("inf")], {"big": -(2**70)}]:
        assert dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    for value in [{"a": "\ud800"}, {"a": object()}, {"a": {1, 2}}]:
        with pytest.raises((TypeError, ValueError)):
            json.dumps(value, ensure_ascii=False).encode()
        with pytest.raises((TypeError, ValueError)):
            dumps(value)


line = st.one_of(
    st.builds(lambda v: b"data: " + v, st.binary(max_size=12).filter(lambda b: b"\n" not in b and b"\r" not in b)),
    st.sampled_from([b"", b"data:x", b"data", b": comment", b"event: ping", b"event:error", b"id: 7", b"id:\x00",
                     b"retry: 10", b"retry: x", b'{"error": "bad"}', b"error: {}", b"other: 1", b"data:  two"]),
)


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(line, max_size=12), ending=st.sampled_from([b"\n", b"\r\n", b"\r"]),
       cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6), bom=st.booleans())
def test_feed_raw_gives_the_fields_of_the_events_feed_gives(lines, ending, cuts, bom):
    raw = (codecs.BOM_UTF8 if bom else b"") + b"".join(x + ending for x in lines)
    points = sorted({c % (len(raw) + 1) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)])]
    a, b = SSEDecoder(), SSEDecoder()
    objects = [e for c in chunks for e in a.feed(c)] + a.end()
    tuples = [e for c in chunks for e in b.feed_raw(c)] + b.end_raw()
    assert [(e.data, e.event, e.id, e.retry) for e in objects] == tuples
    assert (a.lines, a.stray) == (b.lines, b.stray)


content = st.one_of(
    st.none(), st.text(max_size=5), st.integers(), st.booleans(),
    st.lists(st.one_of(st.text(max_size=4), st.fixed_dictionaries({"type": st.sampled_from(["text", "thinking",
                                                                                            "refusal", "image"]),
                                                                   "text": st.text(max_size=4)})), max_size=3),
)
delta = st.one_of(
    st.fixed_dictionaries({}, optional={"role": st.sampled_from(["assistant", None]), "content": content}),
    st.fixed_dictionaries({"content": content}, optional={"reasoning_content": st.text(max_size=4),
                                                          "refusal": st.text(max_size=4)}),
)


def assemble(payloads: list[dict]) -> tuple:
    texts: list[str] = []
    asm = Assembler("m", texts.append)
    for p in payloads:
        asm.add(p)
    r = asm.reply()
    return r.content, r.thinking, r.refusal, r.finish_reason, r.model, asm.chunks, texts


@settings(max_examples=300, deadline=None)
@given(deltas=st.lists(delta, max_size=6), finish=st.sampled_from([None, "stop", "length"]))
def test_the_plain_delta_shortcut_builds_what_the_general_path_builds(deltas, finish):
    payloads = [{"id": "c", "model": "m2", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
                for d in deltas]
    payloads.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    fast = assemble(payloads)
    plain, _assemble._PLAIN = _assemble._PLAIN, frozenset()  # every delta through the general _delta
    try:
        general = assemble(payloads)
    finally:
        _assemble._PLAIN = plain
    assert fast == general


def test_an_event_that_is_not_a_plain_json_chunk_takes_the_general_path():
    texts: list[str] = []
    asm = Assembler("m", texts.append)
    assert _event("message", b'{"choices": [{"delta": {"content": "a"}}]}', asm) is False
    assert _event("message", b' {"choices": [{"delta": {"content": "b"}}]}', asm) is False  # a space first
    assert _event("message", b"[DONE]", asm) is True
    assert _event("ping", b"{}", asm) is False and asm.chunks == 2
    assert texts == ["a", "b"]


def test_a_response_read_to_done_leaves_no_async_generator_to_close():
    ours: list[str] = []

    async def main() -> None:
        firstiter, finalizer = sys.get_asyncgen_hooks()  # the running loop's: restored when it ends

        def spy(agen: Any) -> None:  # called for an async generator collected before it finished
            if "unity_nb" in agen.ag_code.co_filename:
                ours.append(agen.ag_code.co_qualname)
            finalizer(agen)

        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=spy)
        async with FakeOpenAIServer() as srv:
            srv.script([Reply(content="hello there", chunks=3)] * 3)
            async with u.OpenAIModel("m", base_url=srv.base_url, api_key="k") as m:
                for _ in range(3):
                    reply = await asyncio.wait_for(m.complete(ModelRequest([{"role": "user", "content": "hi"}])), T)
                    assert reply.content == "hello there"

    asyncio.run(main())
    assert ours == []


def test_every_request_of_a_pool_carries_the_model_s_headers_once():
    heads: list[list[bytes]] = []

    async def main() -> None:
        ended = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:  # keep-alive: several requests on one connection
                    try:
                        head = await reader.readuntil(b"\r\n\r\n")
                    except (asyncio.IncompleteReadError, ConnectionError):
                        return  # the model closed its pool
                    lines = head.split(b"\r\n")[1:-2]
                    length = next(int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:"))
                    await reader.readexactly(length)
                    heads.append([x.split(b":")[0].lower() for x in lines])
                    body = b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\n'
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
                                 % (len(body), body))
                    await writer.drain()
            finally:
                writer.close()
                ended.set()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        async with u.OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test-key") as m:
            for _ in range(3):
                reply = await asyncio.wait_for(m.complete(ModelRequest([{"role": "user", "content": "hi"}])), T)
                assert reply.content == "x"
        await asyncio.wait_for(ended.wait(), T)  # one connection, closed by the model
        srv.close()
        await srv.wait_closed()

    asyncio.run(main())
    assert len(heads) == 3 and heads[0] == heads[1] == heads[2]
    for name in (b"authorization", b"accept", b"content-type", b"user-agent", b"host"):
        assert heads[0].count(name) == 1, (name, heads[0])


class Options(dict):
    """A dict subclass: marshal cannot take it."""


option_value = st.one_of(st.booleans(), st.integers(min_value=-2, max_value=2), st.floats(allow_nan=False),
                         st.sampled_from([0.0, -0.0, 1.0, "1", "true", None]), st.lists(st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(requests=st.lists(st.tuples(
    st.sampled_from(["m", "m2"]),
    st.dictionaries(st.sampled_from(["temperature", "seed", "top_p"]), option_value, max_size=2),
    st.booleans(), st.booleans(), st.integers(min_value=0, max_value=2)), min_size=1, max_size=8))
def test_the_json_kept_around_the_messages_is_that_of_each_request(requests):
    from unity_nb.models._openai import WireCache

    cache = WireCache()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for model, options, with_tools, subclass, n in requests:
        messages = [{"role": "user", "content": f"q{i}"} for i in range(n + 1)]
        body = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True}}
        if with_tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        body.update(Options(options) if subclass else options)
        if subclass:
            body["extra"] = Options(options)
        expected = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()
        assert cache.body(body, messages) == expected


def test_silence_ends_an_attempt_only_after_timeout_without_progress():
    from unity_nb.models._transport import Silence

    async def attempt(timeout: float, beats: int, gap: float) -> str:
        async with asyncio.timeout(None) as deadline:
            silence = Silence(timeout, deadline)
            try:
                for _ in range(beats):  # progress more often than the timeout, for several timeouts in all
                    await asyncio.sleep(gap)
                    silence.alive()
                await asyncio.sleep(T)  # then nothing
            finally:
                silence.cancel()
        return "not reached"

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(attempt(0.2, beats=8, gap=0.05), T)
        with pytest.raises(TimeoutError):  # no progress at all
            await asyncio.wait_for(attempt(0.1, beats=0, gap=0), T)
        # a cancellation from outside stays a cancellation
        task = asyncio.create_task(attempt(5.0, beats=1, gap=0.01))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # and an attempt that ends in time leaves no timer behind
        async with asyncio.timeout(None) as deadline:
            silence = Silence(0.05, deadline)
            await asyncio.sleep(0)
            silence.cancel()
        await asyncio.sleep(0.1)  # the cancelled timer would have fired by now: nothing happens

    asyncio.run(main())


def test_silence_moves_its_timer_only_when_it_comes():
    from unity_nb.models._transport import Silence

    async def main() -> None:
        loop = asyncio.get_running_loop()
        timers: list[float] = []
        call_at = loop.call_at

        def spy(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            if type(getattr(callback, "__self__", None)).__name__ == "_Watch":  # the timer watching the silences
                timers.append(when)
            return call_at(when, callback, *args, **kwargs)

        loop.call_at = spy  # type: ignore[method-assign]
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(None) as deadline:
                silence = Silence(60.0, deadline)
                start = silence._last
                for _ in range(20):  # twenty signs of life: no timer for any of them
                    silence.alive()
                assert timers == [start + 60.0]
                async with asyncio.timeout(None) as other_deadline:  # another attempt at once: no timer of its own
                    others = [Silence(60.0, other_deadline) for _ in range(5)]
                    assert timers == [start + 60.0]
                    for other in others:
                        other.cancel()
                    await asyncio.sleep(0)
                silence._watch._check(loop)  # the timer comes (early here) after a sign of life: moved on
                assert timers == [start + 60.0, silence._last + 60.0]
                await asyncio.sleep(0)  # not over
                silence._last -= 61.0  # the timer comes after 60 s of silence: the attempt ends
                silence._watch._check(loop)
                await asyncio.sleep(T)
        assert len(timers) == 2

    asyncio.run(main())


def test_a_server_silent_after_its_first_lines_is_abandoned_for_no_progress():
    from unity_nb.events import ModelRetry

    async def main() -> list[str]:
        async with FakeOpenAIServer() as srv:
            srv.script([Reply(content="slow answer", chunks=4, chunk_delay=30), Reply(content="the retry")])
            async with u.OpenAIModel("m", base_url=srv.base_url, api_key="k", timeout=0.5, backoff=0.001) as m:
                h = u.start_loop("go", model=m)
                assert await asyncio.wait_for(h.result(), T) == "the retry"
            return [e.error for e in h.events if isinstance(e, ModelRetry)]

    errors = asyncio.run(main())
    assert len(errors) == 1 and "no progress for 0.5 s" in errors[0], errors
