"""The handle is the person's facade over a Run; what the actor, a batch and the managers add comes by
composition (issue 25): a tool source the loop is given, a driver over a run with no turn, tags on the run."""

from __future__ import annotations

import asyncio

import pytest

import unity_nb as u
from unity_nb.loop import LoopHandle, Run, Tool, ToolSource, as_tool

PEOPLE = {
    # who it is, and where it sits (``tree``: it and every loop under it, their totals, its lineage)
    "id", "name", "task", "kind", "model", "parent", "children", "tree",
    # where it stands, what it has done (``state``: the rest, the text streaming in, elapsed seconds)
    "status", "steps", "tool_calls", "usage", "cost", "state",
    # its record
    "transcript", "messages", "events", "dataframe", "wait_for",
    # its end
    "done", "result",
    # the steering verbs
    "pause", "resume", "interject", "stop", "ask",
    # what waits for the person (approvals, questions, notes), and a multi-request loop's requests
    "inbox", "requests",
    # where its parts and tools work
    "run",
}


def test_the_handle_offers_people_what_they_use_and_nothing_its_parts_need():
    public = {n for n in dir(LoopHandle) if not n.startswith("_")}
    assert public == PEOPLE, (sorted(public - PEOPLE), sorted(PEOPLE - public))
    # what the parts and extensions used to reach through the handle is the run's now
    for gone in ("emit", "publish", "end", "steer", "require_live", "adopt_child", "reach_children", "turn",
                 "router", "runner", "engine", "gate", "conversation", "config", "available_tools", "tool_named",
                 "before_step", "finish_with", "notify", "clarify", "needs_approval", "wait_for_approval",
                 # grouped for people: h.tree, h.inbox, h.requests, h.state, h.run
                 "walk", "lineage", "tree_usage", "tree_cost", "approve", "skip", "pending_approvals",
                 "next_clarification", "answer_clarification", "pending_clarifications", "next_notification",
                 "submit", "streaming_text", "streaming_thinking", "elapsed", "add_listener"):
        assert not hasattr(LoopHandle, gone), gone
    for on_run in ("emit", "publish", "end", "steer", "require_live", "adopt", "reach_children", "finish_with",
                   "live_children", "request", "tags"):
        assert on_run in Run.__slots__ or hasattr(Run, on_run), on_run


class Unlocking(ToolSource):
    """A source written outside the package: ``secret`` is offered only once ``hint`` was called, and before
    each step the model is told how many steps it has taken (through the run, not the handle)."""

    def __init__(self) -> None:
        self.hint = as_tool(self._hint, name="hint")
        self.secret = as_tool(self._secret, name="secret")
        self.unlocked = False
        self.offered: list[list[str]] = []

    def _hint(self) -> str:
        """Get a hint."""
        self.unlocked = True
        return "the secret tool is open now"

    def _secret(self) -> str:
        """The secret."""
        return "42"

    def available(self) -> list[Tool]:
        tools = [self.hint, self.secret] if self.unlocked else [self.hint]
        self.offered.append([t.name for t in tools])
        return tools

    def named(self, name: str) -> Tool | None:
        return {"hint": self.hint, "secret": self.secret}.get(name)

    def before_step(self) -> None:
        assert self.run is not None
        self.run.conversation.note(f"[step {self.run.state.steps + 1}]")


