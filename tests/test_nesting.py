"""Depth 2: a child loop started inside a tool; steering reaches it."""

import asyncio

import pytest
from conftest import assert_every_call_answered_once, settle, tool_messages

import unity_nb as u


class Family:
    """A parent loop whose tool ``research`` starts a child loop; each model is gated."""

    def __init__(self, bus, *, child_script=None, parent_script=None, parent_context="never", gate_child=True):
        self.bus = bus
        self.child_gate = asyncio.Event()
        if not gate_child:
            self.child_gate.set()
        self.child_model = u.ScriptedModel(self._child_reply)
        self.child_script = child_script or (lambda m, t: "child found: " + m[-1]["content"])
        self.parent_script = parent_script or self._default_parent
        self.parent_model = u.ScriptedModel(lambda m, t: self.parent_script(m, t))
        self.child = None
        self.child_started = asyncio.Event()

        async def research(topic: str) -> u.LoopHandle:
            """Research a topic in a sub-operation."""
            self.child = u.start_loop(f"research {topic}", model=self.child_model, name="researcher", bus=bus)
            self.child_started.set()
            return self.child

        self.parent = u.start_loop(
            "write a report",
            model=self.parent_model,
            tools=[research],
            name="writer",
            parent_context=parent_context,
            bus=bus,
        )

    async def _child_reply(self, messages, tools):
        if "You are inspecting" not in str(messages[0]["content"]):  # asks about the child are not held
            await self.child_gate.wait()
        return self.child_script(messages, tools)

    @staticmethod
    def _default_parent(messages, tools):
        results = tool_messages(messages)
        if not results:
            return u.call_tool("research", topic="tides")
        return "report: " + results[0]["content"]

    async def started(self):
        await asyncio.wait_for(self.child_started.wait(), 10)
        await self.child.wait_for("model_request")
        return self.child


async def test_a_loop_started_in_a_tool_is_a_child_with_lineage(bus):
    f = Family(bus, gate_child=False)
    assert await f.parent == "report: child found: research tides"
    child = f.child
    assert f.parent.children == [child] and child.parent is f.parent
    assert child.tree.lineage[:-1] == f.parent.tree.lineage and child.tree.lineage[-1].startswith("researcher(")
    call = next(c for m in f.parent.transcript for c in m.tool_calls)
    assert call.child is child and call.result == "child found: research tides"
    started = [e for e in f.parent.events if e.kind == "child_started"]
    assert [e.child_id for e in started] == [child.id]
    assert {e.loop_id for e in bus.history(lineage=f.parent.tree.lineage)} == {f.parent.id, child.id}


async def test_pause_and_resume_reach_the_child(bus):
    f = Family(bus)
    child = await f.started()
    await f.parent.pause()
    assert child.status == "paused" and f.parent.status == "paused"
    f.child_gate.set()  # the child's in-flight call finishes, nothing new starts
    await child.wait_for("model_response")
    await settle()
    assert not child.done()
    await f.parent.resume()
    assert child.status in ("running", "finished")
    assert await f.parent == "report: child found: research tides"


async def test_stop_reaches_the_child_and_every_call_is_answered(bus):
    f = Family(bus)
    child = await f.started()
    await f.parent.stop("cancelled by test")
    assert child.status == "stopped" and f.parent.status == "stopped"
    with pytest.raises(u.Stopped, match="cancelled by test"):
        await child.result()
    assert_every_call_answered_once(f.parent)


async def test_stopping_only_the_child_fails_its_tool_call_not_the_parent(bus):
    f = Family(bus)
    child = await f.started()
    await child.stop("wrong direction")
    assert await f.parent == "report: error: the sub-operation was stopped (wrong direction)"


