"""%unity reaches the engine: act's loop options and --managers, answering questions, names,
steering that is never left unobserved, and base URLs named in refusals and connection errors."""

import asyncio
import gc
import socket

import pytest
from conftest import Gate, magics, settle, tool_messages
from IPython.core.error import UsageError

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def use(ip, model):
    ip.user_ns["m"] = model
    ip.run_line_magic("unity", "model --var m")
    return model


# -- item 1: act's options ---------------------------------------------------------------------


async def test_act_options_reach_the_loop(ip):
    plans = []

    def script(messages, tools):
        if messages[0]["content"].startswith("You compress"):
            return "SUMMARY of the earlier work"
        if len(plans) < 2:  # counted here: compression takes earlier results out of the messages
            plans.append(1)
            return u.call_tool("execute_code", code="print('x' * 2000)", intent="work")
        return "done"

    model = use(ip, u.ScriptedModel(script))
    h = ip.run_line_magic(
        "unity", "act --name small --context-window 64 --compress-at 0.5 --keep-last 2 --time-awareness "
        "--max-parallel-tools 3 go",
    )
    c = h.run.config
    assert (c.context_window, c.compress_at, c.keep_last, c.time_awareness) == (64, 0.5, 2, True)
    assert await h == "done"
    assert h.state.compressions >= 1 and any(e.kind == "context_compressed" for e in h.events)
    assert any(r.messages[0]["content"].startswith("You compress") for r in model.requests)
    later = [r for r in model.requests if not r.messages[0]["content"].startswith("You compress")][-1]
    assert any(m["role"] == "user" and str(m["content"]).startswith("[time now: ") for m in later.messages)


async def test_the_parallel_tool_limit_holds(ip):
    release = asyncio.Event()
    running = []

    async def slow(n: int) -> int:
        """Wait for the test."""
        running.append(n)
        await release.wait()
        return n

    def script(messages, tools):
        return [u.call_tool("slow", n=i) for i in range(4)] if not tool_messages(messages) else "all done"

    use(ip, u.ScriptedModel(script))
    u.register_tool(slow)
    try:
        h = ip.run_line_magic("unity", "act --name par --max-parallel-tools 2 go")
        started = lambda e: sum(x.kind == "tool_started" for x in h.events) >= 2
        await h.wait_for("tool_started", started)
        await settle()
        assert len(running) == 2  # the other two wait for a free slot
        release.set()
        assert await h == "all done"
        assert sorted(running) == [0, 1, 2, 3]
    finally:
        u.unregister_tool("slow")


@pytest.fixture
def settings(ip):
    """%config settings stay in the shell's config: restore the defaults after the test."""
    yield
    for name, value in (("context_window", 0), ("keep_last", 8), ("time_awareness", False), ("max_parallel_tools", 8)):
        ip.run_line_magic("config", f"UnityMagics.{name} = {value!r}")


async def test_traitlets_hold_the_defaults(ip, settings):
    use(ip, u.ScriptedModel(lambda m, t: "ok"))
    ip.run_line_magic("config", "UnityMagics.context_window = 32000")
    ip.run_line_magic("config", "UnityMagics.keep_last = 4")
    ip.run_line_magic("config", "UnityMagics.time_awareness = True")
    ip.run_line_magic("config", "UnityMagics.max_parallel_tools = 1")
    h = ip.run_line_magic("unity", "act --name d go")
    c = h.run.config
    assert (c.context_window, c.compress_at, c.keep_last, c.time_awareness) == (32000, 0.8, 4, True)
    await h
    h2 = ip.run_line_magic("unity", "act --name d2 --context-window 1000 --compress-at 0.9 go")
    assert (h2.run.config.context_window, h2.run.config.compress_at, h2.run.config.keep_last) == (1000, 0.9, 4)
    await h2
    ip.run_line_magic("config", "UnityMagics.context_window = 10")
    with pytest.raises(UsageError, match=r"UnityMagics.context_window takes a number of tokens .* not 10"):
        ip.run_line_magic("unity", "act go")


