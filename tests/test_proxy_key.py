"""The API key never reaches a proxy (issue 24.1): a loopback proxy records every byte it is sent.

With ``HTTP_PROXY`` (an http origin, forwarded), the request the proxy passes on carries the origin's
``Authorization`` (a plain-http proxy necessarily sees what it forwards), and nothing of the key is
sent to the proxy as ``Proxy-Authorization``. With ``HTTPS_PROXY`` (an https origin), the CONNECT that
opens the tunnel carries nothing of the key; the proxy refuses the tunnel, and only what it saw is
asserted. A proxy URL's own ``user:pass`` is sent to it as Basic proxy auth, on both paths.
"""

import asyncio
import base64

import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u
from unity_nb.models import ModelRequest

KEY = "sk-proxy-test-0123456789abcdef"
T = 10.0
PATHS = pytest.mark.parametrize("fast_path", [True, False], ids=["aiohttp", "client.post"])


def ask():
    return ModelRequest(messages=[{"role": "user", "content": "hi"}])


class RecordingProxy:
    """A forward proxy on 127.0.0.1 that keeps every byte a client sends it. A plain request is forwarded
    to its absolute URL's host; a CONNECT is refused (403) once its head is recorded."""

    def __init__(self) -> None:
        self.received: list[bytes] = []  # per connection, everything the client sent
        self.heads: list[bytes] = []
        self.seen = asyncio.Event()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()

    def header_values(self, name: str) -> list[str]:
        out = []
        for head in self.heads:
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == name.lower().encode():
                    out.append(value.strip().decode("latin-1"))
        return out

    async def _serve(self, reader, writer):
        index = len(self.received)
        self.received.append(b"")

        def note(data: bytes) -> None:
            self.received[index] += data

        try:
            head = await reader.readuntil(b"\r\n\r\n")
            note(head)
            self.heads.append(head)
            self.seen.set()
            method, target = head.split(b" ", 2)[:2]
            if method == b"CONNECT":
                writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
                note(await reader.read(65536))  # anything more the client sends before it gives up
                return
            hostport = target.decode().split("://", 1)[1].split("/", 1)[0]
            host, port = hostport.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
            up_writer.write(head)

            async def client_to_origin():
                try:
                    while data := await reader.read(65536):
                        note(data)
                        up_writer.write(data)
                        await up_writer.drain()
                finally:
                    up_writer.close()

            async def origin_to_client():
                try:
                    while data := await up_reader.read(65536):
                        writer.write(data)
                        await writer.drain()
                finally:
                    writer.close()

            await asyncio.gather(client_to_origin(), origin_to_client(), return_exceptions=True)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
def proxy_env(monkeypatch):
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "")
    monkeypatch.setenv("no_proxy", "")
    return monkeypatch


def _key_seen(proxy: RecordingProxy) -> bool:
    return any(KEY.encode() in data for data in proxy.received)


@PATHS
async def test_a_plain_http_proxy_gets_no_proxy_authorization_with_the_key(proxy_env, fast_path):
    async with FakeOpenAIServer() as srv, RecordingProxy() as proxy:
        srv.script([R(content="through the proxy")])
        proxy_env.setenv("HTTP_PROXY", proxy.url)
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=fast_path, max_retries=0) as m:
            reply = await asyncio.wait_for(m.complete(ask()), T)
        assert reply.content == "through the proxy"
        assert len(proxy.heads) == 1  # it went through the proxy
        # what the origin needs, forwarded once; nothing addressed to the proxy itself
        assert proxy.header_values("Authorization") == [f"Bearer {KEY}"]
        assert proxy.header_values("Proxy-Authorization") == []
        assert srv.request_headers[0].get("authorization") == f"Bearer {KEY}"


@PATHS
@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "ALL_PROXY"])
async def test_the_connect_to_an_https_proxy_carries_nothing_of_the_key(proxy_env, fast_path, variable):
    async with RecordingProxy() as proxy:
        proxy_env.setenv(variable, proxy.url)
        m = u.OpenAIModel("m", base_url="https://127.0.0.1:9/v1", api_key=KEY, fast_path=fast_path, max_retries=0)
        try:
            with pytest.raises(u.ModelError):  # the proxy refuses the tunnel
                await asyncio.wait_for(m.complete(ask()), T)
        finally:
            await m.close()
        assert proxy.heads and all(h.startswith(b"CONNECT 127.0.0.1:9 ") for h in proxy.heads)
        assert not _key_seen(proxy)
        assert proxy.header_values("Proxy-Authorization") == []
        assert proxy.header_values("Authorization") == []


@PATHS
@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_a_proxy_urls_own_credentials_are_sent_to_it_as_basic_auth(proxy_env, fast_path, scheme):
    basic = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    async with FakeOpenAIServer() as srv, RecordingProxy() as proxy:
        srv.script([R(content="ok")])
        creds = f"http://alice:s3cret@127.0.0.1:{proxy.port}"
        base = srv.base_url if scheme == "http" else "https://127.0.0.1:9/v1"
        proxy_env.setenv("HTTP_PROXY" if scheme == "http" else "HTTPS_PROXY", creds)
        m = u.OpenAIModel("m", base_url=base, api_key=KEY, fast_path=fast_path, max_retries=0)
        try:
            if scheme == "http":
                assert (await asyncio.wait_for(m.complete(ask()), T)).content == "ok"
            else:
                with pytest.raises(u.ModelError):
                    await asyncio.wait_for(m.complete(ask()), T)
        finally:
            await m.close()
        assert proxy.header_values("Proxy-Authorization") == [basic]
        if scheme == "https":
            assert not _key_seen(proxy)
