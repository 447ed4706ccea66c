"""Secrets: used by reference, never shown. A run that used one is scanned everywhere a person,
a model or a saved notebook could see it: the requests sent to the model, the transcript, the
events, the store, the widget's state and snapshot, and a notebook saved after running."""

import asyncio
import json
import sys
import textwrap
from typing import Any

import nbformat
import pytest
from conftest import tool_messages
from nbclient import NotebookClient

import unity_nb as u
from unity_nb.events import ClarificationAnswered, ModelDelta, ToolOutput
from unity_nb.jupyter._widget import HandleWidget, render_html
from unity_nb.store import Store

VALUE = "sk-live-5f2b9c1e8a7d4b3c"


@pytest.fixture
def secret(monkeypatch):
    monkeypatch.setenv("UNB_TEST_TOKEN", VALUE)
    u.set_secret("API_TOKEN", env="UNB_TEST_TOKEN", description="the test service")
    yield
    u.forget_secret("API_TOKEN")


SEEN_BY_TOOL: list[str] = []


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
    ns: dict[str, Any] = {}
    h = u.act("use the service", model=model, namespace=ns, tools=[call_service], bus=bus)
    w = HandleWidget(h)
    assert await h == "done"
    w.flush()
    assert SEEN_BY_TOOL[-1] == f"Bearer {VALUE}"  # the tool got the value
    assert ns["tok"] == VALUE  # the plan had it
    results = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    assert "token is <<secret:API_TOKEN>>" in results[0]
    assert "value of the last expression: str: '<<secret:API_TOKEN>>'" in results[0]
    assert "the service answered to Bearer <<secret:API_TOKEN>>" in results[1]
    assert "bad token <<secret:API_TOKEN>>" in results[2]
    assert "API_TOKEN (the test service)" in model.requests[0].messages[0]["content"]  # the model knows the name
    places = {
        "requests to the model": json.dumps([r.messages for r in model.requests]),
        "transcript": json.dumps(
            [[m.content, [(c.arguments, c.result, c.output, c.displays) for c in m.tool_calls]] for m in h.transcript]
        ),
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
    script = lambda m, t: u.call_tool("login") if not tool_messages(m) else "done: " + tool_messages(m)[0]["content"]
    h = u.start_loop("log in", model=u.ScriptedModel(script), tools=[login], bus=bus, name="login")
    question = await h.inbox.next_question()
    await h.inbox.answer(question["call_id"], f"use {VALUE}")
    assert await h == "done: logged in"
    answered = [e for e in h.events if isinstance(e, ClarificationAnswered)]
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
        ref = u.Reference(f"token {VALUE}", f"body {VALUE}", url=f"{url}?key={VALUE}")
        return u.ToolResult("fetched", references=[ref])

    script = lambda m, t: u.call_tool("fetch", url="https://example.invalid") if not tool_messages(m) else "see [1]"
    h = u.start_loop("fetch it", model=u.ScriptedModel(script), tools=[fetch], bus=u.EventBus())
    w = HandleWidget(h)
    assert await h == "see [1]"
    w.flush()
    (ref,) = h.state.references
    assert ref.title == "token <<secret:API_TOKEN>>" and ref.url == "https://example.invalid?key=<<secret:API_TOKEN>>"
    assert VALUE not in json.dumps({"nodes": w.nodes, "entries": w.entries}) and VALUE not in render_html(h)
    assert VALUE not in json.dumps([(r.title, r.text, r.url) for r in h.state.all_references])


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


# -- values written in pieces ---------------------------------------------------------------

PLANS_IN_PIECES = {
    "one character a write": "print(*get_secret('API_TOKEN'), sep='')",
    "two halves": (
        "import sys\ntok = get_secret('API_TOKEN')\nsys.stdout.write(tok[:9])\nsys.stdout.write(tok[9:] + '\\n')"
    ),
}


def leaky(how: str) -> str:
    """Print the token in pieces."""
    token = u.get_secret("API_TOKEN")
    pieces = list(token) if how == "chars" else [token[:9], token[9:]]
    for piece in pieces:
        sys.stdout.write(piece)
    sys.stdout.write("\n")
    return "printed"


async def aleaky(how: str) -> str:
    """Print the token in pieces, awaiting between them."""
    token = u.get_secret("API_TOKEN")
    for piece in list(token) if how == "chars" else [token[:9], token[9:]]:
        sys.stdout.write(piece)
        await asyncio.sleep(0)
    sys.stdout.write("\n")
    return "printed"


@pytest.fixture
def routed():
    """Route what tools print to their call records, as the notebook layer does (call it in the
    test itself: pytest swaps ``sys.stdout`` between a fixture's set-up and the test)."""
    from unity_nb import _output

    yield _output.install
    _output.uninstall()


def scan_everywhere(h, w, store, tmp_path):
    """Where a person could see what the run printed: every place holds no value."""
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    rebuilt = [c for m in store.transcript(h.id) for c in m.tool_calls]
    places = {
        "the call's output": rec.output,
        "the ToolOutput events joined": "".join(e.text for e in h.events if e.kind == "tool_output"),
        "events": json.dumps([e.model_dump_json() for e in h.events]),
        "transcript": json.dumps(
            [[m.content, [(c.arguments, c.result, c.output) for c in m.tool_calls]] for m in h.transcript]
        ),
        "widget state": json.dumps({"nodes": w.nodes, "entries": w.entries}),
        "Store.transcript()": json.dumps([(c.output, c.result) for c in rebuilt]),
    }
    store.close()
    places["store"] = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("s.db*"))
    for where, text in places.items():
        assert VALUE not in text, where
    return rec, rebuilt


