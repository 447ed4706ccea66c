"""The first model: ``OpenAIModel(...)`` is configured as the openai client would be, without importing openai.

The default request path is aiohttp's; openai is imported only when its own path is asked for (a client handed
in, ``fast_path=False``, or ``model.client``)."""

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u
from unity_nb.models import ModelRequest

KEY = "sk-test-123456789"
T = 10.0
TESTS = Path(__file__).resolve().parent


def test_a_model_made_and_asked_over_the_default_path_never_imports_openai():
    """Nor does it import aiohttp on the event loop's thread: the first request waits for its import in a
    thread of its own."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(TESTS)!r})
        from fake_openai import FakeOpenAIServer
        import importlib.abc, threading
        import unity_nb as u
        from unity_nb.models import ModelRequest

        class Watch(importlib.abc.MetaPathFinder):  # which thread imports aiohttp
            def find_spec(self, name, path, target=None):
                if name == "aiohttp":
                    print("aiohttp imported on the event loop's thread:", threading.current_thread() is loop_thread)
        loop_thread = threading.main_thread()
        sys.meta_path.insert(0, Watch())
        srv = FakeOpenAIServer(lambda body: "hello").start_in_thread()
        m = u.OpenAIModel("m", base_url=srv.base_url, api_key="sk-x")
        print("after the model:", "openai" in sys.modules, "aiohttp" in sys.modules)

        async def main():
            async with m:
                reply = await m.complete(ModelRequest([{{"role": "user", "content": "hi"}}]))
            print("reply:", reply.content)

        asyncio.run(main())
        srv.stop_thread()
        print("after a request:", "openai" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["after the model: False False",
                                       "aiohttp imported on the event loop's thread: False",
                                       "reply: hello", "after a request: False"]


def test_a_first_map_never_imports_openai_and_its_cache_is_found_by_the_sdk_path(tmp_path):
    """A batch names its model's answers (its cache key) by the model's server without asking for the openai
    client: the first ``u.map`` does not import openai, and what it cached is found by the same model made to
    go through the SDK (the key is the one the SDK's client gives)."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(TESTS)!r})
        from fake_openai import FakeOpenAIServer
        import unity_nb as u

        srv = FakeOpenAIServer(lambda body: "hello").start_in_thread()
        store = u.Store({str(tmp_path / "state.db")!r})

        async def main():
            async with u.OpenAIModel("m", base_url=srv.base_url, api_key="sk-x") as lean:
                bus = u.EventBus()
                first = await u.map(["a", "b"], "Greet {{value}}", model=lean, cache=store, bus=bus)
                print("answers:", list(first), "openai:", "openai" in sys.modules)
                started = [e for e in bus.history() if e.kind == "loop_started" and not e.parent_id]
                print("remembered:", started[0].base_url == srv.base_url.rstrip("/"))
            async with u.OpenAIModel("m", base_url=srv.base_url, api_key="sk-x", fast_path=False) as sdk:
                h = u.map(["a", "b"], "Greet {{value}}", model=sdk, cache=store, bus=u.EventBus())
                again = await h
                print("answers:", list(again), "cached:", h.rows.cached, "asked:", len(srv.requests))

        asyncio.run(main())
        srv.stop_thread()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["answers: ['hello', 'hello'] openai: False", "remembered: True",
                                       "answers: ['hello', 'hello'] cached: 2 asked: 2"]


async def test_the_environment_s_headers_reach_the_server_as_the_openai_client_would_send_them(monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-42")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-7")
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Gateway: east\nX-Team:  data ")
    async with FakeOpenAIServer() as srv:
        srv.script([R("one"), R("two")])
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY) as lean, \
                u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY, fast_path=False) as sdk:
            for m in (lean, sdk):
                await asyncio.wait_for(m.complete(ModelRequest([{"role": "user", "content": "hi"}])), T)
        for headers in srv.request_headers:
            assert headers["authorization"] == f"Bearer {KEY}"
            assert headers["openai-organization"] == "org-42" and headers["openai-project"] == "proj-7"
            assert headers["x-gateway"] == "east" and headers["x-team"] == "data"


async def test_model_client_is_an_async_openai_client_configured_as_the_model(monkeypatch):
    import openai

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    m = u.OpenAIModel("m")
    assert m.base_url == "https://api.openai.com/v1/" and KEY not in repr(m)
    client = m.client
    assert isinstance(client, openai.AsyncOpenAI) and m.client is client
    assert str(client.base_url) == m.base_url and client.api_key == KEY and client.max_retries == 0
    await m.close()
    local = u.OpenAIModel("m", base_url="http://127.0.0.1:9/v1")
    assert str(local.client.base_url) == local.base_url == "http://127.0.0.1:9/v1/"
    await local.close()


