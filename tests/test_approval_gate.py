"""Approval that cannot be walked around (issue 37, items 1, 2, 3, 5): a function marked
``@u.tool(needs_approval=True)`` is gated itself, so a plan that calls it by name, through
``u.registered_tools()[i].fn``, from a thread or from a child loop waits for the person in the running loop's
inbox; the mark survives ``start_loop(tools=[f])``, child loops and ``u.map``; a skipped first plan is no approved
one; two calls with one id each wait visibly. Driven by ScriptedModel, synchronised on events."""

import asyncio

import pytest
from conftest import tool_messages

import unity_nb as u

RAN: list[str] = []


@pytest.fixture(autouse=True)
def _marked():
    """``wipe`` (sync) and ``purge`` (async), registered and marked; forgotten after each test."""
    RAN.clear()

    @u.tool(needs_approval=True)
    def wipe(table: str) -> str:
        """Wipe every row of a table (irreversible)."""
        RAN.append(f"wipe {table}")
        return f"wiped {table}"

    @u.tool(needs_approval=True)
    async def purge(table: str) -> str:
        """Purge a table (irreversible)."""
        RAN.append(f"purge {table}")
        return f"purged {table}"

    yield {"wipe": wipe, "purge": purge}
    u.unregister_tool("wipe")
    u.unregister_tool("purge")
    RAN.clear()


def plans(*codes, answer="done"):
    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < len(codes):
            return u.call_tool("execute_code", code=codes[len(done)], intent=f"step {len(done) + 1}")
        return answer(messages) if callable(answer) else answer

    return script


def results(model):
    return [m["content"] for m in tool_messages(model.requests[-1].messages)]


# ---------------------------------------------------------------------------- 1. the function itself is gated