@pytest.mark.parametrize("code", list(PLANS_IN_PIECES.values()), ids=list(PLANS_IN_PIECES))
async def test_a_secret_a_plan_prints_in_pieces_is_found_nowhere(secret, tmp_path, code):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    script = lambda m, t: u.call_tool("execute_code", code=code, intent="leak it") if not tool_messages(m) else "done"
    h = u.act("print the token", model=u.ScriptedModel(script), namespace={}, bus=bus)
    w = HandleWidget(h)
    assert await h == "done"
    w.flush()
    rec, rebuilt = scan_everywhere(h, w, store, tmp_path)
    # nothing lost: the pieces published add up to the record, which the store rebuilds
    assert rec.output == "<<secret:API_TOKEN>>\n"
    assert [c.output for c in rebuilt] == [rec.output]
    assert "stdout:\n<<secret:API_TOKEN>>" in rec.result


@pytest.mark.parametrize("tool", [leaky, aleaky], ids=["sync tool", "async tool"])
@pytest.mark.parametrize("how", ["chars", "halves"])
async def test_a_secret_a_tool_writes_in_pieces_is_found_nowhere(secret, routed, tmp_path, tool, how):
    routed()
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    script = lambda m, t: u.call_tool(tool.__name__, how=how) if not tool_messages(m) else "done"
    h = u.start_loop("print the token", model=u.ScriptedModel(script), tools=[tool], bus=bus)
    w = HandleWidget(h)
    assert await h == "done"
    w.flush()
    rec, rebuilt = scan_everywhere(h, w, store, tmp_path)
    assert rec.output == "<<secret:API_TOKEN>>\n" and [c.output for c in rebuilt] == [rec.output]
    assert h.state.printed == len(rec.output)


async def test_text_held_back_as_a_possible_start_of_a_value_is_published_when_the_call_ends(secret, routed):
    def tease() -> str:
        """Print most of the token, never all of it."""
        sys.stdout.write("x" + VALUE[:-1])
        return "teased"

    routed()
    script = lambda m, t: u.call_tool("tease") if not tool_messages(m) else "done"
    h = u.start_loop("tease", model=u.ScriptedModel(script), tools=[tease], bus=u.EventBus())
    assert await h == "done"
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    outputs = [e.text for e in h.events if isinstance(e, ToolOutput)]
    assert rec.output == "x" + VALUE[:-1] and "".join(outputs) == rec.output  # nothing lost
    assert outputs[0] == "x"  # the rest waited: only the call's end showed it could not become the value


