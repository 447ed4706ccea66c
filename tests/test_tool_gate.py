"""The tool gate (issue 24, item 0): a call runs only if its tool was offered at that step, and a
tool marked ``needs_approval`` (or any JSON tool of an actor with ``approval="always"``) waits for
the person's approve or skip. Driven by ScriptedModel, synchronised on events."""

import asyncio

import pytest
from conftest import assert_every_call_answered_once, tool_messages

import unity_nb as u

RAN: list[str] = []


def hidden_tool() -> str:
    """A tool with a side effect that a policy keeps away from the model."""
    RAN.append("hidden")
    return "HIDDEN RAN"


def list_functions() -> str:
    """Discovery: what functions exist."""
    return "functions: hidden_tool"


def results(model):
    return [m["content"] for m in tool_messages(model.requests[-1].messages)]


@pytest.fixture(autouse=True)
def _clear():
    RAN.clear()
    yield
    RAN.clear()


async def test_a_tool_hidden_by_discovery_first_does_not_run_when_the_model_names_it(bus):
    def script(messages, tools):
        done = tool_messages(messages)
        if not done:  # only list_functions is offered: the model calls the hidden tool anyway
            assert [t["function"]["name"] for t in tools] == ["list_functions"]
            return u.call_tool("hidden_tool")
        return "gave up" if len(done) == 1 else "unexpected"

    model = u.ScriptedModel(script)
    h = u.start_loop(
        "do it", model=model, tools=[list_functions, hidden_tool], bus=bus,
        tool_policy=u.discovery_first("list_functions"), max_steps=4,
    )
    assert await h == "gave up"
    assert RAN == []  # the side effect never happened
    (refusal,) = results(model)
    assert refusal.startswith("error: hidden_tool is not available at this step, so it did not run")
    assert "the tools you may call now: list_functions" in refusal
    rec = next(c for m in h.transcript for c in m.tool_calls)
    assert rec.error and rec.result == refusal
    assert_every_call_answered_once(h)


async def test_a_tool_policy_that_hides_a_tool_is_held_and_the_loop_goes_on(bus):
    def policy(step, tools):
        return "auto", [t for t in tools if t.name != "hidden_tool"]

    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return [u.call_tool("hidden_tool"), u.call_tool("list_functions")]  # one hidden, one offered
        return "done: " + " | ".join(m["content"] for m in done)

    model = u.ScriptedModel(script)
    h = u.start_loop("go", model=model, tools=[hidden_tool, list_functions], tool_policy=policy, bus=bus)
    answer = await h
    assert RAN == []
    assert "hidden_tool is not available at this step" in answer and "functions: hidden_tool" in answer
    assert h.state.called_tools == {"list_functions"}


async def test_a_dynamic_tool_of_an_earlier_step_is_refused_at_a_step_that_does_not_offer_it(bus):
    def make_tools(loop):
        if loop.tool_calls:  # offered until a call has completed
            return []

        def once() -> str:
            """Offered at the first step only."""
            RAN.append("once")
            return "ran once"

        return [once]

    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < 2:
            return u.call_tool("once")
        return "done"

    model = u.ScriptedModel(script)
    h = u.start_loop("go", model=model, dynamic_tools=make_tools, tools=[list_functions], bus=bus)
    assert await h == "done"
    assert RAN == ["once"]  # offered at step 1 and run; named again at step 2, where it was not offered
    first, second = results(model)
    assert first == "ran once"
    assert second.startswith("error: there is no tool named 'once'")
    assert "the tools you may call now: list_functions" in second


# ---------------------------------------------------------------------------- approval of tools


def delete_rows(table: str) -> str:
    """Delete every row of a table (irreversible)."""
    RAN.append(table)
    return f"deleted {table}"


