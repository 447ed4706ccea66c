"""%unity tasks and %unity task new|run|message|show: durable tasks from the notebook."""

import asyncio

import pytest
from conftest import dead_kernel, kill, magics, tool_messages
from IPython.core.error import UsageError

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


async def test_create_list_run_message_and_show_tasks(ip, capsys):
    gate = asyncio.Event()
    gate.set()

    async def script(messages, tools):
        await gate.wait()
        users = [m["content"] for m in messages if m["role"] == "user"]
        return f"turn reply to: {users[-1]}"

    ip.user_ns["m"] = u.ScriptedModel(script)
    ip.run_line_magic("unity", "model --var m")
    table = ip.run_line_magic("unity", "tasks")
    assert list(table.columns) == ["id", "name", "status", "parent", "description", "result"] and table.empty
    ip.run_line_magic("unity", "task new report Summarise the sales.")
    ip.run_cell_magic("unity", "task new notes", "Keep notes\non the meeting.")
    out = capsys.readouterr().out
    assert "task 'report' created: t" in out and "%unity task run t" in out
    table = ip.run_line_magic("unity", "tasks")
    assert list(table["name"]) == ["report", "notes"] and list(table["status"]) == ["new", "new"]
    assert table["description"][1] == "Keep notes\non the meeting."
    report_id = table["id"][0]

    h = ip.run_line_magic("unity", "task run report")  # by name
    assert isinstance(h, u.LoopHandle) and magics(ip).handles[report_id] is h
    assert "task 'report'" in magics(ip).widgets[report_id].notice  # its live widget
    assert await h == "turn reply to: Task 'report': Summarise the sales."
    assert ip.run_line_magic("unity", "tasks")["status"][0] == "idle"

    # a message to an idle task starts a new turn, live, with its widget
    h2 = ip.run_line_magic("unity", f"task message {report_id} and by region?")
    assert isinstance(h2, u.LoopHandle) and h2 is not h and magics(ip).handles[report_id] is h2
    assert await h2 == "turn reply to: and by region?"

    # a message to a running task is delivered into its turn
    gate.clear()
    h3 = ip.run_line_magic("unity", "task message report first this")
    await h3.wait_for("model_request")
    assert ip.run_line_magic("unity", "task message report and then that") is None
    assert "delivered into the running turn of task 'report'" in capsys.readouterr().out
    assert ip.run_line_magic("unity", "task run report") is h3  # already running: its handle
    gate.set()
    await h3
    assert any("and then that" in str(m.get("content")) for m in magics(ip).tasks_manager.messages(report_id))

    turns = ip.run_line_magic("unity", "task show report")
    assert list(turns.columns) == ["turn", "started", "ended", "messages", "summary", "last_reply"]
    assert list(turns["turn"]) == [0, 1, 2]
    assert turns["summary"][0] == "turn reply to: Task 'report': Summarise the sales."
    assert turns["last_reply"][1] == "turn reply to: and by region?"
    assert "task 'report' (" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, message",
    [
        ("task", "%unity task takes an action: new, run, message, show"),
        ("task frob x", "takes an action: new, run, message, show, not 'frob'"),
        ("task new", "needs a name for the new task"),
        ("task new x", "needs a description"),
        ("task run", "needs a task's id or name"),
        ("task run nobody", "there is no task 'nobody'"),
        ("task message nobody", "needs the message's text"),
        ("task show x extra", "takes only the task"),
        ("tasks x", "%unity tasks takes no arguments"),
    ],
)
async def test_task_mistakes_are_usage_errors_with_help(ip, line, message):
    ip.user_ns["m"] = u.ScriptedModel(["ok"])
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=message) as info:
        ip.run_line_magic("unity", line)
    assert "%unity task" in str(info.value)


async def test_two_tasks_of_one_name_are_told_apart_by_id(ip):
    ip.run_line_magic("unity", "task new twin first")
    ip.run_line_magic("unity", "task new twin second")
    with pytest.raises(UsageError, match="2 tasks are named 'twin': say which by its id"):
        ip.run_line_magic("unity", "task show twin")


