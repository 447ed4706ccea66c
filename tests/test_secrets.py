"""Secrets: used by reference, never shown. A run that used one is scanned everywhere a person,
a model or a saved notebook could see it: the requests sent to the model, the transcript, the
events, the store, the widget's state and snapshot, and a notebook saved after running."""

import json
import textwrap

import nbformat
import pytest
from nbclient import NotebookClient

import unity_nb as u
from conftest import tool_messages
from unity_nb.jupyter._widget import HandleWidget, render_html
from unity_nb.store import Store

VALUE = "sk-live-5f2b9c1e8a7d4b3c"


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("UNB_TEST_TOKEN", VALUE)
    u.set_secret("API_TOKEN", env="UNB_TEST_TOKEN", description="the test service")
    yield
    u.forget_secret("API_TOKEN")


SEEN_BY_TOOL = []


def call_service(header: str) -> str:
    """Call the service with an Authorization header."""
    SEEN_BY_TOOL.append(header)
    return f"the service answered to {header}"


def script(messages, tools):
    done = tool_messages(messages)
    steps = [
        u.call_tool("execute_code", code="tok = get_secret('API_TOKEN')\nprint('token is', tok)\ntok", intent="use it"),
        u.call_tool("call_service", header="Bearer <<secret:API_TOKEN>>"),
        u.call_tool("execute_code", code="raise ValueError('bad token ' + get_secret('API_TOKEN'))", intent="fail"),
    ]
    return steps[len(done)] if len(done) < len(steps) else "done"


async def test_a_secret_is_used_by_reference_and_found_nowhere(secret, tmp_path):
    assert u.secret_names() == {"API_TOKEN": "the test service"}
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    model = u.ScriptedModel(script, chunk=5)
    ns = {}
    h = u.act("use the service", model=model, namespace=ns, tools=[call_service], bus=bus)
    w = HandleWidget(h)
    assert await h == "done"
    w.flush()
    assert SEEN_BY_TOOL[-1] == f"Bearer {VALUE}"  # the tool got the value
    assert ns["tok"] == VALUE  # the plan had it
    results = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    assert "token is <<secret:API_TOKEN>>" in results[0] and "value of the last expression: str: '<<secret:API_TOKEN>>'" in results[0]
    assert "the service answered to Bearer <<secret:API_TOKEN>>" in results[1]
    assert "bad token <<secret:API_TOKEN>>" in results[2]
    assert "API_TOKEN (the test service)" in model.requests[0].messages[0]["content"]  # the model knows the name
    places = {
        "requests to the model": json.dumps([r.messages for r in model.requests]),
        "transcript": json.dumps([[m.content, [(c.arguments, c.result, c.output, c.displays) for c in m.tool_calls]] for m in h.transcript]),
        "events": json.dumps([e.model_dump_json() for e in h.events]),
        "widget state": json.dumps({"nodes": w.nodes, "entries": w.entries}),
        "snapshot": render_html(h),
    }
    store.close()
    places["store"] = (tmp_path / "s.db").read_bytes().decode("latin-1") + "".join(
        p.read_bytes().decode("latin-1") for p in tmp_path.glob("s.db-*"))
    for where, text in places.items():
        assert VALUE not in text, where
    assert "<<secret:API_TOKEN>>" in places["transcript"]


async def test_a_secret_typed_as_a_clarification_answer_is_scrubbed_too(secret, tmp_path):
    async def login(ctx: u.ToolContext) -> str:
        """Log in, asking the person for the token."""
        token = await ctx.clarify("Which token?")
        return "logged in" if VALUE in token else "wrong token"  # the tool gets the value itself

    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    script = lambda m, t: u.call_tool("login") if not tool_messages(m) else "done: " + tool_messages(m)[0]["content"]  # noqa: E731
    h = u.start_loop("log in", model=u.ScriptedModel(script), tools=[login], bus=bus, name="login")
    question = await h.next_clarification()
    await h.answer_clarification(question["call_id"], f"use {VALUE}")
    assert await h == "done: logged in"
    answered = [e for e in h.events if e.kind == "clarification_answered"]
    assert answered and answered[0].answer == "use <<secret:API_TOKEN>>"
    places = {
        "transcript": json.dumps([m.content for m in h.transcript]),
        "events": json.dumps([e.model_dump_json() for e in h.events]),
        "rebuilt transcript": json.dumps([m.content for m in store.transcript("login")]),
    }
    store.close()
    places["store"] = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("s.db*"))
    for where, text in places.items():
        assert VALUE not in text, where