async def test_a_tool_source_written_outside_the_package_decides_what_each_step_offers(bus):
    seen: list[list[str]] = []

    def script(messages, tools):
        seen.append(sorted(t["function"]["name"] for t in tools))
        if "secret" not in seen[-1]:
            return u.call_tool("hint")
        if not any(m.get("content") == "42" for m in messages if m["role"] == "tool"):
            return u.call_tool("secret")
        return "the secret is 42"

    source = Unlocking()
    h = u.start_loop("find the secret", model=u.ScriptedModel(script), tool_source=source, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "the secret is 42"
    assert seen[:2] == [["hint"], ["hint", "secret"]]
    assert source.run is h.run  # bound to the loop's run when the loop was made
    assert any("[step 2]" in (m.get("content") or "") for m in h.messages if m["role"] == "user")


async def test_a_tool_source_must_be_one(bus):
    with pytest.raises(u.UserError, match=r"tool_source= takes a unity_nb\.loop\.ToolSource"):
        u.start_loop("x", model=u.ScriptedModel(lambda m, t: "done"), tool_source=["hint"], bus=bus)


async def test_a_tool_reaches_its_loop_through_its_context_not_the_handle(bus):
    async def finish_early(ctx: u.ToolContext) -> str:
        """Finish with a value."""
        ctx.print("working\n")
        ctx.finish({"answer": 7}, "seven")
        return "done"

    def script(messages, tools):
        return u.call_tool("finish_early")

    h = u.start_loop("go", model=u.ScriptedModel(script), tools=[finish_early], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == {"answer": 7}
    (rec,) = [c for m in h.transcript for c in m.tool_calls]
    assert rec.output == "working\n" and h.state.printed == len("working\n")


async def test_the_actor_is_a_loop_given_its_tool_source(bus):
    ns: dict = {}

    def script(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("execute_code", code="x = 6 * 7", intent="compute")
        return "x is 42"

    h = u.act("compute x", model=u.ScriptedModel(script), namespace=ns, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "x is 42"
    assert ns["x"] == 42 and h.plans == 1
    assert not any(hasattr(type(h), n) for n in ("available_tools", "tool_named", "before_step"))
    assert h.run.tags["actor"] is not None


async def test_a_manager_tags_the_run_it_starts_instead_of_setting_attributes_on_the_handle(bus, tmp_path):
    from unity_nb.managers import KnowledgeManager

    store = u.Store(tmp_path / "s.db")
    km = KnowledgeManager(model=u.ScriptedModel(lambda m, t: "nothing yet"), store=store, bus=bus)
    h = km.ask("What do we know?")
    assert await asyncio.wait_for(h.result(), 10) == "nothing yet"
    assert h.run.tags["manager"] is km and not hasattr(h, "manager")
    store.close()


async def test_a_batch_is_driven_over_a_run_that_calls_no_model_itself(bus):
    h = u.map(["a", "b"], "Say {value}", model=u.ScriptedModel(lambda m, t: "ok"), bus=bus)
    assert list(await asyncio.wait_for(h, 10)) == ["ok", "ok"]
    assert h.state.streaming_text == "" and h.state.steps == 0  # its rows made the calls
    assert h.steps == 2  # and the batch's reading sums them


async def test_tree_inbox_and_requests_group_what_a_person_reads_of_a_loop_and_below(bus):
    """``h.tree`` walks the loop and its children and totals their tokens; ``h.inbox`` at the root lists and
    answers a child's question and approves a child's call; ``h.requests`` lists and takes requests."""
    async def confirm(ctx: u.ToolContext) -> str:
        """Ask the person."""
        return await ctx.clarify("go ahead?")

    def risky() -> str:
        """A call the person approves."""
        return "done"

    def child_script(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if not results:
            return u.call_tool("confirm")
        if len(results) == 1:
            return u.call_tool("risky")
        return "child: " + " / ".join(results)

    child_model = u.ScriptedModel(child_script)
    gated = as_tool(risky, needs_approval=True)

    async def research() -> u.LoopHandle:
        """Research in a sub-operation."""
        return u.start_loop("check", model=child_model, tools=[confirm, gated], name="kid", bus=bus)

    def parent_script(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return u.call_tool("research") if not results else "parent: " + results[0]

    h = u.start_loop("go", model=u.ScriptedModel(parent_script), tools=[research], name="root", bus=bus)
    q = await asyncio.wait_for(h.inbox.next_question(), 10)
    (child,) = h.children
    assert list(h.tree) == [h, child] and len(h.tree) == 2 and list(child.tree) == [child]
    assert h.tree.lineage == (f"root({h.id})",) and child.tree.lineage == (*h.tree.lineage, f"kid({child.id})")
    assert [x["question"] for x in h.inbox.questions] == ["go ahead?"] and h.inbox.questions[0]["loop"] == "kid"
    await h.inbox.answer(q["call_id"], "yes")
    await child.wait_for("approval_requested", timeout=10)
    assert [a["tool"] for a in h.inbox.approvals] == ["risky"] and child.inbox.approvals == h.inbox.approvals
    await h.inbox.approve()
    assert await h == "parent: child: yes / done"
    total = h.tree.usage
    assert total.input_tokens == h.usage.input_tokens + child.usage.input_tokens > h.usage.input_tokens
    assert h.state.elapsed >= 0 and h.state.streaming_text == ""
    with pytest.raises(u.UserError, match="no open clarification"):
        await h.inbox.answer("nope", "x")

    m = u.start_loop("first", model=u.ScriptedModel(lambda m, t: "ok"), multi=True, persist=True, bus=bus)
    r2 = m.requests.submit("second")
    assert len(m.requests) == 2 and m.requests[1] is r2 and [r.request_id for r in m.requests] == ["r1", "r2"]
    assert m.requests == list(m.run.requests)
    await m.stop()
