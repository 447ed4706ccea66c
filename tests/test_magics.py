"""%unity through a real InteractiveShell; the widget through the Python side of its message handler."""

import asyncio
import gc
import logging
import re

import pytest
from conftest import Gate, settle, tool_messages
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget, render_html


@pytest.fixture
def ip(monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "UNITY_NB_MODEL"):
        monkeypatch.delenv(var, raising=False)
    shell = InteractiveShell.instance()  # a real shell, as in a terminal or kernel
    shell.run_line_magic("load_ext", "unity_nb")
    yield shell
    shell.run_line_magic("unload_ext", "unity_nb")


@u.tool
def double(x: int) -> int:
    """Double x."""
    return 2 * x


def double_script(messages, tools):
    done = tool_messages(messages)
    return u.call_tool("double", x=21) if tools and not done else f"answer {done[-1]['content'] if done else ''}"


async def test_act_starts_in_the_background_with_registered_tools(ip, capsys):
    ip.user_ns["m"] = u.ScriptedModel(double_script)
    ip.run_line_magic("unity", "model --var m")
    assert "model: scripted" in capsys.readouterr().out
    h = ip.run_line_magic("unity", "act double 21")
    assert isinstance(h, u.ActorHandle) and h.name == "h1" and not h.done()
    answer = await h
    assert answer == "answer 42"
    assert "double_result" not in ip.user_ns  # a JSON result the model read whole makes no variable
    h2 = ip.run_cell_magic("unity", "act --name report --max-steps 3", "Write a report\non 21")
    assert h2.name == "report" and h2.run.config.max_steps == 3 and h2.task == "Write a report\non 21"
    await h2
    table = ip.run_line_magic("unity", "list")
    assert list(table["name"]) == ["h1", "report"] and list(table["status"]) == ["finished", "finished"]
    assert list(table.columns[:6]) == ["name", "status", "steps", "tool_calls", "tokens_in", "tokens_out"]


async def test_steering_by_name(ip):
    gate = Gate(lambda m, t: "final: " + m[-1]["content"])
    ip.user_ns["m"] = u.ScriptedModel(gate)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name job do it")
    await h.wait_for("model_request")
    ip.run_line_magic("unity", "pause job")
    await h.wait_for("steering", lambda e: e.action == "pause")
    assert h.status == "paused"
    ip.run_line_magic("unity", "resume job")
    await h.wait_for("steering", lambda e: e.action == "resume")
    ip.run_line_magic("unity", "interject job also split by quarter")
    await h.wait_for("model_request", lambda e: e.step == 2)
    asked = ip.run_line_magic("unity", "ask job what have you found so far?")
    assert isinstance(asked, u.LoopHandle)
    gate.event.set()
    assert "also split by quarter" in await h
    assert isinstance(await asked.result(), str)
    h2 = ip.run_line_magic("unity", "act --name other run forever")
    gate.event.clear()
    await h2.wait_for("model_request")
    ip.run_line_magic("unity", "stop other no longer needed")
    with pytest.raises(u.Stopped, match="no longer needed"):
        await asyncio.wait_for(h2.result(), 10)


@pytest.mark.parametrize(
    "line, message",
    [
        ("frobnicate", "unknown subcommand 'frobnicate'"),
        ("help frobnicate", "no subcommand 'frobnicate'"),
        ("act", "needs a task"),
        ("act --bogus 1 x", "unknown option --bogus"),
        ("act --max-steps lots x", "--max-steps takes a whole number, not 'lots'"),
        ("act --approval sometimes x", "--approval takes one of never, first, always, not 'sometimes'"),
        ("act --code-timeout soon x", r"--code-timeout takes a number of seconds >= 0 \(0: no limit\), not 'soon'"),
        ("act --code-timeout -5 x", r"--code-timeout takes a number of seconds >= 0 \(0: no limit\), not '-5'"),
        ("act --approval first --approval never x", "option --approval is given twice: give it once"),
        ("act --multi --multi x", "option --multi is given twice: give it once"),
        ("pause nobody", "no operation named 'nobody'"),
        ("interject", "needs the name of an operation"),
        ("ask someone", "needs a question"),
    ],
)
async def test_bad_input_is_a_usage_error_with_help(ip, line, message):
    ip.user_ns["m"] = u.ScriptedModel(["ok"])
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=message) as info:
        ip.run_line_magic("unity", line)
    assert "%unity" in str(info.value)  # the subcommand's help (or all of them) follows


