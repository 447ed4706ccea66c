"""What an operation leaves behind keeps nothing of it alive once it ended and the person let go of it.

Each test drops every reference it holds to a finished operation, collects, and checks by weak references that
the handle (its tools, transcript and namespace) and the objects it was given are gone. Found by a search over
every verb: a thread a plan or tool started, and the timers a model call arms (ours and aiohttp's keep-alive),
kept the context the operation ran in, which named its handle; a cache of kinds kept every class a namespace
ever held; the table of what pydantic made kept a tool's defaults.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u


class Rows(list):
    """Stands for a large object given as a tool's default."""


def plan(code: str, answer: str = "done"):
    def script(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("execute_code", code=code, intent="step")
        return answer

    return script


async def test_a_thread_a_plan_started_keeps_neither_the_run_nor_a_marked_function_s_approval():
    @u.tool(needs_approval=True)
    def wipe(table: str) -> str:
        """Wipe a table (irreversible)."""
        return f"wiped {table}"

    release, outcome, ended = threading.Event(), [], threading.Event()

    def later() -> None:  # a thread that outlives the plan: a library's pool, a monitor
        release.wait(10)
        try:
            outcome.append(wipe("sales"))
        except u.NotApproved as err:
            outcome.append(f"not approved: {err}")
        finally:
            ended.set()

    try:
        ns = {"later": later, "threading": threading}
        code = "t = threading.Thread(target=later, daemon=True)\nt.start()\ndel t"
        h = u.act("start a helper thread", model=u.ScriptedModel(plan(code)), namespace=ns, bus=u.EventBus())
        assert await asyncio.wait_for(h.result(), 20) == "done"
        ref = weakref.ref(h)
        del h
        gc.collect()
        assert ref() is None  # the thread's copy of the plan's context no longer holds the handle
        release.set()
        assert await asyncio.to_thread(ended.wait, 10)
        # the function the thread calls later still waits for an approval no one can give: it did not run
        assert outcome and outcome[0].startswith("not approved") and "has ended" in outcome[0]
    finally:
        release.set()
        u.unregister_tool("wipe")


async def test_a_loop_over_http_with_a_model_kept_for_more_is_freed_once_dropped():
    """The silence timer and aiohttp's keep-alive timer are armed in the call's context and outlive it."""
    async with FakeOpenAIServer() as server:
        server.script([R("one"), R("two")])
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test-123456789")
        try:
            refs = []
            for _ in range(2):
                h = u.start_loop("say", model=model, bus=u.EventBus())
                assert await asyncio.wait_for(h.result(), 10) in ("one", "two")
                refs.append(weakref.ref(h))
            del h
            gc.collect()
            assert [r() for r in refs] == [None, None]  # the model and its pooled connection are still in use
        finally:
            await model.close()


@pytest.mark.parametrize("held", ["p = Point()", "t = (Point(),)", "s = frozenset({Point()})"],
                         ids=["instance", "in-a-tuple", "in-a-frozenset"])
async def test_classes_a_namespace_held_are_freed_once_dropped(held):
    """What a run learnt of the namespace is kept for the next run's (by its identity), but holds nothing of the
    person's: a class, its instances, in a tuple or not, go with the namespace's names."""
    ns: dict = {}
    code = "class Point:\n    data = list(range(1000))\n" + held
    for _ in range(3):  # a cell run again defines its class again
        h = u.act("make a point", model=u.ScriptedModel(plan(code)), namespace=ns, bus=u.EventBus())
        await asyncio.wait_for(h.result(), 20)
        h = u.act("look", model=u.ScriptedModel(["seen"]), namespace=ns, bus=u.EventBus())  # described: its kind
        assert await asyncio.wait_for(h.result(), 20) == "seen"
    point = weakref.ref(ns["Point"])
    ns.clear()
    del h
    gc.collect()
    assert point() is None


def test_a_tool_s_default_is_freed_with_its_tool():
    table = Rows(range(1000))
    kept = weakref.ref(table)

    def look(key: str, where: list[int] = table) -> str:
        """Look a key up."""
        return f"{key}: {len(where)} rows"

    tool = u.as_tool(look)
    assert tool.fn(**tool.parse('{"key": "a"}')) == "a: 1000 rows"  # the default reaches the call
    del tool, look, table
    gc.collect()
    assert kept() is None


async def test_the_bus_keeps_printed_output_within_its_size_and_the_transcript_keeps_all_of_it():
    """A bus kept 2,000 events of each kind whatever their size: a plan printing a large frame in a loop kept
    gigabytes in the default bus after its run was gone."""
    bus = u.EventBus(printed_chars=50_000)

    def script(messages, tools):
        done = sum(1 for m in messages if m["role"] == "tool")
        code = f"print('part {done}: ' + 'x' * 20_000)"
        return u.call_tool("execute_code", code=code, intent="print a part") if done < 6 else "done"

    h = u.act("report", model=u.ScriptedModel(script), namespace={}, bus=bus)
    assert await asyncio.wait_for(h.result(), 20) == "done"
    kept = bus.history("tool_output")
    assert 0 < sum(len(e.text) for e in kept) <= 50_000 and bus.dropped >= 3
    kept_text = "".join(e.text for e in kept)
    assert "part 5: " in kept_text and "part 0: " not in kept_text  # the newest kept, the oldest gone
    assert len(bus.history("code_executed")) == 6  # other kinds as they were
    printed = "".join(e.text for e in h.events if e.kind == "tool_output")
    assert all(f"part {i}: " in printed for i in range(6))  # nothing lost from the run's own record