async def test_a_secret_in_a_reference_is_scrubbed_from_the_references_the_widget_lists(secret):
    def fetch(url: str) -> u.ToolResult:
        """Fetch a page."""
        return u.ToolResult("fetched", references=[u.Reference(f"token {VALUE}", f"body {VALUE}", url=f"{url}?key={VALUE}")])

    script = lambda m, t: u.call_tool("fetch", url="https://example.invalid") if not tool_messages(m) else "see [1]"  # noqa: E731
    h = u.start_loop("fetch it", model=u.ScriptedModel(script), tools=[fetch], bus=u.EventBus())
    w = HandleWidget(h)
    assert await h == "see [1]"
    w.flush()
    (ref,) = h.references
    assert ref.title == "token <<secret:API_TOKEN>>" and ref.url == "https://example.invalid?key=<<secret:API_TOKEN>>"
    assert VALUE not in json.dumps({"nodes": w.nodes, "entries": w.entries}) and VALUE not in render_html(h)
    assert VALUE not in json.dumps([(r.title, r.text, r.url) for r in h.all_references])


def test_a_display_bundle_is_scrubbed_in_text_svg_and_json_but_binary_images_are_kept(secret):
    from unity_nb._secrets import scrub_bundle

    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    bundle = {
        "data": {
            "text/plain": f"token {VALUE}",
            "image/svg+xml": f"<svg><text>{VALUE}</text></svg>",
            "application/json": {"token": VALUE, "items": [VALUE, 1]},
            "image/png": png,
        },
        "metadata": {},
    }
    data = scrub_bundle(bundle)["data"]
    assert VALUE not in json.dumps(data)
    assert data["image/svg+xml"] == "<svg><text><<secret:API_TOKEN>></text></svg>"
    assert data["application/json"] == {"token": "<<secret:API_TOKEN>>", "items": ["<<secret:API_TOKEN>>", 1]}
    assert data["image/png"] == png


def test_bad_secrets_are_clear_errors(monkeypatch):
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(u.UserError, match="is not set"):
        u.set_secret("X", env="NOPE_NOT_SET")
    with pytest.raises(u.UserError, match="identifier"):
        u.set_secret("not valid", "abcdef")
    with pytest.raises(u.UserError, match="at least 4"):
        u.set_secret("X", "abc")
    with pytest.raises(KeyError, match="no secret named 'X'"):
        u.get_secret("X")


NOTEBOOK = [
    "%load_ext unity_nb\nimport unity_nb as u\nu.set_secret('API_TOKEN', env='UNB_TEST_TOKEN')",
    textwrap.dedent('''
        def script(messages, tools):
            done = [m for m in messages if m["role"] == "tool"]
            if not done:
                return u.call_tool("execute_code", code="print('token', get_secret('API_TOKEN'))\\nget_secret('API_TOKEN')", intent="show it")
            return "finished"

        m = u.ScriptedModel(script)
        %unity model --var m
    '''),
    "h = %unity act --name secretive use the token",
    "await h",
    "h.transcript[-2].content",
]


def test_a_saved_notebook_holds_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("UNB_TEST_TOKEN", VALUE)
    monkeypatch.setenv("UNITY_NB_STORE", str(tmp_path / "nb.db"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK])
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}, store_widget_state=True).execute()
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    saved = path.read_text()
    assert "application/vnd.jupyter.widget-state+json" in saved  # the widget's state was saved too
    assert "<<secret:API_TOKEN>>" in saved and VALUE not in saved
    stored = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("nb.db*"))
    assert "secretive" in stored and VALUE not in stored