async def test_tasks_need_the_store(ip):
    m = magics(ip)
    m.close()
    m.store_path = "off"
    with pytest.raises(UsageError, match=r"the store is off .*, and durable tasks live in it"):
        ip.run_line_magic("unity", "tasks")
    m.store_path = ""


# -- %unity resume from the store (the real-kernel test is in test_magics_kernel.py) --------------


async def test_resume_from_the_store_takes_only_an_interrupted_top_level_operation(ip, tmp_path):
    hold = asyncio.Event()

    async def kid_script(messages, tools):
        await hold.wait()
        return "kid done"

    async def sub(x: int) -> u.LoopHandle:
        """Start a sub-operation."""
        return u.start_loop("check", model=u.ScriptedModel(kid_script), name="kid")

    def boss_script(messages, tools):
        return u.call_tool("sub", x=1) if not [m for m in messages if m["role"] == "tool"] else "boss done"

    # another "kernel" on the same file: its own store session, its own bus
    other = u.Store(str(tmp_path / "state.db"))
    bus = u.EventBus()
    other.attach(bus)
    # an act (a plain u.start_loop is refused: test_a_plain_loop_is_not_resumed_as_an_act)
    boss = u.act("go", model=u.ScriptedModel(boss_script), tools=[sub], namespace={}, name="boss", bus=bus)
    await boss.wait_for("tool_started")
    (kid,) = boss.children
    await kid.wait_for("model_request")
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone

    ip.user_ns["m"] = u.ScriptedModel(lambda m, t: "continued")
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=r"'kid' ran inside 'boss': resume that one \(%unity resume boss\)"):
        ip.run_line_magic("unity", "resume kid")
    h = ip.run_line_magic("unity", "resume boss")
    assert h.name == "boss" and await h == "continued"
    sent = ip.user_ns["m"].requests[0].messages  # the earlier conversation, as messages
    assert any(m.get("tool_calls") for m in sent if m["role"] == "assistant")
    assert any("no result was recorded (the run was interrupted)" in m["content"] for m in sent if m["role"] == "tool")
    with pytest.raises(UsageError, match="cannot resume 'boss': it is finished"):
        ip.run_line_magic("unity", "resume boss")

    plain = u.start_loop("hi", model=u.ScriptedModel(["hello"]), name="plain")  # recorded by the magics' store
    await plain
    with pytest.raises(UsageError, match="in the store it is finished: only one a dead kernel left interrupted"):
        ip.run_line_magic("unity", "resume plain")
    hold.set()
    await boss.stop()
    other.close()


async def test_a_plain_loop_is_not_resumed_as_an_act(ip, capsys):
    """A plain ``u.start_loop`` a dead kernel left interrupted was resumed as an act, which could run plans it never
    could, without the tools it had: it is refused, saying why and what to do."""
    other, bus, silent = dead_kernel(ip)

    def rate(city: str) -> str:
        """The rate of a city."""
        return "5%"

    def plain_script(messages, tools):
        return u.call_tool("rate", city="Oslo") if not tool_messages(messages) else silent(messages, tools)

    plain = u.start_loop("rate Oslo", model=u.ScriptedModel(plain_script), tools=[rate], name="plain", bus=bus)
    await plain.wait_for("model_request", lambda e: e.step >= 2, timeout=10)
    kill(other)

    ip.user_ns.pop("plain_ran", None)  # (the shell is shared by the tests)
    ip.user_ns["m"] = u.ScriptedModel(lambda m, t: u.call_tool("execute_code", code="plain_ran = 1", intent="x"))
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=r"'plain' is a plain tool loop \(u.start_loop.*not an act.*%unity show plain"):
        ip.run_line_magic("unity", "resume plain")
    assert "plain" not in magics(ip).handles and "plain_ran" not in ip.user_ns  # nothing started, no plan ran
    assert ip.user_ns["m"].requests == []
    silent.event.set()
    await plain.stop()
    other.close()


