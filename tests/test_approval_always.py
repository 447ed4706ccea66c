"""Approvals as a person gives them in the widget (issue 39, item 13): "Always allow" a tool for the rest of an
operation (its later calls run unasked, in the loop and in every loop under it; another tool still asks; a plan is
approved one at a time), and a skipped call reads "skipped" in the widget, not "done". Driven by ScriptedModel,
synchronised on events with timeouts."""

import pytest
from conftest import tool_messages

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget

RAN: list[str] = []


def delete_rows(table: str) -> str:
    """Delete every row of a table (irreversible)."""
    RAN.append(table)
    return f"deleted {table}"


def drop_table(table: str) -> str:
    """Drop a table (irreversible)."""
    RAN.append(f"drop {table}")
    return f"dropped {table}"


@pytest.fixture(autouse=True)
def _clear():
    RAN.clear()
    yield
    RAN.clear()


async def test_always_allow_runs_the_tools_later_calls_unasked_and_no_other_tool(bus):
    gated = [u.as_tool(delete_rows, needs_approval=True), u.as_tool(drop_table, needs_approval=True)]

    def script(messages, tools):
        done = len(tool_messages(messages))
        if done < 3:  # the same tool three times, one step each
            return u.call_tool("delete_rows", table=f"t{done + 1}")
        if done == 3:
            return u.call_tool("drop_table", table="t9")  # another tool: still asked
        return "done"

    h = u.start_loop("clean up", model=u.ScriptedModel(script), tools=gated, bus=bus)
    w = HandleWidget(h)
    first = await h.wait_for("approval_requested", timeout=10)
    await w.act("allow", h.id, call_id=first.call_id)  # the widget's "Always allow delete_rows"
    other = await h.wait_for("approval_requested", lambda e: e.tool == "drop_table", timeout=10)
    assert RAN == ["t1", "t2", "t3"]  # the later calls of delete_rows ran without asking
    asked = [e for e in h.events if e.kind == "approval_requested"]
    assert [e.tool for e in asked] == ["delete_rows", "drop_table"]
    await h.inbox.approve(other.call_id)
    assert await h == "done"
    assert RAN == ["t1", "t2", "t3", "drop t9"]
    note = "[call to delete_rows approved by the user; delete_rows is allowed for the rest of this operation]"
    assert any(m.content == note for m in h.transcript)


async def test_always_allow_reaches_the_calls_waiting_now_and_the_loops_under_the_operation(bus):
    gated = u.as_tool(delete_rows, needs_approval=True)

    def start_child(table: str) -> u.LoopHandle:
        """Clean one table as a sub-operation."""
        model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table=table) if not tool_messages(m) else "ok")
        return u.start_loop(f"clean {table}", model=model, tools=[gated], name=f"clean-{table}")

    def script(messages, tools):  # three children at once, each asking for delete_rows
        return [u.call_tool("start_child", table=t) for t in "abc"] if not tool_messages(messages) else "done"

    h = u.start_loop("clean up", model=u.ScriptedModel(script), tools=[start_child], bus=bus)
    await h.wait_for("child_started", lambda e: len(h.children) == 3, timeout=10)
    for child in list(h.children):
        await child.wait_for("approval_requested", timeout=10)
    first = h.inbox.approvals[0]
    assert len(h.inbox.approvals) == 3 and RAN == []
    await h.inbox.approve(first["call_id"], always=True)
    assert await h == "done"
    assert sorted(RAN) == ["a", "b", "c"]  # all three ran on one decision


async def test_a_plan_is_not_allowed_always(bus):
    def script(messages, tools):
        return u.call_tool("execute_code", code="x = 1", intent="one") if not tool_messages(messages) else "done"

    h = u.act("plan", model=u.ScriptedModel(script), namespace={}, approval="always", bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    with pytest.raises(u.UserError, match="a plan is approved one at a time"):
        await h.inbox.approve(asked.call_id, always=True)
    await h.inbox.approve(asked.call_id)
    assert await h == "done"


async def test_a_skipped_call_reads_skipped_in_the_widget(bus):
    gated = u.as_tool(delete_rows, needs_approval=True)
    model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table="t1") if not tool_messages(m) else "ok")
    h = u.start_loop("clean up", model=model, tools=[gated], bus=bus)
    w = HandleWidget(h)
    asked = await h.wait_for("approval_requested", timeout=10)
    await w.act("skip", h.id, "not that table", call_id=asked.call_id)
    assert await h == "ok"
    w.flush()
    (call,) = [c for e in w.entries[h.id] for c in e.get("calls", [])]
    assert call["skipped"] is True and RAN == []