@pytest.mark.parametrize("line", ['act --name "my job" do it', "act --name='my job' do it",
                                  'map xs --name "my job" Label {x}'])
async def test_a_name_of_more_than_one_word_is_refused_as_no_magic_could_steer_it(ip, line):
    """``--name "my job"`` started an operation every steering line reads as ``my`` (one word): ``%unity stop my
    job`` said there was no operation ``my`` (or stopped one of that name)."""
    ip.user_ns["m"] = u.ScriptedModel(["ok"])
    ip.user_ns["xs"] = ["a", "b"]
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match="option --name takes a name of one word"):
        ip.run_line_magic("unity", line)
    assert ip.run_line_magic("unity", "list").empty  # nothing started


@pytest.mark.parametrize("line, needed", [
    ("map xs --batch-poll 5 Label {x}", "--batch-poll goes with --via batch"),
    ("map xs --ray-workers 2 Label {x}", "--ray-workers goes with --backend ray"),
    ("map xs --via live --batch-poll 5 Label {x}", "--batch-poll goes with --via batch"),
    ("filter xs --ray-address auto is it a", "--ray-address goes with --backend ray"),
])
async def test_an_option_without_the_one_it_goes_with_is_refused_not_dropped(ip, line, needed):
    """``--batch-poll`` without ``--via batch`` (or ``--ray-*`` without ``--backend ray``) was dropped without a word:
    the rows ran live, in this kernel, as if the option had not been typed."""
    ip.user_ns["m"] = u.ScriptedModel(["ok"])
    ip.user_ns["xs"] = ["a", "b"]
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=needed):
        ip.run_line_magic("unity", line)
    assert ip.run_line_magic("unity", "list").empty  # nothing started


@pytest.mark.parametrize("line, message", [
    ("model gpt-4.1-mini --var m", "give no NAME 'gpt-4.1-mini' beside it"),
    ("model --var m extra", "give no NAME 'extra' beside it"),
    ("model --var m --base-url http://127.0.0.1:9/v1", "give no --base-url beside it"),
    ("model --var nothere", "no variable named `nothere` in this notebook"),
])
def test_model_from_a_variable_takes_nothing_beside_it_and_names_a_missing_variable(ip, capsys, line, message):
    """A NAME or --base-url beside --var was dropped silently (the variable's model used); a variable that does not
    exist was said to be "not a model"."""
    ip.user_ns["m"] = u.ScriptedModel(["ok"])
    with pytest.raises(UsageError, match=re.escape(message)):
        ip.run_line_magic("unity", line)
    assert "model: " not in capsys.readouterr().out  # no model was set


@pytest.mark.parametrize("line, shows", [
    ("", "%unity act"), ("help", "%unity submit"), ("--help", "%unity history"), ("act --help", "--approval"),
    ("help model", "--base-url"), ("?", "%unity stop"), ("help", "%unity answer"), ("help", "%unity task new"),
    ("act --help", "--context-window"), ("help resume", "continues from the store"), ("tasks --help", "Durable tasks"),
])
def test_help_is_shown_not_refused(ip, capsys, line, shows):
    assert ip.run_line_magic("unity", line) is None
    assert shows in capsys.readouterr().out


async def test_steering_a_finished_operation_names_its_state(ip):
    ip.user_ns["m"] = u.ScriptedModel(["done"])
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name quick hi")
    await h
    with pytest.raises(UsageError, match="cannot pause 'quick': it is finished"):
        ip.run_line_magic("unity", "pause quick")


async def test_no_model_names_the_ways_to_configure_one(ip):
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", "act do something")
    for needle in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "%unity model"):
        assert needle in str(info.value)
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        ip.run_line_magic("unity", "model gpt-4.1-mini")


