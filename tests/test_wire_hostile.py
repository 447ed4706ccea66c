"""Servers that answer badly, over real HTTP on 127.0.0.1 (issues 23 and 24.6), on both request paths.

- A server out of slots (llama-cpp-python's with one slot) sends a role chunk, ``data: [DONE]``, then a
  broken chunked body: that is no reply. It is retried as an incomplete stream, each retry announced,
  and after the retries it is a ModelError saying so. A real ``finish_reason`` with no text stays a reply.
- A stream with no usage gets an estimate, marked ``estimated``; reported usage is kept as reported.
- A gzip bomb (one line of 1 GiB once decompressed), one line of 9 MiB, and endless valid deltas each end
  in a ModelError naming the limit, with memory bounded (tracemalloc's peak), and are not retried.

The servers are raw asyncio sockets, so the bytes on the wire are exactly the ones written here.
"""

import asyncio
import json
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable

import pytest

import unity_nb as u
from unity_nb.events import ModelRetry
from unity_nb.models import ModelRequest

KEY = "sk-test-123456789"
T = 30.0
PATHS = pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
Respond = Callable[[asyncio.StreamWriter, int], Awaitable[None]]
SLOTS = pytest.mark.parametrize("at_once", [False, True], ids=["broken_after_done", "broken_at_once"])


class HostileServer:
    """Reads each request, then lets ``respond(writer, n)`` (n counts requests from 1) write the answer;
    :attr:`reader` is the connection's reader while it does."""

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[dict] = []
        self.ended = asyncio.Event()
        """Set when a response's writing stopped (finished, or the client went away)."""

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    key, _, value = line.partition(b":")
                    if key.strip().lower() == b"content-length":
                        length = int(value)
                self.requests.append(json.loads(await reader.readexactly(length)))
                self.reader = reader
                await self.respond(writer, len(self.requests))
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.ended.set()
            writer.close()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def delta(content: str | None = None, finish: str | None = None, role: bool = False) -> bytes:
    d: dict = {"role": "assistant"} if role else {}
    if content is not None:
        d["content"] = content
    return sse({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
               b"Transfer-Encoding: chunked\r\n")


async def out_of_slots(srv: "HostileServer", writer: asyncio.StreamWriter, at_once: bool) -> None:
    """What llama-cpp-python's server sends for a request its one slot cannot take: a role chunk, [DONE],
    then a broken chunked body, either in the same write (the client meets the broken body as it reads
    the response) or once the client is done reading (it stopped at [DONE] and closed)."""
    writer.write(STREAM_HEAD + b"\r\n")
    writer.write(chunk(delta(role=True)))
    writer.write(chunk(b"data: [DONE]\n\n"))
    if not at_once:
        await writer.drain()
        await asyncio.wait_for(srv.reader.read(1), T)  # b"": the client closed the connection
    writer.write(b"zz\r\nthis is not a chunk")  # a broken chunked body
    await writer.drain()
    writer.close()


async def answer(writer: asyncio.StreamWriter, text: str, usage: dict | None = None) -> None:
    writer.write(STREAM_HEAD + b"\r\n")
    writer.write(chunk(delta(role=True)))
    writer.write(chunk(delta(text)))
    writer.write(chunk(delta(finish="stop")))
    if usage is not None:
        writer.write(chunk(sse({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage})))
    writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


def ask(text="hi"):
    return ModelRequest(messages=[{"role": "user", "content": text}])


# ------------------------------------------------------------------------ silent empty answers


@PATHS
@SLOTS
async def test_a_server_out_of_slots_is_retried_with_each_retry_announced(fast_path, at_once):
    async def respond(writer, n):
        if n <= 2:
            await out_of_slots(srv, writer, at_once)
        else:
            await answer(writer, "the real answer")

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, backoff=0.001) as m:
            h = u.start_loop("go", model=m)
            assert await asyncio.wait_for(h.result(), T) == "the real answer"
        retries = [e for e in h.events if isinstance(e, ModelRetry)]
        assert len(retries) == 2
        if not at_once:  # else the HTTP library may meet the broken body first: a broken stream, retried too
            assert all("ended without a reply" in r.error for r in retries)
        assert len(srv.requests) == 3


@PATHS
async def test_a_server_always_out_of_slots_fails_saying_what_happened(fast_path):
    async def respond(writer, n):
        await out_of_slots(srv, writer, at_once=False)

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, backoff=0.001,
                                 max_retries=2) as m:
            with pytest.raises(u.ModelError, match="ended without a reply") as err:
                await asyncio.wait_for(m.complete(ask()), T)
        assert "after 3 attempt(s)" in str(err.value) and "incomplete stream" in str(err.value)
        assert err.value.status is None
        assert len(srv.requests) == 3


@PATHS
async def test_a_real_finish_reason_with_no_text_is_a_reply_not_a_retry(fast_path):
    async def respond(writer, n):
        writer.write(STREAM_HEAD + b"\r\n")
        writer.write(chunk(delta(role=True)) + chunk(delta(finish="stop")) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=3) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert (reply.content, reply.tool_calls, reply.finish_reason) == (None, [], "stop")
        assert len(srv.requests) == 1


# ------------------------------------------------------------------------ usage


