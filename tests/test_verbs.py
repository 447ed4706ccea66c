"""One source for each steering verb (issue 25): its ``Verb`` entry drives routing to children and the
events' list of steering actions."""

import asyncio
import dataclasses

import pytest
from test_nesting import Family

import unity_nb as u
from unity_nb import events as ev
from unity_nb.loop import VERBS, LoopHandle, Verb, register_verb, unregister_verb


@pytest.fixture
def pause_not_reaching_children():
    kept = VERBS["pause"]
    VERBS["pause"] = dataclasses.replace(kept, reaches_children=False)
    yield
    VERBS["pause"] = kept


async def test_pause_reaches_children_because_its_entry_says_so(bus, pause_not_reaching_children):
    f = Family(bus)
    child = await f.started()
    await f.parent.pause()
    assert f.parent.status == "paused"
    assert child.status == "running"  # the entry no longer reaches children: the routing reads it
    await f.parent.resume()
    f.child_gate.set()
    assert await asyncio.wait_for(f.parent.result(), 10) == "report: child found: research tides"


async def test_a_new_verb_that_reaches_children_is_routed_by_its_entry(bus):
    class Family2(LoopHandle):
        async def hush(self, why: str | None = None) -> None:
            self.run.steer("hush", why)
            await self.run.reach_children("hush", why=why)

    heard: list[str] = []

    async def quiet_child_tool(topic: str) -> LoopHandle:
        """Research quietly."""
        child = Family2(f"research {topic}", model=u.ScriptedModel(child_reply), name="researcher", bus=bus)
        started.set()
        return child

    gate, started = asyncio.Event(), asyncio.Event()

    async def child_reply(messages, tools):
        await gate.wait()
        return "found"

    def parent_reply(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("quiet_child_tool", topic="tides")
        return "done"

    register_verb(Verb("hush", entry=lambda m, _r: f"[hushed: {m}]", reaches_children=True, message="optional"))
    try:
        parent = Family2("write", model=u.ScriptedModel(parent_reply), tools=[quiet_child_tool], bus=bus)
        await asyncio.wait_for(started.wait(), 10)
        child = parent.children[0]
        child.run.add_listener(lambda _h, e: heard.append(e.action) if e.kind == "steering" else None)
        await parent.hush("quiet please")
        assert heard == ["hush"]
        assert [m.content for m in child.transcript if m.kind == "steering"] == ["[hushed: quiet please]"]
        gate.set()
        assert await asyncio.wait_for(parent.result(), 10) == "done"
    finally:
        unregister_verb("hush")
    assert "hush" not in VERBS and "hush" not in ev.steering_actions()


def test_the_events_module_owns_the_steering_actions_and_the_verbs_table_matches_it():
    assert set(VERBS) == ev.BUILTIN_STEERING_ACTIONS == ev.steering_actions()
    with pytest.raises(ValueError, match=r"Steering\.action"):
        ev.Steering(loop_id="x", lineage=("x",), action="hush")
    register_verb(Verb("hush", entry=lambda m, _r: m))
    try:
        assert ev.Steering(loop_id="x", lineage=("x",), action="hush").action == "hush"
    finally:
        unregister_verb("hush")
    unregister_verb("pause")  # a built-in verb stays
    assert "pause" in VERBS and "pause" in ev.steering_actions()