async def test_the_api_key_never_shows(ip, monkeypatch, capsys):
    secret = "sk-very-secret-key-1234567890"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    ip.run_line_magic("unity", "model gpt-4.1-mini --base-url http://127.0.0.1:9/v1")
    ip.run_line_magic("unity", "model")
    out = capsys.readouterr().out
    assert "gpt-4.1-mini" in out and "127.0.0.1:9" in out and secret not in out
    magics = ip.magics_manager.registry["UnityMagics"]
    assert secret not in repr(magics.model)


async def test_a_servers_password_from_the_environment_never_shows_in_a_cell(ip, monkeypatch, capsys):
    """``OPENAI_BASE_URL=https://user:PASSWORD@proxy/v1?api_key=...``: no model can use such a URL (it is refused
    when the model is made, saying why), and nothing a cell shows, its output or its error (saved with the
    notebook), holds the password or the key."""
    password = "pw-from-the-env-5678"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-very-secret-key-1234567890")
    for url, why in [
        (f"http://team:{password}@127.0.0.1:9/v1?api-version=2024-10&api_key=kq-9f8e7d", "carries credentials"),
        ("http://127.0.0.1:9/v1?api-version=2024-10&api_key=kq-9f8e7d", "has a query"),
    ]:
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        for line in ("model gpt-4.1-mini", "model list"):
            with pytest.raises(UsageError) as refused:
                ip.run_line_magic("unity", line)
            said = str(refused.value) + capsys.readouterr().out
            assert why in said and "api_key=***" in said, (line, said)
            assert password not in said and "kq-9f8e7d" not in said, (line, said)