async def test_a_secret_a_model_streams_over_several_deltas_is_found_in_none(secret):
    reply = f"the token is {VALUE}, and again: {VALUE[:5]}|{VALUE}"
    for chunk in (1, 3, 7):
        h = u.start_loop("say it", model=u.ScriptedModel([reply], chunk=chunk), bus=u.EventBus())
        seen: list[str] = []
        h.run.add_listener(lambda _source, _e, h=h, seen=seen: seen.append(h.state.streaming_text))  # type: ignore[misc]
        answer = await h
        deltas = [e.text for e in h.events if isinstance(e, ModelDelta)]
        assert len(deltas) > 3
        assert answer == "the token is <<secret:API_TOKEN>>, and again: sk-li|<<secret:API_TOKEN>>"
        assert "".join(deltas) == answer  # nothing lost, nothing shown twice
        assert not any(VALUE in text for text in seen)
        assert VALUE not in json.dumps([e.model_dump_json() for e in h.events])


async def test_no_piece_of_a_value_shows_where_the_models_view_of_long_output_is_cut(secret):
    code = "print('x' * 1990 + get_secret('API_TOKEN') + 'y' * 20000)"  # the view's head ends inside the value
    script = lambda m, t: u.call_tool("execute_code", code=code, intent="long") if not tool_messages(m) else "done"
    model = u.ScriptedModel(script)
    h = u.act("print", model=model, namespace={}, bus=u.EventBus())
    assert await h == "done"
    (seen,) = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    assert "characters omitted" in seen and VALUE[:8] not in seen


def test_scrub_stream_gives_what_scrubbing_the_whole_text_gives_however_it_is_split(secret):
    import random

    from unity_nb._secrets import ScrubStream, scrub

    u.set_secret("OTHER", "sk-live-5f2b")  # a prefix of the first value: the longer one wins
    u.set_secret("THIRD", "aaab")
    try:
        text = f"{VALUE} x sk-live-5f2b y aaaab aaaaab {VALUE[:-1]}z {VALUE}{VALUE} sk-live-5f2 end sk-live"
        expected = scrub(text)
        assert VALUE not in expected and "<<secret:OTHER>>" in expected and "<<secret:THIRD>>" in expected
        rng = random.Random(7)
        for _ in range(300):
            cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 40)))
            pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
            stream = ScrubStream()
            out = [stream.feed(p) for p in pieces]
            out.append(stream.flush())
            assert "".join(out) == expected
            assert not any(VALUE in piece or "aaab" in piece for piece in out)
    finally:
        u.forget_secret("OTHER")
        u.forget_secret("THIRD")


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
                code = "print('token', get_secret('API_TOKEN'))\\nget_secret('API_TOKEN')"
                return u.call_tool("execute_code", code=code, intent="show it")
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
    resources = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(nb, timeout=60, kernel_name="python3", resources=resources, store_widget_state=True).execute()
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    saved = path.read_text()
    assert "application/vnd.jupyter.widget-state+json" in saved  # the widget's state was saved too
    assert "<<secret:API_TOKEN>>" in saved and VALUE not in saved
    stored = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("nb.db*"))
    assert "secretive" in stored and VALUE not in stored


# -- every form a value takes when shown (issue: quotes and backslashes) -------------------------

QUOTED = 'pa"ss\\w0rd-Q7x!'
QUOTED_FORMS = {
    "as is": QUOTED,
    "repr": repr(QUOTED)[1:-1],  # pa"ss\\w0rd-Q7x!
    "repr, double quotes": QUOTED.replace("\\", "\\\\").replace('"', '\\"'),
    "JSON": json.dumps(QUOTED)[1:-1],
}


@pytest.fixture
def quoted():
    u.set_secret("QUOTED", QUOTED)
    yield
    u.forget_secret("QUOTED")


