"""The request paths' transport: proxies from the environment, timeouts that bound silence (not
length) on both paths, connection pools that are closed, and bad URLs refused at once.

Servers are on 127.0.0.1; the proxy is a byte pipe that counts the connections it forwards.
"""

import asyncio
import gc
import warnings

import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u
from unity_nb.events import ModelRetry
from unity_nb.models import ModelRequest

KEY = "sk-test-123456789"
T = 10.0


def ask(text="hi"):
    return ModelRequest(messages=[{"role": "user", "content": text}])


class Proxy:
    """A forward HTTP proxy on 127.0.0.1: reads the request head, connects to the absolute URL's
    host, and pipes bytes both ways."""

    def __init__(self) -> None:
        self.connections = 0
        self.targets: list[str] = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    async def _serve(self, reader, writer):
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head.split(b" ", 2)[1].decode()
            self.targets.append(target)
            hostport = target.split("://", 1)[1].split("/", 1)[0]
            host, port = hostport.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            up_writer.write(head)

            async def pipe(src, dst):
                try:
                    while data := await src.read(65536):
                        dst.write(data)
                        await dst.drain()
                finally:
                    dst.close()

            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@pytest.fixture
def no_proxy_env(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_a_proxy_from_the_environment_is_used_and_no_proxy_exempts_a_host(no_proxy_env, fast_path):
    async with FakeOpenAIServer() as srv, Proxy() as proxy:
        srv.script([R(content="through the proxy"), R(content="direct")])
        no_proxy_env.setenv("HTTP_PROXY", proxy.url)
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=0) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert reply.content == "through the proxy"
        assert proxy.connections == 1 and proxy.targets == [srv.base_url + "/chat/completions"]
        no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=0) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert reply.content == "direct" and proxy.connections == 1


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_a_server_that_trickles_a_byte_at_a_time_is_abandoned_after_timeout_of_no_progress(fast_path):
    async with FakeOpenAIServer() as srv:
        # one byte every 0.3 s: bytes keep coming, but no line of the stream is finished within the timeout
        srv.script([R(content="slow", trickle=0.3), R(content="the retry")])
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, timeout=1.0,
                                 backoff=0.001) as m:
            h = u.start_loop("go", model=m)
            assert await asyncio.wait_for(h.result(), T) == "the retry"
        retries = [e for e in h.events if isinstance(e, ModelRetry)]
        assert len(retries) == 1 and "no progress for 1 s" in retries[0].error
        await srv.wait_for_disconnects(1)


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_a_long_stream_that_keeps_sending_is_never_cut(fast_path):
    async with FakeOpenAIServer() as srv:
        srv.script([R(content="x" * 40, chunks=40, chunk_delay=0.05)])  # about 2 s in all, a line every 0.05 s
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, timeout=0.5,
                                 max_retries=0) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert reply.content == "x" * 40


async def test_closing_a_model_closes_its_connections_and_it_can_be_used_again():
    async with FakeOpenAIServer() as srv:
        srv.script([R(content="one"), R(content="two")])
        m = u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY)
        assert (await m.complete(ask())).content == "one"
        await m.close()
        assert (await m.complete(ask())).content == "two"  # a new pool
        await m.close()


async def test_a_model_dropped_unclosed_leaves_no_unclosed_session_warning():
    async with FakeOpenAIServer() as srv:
        srv.script([R(content="one")])
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            m = u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY)
            assert (await m.complete(ask())).content == "one"
            del m
            gc.collect()
        assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize("url", ["not-a-url", "ftp://example.com/v1", "http://", "http://host:port/v1"])
def test_a_base_url_that_is_not_http_is_refused_naming_it(url):
    with pytest.raises(u.ModelConfigError, match="base URL") as err:
        u.OpenAIModel("m", base_url=url, api_key=KEY)
    assert repr(url) in str(err.value)


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_a_refused_connection_names_the_host_and_port(fast_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = u.OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, fast_path=fast_path, max_retries=0)
    with pytest.raises(u.ModelError, match=f"127.0.0.1:{port}"):
        await asyncio.wait_for(m.complete(ask()), T)
    await m.close()


@pytest.fixture
def persons_headers(monkeypatch):
    """Headers the person set for the model's server (a gateway's key beside the API key, an organisation)."""
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Gateway-Key: gw-secret-42")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-secret-42")


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
@pytest.mark.parametrize("status", [307, 308, 302])
async def test_a_redirect_to_another_host_is_not_followed_and_takes_no_key_nor_header_there(
        no_proxy_env, persons_headers, status, fast_path):
    # aiohttp (and the openai client's httpx) followed it, dropping Authorization only: the person's other headers
    # (and the request) went along
    async with FakeOpenAIServer() as srv, FakeOpenAIServer() as elsewhere:
        elsewhere.script([R(content="from another host")])
        moved = elsewhere.base_url + "/chat/completions"  # another port of the same address: another origin
        srv.script([R(status=status, headers={"location": moved})])
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path) as m:
            with pytest.raises(u.ModelError) as err:
                await asyncio.wait_for(m.complete(ask()), T)
        assert elsewhere.connections == 0 and len(srv.requests) == 1  # nothing sent there, and not retried
        said = str(err.value)
        assert err.value.status == status and moved in said and "another host" in said and KEY not in said
        assert srv.request_headers[0]["x-gateway-key"] == "gw-secret-42"


@pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])
async def test_a_redirect_within_the_same_host_is_followed_with_the_key_and_the_persons_headers(
        no_proxy_env, persons_headers, fast_path):
    async with FakeOpenAIServer() as srv:
        origin = srv.base_url.rsplit("/v1", 1)[0]
        srv.script([R(status=307, headers={"location": origin + "/chat/completions"}), R(content="moved here")])
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path) as m:
            reply = await asyncio.wait_for(m.complete(ask("the same")), T)
        assert reply.content == "moved here"
        first, second = srv.request_headers
        for name in ("authorization", "x-gateway-key", "openai-organization"):
            assert second[name] == first[name]
        assert srv.requests[1] == srv.requests[0]  # the body posted again