async def test_settings_are_traitlets(ip, monkeypatch):
    magics = ip.magics_manager.registry["UnityMagics"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x-123456789")
    ip.run_line_magic("config", "UnityMagics.default_model = 'my-default'")
    assert magics.default_model == "my-default"
    assert magics.current_model().name == "my-default"


async def test_unload_removes_the_magics_but_stops_nothing(ip):
    shell = ip
    gate = Gate(lambda m, t: "done")
    shell.user_ns["m"] = u.ScriptedModel(gate)
    shell.run_line_magic("unity", "model --var m")
    h = shell.run_line_magic("unity", "act keep going")
    shell.run_line_magic("unload_ext", "unity_nb")
    assert "unity" not in shell.magics_manager.magics["line"]
    shell.run_line_magic("load_ext", "unity_nb")  # the fixture unloads again
    assert not h.done()
    gate.event.set()
    assert await h == "done"


# -- the widget ---------------------------------------------------------------------------


async def test_widget_buttons_call_the_handle_api():
    gate = Gate(lambda m, t: "final: " + m[-1]["content"])
    h = u.start_loop("do it", model=u.ScriptedModel(gate), name="w")
    w = HandleWidget(h)
    await h.wait_for("model_request")
    w._on_custom(w, {"action": "pause", "node": h.id}, [])
    await h.wait_for("steering", lambda e: e.action == "pause")
    await settle()
    assert w.nodes[0]["status"] == "paused"
    w._on_custom(w, {"action": "resume", "node": h.id}, [])
    await h.wait_for("steering", lambda e: e.action == "resume")
    w._on_custom(w, {"action": "interject", "node": h.id, "text": "shorter please"}, [])
    await h.wait_for("model_request", lambda e: e.step == 2)
    w._on_custom(w, {"action": "ask", "node": h.id, "text": "status?"}, [])
    await h.wait_for("steering", lambda e: e.action == "ask")
    await settle()
    assert w.asks[0]["question"] == "status?"
    gate.event.set()
    await h
    await settle()
    w.flush()
    assert w.nodes[0]["status"] == "finished" and w.nodes[0]["answer"].startswith("final:")
    kinds = [e["kind"] for e in w.entries[h.id]]
    assert kinds[:4] == ["task", "steering", "steering", "interjection"]
    w._on_custom(w, {"action": "pause", "node": h.id}, [])  # a click on an ended handle: shown, not raised
    await settle()
    assert "finished" in w.notice


async def test_widget_shows_children_and_answers_clarifications():
    async def confirm(ctx: u.ToolContext) -> str:
        """Confirm with the person."""
        return await ctx.clarify("Proceed?")

    child_model = u.ScriptedModel(
        lambda m, t: u.call_tool("confirm") if not tool_messages(m) else "child: " + tool_messages(m)[0]["content"]
    )

    async def sub(x: int) -> u.LoopHandle:
        """Start a sub-operation."""
        return u.start_loop("check", model=child_model, tools=[confirm], name="kid")

    parent_model = u.ScriptedModel(
        lambda m, t: u.call_tool("sub", x=1) if not tool_messages(m) else tool_messages(m)[0]["content"]
    )
    parent = u.start_loop("go", model=parent_model, tools=[sub], name="boss")
    w = HandleWidget(parent)
    q = await asyncio.wait_for(parent.inbox.next_question(), 10)
    w.flush()
    kid = parent.children[0]
    assert [(n["name"], n["depth"], n["status"]) for n in w.nodes] == [("boss", 0, "waiting"), ("kid", 1, "waiting")]
    assert w.nodes[1]["clarifications"] == [{"call_id": q["call_id"], "question": "Proceed?"}]
    w._on_custom(w, {"action": "answer", "node": kid.id, "text": "yes", "call_id": q["call_id"]}, [])
    assert await parent == "child: yes"


async def test_widget_updates_are_coalesced():
    model = u.ScriptedModel(lambda m, t: "x" * 500, chunk=1)  # 500 deltas in one burst
    h = u.start_loop("stream", model=model)
    w = HandleWidget(h, max_hz=10)
    before = w.flushes
    await h
    deltas = sum(1 for e in h.events if e.kind == "model_delta")
    await settle()
    assert deltas == 500
    assert w.flushes - before <= 3  # one throttled flush for the burst, one at the end


async def test_repr_and_static_snapshot():
    h = u.start_loop("say <hi>", model=u.ScriptedModel(["hello & bye"]), name="snap")
    await h
    w = HandleWidget(h)
    bundle, _metadata = w._repr_mimebundle_()
    assert bundle["text/plain"] == "<unity handle 'snap': finished, 1 steps>"
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "say &lt;hi&gt;" in bundle["text/html"] and "hello &amp; bye" in bundle["text/html"]
    assert "<script" not in render_html(h)


async def test_a_question_mark_ends_a_question_not_a_help_request(ip):
    ip.user_ns["m"] = u.ScriptedModel(lambda m, t: "you asked: " + m[-1]["content"])
    ip.run_line_magic("unity", "model --var m")
    ip.run_cell("h = %unity act --name q What sold most?")
    h = ip.user_ns["h"]
    assert h.task == "What sold most?" and await h == "you asked: What sold most?"
    ip.run_cell("a = %unity ask q what have you found so far?")
    assert ip.user_ns["a"].task == "what have you found so far?"
    assert ip.transform_cell("len?") == "get_ipython().run_line_magic('pinfo', 'len')\n"  # help still works


async def test_what_a_tool_prints_goes_to_its_call_not_the_cell(ip, capsys):
    def noisy(x: int) -> int:
        """Print while working (runs in a worker thread)."""
        print("working on", x)
        return x

    async def anoisy(x: int) -> int:
        """Print while working (runs on the event loop)."""
        print("async work on", x)
        return x

    def script(messages, tools):
        return [u.call_tool("noisy", x=1), u.call_tool("anoisy", x=2)] if not tool_messages(messages) else "done"

    ip.user_ns["m"] = u.ScriptedModel(script)
    ip.run_line_magic("unity", "model --var m")
    u.register_tool(noisy), u.register_tool(anoisy)
    try:
        h = ip.run_line_magic("unity", "act --name noisy go")
        assert await h == "done"
    finally:
        u.unregister_tool("noisy"), u.unregister_tool("anoisy")
    calls = {c.name: c for m in h.transcript for c in m.tool_calls}
    assert calls["noisy"].output == "working on 1\n" and calls["anoisy"].output == "async work on 2\n"
    assert "work" not in capsys.readouterr().out
    assert "".join(e.text for e in h.events if e.kind == "tool_output" and e.name == "noisy") == "working on 1\n"
    w = ip.magics_manager.registry["UnityMagics"].widgets["noisy"]
    w.flush()
    shown = [c for e in w.entries[h.id] for c in e.get("calls", [])]
    assert {c["name"]: c["output"] for c in shown} == {"noisy": "working on 1\n", "anoisy": "async work on 2\n"}
    print("a plain print still reaches the cell")
    assert "a plain print still reaches the cell" in capsys.readouterr().out


# -- the actor behind %unity act ------------------------------------------------------------


def plan_script(*codes):
    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < len(codes):
            return u.call_tool("execute_code", code=codes[len(done)], intent=f"plan {len(done) + 1}")
        return "done"

    return script


async def test_what_a_plan_displays_goes_to_the_widget_not_the_cell(ip, capsys):
    import pandas as pd

    ip.user_ns["sales"] = pd.DataFrame({"region": ["north", "south"], "delta": [3, -4]})
    ip.user_ns["m"] = u.ScriptedModel(plan_script(
        "from IPython.display import display\nprint('PLAN-PRINT')\ndisplay(sales)\nint(sales.delta.sum())"
    ))
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name shows show the data")
    assert await h == "done"
    assert "PLAN-PRINT" not in capsys.readouterr().out  # nothing leaked into the cell
    (call,) = [c for m in h.transcript for c in m.tool_calls]
    assert call.output == "PLAN-PRINT\n"
    assert [sorted(d["data"]) for d in call.displays] == [["text/html", "text/plain"], ["text/plain"]]
    assert "<table" in call.displays[0]["data"]["text/html"] and call.displays[1]["data"]["text/plain"] == "-1"
    result = tool_messages(ip.user_ns["m"].requests[-1].messages)[0]["content"]
    assert "displayed to the user (text/html)" in result and "value of the last expression: int: -1" in result
    w = ip.magics_manager.registry["UnityMagics"].widgets["shows"]
    w.flush()
    shown = next(c for e in w.entries[h.id] for c in e.get("calls", []))
    assert "<table" in shown["displays"][0]["text/html"] and shown["output"] == "PLAN-PRINT\n"


async def test_approval_through_the_widget_and_the_magics(ip):
    ip.user_ns["m"] = u.ScriptedModel(plan_script("ran_one = True", "ran_two = True"))
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name careful --approval always be careful")
    first = await h.wait_for("approval_requested", timeout=10)
    w = ip.magics_manager.registry["UnityMagics"].widgets["careful"]
    w.flush()
    assert w.nodes[0]["status"] == "waiting"
    assert w.nodes[0]["approvals"] == [{"call_id": first.call_id, "code": "ran_one = True", "intent": "plan 1"}]
    assert "ran_one" not in ip.user_ns
    w._on_custom(w, {"action": "approve", "node": h.id, "call_id": first.call_id}, [])  # the Run button
    await h.wait_for("code_executed", timeout=10)
    assert ip.user_ns["ran_one"] is True
    await h.wait_for("approval_requested", lambda e: e.call_id != first.call_id, timeout=10)
    ip.run_line_magic("unity", "skip careful not now")
    assert await h == "done"
    assert "ran_two" not in ip.user_ns
    skipped = tool_messages(ip.user_ns["m"].requests[-1].messages)[1]["content"]
    assert "[the person skipped this plan; it did not run]: not now" in skipped
    with pytest.raises(UsageError, match=r"has no plan or tool call waiting for approval|is finished"):
        ip.run_line_magic("unity", "approve careful")


async def test_act_options_are_checked(ip):
    ip.user_ns["m"] = u.ScriptedModel(plan_script())
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match="--approval"):
        ip.run_line_magic("unity", "act --approval sometimes go")
    with pytest.raises(UsageError, match="--code-timeout"):
        ip.run_line_magic("unity", "act --code-timeout soon go")