async def test_interjection_is_routed_to_the_live_child_by_the_parents_model(bus):
    offered = []

    def parent_script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        if "interject_researcher" in names:  # the routing step: forward the user's message
            offered.append(names)
            return u.call_tool("interject_researcher", message="focus on spring tides")
        return Family._default_parent(messages, tools)

    f = Family(bus, parent_script=parent_script, child_script=lambda m, t: "child saw: " + m[-1]["content"])
    child = await f.started()
    await f.parent.interject("only spring tides please")
    await child.wait_for("steering", lambda e: e.action == "interject")
    f.child_gate.set()
    result = await f.parent
    assert result == "report: child saw: [interjection from the user] focus on spring tides"
    assert offered and {"ask_researcher", "pause_researcher", "resume_researcher", "stop_researcher"} <= set(offered[0])
    # the routing turn is kept, after the tool's result, so the parent's conversation stays valid
    last = f.parent_model.requests[-1].messages
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "user", "assistant", "tool"]
    assert last[2]["tool_call_id"] == last[1]["tool_calls"][0]["id"]  # research's result right after its call
    assert "only spring tides please" in last[3]["content"]
    assert last[4]["tool_calls"][0]["function"]["name"] == "interject_researcher"
    assert_every_call_answered_once(f.parent)


async def test_the_routing_request_answers_every_tool_call_exactly_once(bus):
    routing = []

    def parent_script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        if "interject_researcher" in names:
            routing.append(messages)
            return u.call_tool("interject_researcher", message="focus on spring tides")
        return Family._default_parent(messages, tools)

    f = Family(bus, parent_script=parent_script)
    child = await f.started()
    await f.parent.interject("only spring tides please")
    await child.wait_for("steering", lambda e: e.action == "interject")
    f.child_gate.set()
    await asyncio.wait_for(f.parent.result(), 10)
    (messages,) = routing
    calls = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == results == [calls[0]]  # the research call once, with its placeholder result right after it
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user", "system"]


async def test_ask_on_the_parent_can_drill_into_the_live_child(bus):
    def inspector(messages, tools):
        names = [t["function"]["name"] for t in tools]
        if "ask_researcher" in names and not tool_messages(messages):
            return u.call_tool("ask_researcher", question="what tides?")
        if tool_messages(messages):
            return "the child says: " + tool_messages(messages)[0]["content"]
        return "child-level answer about " + messages[0]["content"][:30]

    f = Family(bus)
    await f.started()
    status = await f.parent.ask("how is the research going?", model=u.ScriptedModel(inspector))
    answer = await status.result()
    assert answer == "the child says: child found: what tides?"
    # the child's own inspection loop saw the child's conversation with inner_ roles
    inspecting = next(r for r in f.child_model.requests if "You are inspecting" in str(r.messages[0]["content"]))
    assert "inner_user: research tides" in inspecting.messages[0]["content"]
    f.child_gate.set()
    await f.parent


async def test_the_tools_an_ask_makes_for_running_children_keep_none_of_them_alive_once_done(bus):
    import gc
    import weakref

    f = Family(bus)
    child = await f.started()
    inspector = u.ScriptedModel(lambda m, t: "going well")
    ask = await f.parent.ask("how is the research going?", model=inspector)
    assert await ask.result() == "going well"
    assert [t["function"]["name"] for t in inspector.requests[0].tools] == ["ask_researcher"]  # it holds the child
    f.child_gate.set()
    await f.parent
    await settle()  # the done callbacks the event loop holds for the loops' tasks run
    gone = [weakref.ref(x) for x in (child, f.parent, ask)]
    del child, f, ask, inspector
    bus.clear()
    gc.collect()
    assert [r() for r in gone] == [None, None, None]  # the operation, its child and the ask are freed


async def test_child_clarification_surfaces_at_the_root_and_is_answered_there(bus):
    async def confirm(ctx: u.ToolContext) -> str:
        """Ask the person to confirm."""
        return "person said " + await ctx.clarify("Proceed?")

    def child_script(messages, tools):
        return u.call_tool("confirm") if not tool_messages(messages) else tool_messages(messages)[0]["content"]

    child_model = u.ScriptedModel(child_script)

    async def research(topic: str) -> u.LoopHandle:
        """Research."""
        return u.start_loop("check", model=child_model, tools=[confirm], bus=bus)

    parent = u.start_loop(
        "go",
        model=u.ScriptedModel(Family._default_parent),
        tools=[research],
        bus=bus,
    )
    q = await asyncio.wait_for(parent.inbox.next_question(), 10)
    assert q["question"] == "Proceed?" and q["loop"] == parent.children[0].name
    assert parent.status == "waiting" and parent.children[0].status == "waiting"
    assert parent.inbox.questions[0]["call_id"] == q["call_id"]
    await parent.inbox.answer(q["call_id"], "yes")
    assert await parent == "report: person said yes"