async def test_a_tool_marked_needs_approval_waits_and_runs_once_approved(bus):
    tool = u.as_tool(delete_rows, needs_approval=True)
    model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table="t1") if not tool_messages(m) else "done")
    h = u.start_loop("clean up", model=model, tools=[tool], bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "delete_rows" and '"t1"' in asked.code
    assert h.status == u.Status.WAITING
    assert RAN == []
    (pending,) = h.inbox.approvals
    assert pending["tool"] == "delete_rows" and pending["call_id"] == asked.call_id
    await h.inbox.approve()
    assert await h == "done"
    assert RAN == ["t1"]
    assert results(model) == ["deleted t1"]
    assert h.inbox.approvals == []
    assert any(m.content == "[call to delete_rows approved by the user]" for m in h.transcript)


async def test_a_skipped_tool_call_does_not_run_and_the_model_reads_the_reason(bus):
    tool = u.as_tool(delete_rows, needs_approval=True)
    model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table="t2") if not tool_messages(m) else "ok")
    h = u.start_loop("clean up", model=model, tools=[tool], bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    await h.inbox.skip(asked.call_id, reason="not the production table")
    assert await h == "ok"
    assert RAN == []
    assert results(model) == ["[the person skipped this call; delete_rows did not run]: not the production table"]
    decided = await h.wait_for("approval_decided", timeout=10)
    assert decided.approved is False and decided.reason == "not the production table"


async def test_stop_while_a_tool_call_waits_for_approval_ends_the_loop_and_the_tool_never_runs(bus):
    tool = u.as_tool(delete_rows, needs_approval=True)
    model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table="t3"))
    h = u.start_loop("clean up", model=model, tools=[tool], bus=bus)
    await h.wait_for("approval_requested", timeout=10)
    await h.stop("changed my mind")
    with pytest.raises(u.Stopped):
        await h
    assert RAN == []
    assert h.inbox.approvals == []
    rec = next(c for m in h.transcript for c in m.tool_calls)
    assert rec.result.startswith("cancelled") and rec.error


async def test_a_child_loops_tool_call_waiting_is_approved_from_the_parent(bus):
    tool = u.as_tool(delete_rows, needs_approval=True)

    def start_child() -> u.LoopHandle:
        """Start the clean-up as a sub-operation."""
        child_model = u.ScriptedModel(
            lambda m, t: u.call_tool("delete_rows", table="t4") if not tool_messages(m) else "child done"
        )
        return u.start_loop("clean", model=child_model, tools=[tool], name="cleaner")

    model = u.ScriptedModel(lambda m, t: u.call_tool("start_child") if not tool_messages(m) else "parent done")
    h = u.start_loop("go", model=model, tools=[start_child], bus=bus)
    while not h.inbox.approvals:
        await h.wait_for("child_started", timeout=10)
        child = h.children[0]
        await child.wait_for("approval_requested", timeout=10)
    (pending,) = h.inbox.approvals
    assert pending["loop"] == "cleaner"
    assert h.status == u.Status.WAITING  # the parent says it waits for the person too
    await h.inbox.approve(pending["call_id"])
    assert await h == "parent done"
    assert RAN == ["t4"]


async def test_approve_with_nothing_waiting_is_a_user_error(bus):
    gate = asyncio.Event()

    async def script(messages, tools):
        await gate.wait()
        return "done"

    h = u.start_loop("go", model=u.ScriptedModel(script), bus=bus)
    with pytest.raises(u.UserError, match="nothing is waiting for approval"):
        await h.inbox.approve()
    gate.set()
    assert await h == "done"


async def test_registered_tool_marked_by_the_decorator_waits_in_the_actor(bus):
    @u.tool(needs_approval=True)
    def drop_table(name: str) -> str:
        """Drop a table."""
        RAN.append(name)
        return f"dropped {name}"

    try:
        model = u.ScriptedModel(
            lambda m, t: u.call_tool("drop_table", name="sales") if not tool_messages(m) else "done"
        )
        h = u.act("drop it", model=model, namespace={}, bus=bus)
        asked = await h.wait_for("approval_requested", timeout=10)
        assert asked.tool == "drop_table"
        assert RAN == []
        await h.inbox.approve()
        assert await h == "done"
        assert RAN == ["sales"]
    finally:
        u.unregister_tool("drop_table")