def test_scrub_catches_the_repr_and_json_forms_of_a_value(quoted):
    from unity_nb._secrets import scrub

    for text in (QUOTED, repr(QUOTED), repr([QUOTED]), repr({"k": QUOTED}), json.dumps({"pw": [QUOTED]}),
                 repr(repr(QUOTED)), json.dumps(repr(QUOTED)), repr(ValueError(QUOTED)), f"x{QUOTED}y"):
        scrubbed = scrub(text)
        assert "<<secret:QUOTED>>" in scrubbed, text
        assert not any(f in scrubbed for f in QUOTED_FORMS.values()), (text, scrubbed)


async def test_a_value_with_quotes_and_backslashes_reaches_the_model_in_no_form(quoted, tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    ns = {"pw": QUOTED, "creds": {"user": "me", "pw": QUOTED}}
    steps = [
        "get_secret('QUOTED')",  # the last expression's value, shown as a repr
        "[get_secret('QUOTED')]",
        "import json\nprint(json.dumps({'pw': get_secret('QUOTED')}))\nprint(repr(get_secret('QUOTED')))\n"
        "mine = get_secret('QUOTED')",
    ]

    def script(messages, tools):
        done = tool_messages(messages)
        return u.call_tool("execute_code", code=steps[len(done)], intent="show") if len(done) < len(steps) else "done"

    model = u.ScriptedModel(script)
    h = u.act("show it", model=model, namespace=ns, bus=bus)
    assert await h == "done"
    sent = [m.get("content") or "" for r in model.requests for m in r.messages]
    assert "pw: str: '<<secret:QUOTED>>'" in sent[0]  # the variable's description in the system prompt
    first, second, third = results = [m["content"] for m in tool_messages(model.requests[-1].messages)]
    assert "value of the last expression: str: '<<secret:QUOTED>>'" in first
    assert "['<<secret:QUOTED>>']" in second
    assert '{"pw": "<<secret:QUOTED>>"}' in third and "- mine: str: '<<secret:QUOTED>>'" in third
    places = {
        "requests to the model": "\n".join(sent),
        "tool results": "\n".join(results),
        "transcript": "\n".join(
            [m.content or "" for m in h.transcript]
            + [c.output + (c.result or "") for m in h.transcript for c in m.tool_calls]
        ),
        "events": "\n".join(e.model_dump_json() for e in h.events),
    }
    store.close()
    places["store"] = "".join(p.read_bytes().decode("latin-1") for p in tmp_path.glob("s.db*"))
    for where, text in places.items():
        for form, value in QUOTED_FORMS.items():
            assert value not in text, (where, form)


# -- output that arrives after its plan ended ----------------------------------------------------


async def test_a_thread_a_plan_started_prints_after_the_plan_ended_into_the_plans_record(secret, bus, capsys):
    import threading

    go = threading.Event()
    code = (
        "import threading\n"
        "def later():\n"
        "    go.wait(30)\n"
        "    print('late', get_secret('API_TOKEN'))\n"
        "t = threading.Thread(target=later, daemon=True)\n"
        "t.start()"
    )
    ns: dict[str, Any] = {"go": go}

    def script(m, t):
        return u.call_tool("execute_code", code=code, intent="leave a thread") if not tool_messages(m) else "done"

    h = u.act("start a thread", model=u.ScriptedModel(script), namespace=ns, bus=bus)
    assert await h == "done"
    go.set()
    # the thread ends before the test does: print writes its pieces one by one, and a stream swapped while a
    # print is under way crashes CPython 3.11 (print holds sys.stdout without a reference)
    await asyncio.to_thread(ns["t"].join, 10)
    await h.wait_for("tool_output", lambda e: isinstance(e, ToolOutput) and e.text.endswith("\n"), timeout=10)
    late = "".join(e.text for e in h.events if isinstance(e, ToolOutput))  # published as the pieces came
    assert late == "late <<secret:API_TOKEN>>\n"
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    assert rec.output == "late <<secret:API_TOKEN>>\n"  # it still belongs to the plan's record
    out = capsys.readouterr()
    assert "late" not in out.out and VALUE not in out.out + out.err  # not in whatever runs now


AFTER_PLAN_NOTEBOOK = [
    "%load_ext unity_nb\nimport threading\nimport unity_nb as u\nu.set_secret('API_TOKEN', env='UNB_TEST_TOKEN')\n"
    "go = threading.Event()",
    textwrap.dedent('''
        PLAN = """import threading
        def later():
            go.wait(60)
            print('late', get_secret('API_TOKEN'))
        t = threading.Thread(target=later, daemon=True)
        t.start()"""

        def script(messages, tools):
            if not [m for m in messages if m["role"] == "tool"]:
                return u.call_tool("execute_code", code=PLAN, intent="leave a thread behind")
            return "finished"

        m = u.ScriptedModel(script)
        %unity model --var m
    '''),
    "h = %unity act --name threads leave a thread",
    "await h",
    "go.set()\nt.join(60)\nprint('the next cell')",
    "late = await h.wait_for('tool_output', lambda e: 'late' in e.text, timeout=20)\n"
    "print('record:', [c for m in h.transcript for c in m.tool_calls][0].output)",
]


def test_a_thread_a_plan_started_leaks_nothing_into_the_next_cell_or_the_saved_notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("UNB_TEST_TOKEN", VALUE)
    monkeypatch.setenv("UNITY_NB_STORE", str(tmp_path / "nb.db"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in AFTER_PLAN_NOTEBOOK])
    resources = {"metadata": {"path": str(tmp_path)}}
    client = NotebookClient(nb, timeout=90, kernel_name="python3", resources=resources, allow_errors=True)
    client.execute()  # errors allowed: where the late output went is the point
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, path)
    saved = path.read_text()
    next_cell = json.dumps(nb.cells[4].outputs)
    assert "the next cell" in next_cell and "late" not in next_cell
    assert "record: late <<secret:API_TOKEN>>" in json.dumps(nb.cells[5].outputs)
    assert VALUE not in saved