@pytest.mark.parametrize(
    "options, message",
    [
        ("--context-window 10", "--context-window takes a number of tokens (a whole number of at least 64), not '10'"),
        ("--context-window lots", "--context-window takes a number of tokens"),
        ("--compress-at 2",
         "--compress-at takes a fraction of the context window between 0.1 and 1 (e.g. 0.8), not '2'"),
        ("--keep-last 0", "--keep-last takes a whole number of at least 1, not '0'"),
        ("--max-parallel-tools none", "--max-parallel-tools takes a whole number of at least 1, not 'none'"),
        ("--time-awareness=yes", "--time-awareness is a flag: it takes no value"),
        ("--managers=1", "--managers is a flag"),
        ("--keep-last 3", "--compress-at and --keep-last tune compression, which needs --context-window"),
    ],
)
async def test_bad_option_values_say_what_the_option_takes(ip, options, message):
    use(ip, u.ScriptedModel(["ok"]))
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", f"act {options} go")
    assert message in str(info.value) and "%unity help act" in str(info.value)  # the line, and where the help is


async def test_managers_become_the_actor_s_primitives(ip):
    def script(messages, tools):
        if not tool_messages(messages):
            return u.call_tool("execute_code", code="aliases = dir(primitives)", intent="look")
        return "looked"

    model = use(ip, u.ScriptedModel(script))
    h = ip.run_line_magic("unity", "act --name mgr --managers what can you reach?")
    assert await h == "looked"
    expected = {"knowledge", "data", "functions", "guidance", "transcripts", "tasks"}
    assert expected <= set(ip.user_ns["aliases"])
    system = model.requests[0].messages[0]["content"]
    assert "Managers (call them in plans as `await primitives.<alias>.<method>(...)`)" in system
    for alias in expected:
        assert f"## {alias}: " in system
    plain = ip.run_line_magic("unity", "act --name plain go on")
    assert await plain == "looked"
    assert "## knowledge: " not in model.requests[-1].messages[0]["content"]


async def test_managers_need_the_store(ip):
    m = magics(ip)
    m.close()
    m.store_path = "off"
    use(ip, u.ScriptedModel(["ok"]))
    with pytest.raises(UsageError, match=r"the store is off .*, and --managers keep their state in it"):
        ip.run_line_magic("unity", "act --managers go")
    m.store_path = ""


# -- item 2: %unity answer ----------------------------------------------------------------------


def asker(*questions):
    def make():
        async def confirm(question: str, ctx: u.ToolContext) -> str:
            """Ask the person."""
            return await ctx.clarify(question)

        return confirm

    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return [u.call_tool("confirm", question=q) for q in questions]
        return "answers: " + ", ".join(m["content"].splitlines()[0] for m in done)

    return make(), script


async def test_answer_answers_the_one_question_waiting(ip):
    confirm, script = asker("Proceed?")
    use(ip, u.ScriptedModel(script))
    u.register_tool(confirm)
    try:
        h = ip.run_line_magic("unity", "act --name q go")
        with pytest.raises(UsageError, match="'q' has no question waiting for an answer"):
            ip.run_line_magic("unity", "answer q yes")  # asked before the question arrives
        await asyncio.wait_for(h.inbox.next_question(), 10)
        ip.run_line_magic("unity", "answer q yes, go ahead")
        assert await h == "answers: yes, go ahead"
    finally:
        u.unregister_tool("confirm")


async def test_answer_with_several_questions_takes_call(ip):
    confirm, script = asker("First?", "Second?")
    use(ip, u.ScriptedModel(script))
    u.register_tool(confirm)
    try:
        h = ip.run_line_magic("unity", "act --name two go")
        await h.wait_for("clarification_requested", lambda e: e.question == "First?")
        await h.wait_for("clarification_requested", lambda e: e.question == "Second?")
        pending = {p["question"]: p["call_id"] for p in h.inbox.questions}
        with pytest.raises(UsageError, match="'two' has 2 questions waiting: say which with") as info:
            ip.run_line_magic("unity", "answer two yes")
        assert pending["First?"] in str(info.value) and "Second?" in str(info.value)
        with pytest.raises(UsageError, match="no question with call id 'nope'"):
            ip.run_line_magic("unity", "answer two --call nope yes")
        ip.run_line_magic("unity", f"answer two --call {pending['Second?']} B")
        ip.run_line_magic("unity", f"answer --call {pending['First?']} two A")  # the option may come first
        assert await h == "answers: A, B"
    finally:
        u.unregister_tool("confirm")
    with pytest.raises(UsageError, match="needs the answer's text"):
        ip.run_line_magic("unity", "answer two")