@PATHS
async def test_usage_is_estimated_and_marked_when_the_stream_reports_none(fast_path):
    text = "The answer is forty-two, as the table shows."

    async def respond(writer, n):
        await answer(writer, text)

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path) as m:
            question = "What is the answer? " * 50  # 1,000 characters
            h = u.start_loop(question, model=m)
            assert await asyncio.wait_for(h.result(), T) == text
            assert m.usage.estimated
        sent = len(json.dumps(srv.requests[0], ensure_ascii=False))
        assert h.usage.estimated
        assert h.usage.output_tokens == -(-len(text) // 4)
        assert sent // 5 <= h.usage.input_tokens <= sent // 3  # about 4 characters of the request a token
        assert h.usage.input_tokens >= 250  # the question alone is 1,000 characters


@PATHS
async def test_reported_usage_is_kept_as_reported(fast_path):
    async def respond(writer, n):
        await answer(writer, "ok", usage={"prompt_tokens": 7, "completion_tokens": 0, "total_tokens": 7})

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.estimated) == (7, 0, False)


async def test_usage_estimated_counts_tool_call_arguments_and_sums_with_the_flag_kept():
    args = json.dumps({"query": "x" * 400})

    async def respond(writer, n):
        writer.write(STREAM_HEAD + b"\r\n")
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": args}}
        writer.write(chunk(sse({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]})))
        writer.write(chunk(delta(finish="tool_calls")) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
    assert reply.usage.estimated and reply.usage.output_tokens == -(-(len("search") + len(args)) // 4)
    total = u.Usage(10, 10)
    total += reply.usage
    assert total.estimated and total.output_tokens == 10 + reply.usage.output_tokens


# ------------------------------------------------------------------------ hostile bodies


def _bomb_pieces(total: int, block: int = 1 << 20):
    """gzip of one SSE line ``data: {...\"aaaa...`` of ``total`` bytes, made as it is sent (about 1 MB of gzip
    for 1 GiB)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    yield z.compress(b'data: {"choices":[{"index":0,"delta":{"content":"')
    data = b"a" * block
    for _ in range(total // block):
        piece = z.compress(data)
        if piece:
            yield piece
    yield z.flush()


@PATHS
async def test_a_gzip_bomb_of_one_1_gib_line_ends_in_the_line_limit_with_bounded_memory(fast_path):
    sent = {"compressed": 0}

    async def respond(writer, n):
        writer.write(STREAM_HEAD + b"Content-Encoding: gzip\r\n\r\n")
        for piece in _bomb_pieces(1 << 30):
            writer.write(chunk(piece))
            sent["compressed"] += len(piece)
            await writer.drain()
            if writer.is_closing():
                return
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with HostileServer(respond) as srv:
        tracemalloc.start()
        try:
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path,
                                     max_retries=3) as m:
                with pytest.raises(u.ModelError, match="max_line_bytes") as err:
                    await asyncio.wait_for(m.complete(ask()), T)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        await asyncio.wait_for(srv.ended.wait(), T)
    assert "OpenAIModel(..., max_line_bytes=...)" in str(err.value)
    assert len(srv.requests) == 1  # the same request would meet the same line: not retried
    # the bomb is 1 GiB once decompressed; what was held stayed within a few times the 8 MiB limit
    # (the client.post path's HTTP library decompresses a whole network read at once, up to ~64 MB)
    assert peak - base < (48 << 20 if fast_path else 192 << 20), f"{(peak - base) >> 20} MiB"
    assert sent["compressed"] < 1 << 20  # stopped long before the end of the bomb


@PATHS
async def test_one_line_longer_than_the_limit_is_a_model_error_naming_it(fast_path):
    async def respond(writer, n):
        writer.write(STREAM_HEAD + b"\r\n")
        line = delta("x" * (9 << 20))  # 9 MiB in one line
        for i in range(0, len(line), 1 << 16):
            writer.write(chunk(line[i : i + (1 << 16)]))
            await writer.drain()
            if writer.is_closing():
                return
        writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=3) as m:
            with pytest.raises(u.ModelError, match=r"max_line_bytes=8388608"):
                await asyncio.wait_for(m.complete(ask()), T)
        assert len(srv.requests) == 1
        # raised, the same line is accepted
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path,
                                 max_line_bytes=16 << 20, max_reply_chars=16 << 20) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert len(reply.content or "") == 9 << 20


@PATHS
async def test_endless_valid_deltas_end_at_the_reply_limit(fast_path):
    async def respond(writer, n):
        writer.write(STREAM_HEAD + b"\r\n")
        piece = chunk(delta("y" * 4096) * 16)
        while not writer.is_closing():
            writer.write(piece)
            await writer.drain()

    async with HostileServer(respond) as srv:
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=3,
                                 max_reply_chars=2_000_000) as m:
            with pytest.raises(u.ModelError, match=r"max_reply_chars=2000000") as err:
                await asyncio.wait_for(m.complete(ask()), T)
        await asyncio.wait_for(srv.ended.wait(), T)
    assert "OpenAIModel(..., max_reply_chars=...)" in str(err.value)
    assert len(srv.requests) == 1


def test_limits_below_a_kilobyte_are_refused():
    with pytest.raises(u.ModelConfigError, match="max_line_bytes"):
        u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", max_line_bytes=10)
    with pytest.raises(u.ModelConfigError, match="max_reply_chars"):
        u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1", max_reply_chars=True)