async def test_widget_shows_cited_references_thinking_and_idle():
    def search(query: str) -> u.ToolResult:
        """Search."""
        return u.ToolResult("hits", references=[
            u.Reference("Q3 report", "North fell.", url="https://example.invalid/q3"),
            u.Reference("Bad link", "x", url="javascript:alert(1)"),
        ])

    def script(messages, tools):
        if not tool_messages(messages):
            return u.Reply(content="Searching the reports.", tool_calls=[u.call_tool("search", query="north")])
        return "North fell [1], see also [2]."

    h = u.start_loop("north?", model=u.ScriptedModel(script), tools=[search], multi=True, persist=True, name="refs")
    w = HandleWidget(h)
    await h.requests[0]
    await h.wait_for("request_finished")
    for _ in range(1000):  # the loop goes idle once it has handled the request's end (no event says so)
        if h.status == "idle":
            break
        await asyncio.sleep(0)
    w.flush()
    node = w.nodes[0]
    assert node["status"] == "idle" and node["thinking"] == "Searching the reports."
    assert node["references"] == [
        {"number": 1, "title": "Q3 report", "url": "https://example.invalid/q3", "text": "North fell."},
        {"number": 2, "title": "Bad link", "url": None, "text": "x"},  # never a javascript: link
    ]
    assert [e["kind"] for e in w.entries[h.id]][:2] == ["task", "text"]
    await h.stop()


