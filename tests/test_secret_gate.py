"""Secrets a model cannot write out (issue 24, items 2 and 3).

A ``<<secret:NAME>>`` reference resolves only in the arguments of a tool a person wrote: never in
the loop's own answer tools (``submit_answer``, a multi-request loop's ``final_answer``) nor a
built-in tool, where it stays the literal reference. And a model error quoting a secret's value
(a ScriptedModel's, or a provider's 400 over loopback HTTP) is scrubbed from the failure reasons,
``h.failures``, the widget's state, the events and the store."""

import json

import pandas as pd
import pytest
from aiohttp import web
from conftest import tool_messages

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget
from unity_nb.store import Store

VALUE = "tok-9c2e7f1a4b6d8e0f"
REF = "<<secret:API_TOKEN>>"
SEEN: list[str] = []


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("UNB_GATE_TOKEN", VALUE)
    u.set_secret("API_TOKEN", env="UNB_GATE_TOKEN", description="the test service")
    SEEN.clear()
    yield
    u.forget_secret("API_TOKEN")


def stored(path) -> str:
    """Every byte of a store file (and its WAL), as text."""
    return "".join(p.read_bytes().decode("latin-1") for p in path.parent.glob(path.name + "*"))


def call_service(header: str) -> str:
    """Call the service with an Authorization header."""
    SEEN.append(header)
    return "service called"


# ---------------------------------------------------------------------------- item 2: no write-out


async def test_a_map_answer_naming_a_secret_keeps_the_reference_everywhere(secret, tmp_path):
    def script(messages, tools):
        if any("inspecting a batch" in str(m.get("content")) for m in messages):
            return "the batch answered " + messages[0]["content"][-400:]
        if not tool_messages(messages):  # a tool the person wrote still gets the value
            return u.call_tool("call_service", header=f"Bearer {REF}")
        return u.call_tool("submit_answer", label=REF, confidence=f"high {REF}")

    bus = u.EventBus()
    path = tmp_path / "s.db"
    store = Store(path)
    store.attach(bus)
    model = u.ScriptedModel(script)
    h = u.map(["a", "b"], "Label {value}", model=model, columns=["label", "confidence"], tools=[call_service],
              bus=bus, name="labels")
    w = HandleWidget(h)
    df = await h
    assert SEEN == [f"Bearer {VALUE}"] * 2  # the person's tool got the value
    assert list(df["label"]) == [REF, REF]  # the answer tool did not: the literal reference stays
    assert list(df["confidence"]) == [f"high {REF}"] * 2
    asked = await h.ask("what did the rows answer?")
    assert REF in await asked
    w.flush()
    places = {
        "result": df.to_json(),
        "events": json.dumps([e.model_dump_json() for e in bus.history()]),
        "sent to the model": json.dumps([r.messages for r in model.requests]),
        "widget": json.dumps({"nodes": w.nodes, "entries": w.entries}),
    }
    store.close()
    places["store"] = stored(path)
    for where, text in places.items():
        assert VALUE not in text, where
    assert REF in places["events"] and REF in places["store"]


async def test_a_multi_request_final_answer_naming_a_secret_is_not_resolved(secret, bus):
    def script(messages, tools):
        return u.call_tool("final_answer", request_id="r1", answer=f"the token is {REF}")

    h = u.start_loop("answer", model=u.ScriptedModel(script), multi=True, bus=bus)
    assert await h == {"r1": f"the token is {REF}"}


async def test_a_builtin_tool_gets_the_reference_and_a_persons_tool_the_value(secret, bus):
    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return [
                u.call_tool("execute_code", code=f"x = '{REF}'", intent="store it"),
                u.call_tool("call_service", header=REF),
            ]
        return "done"

    ns: dict = {}
    h = u.act("go", model=u.ScriptedModel(script), namespace=ns, tools=[call_service], bus=bus)
    assert await h == "done"
    assert ns["x"] == REF  # execute_code is unity_nb's own: a plan reads a secret with get_secret
    assert SEEN == [VALUE]


# ---------------------------------------------------------------------------- item 3: failure reasons


async def test_a_model_error_quoting_a_secret_is_scrubbed_from_every_failure_path(secret, tmp_path):
    def script(messages, tools):
        if "Label good" in messages[-1]["content"]:
            return "fine"
        raise u.ModelError(f"provider said: invalid header 'Bearer {VALUE}' (repr {VALUE!r})")

    bus = u.EventBus()
    path = tmp_path / "s.db"
    store = Store(path)
    store.attach(bus)
    items = pd.Series(["good", "bad1", "bad2"], name="x")
    h = u.map(items, "Label {x}", model=u.ScriptedModel(script), bus=bus, name="failing")
    w = HandleWidget(h)
    result = await h
    reasons = result.attrs["reasons"]
    assert set(reasons) == {1, 2} and all(REF in r for r in reasons.values())
    failures = h.failures
    w.flush()
    assert len(w.nodes[0]["failures"]) == 2
    loop_errors = [str(r.child.state.error) for r in h.rows.ended_badly if r.child is not None]
    assert len(loop_errors) == 2 and all(REF in e for e in loop_errors)
    # a batch whose every row fails ends failed, its error naming the first reason: scrubbed too
    everyone = u.map(["bad3", "bad4"], "Label {value}", model=u.ScriptedModel(script), bus=bus, name="all-failing")
    with pytest.raises(u.UnityError) as caught:
        await everyone
    places = {
        "batch error": str(caught.value),
        "reasons": json.dumps(reasons),
        "failures": failures.to_json(),
        "loop errors": json.dumps(loop_errors),
        "events": json.dumps([e.model_dump_json() for e in bus.history()]),
        "widget": json.dumps({"nodes": w.nodes, "entries": w.entries}),
    }
    store.close()
    places["store"] = stored(path)
    for where, text in places.items():
        assert VALUE not in text, where


async def test_a_providers_error_over_http_quoting_a_secret_is_scrubbed(secret, tmp_path):
    """A 500 (retried) and then a 400, both quoting the value, from a loopback server."""
    seen = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(await request.read())
        status = 500 if len(seen) == 1 else 400
        body = {"error": {"message": f"bad credential {VALUE} in header", "type": "invalid_request_error"}}
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    bus = u.EventBus()
    path = tmp_path / "s.db"
    store = Store(path)
    store.attach(bus)
    try:
        async with u.OpenAIModel(
            "m", base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-test-key", max_retries=1, backoff=0.01
        ) as model:
            h = u.start_loop("go", model=model, bus=bus, name="http-fail")
            w = HandleWidget(h)
            with pytest.raises(u.ModelError) as caught:
                await h
    finally:
        await runner.cleanup()
    assert len(seen) == 2
    assert any(e.kind == "model_retry" for e in h.events)
    w.flush()
    places = {
        "error raised": str(caught.value),
        "events": json.dumps([e.model_dump_json() for e in bus.history()]),
        "transcript": json.dumps([m.content for m in h.transcript]),
        "widget": json.dumps({"nodes": w.nodes, "entries": w.entries}),
    }
    store.close()
    places["store"] = stored(path)
    for where, text in places.items():
        assert VALUE not in text, where
    assert REF in places["events"]