async def test_a_thread_a_tool_started_prints_after_the_call_ended_into_the_calls_record(secret, routed, bus, capsys):
    import threading

    routed()
    go = threading.Event()
    started: list[threading.Thread] = []

    def start_worker() -> str:
        """Start a worker that prints the token later."""
        t = threading.Thread(target=lambda: (go.wait(30), print("worker", u.get_secret("API_TOKEN"))), daemon=True)
        t.start()
        started.append(t)
        return "started"

    script = lambda m, t: u.call_tool("start_worker") if not tool_messages(m) else "done"
    h = u.start_loop("work", model=u.ScriptedModel(script), tools=[start_worker], bus=bus)
    assert await h == "done"
    go.set()
    await asyncio.to_thread(started[0].join, 10)  # ended before the test ends and the streams are swapped back
    await h.wait_for("tool_output", lambda e: isinstance(e, ToolOutput) and e.text.endswith("\n"), timeout=10)
    late = "".join(e.text for e in h.events if isinstance(e, ToolOutput))  # published as the pieces came
    assert late == "worker <<secret:API_TOKEN>>\n"
    assert next(c for m in h.transcript for c in m.tool_calls).output == "worker <<secret:API_TOKEN>>\n"
    out = capsys.readouterr()
    assert "worker" not in out.out and VALUE not in out.out + out.err


def test_what_belongs_to_no_call_passes_through_scrubbed(secret, routed, capsys):
    import threading

    routed()
    print("mine", VALUE)  # a cell's own print
    t = threading.Thread(target=lambda: print("thread", repr(VALUE)))  # a thread started outside any call
    t.start()
    t.join(10)
    out = capsys.readouterr().out
    assert "mine <<secret:API_TOKEN>>" in out and "thread '<<secret:API_TOKEN>>'" in out and VALUE not in out