async def test_code_and_managers_use_the_model_set_with_the_magic(ip):
    from unity_nb.managers import FunctionsManager

    ip.user_ns["m"] = u.ScriptedModel(lambda m, t: "from the magic's model")
    ip.run_line_magic("unity", "model --var m")
    assert await u.act("hello", namespace={}) == "from the magic's model"
    assert await FunctionsManager().ask("what exists?") == "from the magic's model"


async def test_a_multi_operation_takes_more_requests_with_submit(ip):
    import pandas as pd

    ip.user_ns["sales"] = pd.DataFrame({"region": ["north", "south"], "delta": [3, -4]})

    def script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        assert "final_answer" in names
        users = [m["content"] for m in messages if m["role"] == "user"]
        results = [m["content"] for m in tool_messages(messages)]
        if not results:
            return u.call_tool("execute_code", code="final_answer(1)", intent="try to end the run in a plan")
        if "[request r2]" in "\n".join(users) and not any("r2 completed" in r for r in results):
            if not any("total" in r for r in results):
                return u.call_tool("execute_code", code="total = int(sales.delta.sum())", intent="sum")
            return u.call_tool("final_answer", request_id="r2", answer="the total is -1")
        return u.call_tool("final_answer", request_id="r1", answer="north rose")

    gate = Gate(script)
    ip.user_ns["m"] = u.ScriptedModel(gate)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --multi --name chat How did north do?")
    r2 = ip.run_line_magic("unity", "submit chat and what is the total?")
    assert isinstance(r2, u.RequestHandle) and r2.request_id == "r2"
    gate.event.set()
    assert await r2 == "the total is -1" and await h.requests[0] == "north rose"
    assert await h == {"r1": "north rose", "r2": "the total is -1"}
    assert ip.user_ns["total"] == -1  # a request's plan works in the notebook's namespace too
    first_plan = tool_messages(ip.user_ns["m"].requests[-1].messages)[0]["content"]
    assert "complete one with the tool final_answer(request_id, answer), not in a plan" in first_plan
    system = ip.user_ns["m"].requests[0].messages[0]["content"]
    assert "Complete each one with the\n  tool final_answer(request_id, answer)" in system
    ip.user_ns["m2"] = u.ScriptedModel(["hi"])
    ip.run_line_magic("unity", "model --var m2")
    single = ip.run_line_magic("unity", "act --name one hello")
    with pytest.raises(UsageError, match="serves one request: start it with `%unity act --multi"):
        ip.run_line_magic("unity", "submit one more")
    await single
    with pytest.raises(UsageError, match="--multi is a flag"):
        ip.run_line_magic("unity", "act --multi=yes go")


@pytest.mark.parametrize("arg", ["²", "99999999999999999999999", "1" * 5000, "-1", "3 rows"])
async def test_history_takes_only_a_plain_number_of_rows(ip, arg):
    with pytest.raises(UsageError, match="%unity history takes an optional number of rows") as info:
        ip.run_line_magic("unity", f"history {arg}")
    assert str(info.value).endswith("\n(%unity help history shows its usage)")  # where the help is, not the help