def test_a_first_call_cancelled_while_aiohttp_is_imported_leaves_the_next_call_working():
    """The import goes on in its thread when the call that started it is cancelled (a stop, a timeout):
    the next call waits for that import and is answered, and nothing is printed."""
    script = textwrap.dedent(f"""
        import asyncio, importlib.abc, sys, threading
        sys.path.insert(0, {str(TESTS)!r})
        from fake_openai import FakeOpenAIServer
        import unity_nb as u
        from unity_nb.models import ModelRequest

        importing, release = threading.Event(), threading.Event()

        class Hold(importlib.abc.MetaPathFinder):  # aiohttp's import waits to be let go
            def find_spec(self, name, path, target=None):
                if name == "aiohttp":
                    importing.set()
                    release.wait(30)

        sys.meta_path.insert(0, Hold())
        srv = FakeOpenAIServer(lambda body: "hello").start_in_thread()
        m = u.OpenAIModel("m", base_url=srv.base_url, api_key="sk-x")

        def ask():
            return m.complete(ModelRequest([{{"role": "user", "content": "hi"}}]))

        async def main():
            first = asyncio.ensure_future(ask())
            while not importing.is_set():
                await asyncio.sleep(0.01)
            first.cancel()
            try:
                await first
            except asyncio.CancelledError:
                print("first: cancelled")
            release.set()
            reply = await asyncio.wait_for(ask(), 30)
            print("second:", reply.content)
            await m.close()

        asyncio.run(main())
        srv.stop_thread()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["first: cancelled", "second: hello"]
    assert out.stderr == ""


@pytest.mark.parametrize("url", [
    "http://LOCALHOST:8000/v1", "HTTP://localhost:8000/v1", "http://example.com:80/v1", "https://example.com:443/v1",
    "https://example.com:80/v1", "http://bücher.de/v1", "http://h/a b/v1", "http://h/a%20b/v1", "http://h/ä/v1",
    "http://[::1]:8080/v1/", "http://127.0.0.1:8000/v1",  # (credentials in a URL are refused: test_model_review)
])
async def test_a_model_s_base_url_is_the_one_its_openai_client_has(url):
    """What names a server (a batch's cache key, the base URL an operation remembers) is read from
    ``model.base_url`` without making the client: it is written as the client writes it, so a key made
    through either path is the same."""
    import openai

    m = u.OpenAIModel("m", base_url=url, api_key=KEY)
    assert m.base_url == str(openai.AsyncOpenAI(base_url=url, api_key=KEY).base_url)
    assert str(m.client.base_url) == m.base_url
    await m.close()


def test_the_first_requests_keep_their_rate_while_aiohttp_is_imported():
    """A request takes its rate-limit turn once the transport is ready: however long aiohttp's import takes,
    the server sees the first requests spaced as the limit says (an import after the turn bunched them)."""
    script = textwrap.dedent(f"""
        import asyncio, importlib.abc, sys, threading, time
        sys.path.insert(0, {str(TESTS)!r})
        from fake_openai import FakeOpenAIServer
        import unity_nb as u

        seen, importing, release = [], threading.Event(), threading.Event()

        class Hold(importlib.abc.MetaPathFinder):  # aiohttp's import takes as long as another thread says
            def find_spec(self, name, path, target=None):
                if name == "aiohttp":
                    importing.set()
                    release.wait(30)

        def handler(body):
            seen.append(time.monotonic())
            return "ok"

        sys.meta_path.insert(0, Hold())
        srv = FakeOpenAIServer(handler).start_in_thread()
        threading.Thread(target=lambda: importing.wait(30) and (time.sleep(0.3), release.set())).start()

        async def main():
            async with u.OpenAIModel("m", base_url=srv.base_url, api_key="sk-x") as m:
                out = await asyncio.wait_for(u.map(["a", "b", "c"], "Say {{value}}", model=m, rate="4/s",
                                                   bus=u.EventBus()), 30)
            print("answers:", list(out))

        asyncio.run(main())
        srv.stop_thread()
        gaps = [b - a for a, b in zip(seen, seen[1:])]
        print("spaced:", len(seen) == 3 and all(g >= 0.25 - 0.1 for g in gaps), gaps)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "answers: ['ok', 'ok', 'ok']"
    assert lines[1].startswith("spaced: True"), lines[1]