async def test_parent_context_always_shows_the_child_the_parents_conversation(bus):
    f = Family(bus, parent_context="always", gate_child=False)
    await f.parent
    context = f.child_model.requests[0].messages[0]
    assert context["role"] == "system" and "outer_user: write a report" in context["content"]


async def test_parent_context_never_hides_it_and_model_lets_the_model_choose(bus):
    f = Family(bus, parent_context="never", gate_child=False)
    await f.parent
    assert f.child_model.requests[0].messages[0]["role"] == "user"

    def chooser(messages, tools):
        assert "include_parent_context" in tools[0]["function"]["parameters"]["properties"]
        if not tool_messages(messages):
            return u.ToolCall("research", '{"topic": "tides", "include_parent_context": true}')
        return "ok"

    g = Family(bus, parent_context="model", parent_script=chooser, gate_child=False)
    await g.parent
    assert "outer_user: write a report" in g.child_model.requests[0].messages[0]["content"]


def test_forward_call_drops_keywords_the_target_does_not_accept():
    from unity_nb.loop import forward_call

    def stop(reason=None):
        return reason

    def stop_kw(reason=None, **kw):
        return kw

    assert forward_call(stop, reason="r", cancel=True) == "r"
    assert forward_call(stop_kw, reason="r", cancel=True) == {"cancel": True}


async def test_a_stop_while_a_routing_call_waits_answers_it_and_stops_the_question_s_loop(bus):
    """Stopping the parent while its model's routing call ``ask_<child>`` waits for the answer: the routing call
    still has its one result (transcript, events, wire), and the question's loop (detached) is stopped too."""
    asked = asyncio.Event()

    def parent_script(messages, tools):
        if "ask_researcher" in [t["function"]["name"] for t in tools]:
            return u.call_tool("ask_researcher", question="how far along?")
        return Family._default_parent(messages, tools)

    f = Family(bus, parent_script=parent_script)
    plain = f.child_model._script

    async def child_reply(messages, tools):
        if "You are inspecting" in str(messages[0]["content"]):  # the question waits (for ever, unless stopped)
            asked.set()
            await asyncio.Event().wait()
        return await plain(messages, tools)

    f.child_model._script = child_reply
    await f.started()
    await f.parent.interject("how is it going?")
    await asyncio.wait_for(asked.wait(), 10)
    await asyncio.wait_for(f.parent.stop("enough"), 10)
    assert_every_call_answered_once(f.parent)
    routed = [e for e in f.parent.events if e.kind == "tool_finished" and e.name == "ask_researcher"]
    assert [e.result for e in routed] == ["cancelled: enough"]
    wire = f.parent.messages
    calls = [c["id"] for m in wire for c in m.get("tool_calls") or []]
    assert sorted(calls) == sorted(m["tool_call_id"] for m in wire if m.get("role") == "tool")
    (question,) = [e for e in bus.history() if e.kind == "loop_started" and e.name == "ask-researcher"]
    ended = [e for e in bus.history() if e.kind == "loop_finished" and e.loop_id == question.loop_id]
    assert [e.status for e in ended] == ["stopped"]


async def test_a_parents_model_pausing_its_child_is_its_tools_doing_and_the_persons_resume_the_users(bus):
    def parent_script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        if "pause_researcher" in names:  # the routing step the person's message starts: hold the child
            if any(m["content"] == "researcher: paused" for m in tool_messages(messages)):
                return "holding the researcher"
            return u.call_tool("pause_researcher")
        return Family._default_parent(messages, tools)

    f = Family(bus, parent_script=parent_script)
    child = await f.started()
    await f.parent.interject("hold the researcher for now")
    await child.wait_for("steering", lambda e: e.action == "pause")
    assert child.status == "paused"
    await child.resume()  # the person lets it go on
    f.child_gate.set()
    assert await f.parent == "report: child found: research tides"
    said = [m.content for m in child.transcript if m.kind == "steering"]
    assert said == ["[paused by the tool pause_researcher of writer]", "[resumed by the user]"]
    assert [(e.action, e.by) for e in child.events if e.kind == "steering"] == [
        ("pause", "the tool pause_researcher of writer"), ("resume", None)]