async def test_a_steering_call_losing_the_race_with_the_end_is_reported_not_left_unobserved(ip, caplog, monkeypatch):
    gate = Gate(lambda m, t: "done")
    ip.user_ns["m"] = u.ScriptedModel(gate)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name racer go")
    await h.wait_for("model_request")
    real_pause = h.pause

    async def pause_after_the_end():  # the loop ends between the magic's check and the pause arriving
        await h
        await real_pause()

    monkeypatch.setattr(h, "pause", pause_after_the_end)
    unobserved = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unobserved.append(context))
    ip.run_line_magic("unity", "pause racer")  # accepted: the loop is live now
    steering = set(ip.magics_manager.registry["UnityMagics"].steering)  # the pause, referenced until it ends
    gate.event.set()
    assert await h == "done"
    await asyncio.wait_for(asyncio.wait(steering), 10)
    await settle()
    assert "cannot pause 'racer': the loop is finished" in caplog.text
    (record,) = [r for r in caplog.records if r.name == "unity_nb.magics"]
    assert record.levelname == "WARNING" and record.getMessage().startswith("%unity pause racer: ")
    gc.collect()  # an unobserved task's exception would be reported now
    assert not unobserved


async def test_an_async_subscriber_s_failure_is_logged_not_left_unobserved(caplog):
    bus = u.EventBus()

    async def broken(event):
        raise RuntimeError(f"subscriber broke on {event.kind}")

    bus.subscribe(broken)
    unobserved = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unobserved.append(context))
    logged = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record):
            if "subscriber broke on loop_finished" in record.getMessage() or (
                record.exc_info and "subscriber broke on loop_finished" in str(record.exc_info[1])
            ):
                logged.set()

    watch = Watch()
    logging.getLogger("unity_nb.events").addHandler(watch)
    try:
        assert await u.start_loop("hi", model=u.ScriptedModel(["ok"]), bus=bus) == "ok"
        await asyncio.wait_for(logged.wait(), 10)
    finally:
        logging.getLogger("unity_nb.events").removeHandler(watch)
    assert all(r.name == "unity_nb.events" and r.exc_info for r in caplog.records)
    gc.collect()
    assert not unobserved


async def test_the_store_s_problems_show_in_live_widgets_and_a_damaged_file_is_named(ip, tmp_path):
    magics = ip.magics_manager.registry["UnityMagics"]
    magics.close()
    magics.store_path = str(tmp_path / "s.db")
    gate = Gate(lambda m, t: "done")
    ip.user_ns["m"] = u.ScriptedModel(gate)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name job go")
    await h.wait_for("model_request")
    store = magics.store
    store.execute(f"PRAGMA max_page_count = {store.query('PRAGMA page_count')[0]['page_count']}")
    await h.interject("x" * 100_000)  # an event the full file cannot take
    assert magics.widgets["job"].notice.startswith("store: disk full, ")
    store.execute("PRAGMA max_page_count = 1073741823")
    store.flush()  # space returned: the backlog is written and the notice goes
    assert magics.widgets["job"].notice == "" and store.waiting == 0
    gate.event.set()
    await h
    magics.close()
    (tmp_path / "bad.db").write_bytes(b"not a database at all" * 100)
    magics.store_path = str(tmp_path / "bad.db")
    with pytest.raises(UsageError, match="move it aside") as info:
        ip.run_line_magic("unity", "history")
    assert str(tmp_path / "bad.db") in str(info.value) and "UNITY_NB_STORE" in str(info.value)
    magics.store_path = ""


def test_a_base_url_that_is_not_a_url_is_refused_naming_it(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="'not-a-url'"):
        ip.run_line_magic("unity", "model gpt-x --base-url not-a-url")


