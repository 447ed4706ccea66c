"""A loop policy written outside the package (issue 25): one class, given in ``policies=[...]``,
composed with the policies the ``LoopOptions`` flags make."""

import asyncio

import pytest

import unity_nb as u
from unity_nb.loop import DiscoveryFirst, ForcedFirstTools, LoopOptions, LoopPolicy, Step, TimeAwareness


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def delete(key: str) -> str:
    """Delete a key."""
    return f"deleted {key}"


def search(query: str) -> str:
    """Search."""
    return f"found {query}"


class ReadOnly(LoopPolicy):
    """Never offer a tool whose name says it writes; tell the model so after each batch of results."""

    def offer(self, step: Step, inner):
        return [([t for t in tools if t.name != "delete"], mode) for tools, mode in inner(step)]

    def after_tools(self, step: Step) -> str | None:
        return f"[read-only: {len(step.called_tools)} tool(s) used so far]"


def recording_model(offered: list[list[str]], replies):
    replies = iter(replies)

    def script(messages, tools):
        offered.append(sorted(t["function"]["name"] for t in tools or ()))
        return next(replies)(messages)

    return u.ScriptedModel(script)


async def test_a_policy_written_outside_the_package_narrows_the_tools_and_adds_a_note(bus):
    offered: list[list[str]] = []
    model = recording_model(offered, [
        lambda m: u.call_tool("lookup", key="a"),
        lambda m: "answer: " + m[-1]["content"],
    ])
    h = u.start_loop("look up a", model=model, tools=[lookup, delete], policies=[ReadOnly()], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "answer: [read-only: 1 tool(s) used so far]"
    assert offered[0] == ["lookup"]  # delete never offered


async def test_a_persons_policy_wraps_the_flags_policies(bus):
    """``first_step_tools`` forces search at the first step; ReadOnly, outermost, sees and keeps that."""
    offered: list[list[str]] = []
    model = recording_model(offered, [
        lambda m: u.call_tool("search", query="x"),
        lambda m: u.call_tool("lookup", key="x"),
        lambda m: "done",
    ])
    h = u.start_loop(
        "find x", model=model, tools=[search, lookup, delete], first_step_tools=["search"],
        policies=[ReadOnly()], bus=bus,
    )
    assert await asyncio.wait_for(h.result(), 10) == "done"
    assert offered[:2] == [["search"], ["lookup", "search"]]


def test_the_flags_are_constructors_of_policy_objects():
    model = u.ScriptedModel(lambda m, t: "ok")
    mine = ReadOnly()
    cfg = LoopOptions.make(
        model=model, tools=[search], first_step_tools=["search"], tool_policy=u.discovery_first("search"),
        time_awareness=True, policies=[mine],
    )
    kinds = [type(p).__name__ for p in cfg.chain]
    assert kinds == ["ReadOnly", "ForcedFirstTools", "ToolPolicyFunction", "TimeAwareness"]
    assert cfg.chain[0] is mine
    assert isinstance(cfg.chain[1], ForcedFirstTools) and isinstance(cfg.chain[3], TimeAwareness)
    assert LoopOptions.make(model=model).chain == ()


async def test_discovery_first_is_also_a_policy_object(bus):
    offered: list[list[str]] = []
    model = recording_model(offered, [
        lambda m: u.call_tool("search", query="x"),
        lambda m: "done",
    ])
    h = u.start_loop("find", model=model, tools=[search, lookup], policies=[DiscoveryFirst("search")], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "done"
    assert offered == [["search"], ["lookup", "search"]]


def test_policies_takes_policy_objects():
    model = u.ScriptedModel(lambda m, t: "ok")
    with pytest.raises(u.UserError, match="policies takes"):
        LoopOptions.make(model=model, policies=[lambda step, inner: inner(step)])
    with pytest.raises(u.UserError, match="policies takes"):
        LoopOptions.make(model=model, policies=ReadOnly())