# -- item 5: names --------------------------------------------------------------------------


async def test_a_live_name_is_refused_with_a_suggestion_and_a_finished_one_is_reused(ip, capsys):
    gate = Gate(lambda m, t: "done")
    use(ip, u.ScriptedModel(gate))
    first = ip.run_line_magic("unity", "act --name tour go")
    refused = r"tour is still running: stop it first .* or pick another name, e\.g\. tour-2"
    with pytest.raises(UsageError, match=refused):
        ip.run_line_magic("unity", "act --name tour again")
    gate.event.set()
    assert await first == "done"
    second = ip.run_line_magic("unity", "act --name tour again")
    assert second is not first and magics(ip).handles["tour"] is second
    notice = magics(ip).widgets["tour"].notice
    assert "replaced an earlier operation of that name (finished)" in notice
    await second
    ip.run_line_magic("unity", "stop tour")
    assert "tour had already finished: nothing to stop" in capsys.readouterr().out


async def test_resume_says_so_when_nothing_is_paused_and_resumes_what_is(ip, capsys):
    gate = Gate(lambda m, t: "done")
    use(ip, u.ScriptedModel(gate))
    h = ip.run_line_magic("unity", "act --name walk go")
    await h.wait_for("model_request")
    ip.run_line_magic("unity", "resume walk")  # it was never paused: said, not silently nothing
    assert "walk is running and nothing under it is paused: nothing to resume" in capsys.readouterr().out
    ip.run_line_magic("unity", "pause walk")
    await h.wait_for("steering", lambda e: e.action == "pause")
    ip.run_line_magic("unity", "resume walk")
    await h.wait_for("steering", lambda e: e.action == "resume")
    assert "nothing to resume" not in capsys.readouterr().out
    gate.event.set()
    assert await asyncio.wait_for(h.result(), 10) == "done"


async def test_pause_says_so_when_all_is_paused_already(ip, capsys):
    gate = Gate(lambda m, t: "done")
    use(ip, u.ScriptedModel(gate))
    h = ip.run_line_magic("unity", "act --name walk go")
    await h.wait_for("model_request")
    ip.run_line_magic("unity", "pause walk")
    await h.wait_for("steering", lambda e: e.action == "pause")
    assert "nothing to pause" not in capsys.readouterr().out
    ip.run_line_magic("unity", "pause walk")  # paused already: said, not silently nothing
    assert "walk is paused already, and all under it: nothing to pause" in capsys.readouterr().out
    ip.run_line_magic("unity", "resume walk")
    await h.wait_for("steering", lambda e: e.action == "resume")
    gate.event.set()
    assert await asyncio.wait_for(h.result(), 10) == "done"


# -- item 8: steering is referenced and reported ------------------------------------------------


async def test_a_failed_steering_call_shows_in_the_widget_and_none_ends_unobserved(ip, caplog, monkeypatch):
    gate = Gate(lambda m, t: "done")
    use(ip, u.ScriptedModel(gate))
    h = ip.run_line_magic("unity", "act --name racer go")
    await h.wait_for("model_request")
    real_pause = h.pause

    async def pause_after_the_end():
        await h
        await real_pause()

    async def broken_resume():
        raise RuntimeError("resume broke")

    monkeypatch.setattr(h, "pause", pause_after_the_end)
    unobserved = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: unobserved.append(context))
    ip.run_line_magic("unity", "pause racer")
    (pending,) = magics(ip).steering  # referenced while it runs
    gate.event.set()
    assert await h == "done"
    await asyncio.wait_for(asyncio.wait({pending}), 10)
    await settle()
    assert not magics(ip).steering
    assert magics(ip).widgets["racer"].notice == "%unity pause racer: cannot pause 'racer': the loop is finished"
    h2 = ip.run_line_magic("unity", "act --name racer2 go")
    gate.event.clear()
    await h2.wait_for("model_request")
    ip.run_line_magic("unity", "pause racer2")  # (resume is asked only of what is paused)
    await h2.wait_for("steering", lambda e: e.action == "pause")
    await settle()
    monkeypatch.setattr(h2, "resume", broken_resume)
    ip.run_line_magic("unity", "resume racer2")
    (pending,) = magics(ip).steering
    await asyncio.wait({pending})
    await settle()
    assert magics(ip).widgets["racer2"].notice == "%unity resume racer2: resume broke"
    assert any(r.levelname == "ERROR" and r.exc_info for r in caplog.records if r.name == "unity_nb.magics")
    monkeypatch.undo()
    await h2.resume()
    gate.event.set()
    await h2
    gc.collect()
    assert not unobserved