async def test_a_plan_awaiting_a_marked_function_by_name_waits_and_runs_once_approved(bus, _marked):
    ns = dict(_marked)
    model = u.ScriptedModel(plans("out = await wipe('sales')"))
    h = u.act("clean", model=model, namespace=ns, bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "wipe" and "wipe('sales')" in asked.code
    assert RAN == [] and h.status == u.Status.WAITING
    (pending,) = h.inbox.approvals
    assert pending["tool"] == "wipe" and pending["call_id"] == asked.call_id
    await h.inbox.approve(asked.call_id)
    assert await h == "done"
    assert RAN == ["wipe sales"] and ns["out"] == "wiped sales"
    system = model.requests[0].messages[0]["content"]
    assert "wipe, purge wait for the person's approval at each call" in system and "`await wipe(...)`" in system


async def test_a_plan_calling_a_marked_sync_function_without_await_does_not_run_it(bus, _marked):
    ns = dict(_marked)
    model = u.ScriptedModel(plans("wipe('sales')\nr = wipe('orders')\nprint('after')"))
    h = u.act("clean", model=model, namespace=ns, bus=bus)
    assert await h == "done"
    assert RAN == []  # nothing asked, nothing ran: the calls were never awaited
    (result,) = results(model)
    assert "after" in result
    assert "wipe(...) needs the person's approval" in result and "await wipe(...)" in result
    assert not any(e.kind == "approval_requested" for e in h.events)


async def test_a_skipped_call_in_a_plan_raises_there_and_the_function_never_runs(bus, _marked):
    ns = dict(_marked)
    code = "try:\n    await purge('sales')\nexcept u.NotApproved as err:\n    print('skipped:', err)"
    ns["u"] = u
    model = u.ScriptedModel(plans(code))
    h = u.act("clean", model=model, namespace=ns, bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "purge"
    await h.inbox.skip(asked.call_id, reason="keep it")
    assert await h == "done"
    assert RAN == []
    assert "skipped: the person skipped this call to purge; it did not run: keep it" in results(model)[0]


async def test_registered_tools_fn_is_gated_too(bus, _marked):
    code = "import unity_nb\nfn = [t for t in unity_nb.registered_tools() if t.name == 'wipe'][0].fn\nawait fn('x')"
    model = u.ScriptedModel(plans(code))
    h = u.act("clean", model=model, namespace={}, bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "wipe" and RAN == []
    await h.inbox.skip(reason="no")
    assert await h == "done"
    assert RAN == []
    assert "NotApproved" in results(model)[0]


async def test_a_marked_function_called_in_a_tools_thread_of_a_child_loop_waits_in_the_roots_inbox(bus, _marked):
    wipe = _marked["wipe"]

    def clean(table: str) -> str:
        """Clean a table (an unmarked tool whose code calls a marked function)."""
        return "cleaned: " + wipe(table)

    def start_child() -> u.LoopHandle:
        """Start the clean-up as a sub-operation."""
        child_model = u.ScriptedModel(
            lambda m, t: u.call_tool("clean", table="t4") if not tool_messages(m) else "child done"
        )
        return u.start_loop("clean", model=child_model, tools=[clean], name="cleaner")

    model = u.ScriptedModel(lambda m, t: u.call_tool("start_child") if not tool_messages(m) else "parent done")
    h = u.start_loop("go", model=model, tools=[start_child], bus=bus)
    await h.wait_for("child_started", timeout=10)
    child = h.children[0]
    asked = await child.wait_for("approval_requested", timeout=10)
    assert asked.tool == "wipe" and RAN == []
    (pending,) = h.inbox.approvals
    assert pending["loop"] == "cleaner" and h.status == u.Status.WAITING
    await h.inbox.approve(pending["call_id"])
    assert await h == "parent done"
    assert RAN == ["wipe t4"]


async def test_a_thread_a_plan_starts_asks_in_the_plans_loop(bus, _marked):
    ns = dict(_marked)
    code = (
        "import asyncio, threading\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(wipe('from a thread')))\n"
        "t.start()\n"
        "await asyncio.to_thread(t.join)"
    )
    h = u.act("clean", model=u.ScriptedModel(plans(code)), namespace=ns, bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "wipe" and "wipe('from a thread')" in asked.code and RAN == []
    await h.inbox.approve(asked.call_id)
    assert await h == "done"
    assert RAN == ["wipe from a thread"] and ns["out"] == ["wiped from a thread"]


async def test_a_call_through_asyncios_shared_executor_is_refused_while_a_plan_runs(bus, _marked):
    ns = dict(_marked)
    code = "import asyncio\nawait asyncio.get_running_loop().run_in_executor(None, wipe, 'x')"
    model = u.ScriptedModel(plans(code))
    h = u.act("clean", model=model, namespace=ns, bus=bus)
    assert await h == "done"
    assert RAN == []
    (result,) = results(model)
    assert "NotApproved" in result and "carries no trace of which operation called it" in result


async def test_a_thread_that_outlives_its_operation_cannot_call_the_marked_function(bus, _marked):
    ns = dict(_marked)
    release = __import__("threading").Event()
    ns["release"] = release
    code = (
        "import threading\n"
        "out = []\n"
        "def later():\n"
        "    release.wait()\n"
        "    try:\n"
        "        out.append(wipe('late'))\n"
        "    except Exception as err:\n"
        "        out.append(repr(err))\n"
        "t = threading.Thread(target=later)\n"
        "t.start()"
    )
    h = u.act("clean", model=u.ScriptedModel(plans(code)), namespace=ns, bus=bus)
    assert await h == "done"
    release.set()
    await asyncio.to_thread(ns["t"].join, 10)
    assert RAN == []
    (refusal,) = ns["out"]
    assert "NotApproved" in refusal and "has ended, so no one can approve it" in refusal


async def test_stop_while_a_plans_call_waits_means_it_never_runs(bus, _marked):
    ns = dict(_marked)
    h = u.act("clean", model=u.ScriptedModel(plans("await wipe('x')")), namespace=ns, bus=bus)
    await h.wait_for("approval_requested", timeout=10)
    await h.stop("no")
    with pytest.raises(u.Stopped):
        await h
    assert RAN == [] and h.inbox.approvals == []


async def test_stop_while_a_tools_thread_waits_means_it_never_runs(bus, _marked):
    wipe = _marked["wipe"]
    finished = __import__("threading").Event()

    def clean(table: str) -> str:
        """Clean a table (an unmarked tool whose code calls a marked function)."""
        try:
            return wipe(table)
        finally:
            finished.set()

    model = u.ScriptedModel(lambda m, t: u.call_tool("clean", table="t9"))
    h = u.start_loop("go", model=model, tools=[clean], bus=bus)
    await h.wait_for("approval_requested", timeout=10)
    await h.stop("no")
    with pytest.raises(u.Stopped):
        await h
    assert await asyncio.to_thread(finished.wait, 10)  # the tool's thread left its wait
    assert RAN == [] and h.inbox.approvals == []


async def test_outside_any_operation_the_marked_function_runs_at_once(_marked):
    assert _marked["wipe"]("cell") == "wiped cell"
    assert await _marked["purge"]("cell") == "purged cell"
    assert RAN == ["wipe cell", "purge cell"]


async def test_a_json_call_of_a_marked_tool_is_asked_once(bus, _marked):
    model = u.ScriptedModel(lambda m, t: u.call_tool("wipe", table="t1") if not tool_messages(m) else "done")
    h = u.act("clean", model=model, namespace={}, bus=bus)
    await h.wait_for("approval_requested", timeout=10)
    await h.inbox.approve()
    assert await h == "done"
    assert RAN == ["wipe t1"]
    assert sum(e.kind == "approval_requested" for e in h.events) == 1


# ---------------------------------------------------------------------------- 2. a skip is not the first plan


async def test_under_first_a_skipped_plan_sent_again_waits_again(bus):
    ns: dict = {}
    same = "flag = 'ran'"
    model = u.ScriptedModel(plans(same, same))
    h = u.act("go", model=model, namespace=ns, approval="first", bus=bus)
    first = await h.wait_for("approval_requested", timeout=10)
    await h.inbox.skip(first.call_id, reason="not yet")
    second = await h.wait_for("approval_requested", lambda e: e.call_id != first.call_id, timeout=10)
    assert second.code == same and "flag" not in ns and h.status == u.Status.WAITING
    await h.inbox.approve(second.call_id)
    assert await h == "done"
    assert ns["flag"] == "ran"


# ---------------------------------------------------------------------------- 3. the mark survives every path


async def test_start_loop_with_the_decorated_function_waits(bus, _marked):
    model = u.ScriptedModel(lambda m, t: u.call_tool("wipe", table="t1") if not tool_messages(m) else "done")
    h = u.start_loop("clean", model=model, tools=[_marked["wipe"]], bus=bus)
    asked = await h.wait_for("approval_requested", timeout=10)
    assert asked.tool == "wipe" and RAN == []
    await h.inbox.skip(reason="no")
    assert await h == "done"
    assert RAN == []


async def test_a_child_loop_with_the_decorated_function_waits(bus, _marked):
    purge = _marked["purge"]

    def start_child() -> u.LoopHandle:
        """Start the purge as a sub-operation."""
        child_model = u.ScriptedModel(
            lambda m, t: u.call_tool("purge", table="t2") if not tool_messages(m) else "child done"
        )
        return u.start_loop("purge", model=child_model, tools=[purge], name="purger")

    model = u.ScriptedModel(lambda m, t: u.call_tool("start_child") if not tool_messages(m) else "parent done")
    h = u.start_loop("go", model=model, tools=[start_child], bus=bus)
    await h.wait_for("child_started", timeout=10)
    await h.children[0].wait_for("approval_requested", timeout=10)
    assert RAN == [] and [a["loop"] for a in h.inbox.approvals] == ["purger"]
    await h.inbox.approve()
    assert await h == "parent done"
    assert RAN == ["purge t2"]


async def test_a_map_with_the_decorated_function_waits_per_row(bus, _marked):
    def script(messages, tools):
        if not tool_messages(messages):
            return u.call_tool("wipe", table=messages[-1]["content"].split()[-1])
        return "row done"

    h = u.map(["a", "b"], "Wipe {value}", model=u.ScriptedModel(script), tools=[_marked["wipe"]], bus=bus)
    await h.wait_for("child_started", lambda e: len(h.children) == 2, timeout=10)
    for row in h.children:
        await row.wait_for("approval_requested", timeout=10)
    assert RAN == [] and sorted(a["tool"] for a in h.inbox.approvals) == ["wipe", "wipe"]
    for a in h.inbox.approvals:
        await h.inbox.approve(a["call_id"])
    assert (await asyncio.wait_for(h.result(), 10)).tolist() == ["row done", "row done"]
    assert sorted(RAN) == ["wipe a", "wipe b"]


# ---------------------------------------------------------------------------- 5. duplicate call ids


async def test_two_calls_with_one_id_each_wait_visibly(bus, _marked):
    def script(messages, tools):
        if not tool_messages(messages):
            return [
                u.ToolCall(name="wipe", arguments='{"table": "a"}', id="dup"),
                u.ToolCall(name="wipe", arguments='{"table": "b"}', id="dup"),
            ]
        return "done"

    model = u.ScriptedModel(script)
    tool = u.as_tool(_marked["wipe"], needs_approval=True)
    h = u.start_loop("clean", model=model, tools=[tool], bus=bus)
    await h.wait_for("approval_requested", lambda e: len(h.inbox.approvals) == 2, timeout=10)
    ids = [a["call_id"] for a in h.inbox.approvals]
    assert len(set(ids)) == 2 and RAN == []
    await h.inbox.approve(ids[0])
    await h.inbox.skip(ids[1], reason="not b")
    assert await h == "done"
    assert RAN == ["wipe a"]
    calls = [c for m in h.transcript for c in m.tool_calls]
    assert [c.id for c in calls] == ids
    sent = model.requests[-1].messages
    wire_ids = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert wire_ids == ids and [m["tool_call_id"] for m in tool_messages(sent)] == ids