async def test_a_stored_map_line_with_an_option_given_twice_resumes_as_it_ran(ip, tmp_path):
    """A ``%unity map`` line run by a version that took the last of an option given twice (a line typed so is refused
    now) is in the store as it was typed: resuming it re-read it, and failed saying to give the option once, which
    nobody can do to a stored line. It is read as it ran: the last one taken."""
    hold = asyncio.Event()

    async def before(messages, tools):
        if messages[-1]["content"].endswith("b"):
            await hold.wait()
        return u.call_tool("submit_answer", label="then")

    # another "kernel" on the same file, which ran the line with its version: --columns label, the last one
    other = u.Store(str(tmp_path / "state.db"))
    bus = u.EventBus()
    other.attach(bus)
    line = "items --columns score --columns label Rate {value}"
    h = u.map(["a", "b"], "Rate {value}", columns="label", model=u.ScriptedModel(before), name="rated", label=line,
              bus=bus)
    await h.wait_for("row_finished")
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone

    ip.user_ns.update(items=["a", "b"], m=u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", label="now")))
    ip.run_line_magic("unity", "model --var m")
    resumed = ip.run_line_magic("unity", "resume rated")
    got = await asyncio.wait_for(resumed.result(), 10)
    assert list(got.columns) == ["label"] and got["label"].tolist() == ["then", "now"]  # row a kept, b asked
    assert resumed.rows.kept == 1
    with pytest.raises(UsageError, match="option --columns is given twice"):  # as it is typed, still refused
        ip.run_line_magic("unity", f"map {line}")
    hold.set()
    await h.stop()
    other.close()


async def test_a_message_to_a_task_another_kernel_runs_is_queued_for_it(ip, capsys):
    """%unity task message/run for a task running in another kernel sharing the store: queued for that kernel
    (never a second run here), and run says why it is refused."""
    from unity_nb.managers import TasksManager

    release = asyncio.Event()

    async def slow(messages, tools):
        await release.wait()
        return "done"

    ip.user_ns["m"] = u.ScriptedModel(slow)
    ip.run_line_magic("unity", "model --var m")
    other = u.Store(magics(ip).store.path)  # kernel A
    tm = TasksManager(store=other, model=u.ScriptedModel(slow), namespace={}, bus=u.EventBus())
    t = tm.create("job", "Take a while.")
    h = tm.execute(t.id)
    await h.wait_for("model_request", timeout=10)
    assert ip.run_line_magic("unity", f"task message {t.id} and also this") is None
    assert "runs in another kernel" in capsys.readouterr().out
    with pytest.raises(UsageError, match="running in another kernel"):
        ip.run_line_magic("unity", f"task run {t.id}")
    release.set()
    assert await asyncio.wait_for(h, 10) == "done"
    for _ in range(100):  # A starts the next turn with the message
        await asyncio.sleep(0.02)
        if len(tm.turns(t.id)) == 2 and tm.handle(t.id) is None:
            break
    assert [m["content"] for m in tm.messages(t.id) if m["role"] == "user"][-1] == "and also this"
    assert [x["summary"] for x in tm.turns(t.id)] == ["done", "done"]
    other.close()


async def test_options_before_the_items_are_in_the_line_a_resume_reads_again(ip):
    """``%unity map --columns label items ...``: the store kept the line from its items on, so a resume after a dead
    kernel ran it without ``--columns`` (its rows answered as text, its kept rows not matching)."""
    ip.user_ns.update(items=["a", "b"], m=u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", label="x")))
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "map --columns label --max-steps 3 items Rate {value}")
    got = await asyncio.wait_for(h.result(), 10)
    assert list(got.columns) == ["label"]
    store = magics(ip).store
    store.flush()
    stored = store.find(h.name)["task"]
    assert stored == "--columns label --max-steps 3 items Rate {value}"  # %unity map <this> again: as it ran