# -- item 6: base URLs ---------------------------------------------------------------------------


def test_a_base_url_that_is_not_a_url_is_refused_at_once_naming_it(ip):
    with pytest.raises(UsageError) as info:
        ip.run_line_magic("unity", "model gpt-x --base-url not-a-url")
    assert "'not-a-url'" in str(info.value) and "http://" in str(info.value)
    assert magics(ip).model is None  # nothing was set


async def test_a_connection_error_names_the_url_it_tried(ip):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ip.run_line_magic("unity", f"model gpt-x --base-url http://127.0.0.1:{port}/v1")
    magics(ip).model.max_retries = 0
    h = ip.run_line_magic("unity", "act --name offline hello")
    with pytest.raises(u.ModelError) as info:
        await asyncio.wait_for(h.result(), 30)
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in str(info.value)
    assert h.status.value == "failed"


# -- %unity show: a loop's transcript, from memory or the store ---------------------------------


async def test_show_gives_a_finished_row_s_transcript_from_the_store(ip):
    def script(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("shout", word=messages[-1]["content"][-1])
        return "labelled " + messages[-2]["tool_calls"][0]["function"]["arguments"]

    def shout(word: str) -> str:
        """Shout a word."""
        return word.upper()

    u.register_tool(shout)
    try:
        use(ip, u.ScriptedModel(script))
        ip.user_ns["xs"] = ["a", "b", "c"]
        h = ip.run_line_magic("unity", "map xs --name labels Echo")
        result = await asyncio.wait_for(h.result(), 10)
    finally:
        u.unregister_tool("shout")
    assert result.tolist() == ['labelled {"word": "a"}', 'labelled {"word": "b"}', 'labelled {"word": "c"}']
    assert h.rows.handle(1) is None  # a finished row's loop is not kept in memory
    table = ip.run_line_magic("unity", "show labels[1]")
    assert list(table.columns) == ["role", "kind", "content", "tool_calls"]
    assert table.iloc[0].tolist()[:2] == ["user", "task"] and table.iloc[0]["content"].endswith("b")
    assert 'shout({"word": "b"}) -> B' in table["tool_calls"].tolist()
    assert table.iloc[-1]["content"] == 'labelled {"word": "b"}'


async def test_show_gives_a_live_operation_s_transcript_and_refuses_what_it_cannot_find(ip):
    gate = Gate(lambda messages, tools: "done")
    use(ip, u.ScriptedModel(gate))
    h = ip.run_line_magic("unity", "act --name waiting think hard")
    table = ip.run_line_magic("unity", "show waiting")
    assert table[table.role != "system"]["content"].tolist() == ["think hard"]
    gate.event.set()
    assert await asyncio.wait_for(h.result(), 10) == "done"
    table = ip.run_line_magic("unity", "show waiting")
    assert table[table.role != "system"][["role", "content"]].values.tolist() == [["user", "think hard"],
                                                                                  ["assistant", "done"]]
    with pytest.raises(UsageError, match="no loop 'nowhere'"):
        ip.run_line_magic("unity", "show nowhere")
    with pytest.raises(UsageError, match="takes only a name"):
        ip.run_line_magic("unity", "show waiting now")