async def test_actor_approval_always_covers_json_tools_too(bus):
    model = u.ScriptedModel(
        lambda m, t: u.call_tool("delete_rows", table="t5") if not tool_messages(m) else "done"
    )
    h = u.act("clean", model=model, namespace={}, tools=[delete_rows], approval="always", bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "delete_rows"
    assert [a["tool"] for a in h.inbox.approvals] == ["delete_rows"]
    assert RAN == []
    await h.inbox.skip(reason="no")
    assert await h == "done"
    assert RAN == []
    assert results(model) == ["[the person skipped this call; delete_rows did not run]: no"]


async def test_actor_without_approval_runs_json_tools_at_once(bus):
    model = u.ScriptedModel(
        lambda m, t: u.call_tool("delete_rows", table="t6") if not tool_messages(m) else "done"
    )
    h = u.act("clean", model=model, namespace={}, tools=[delete_rows], approval="first", bus=bus)
    assert await h == "done"
    assert RAN == ["t6"]
    assert not any(e.kind == "approval_requested" for e in h.events)


async def test_the_widget_and_the_magics_reach_a_tool_call_waiting_for_approval(stored_shell):
    from conftest import magics

    ip = stored_shell

    @u.tool(needs_approval=True)
    def wipe(table: str) -> str:
        """Wipe a table."""
        RAN.append(table)
        return f"wiped {table}"

    def script(messages, tools):
        done = tool_messages(messages)
        return u.call_tool("wipe", table=f"t{len(done) + 1}") if len(done) < 2 else "done"

    try:
        ip.user_ns["m"] = model = u.ScriptedModel(script)
        ip.run_line_magic("unity", "model --var m")
        h = ip.run_line_magic("unity", "act --name wiper wipe the tables")
        first = await h.wait_for("approval_requested", timeout=10)
        w = magics(ip).widgets["wiper"]
        w.flush()
        (shown,) = w.nodes[0]["approvals"]
        assert shown["tool"] == "wipe" and shown["call_id"] == first.call_id and '"t1"' in shown["code"]
        assert w.nodes[0]["status"] == "waiting" and RAN == []
        w._on_custom(w, {"action": "approve", "node": h.id, "call_id": first.call_id}, [])  # the Run button
        await h.wait_for("tool_finished", lambda e: e.call_id == first.call_id, timeout=10)
        assert RAN == ["t1"]
        await h.wait_for("approval_requested", lambda e: e.call_id != first.call_id, timeout=10)
        ip.run_line_magic("unity", "skip wiper keep t2")
        assert await h == "done"
        assert RAN == ["t1"]
        assert results(model)[1] == "[the person skipped this call; wipe did not run]: keep t2"
    finally:
        u.unregister_tool("wipe")


async def test_a_managers_write_tools_wait_for_approval_when_it_approves_writes(bus, tmp_path):
    from unity_nb.managers import KnowledgeManager

    store = u.Store(str(tmp_path / "k.db"))
    script = [
        u.call_tool("list_tables"),  # a read: runs at once
        u.call_tool("create_table", name="regions", columns={"region": "text"}, description="regions"),
        u.call_tool("create_table", name="other", columns={"x": "text"}, description="not wanted"),
        "done",
    ]

    def steps(messages, tools):
        return script[len(tool_messages(messages))]

    model = u.ScriptedModel(steps)
    knowledge = KnowledgeManager(store=store, model=model, bus=bus)
    knowledge.approve_writes = True
    h = knowledge.update("record the regions")
    first = await h.wait_for("approval_requested", timeout=10)
    assert first.tool == "create_table"
    assert [e.name for e in h.events if e.kind == "tool_finished"] == ["list_tables"]
    assert store.query("SELECT name FROM knowledge_tables") == []
    await h.inbox.approve()
    await h.wait_for("approval_requested", lambda e: e.call_id != first.call_id, timeout=10)
    await h.inbox.skip(reason="one table is enough")
    assert await h == "done"
    assert [r["name"] for r in store.query("SELECT name FROM knowledge_tables")] == ["regions"]
    store.close()