def test_models_the_magics_made_are_closed_when_replaced_and_on_unload(ip, monkeypatch):
    closed = []
    monkeypatch.setattr(u.OpenAIModel, "close_now", lambda self: closed.append(self.name))
    ip.run_line_magic("unity", "model first --base-url http://127.0.0.1:9/v1")
    ip.run_line_magic("unity", "model second --base-url http://127.0.0.1:9/v1")
    assert closed == ["first"]
    ip.user_ns["mine"] = u.ScriptedModel(["hi"])
    ip.run_line_magic("unity", "model --var mine")  # the person's own model is theirs to close
    assert closed == ["first", "second"]
    ip.run_line_magic("unity", "model third --base-url http://127.0.0.1:9/v1")
    ip.run_line_magic("unload_ext", "unity_nb")
    assert closed == ["first", "second", "third"]
    ip.run_line_magic("load_ext", "unity_nb")


async def test_the_widget_shows_reasoning_as_it_streams_and_keeps_it_with_its_answer():
    class Thinker:
        """A model that streams reasoning, then waits before it answers (the Model protocol's thinking channel)."""

        name = "thinker"

        def __init__(self):
            self.go = asyncio.Event()

        async def complete(self, request, on_delta=None):
            on_delta.thinking("weighing the west ")
            on_delta.thinking("against the east")
            await self.go.wait()
            on_delta("West.")
            return u.models.Reply(content="West.", thinking="weighing the west against the east")

    m = Thinker()
    h = u.start_loop("which?", model=m)
    w = HandleWidget(h)
    await h.wait_for("model_delta", lambda e: e.thinking and e.text == "against the east")
    w.flush()
    assert w.nodes[0]["reasoning"] == "weighing the west against the east" and w.nodes[0]["streaming"] == ""
    m.go.set()
    assert await asyncio.wait_for(h.result(), 10) == "West."
    w.flush()
    assert w.nodes[0]["reasoning"] == ""
    answer = w.entries[h.id][-1]
    assert (answer["kind"], answer["content"]) == ("answer", "West.")
    assert answer["thinking"] == "weighing the west against the east"



async def test_a_handle_displayed_in_a_later_cell_has_its_snapshot_beside_its_widget(ip):
    """``h`` in a later cell showed the widget alone: a notebook reopened without widget state (JupyterLab's
    default) shows "model not found" there, where ``%unity act``'s own cell shows the snapshot output after it."""
    from IPython.utils.capture import capture_output

    ip.user_ns["m"] = u.ScriptedModel(["The answer is ANSWER-42."])
    ip.run_line_magic("unity", "model --var m")
    ip.run_cell("h = %unity act say it", store_history=True).raise_error()
    assert await ip.user_ns["h"] == "The answer is ANSWER-42."
    with capture_output() as later:
        ip.run_cell("h", store_history=True).raise_error()
    kinds = [sorted(o.data) for o in later.outputs]
    assert kinds == [["application/vnd.jupyter.widget-view+json", "text/html", "text/plain"], ["text/html"]]
    snapshot = later.outputs[1].data["text/html"]
    assert "unity-nb-snapshot" in snapshot and "ANSWER-42" in snapshot


async def test_a_variables_name_taken_by_a_live_operation_is_said_with_the_name_given_instead(ip, capsys):
    """``labels = %unity act ...`` run again while the first ``labels`` ran named the new one ``labels-2`` without a
    word: ``labels`` (the variable) is the new operation, while ``%unity stop labels`` stops the earlier one."""
    go = asyncio.Event()

    async def slow(messages, tools):
        await go.wait()
        return "done"

    ip.user_ns["m"] = u.ScriptedModel(slow)
    ip.run_line_magic("unity", "model --var m")
    ip.run_cell("labels = %unity act work", store_history=True).raise_error()
    ip.run_cell("labels = %unity act work again", store_history=True).raise_error()
    assert ip.user_ns["labels"].name == "labels-2"
    said = ("The operation named 'labels' still runs, so this one is 'labels-2': steer it as labels-2 "
            "(%unity stop labels-2); %unity stop labels stops the earlier one.")
    magics = ip.magics_manager.registry["UnityMagics"]
    assert said in magics.widgets["labels-2"].notice
    magics.show_widgets = False
    capsys.readouterr()
    ip.run_cell("labels = %unity act and again", store_history=True).raise_error()
    assert said.replace("labels-2", "labels-3") in capsys.readouterr().out
    go.set()
    for h in list(magics.handles.values()):
        assert await asyncio.wait_for(h.result(), 10) == "done"
