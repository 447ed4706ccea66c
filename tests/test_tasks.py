"""Durable tasks (UniCore semantics) over a real SQLite store, driven by ScriptedModel,
synchronised on events and on the tasks' own handles."""

import asyncio
import json

import pytest
from conftest import settle, tool_messages

import unity_nb as u
from unity_nb.events import LoopFinished
from unity_nb.managers import TasksManager, repair_history
from unity_nb.store import Store

T = 10


def answered(result):
    """A ``loop_finished`` predicate: the loop answered ``result``."""
    return lambda e: isinstance(e, LoopFinished) and e.result == result


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user"]


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def manager(store, script, bus=None, **kw):
    return TasksManager(store=store, model=u.ScriptedModel(script), namespace={}, bus=bus or u.EventBus(), **kw)


async def test_a_task_keeps_its_conversation_in_turns(store):
    seen = []

    def script(messages, tools):
        seen.append(users(messages))
        return f"answer {len(seen)}"

    tm = manager(store, script)
    t = tm.create("report", "Write the weekly report.")
    assert t.status == "new" and tm.list() == [t]
    assert await tm.execute(t.id) == "answer 1"
    assert tm.get(t.id).status == "idle" and tm.get(t.id).result == "answer 1"
    assert seen[0] == ["Task 'report': Write the weekly report."]
    # idle, and the last turn ended with an answer: a message starts a new turn that sees the old ones
    assert await tm.run(t.id, "Now shorten it.") == "answer 2"
    assert seen[1] == ["Task 'report': Write the weekly report.", "Now shorten it."]
    turns = tm.turns(t.id)
    assert [(x["turn"], x["summary"]) for x in turns] == [(0, "answer 1"), (1, "answer 2")]
    assert [m["role"] for m in turns[1]["messages"]] == ["user", "assistant"]
    assert all(x["ended"] for x in turns)


async def test_edit_reorder_and_clear_errors(store):
    tm = manager(store, lambda m, t: "x")
    a, b, c = (tm.create(n, f"do {n}") for n in "abc")
    assert [t.name for t in tm.reorder([c.id, a.id])] == ["c", "a", "b"]
    assert tm.edit(b.id, description="do b better").description == "do b better"
    with pytest.raises(u.UserError, match="there is no task 'nope'"):
        tm.get("nope")
    with pytest.raises(u.UserError, match="needs a description"):
        tm.create("x", " ")
    with pytest.raises(u.UserError, match="needs store="):
        TasksManager(store=None)


async def test_blank_or_impossible_inputs_are_refused_saying_what_is_wanted(store):
    tm = manager(store, lambda m, t: "x")
    t = tm.create("job", "Do it.")
    with pytest.raises(u.UserError, match="a task needs a name"):
        tm.edit(t.id, name="  ")
    with pytest.raises(u.UserError, match="a task needs a description"):
        tm.edit(t.id, description="")
    assert (tm.get(t.id).name, tm.get(t.id).description) == ("job", "Do it.")
    assert tm.edit(t.id, name=" chore ").name == "chore"
    with pytest.raises(u.UserError, match=r"a message to run the task with is text.*leave it out"):
        await tm.run(t.id, "   ")
    assert tm.get(t.id).status == "new" and store.query("SELECT COUNT(*) AS n FROM task_queue")[0]["n"] == 0
    with pytest.raises(u.UserError, match="parent_context is for a child task: give its parent"):
        tm.create("loner", "Alone.", parent_context=True)
    with pytest.raises(u.UserError, match=f"reorder names {t.id!r} twice"):
        tm.reorder([t.id, t.id])
    assert [x.name for x in tm.list()] == ["chore"]


def parent_script(n_children, gate=None, seen=None):
    """A parent that spawns n children, then answers; later turns report what it was told."""

    async def script(messages, tools):
        texts = users(messages)
        done = tool_messages(messages)
        if messages[-1]["role"] == "user" and "child task" in messages[-1]["content"] and seen is not None:
            seen.append(messages[-1]["content"])
        if len(done) < n_children and not any("child task" in t for t in texts):
            return [u.call_tool("spawn_task", name=f"child{i}", description=f"part {i}") for i in range(n_children)]
        if gate is not None:
            await gate.wait()
        notices = sum(1 for t in texts if t.startswith("[child task"))
        return f"parent saw {notices} completions"

    return script


async def test_a_child_completing_while_the_parent_runs_lands_in_its_current_turn(store):
    parent_gate = asyncio.Event()
    child_gate = asyncio.Event()

    async def script(messages, tools):
        first = users(messages)[0]
        if first.startswith("Task 'child"):
            await child_gate.wait()
            return "child result 42"
        done = tool_messages(messages)
        if not done:
            return u.call_tool("spawn_task", name="child", description="compute")
        if not any("child result 42" in t for t in users(messages)):
            child_gate.set()  # the child finishes while this (parent) call is in flight
            await parent_gate.wait()
            return u.call_tool("execute_code", code="waited = True", intent="keep working")
        return "parent got the child's result"

    tm = manager(store, script)
    parent = tm.create("parent", "Delegate a computation.")
    h = tm.execute(parent.id)
    # the notice is posted into the running parent: wait for it, then let the parent go on
    await h.wait_for("notification", lambda e: "child result 42" in e.text, timeout=T)
    parent_gate.set()
    assert await h == "parent got the child's result"
    assert len(tm.turns(parent.id)) == 1  # no new turn: it landed in the current one
    msgs = tm.messages(parent.id)
    assert any("child result 42" in (m.get("content") or "") for m in msgs if m["role"] == "user")
    child = tm.list(parent=parent.id)[0]
    assert child.status == "idle" and child.result == "child result 42"


async def test_a_child_completing_while_the_parent_is_idle_wakes_it_in_a_new_turn(store):
    child_gate = asyncio.Event()

    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            await child_gate.wait()
            return "child says done"
        if not tool_messages(messages):
            return u.call_tool("spawn_task", name="child", description="slow work")
        if any("child says done" in t for t in texts):
            return "parent: the child is done"
        return "parent: waiting for the child"

    bus = u.EventBus()
    tm = manager(store, script, bus=bus)
    parent = tm.create("parent", "Delegate slow work.")
    assert await tm.execute(parent.id) == "parent: waiting for the child"
    assert tm.get(parent.id).status == "idle" and len(tm.turns(parent.id)) == 1
    woken = asyncio.ensure_future(bus.wait_for("loop_finished", answered("parent: the child is done"), timeout=T))
    child_gate.set()
    await woken
    turns = tm.turns(parent.id)
    assert len(turns) == 2 and turns[1]["summary"] == "parent: the child is done"
    assert turns[1]["messages"][0]["content"].startswith("[child task 'child'")


async def test_four_children_completing_at_once_are_all_seen(store):
    child_gate = asyncio.Event()
    all_seen = asyncio.Event()

    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            await child_gate.wait()
            return f"result of {texts[0].split(':')[0]}"
        if not tool_messages(messages):
            return [u.call_tool("spawn_task", name=f"child{i}", description=f"part {i}") for i in range(4)]
        notices = [t for t in texts if t.startswith("[child task")]
        if len(notices) == 4:
            all_seen.set()
        return f"saw {len(notices)}"

    tm = manager(store, script)
    parent = tm.create("parent", "Split the work in four.")
    assert await tm.execute(parent.id) == "saw 0"
    child_gate.set()  # all four finish together while the parent is idle
    await asyncio.wait_for(all_seen.wait(), T)
    notices = [m["content"] for m in tm.messages(parent.id)
               if m["role"] == "user" and m["content"].startswith("[child task")]
    assert sorted(n.split("'")[1] for n in notices) == ["child0", "child1", "child2", "child3"]
    assert all(c.status == "idle" for c in tm.list(parent=parent.id))


async def test_a_parent_resumes_a_child_with_a_new_message(store):
    child_calls = []

    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            child_calls.append(texts)
            return f"child turn {len(child_calls)}"
        done = tool_messages(messages)
        if not done:
            return u.call_tool("spawn_task", name="child", description="draft")
        notices = [t for t in texts if t.startswith("[child task")]
        if len(notices) == 1 and len(done) == 1:
            child_id = notices[0].split("(")[1].split(")")[0]
            return u.call_tool("message_task", child_id=child_id, message="make it longer")
        return f"parent done after {len(notices)} notices"

    bus = u.EventBus()
    tm = manager(store, script, bus=bus)
    parent = tm.create("parent", "Draft and refine.")
    finished = asyncio.ensure_future(bus.wait_for("loop_finished", answered("parent done after 2 notices"), timeout=T))
    tm.execute(parent.id)
    await finished
    assert child_calls[1][-1] == "make it longer" and len(child_calls[1]) == 2  # the child's 2nd turn sees its 1st
    child = tm.list(parent=parent.id)[0]
    assert [x["turn"] for x in tm.turns(child.id)] == [0, 1]


async def test_an_interrupted_task_resumes_its_turn_from_the_store(tmp_path):
    path = tmp_path / "state.db"
    hang = asyncio.Event()

    async def first_run(messages, tools):
        if not tool_messages(messages):
            return u.call_tool("execute_code", code="found = 7", intent="step one")
        await hang.wait()  # the kernel "dies" during this model call

    s1 = Store(path)
    tm1 = manager(s1, first_run)
    t = tm1.create("job", "Find the number.")
    h = tm1.execute(t.id)
    await h.wait_for("model_request", lambda e: e.step == 2, timeout=T)
    # what a dead kernel leaves: the loop never ends, its session is gone
    s1.execute("UPDATE tasks SET session = 'dead0000' WHERE id = ?", (t.id,))
    s2 = Store(path)
    seen = []

    def second_run(messages, tools):
        seen.append(messages)
        return "the number is 7"

    tm2 = manager(s2, second_run)
    assert tm2.get(t.id).status == "interrupted"
    assert await tm2.execute(t.id) == "the number is 7"
    resumed = seen[0]
    assert [m["role"] for m in resumed[1:]] == ["user", "assistant", "tool", "user"]
    assert "found = 7" in resumed[2]["tool_calls"][0]["function"]["arguments"]
    assert resumed[3]["content"].startswith("success: true")
    assert resumed[-1]["content"].startswith("[this task's previous run was interrupted")
    assert len(tm2.turns(t.id)) == 1  # resumed in the same turn
    await h.stop()
    s1.close()
    s2.close()


async def test_a_message_sent_while_the_turn_ends_in_a_plan_starts_the_next_turn(store):
    started, gate = asyncio.Event(), asyncio.Event()
    plan = "started.set()\nawait gate.wait()\nfinal_answer('first turn done')"

    def script(messages, tools):
        texts = users(messages)
        if any("also count the rows" in t for t in texts):
            return "rows counted"
        return u.call_tool("execute_code", code=plan, intent="finish")

    bus = u.EventBus()
    tm = TasksManager(store=store, model=u.ScriptedModel(script), namespace={"started": started, "gate": gate}, bus=bus)
    t = tm.create("job", "Do the job.")
    h = tm.execute(t.id)
    await asyncio.wait_for(started.wait(), T)
    tm.send(t.id, "also count the rows")  # delivered into the running turn, whose plan is ending it
    next_turn = asyncio.ensure_future(bus.wait_for("loop_finished", answered("rows counted"), timeout=T))
    gate.set()
    assert await h == "first turn done"
    await next_turn  # the message was not lost: it started the next turn
    turns = tm.turns(t.id)
    assert [x["summary"] for x in turns] == ["first turn done", "rows counted"]
    assert sum("also count the rows" in (m.get("content") or "") for m in tm.messages(t.id) if m["role"] == "user") == 1


async def test_a_stopped_task_stays_stopped_and_keeps_what_was_queued_for_it(store):
    gate = asyncio.Event()  # never set: the first turn is stopped

    async def script(messages, tools):
        if users(messages)[0].startswith("Task 'helper'"):
            return "helper done"
        if "now the columns" in users(messages):
            return "columns done"
        await gate.wait()
        return "job done"

    bus = u.EventBus()
    tm = manager(store, script, bus)
    t = tm.create("job", "Do the job.")
    h = tm.execute(t.id)
    await h.wait_for("model_request", timeout=T)
    tm.send(t.id, "also count the rows")  # into the running turn; its model has not seen it yet
    await h.stop("enough for now")
    await settle()
    assert tm.get(t.id).status == "stopped" and tm.handle(t.id) is None  # a stop the queue does not undo
    child = tm.create("helper", "Help.", parent=t.id)
    assert await tm.execute(child.id) == "helper done"
    await settle()  # its completion notice is queued for the stopped parent: it waits there, as the message does
    assert tm.get(t.id).status == "stopped" and tm.handle(t.id) is None
    started = asyncio.ensure_future(bus.wait_for("loop_finished", answered("columns done"), timeout=T))
    tm.send(t.id, "now the columns")  # a person's message to it starts a turn, as to an idle one ...
    await started
    said = [m["content"] for m in tm.messages(t.id) if m["role"] == "user"]  # ... with all that waited, once each
    assert said[-3] == "also count the rows" and said[-2].startswith("[child task 'helper'")
    assert said[-1] == "now the columns" and sum("also count the rows" in x for x in said) == 1
    assert len(tm.turns(t.id)) == 2 and tm.get(t.id).status == "idle"


async def test_run_with_a_message_the_ending_turn_never_saw_returns_the_answer_to_it(store):
    """``run(task, message)`` (a manager's ``run``) while a plan is ending the task's turn: the message lands after
    its last model call, so it starts the next turn; what run returns is that turn's answer, not the one before."""
    started, gate = asyncio.Event(), asyncio.Event()
    plan = "started.set()\nawait gate.wait()\nfinal_answer('first turn done')"

    def script(messages, tools):
        if any("also count the rows" in x for x in users(messages)):
            return "rows counted"
        return u.call_tool("execute_code", code=plan, intent="finish")

    tm = TasksManager(store=store, model=u.ScriptedModel(script), namespace={"started": started, "gate": gate},
                      bus=u.EventBus())
    t = tm.create("job", "Do the job.")
    h = tm.execute(t.id)
    await asyncio.wait_for(started.wait(), T)
    ran = asyncio.ensure_future(tm.run(t.id, "also count the rows"))
    await h.wait_for("notification", lambda e: "also count the rows" in e.text, timeout=T)  # posted into the turn
    gate.set()
    assert await h == "first turn done"
    assert await asyncio.wait_for(ran, T) == "rows counted"
    assert [x["summary"] for x in tm.turns(t.id)] == ["first turn done", "rows counted"]


async def running_in_a_first_of_two_kernels(path, script):
    """Two kernels sharing one store file, both alive (each its Store and manager); a task the first runs, its first
    model call made: ``(s1, s2, tm1, tm2, task, handle)``."""
    s1, s2 = Store(path), Store(path)
    tm1, tm2 = manager(s1, script), manager(s2, script)
    t = tm1.create("job", "Take a while.")
    h = tm1.execute(t.id)
    await h.wait_for("model_request", timeout=T)
    return s1, s2, tm1, tm2, t, h


async def test_a_task_running_in_another_live_kernel_is_not_interrupted(tmp_path):
    path = tmp_path / "state.db"
    release = asyncio.Event()

    async def slow(messages, tools):
        await release.wait()
        return "done"

    s1, s2, _tm1, tm2, t, h = await running_in_a_first_of_two_kernels(path, slow)
    assert tm2.get(t.id).status == "running"
    release.set()
    assert await h == "done"
    assert tm2.get(t.id).status == "idle"
    s1.close()
    s2.close()


def test_repair_gives_every_tool_call_one_result():
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    ]}
    broken: list[dict] = [
        {"role": "user", "content": "go"}, call, {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "tool", "tool_call_id": "a", "content": "duplicate"},
        {"role": "tool", "tool_call_id": "zzz", "content": "orphan"},
        {"role": "user", "content": "more"}, {"role": "tool", "tool_call_id": "q", "content": "orphan too"}, dict(call),
    ]
    fixed = repair_history(broken)
    assert [(m["role"], m.get("tool_call_id")) for m in fixed] == [
        ("user", None), ("assistant", None), ("tool", "a"), ("tool", "b"), ("user", None), ("assistant", None),
        ("tool", "a"), ("tool", "b"),
    ]
    assert "interrupted" in fixed[3]["content"] and json.dumps(fixed)
    assert repair_history(fixed) == fixed


async def test_compression_is_refused_for_durable_tasks(store):
    tm = manager(store, lambda m, t: "x")
    t = tm.create("a", "b")
    with pytest.raises(u.UserError, match="compression is not available"):
        tm.execute(t.id, context_window=1000)


async def test_a_parent_is_told_when_its_child_fails(store):
    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            raise RuntimeError("the child's model broke")
        if not tool_messages(messages):
            return u.call_tool("spawn_task", name="child", description="fragile work")
        if any("failed in turn 0" in t for t in texts):
            return "parent: the child failed"
        return "parent: waiting"

    bus = u.EventBus()
    tm = manager(store, script, bus=bus)
    parent = tm.create("parent", "Delegate fragile work.")
    woken = asyncio.ensure_future(bus.wait_for("loop_finished", answered("parent: the child failed"), timeout=T))
    await tm.execute(parent.id)
    await woken
    child = tm.list(parent=parent.id)[0]
    assert child.status == "failed"
    notice = [m["content"] for m in tm.messages(parent.id)
              if m["role"] == "user" and "failed in turn 0" in m["content"]]
    assert "the child's model broke" in notice[0]


# ---------------------------------------------------------------------------- a child sees its parent


def systems(messages):
    return [m["content"] for m in messages if m["role"] == "system"]


def parent_notes(messages):
    return [s for s in systems(messages) if "conversation of your parent task" in s]


async def test_with_parent_context_always_a_child_task_sees_its_parents_conversation(store):
    child_saw = []

    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            child_saw.append(parent_notes(messages))
            return "child: hotel booked"
        if not tool_messages(messages):
            return u.call_tool("spawn_task", name="child", description="Book the hotel.")
        return "parent: delegated"

    bus = u.EventBus()
    tm = manager(store, script, bus=bus, parent_context="always")
    parent = tm.create("parent", "Plan the trip to Lisbon in May.")
    child_done = asyncio.ensure_future(bus.wait_for("loop_finished", answered("child: hotel booked"), timeout=T))
    await tm.execute(parent.id)
    await child_done
    (notes,) = child_saw
    assert len(notes) == 1
    assert "parent_user: Task 'parent': Plan the trip to Lisbon in May." in notes[0]
    assert "spawn_task(" in notes[0] and "Book the hotel." in notes[0]  # the call that started the child
    child = tm.list(parent=parent.id)[0]
    assert tm.sees_parent(child.id) and not tm.sees_parent(parent.id)
    # context, not conversation: the child's own stored messages do not hold it
    assert [m["role"] for m in tm.messages(child.id)] == ["user", "assistant"]


async def test_with_parent_context_model_the_model_chooses_per_child(store):
    child_saw = {}
    offered = []

    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            name = texts[0].split("'")[1]
            child_saw[name] = parent_notes(messages)
            return f"{name} done"
        if not tool_messages(messages):
            offered.append(next(t for t in tools if t["function"]["name"] == "spawn_task"))
            return [u.call_tool("spawn_task", name="child_with", description="Needs the plan.",
                                include_parent_context=True),
                    u.call_tool("spawn_task", name="child_without", description="Self-contained.")]
        return "parent: delegated"

    bus = u.EventBus()
    tm = manager(store, script, bus=bus, parent_context="model")
    parent = tm.create("parent", "Plan the secret project Zephyr.")
    both = [asyncio.ensure_future(bus.wait_for("loop_finished", answered(f"{n} done"), timeout=T))
            for n in ("child_with", "child_without")]
    await tm.execute(parent.id)
    await asyncio.gather(*both)
    assert "include_parent_context" in offered[0]["function"]["parameters"]["properties"]
    assert len(child_saw["child_with"]) == 1 and "secret project Zephyr" in child_saw["child_with"][0]
    assert child_saw["child_without"] == []


async def test_a_child_created_to_see_its_parent_keeps_seeing_it_after_a_restart(tmp_path):
    path = tmp_path / "state.db"
    child_saw = []

    async def script(messages, tools):
        texts = users(messages)
        if texts[0].startswith("Task 'child"):
            child_saw.append(parent_notes(messages))
            return f"child turn {len(child_saw)}"
        return f"parent: {texts[-1]}"

    s1 = Store(path)
    tm1 = manager(s1, script)  # the default: children see nothing unless created to
    parent = tm1.create("parent", "Plan the trip to Lisbon.")
    assert await tm1.execute(parent.id) == "parent: Task 'parent': Plan the trip to Lisbon."
    child = tm1.create("child", "Book the hotel.", parent=parent.id, parent_context=True)
    other = tm1.create("other", "Book the car.", parent=parent.id)
    assert await tm1.execute(child.id) == "child turn 1"
    assert "Plan the trip to Lisbon." in child_saw[0][0]
    assert not tm1.sees_parent(other.id)
    s1.close()

    s2 = Store(path)  # a new kernel: the choice was kept in the store
    tm2 = manager(s2, script)
    assert await tm2.run(parent.id, "Make it June instead.") == "parent: Make it June instead."
    assert await tm2.run(child.id, "Rebook for June.") == "child turn 2"
    (note,) = child_saw[1]
    assert "parent_user: Make it June instead." in note  # the parent's conversation as it stands now
    s2.close()


# ---------------------------------------------------------------------------- turn summaries


def summary_request(messages):
    last = messages[-1]
    return last["role"] == "user" and "task_assistant:" in (last["content"] or "")


async def test_with_summaries_model_the_model_writes_each_turns_summary(store):
    long_answer = "The weekly report: " + "sales rose in every region. " * 12
    asked = []
    release = asyncio.Event()  # the model's summaries come once the test has seen the truncated one

    async def script(messages, tools):
        if summary_request(messages):
            await release.wait()
            asked.append(messages[-1]["content"])
            return f"  Wrote the weekly report (summary {len(asked)}).  "
        return long_answer if len(users(messages)) == 1 else "Shortened it."

    tm = manager(store, script, summaries="model")
    t = tm.create("report", "Write the weekly report.")
    assert tm.summary_loop(t.id) is None
    assert await tm.execute(t.id) == long_answer
    assert tm.turns(t.id)[0]["summary"] == long_answer[:200]  # the truncated one stands until the model's
    release.set()
    assert await tm.summary_loop(t.id) == "  Wrote the weekly report (summary 1).  "
    assert tm.turns(t.id)[0]["summary"] == "Wrote the weekly report (summary 1)."
    assert "task_user: Task 'report': Write the weekly report." in asked[0] and long_answer.strip() in asked[0]
    assert await tm.run(t.id, "Now shorten it.") == "Shortened it."
    await tm.summary_loop(t.id)
    assert [x["summary"] for x in tm.turns(t.id)] == [
        "Wrote the weekly report (summary 1).", "Wrote the weekly report (summary 2)."]
    assert "task_user: Now shorten it." in asked[1] and "Write the weekly report." not in asked[1]  # that turn only


async def test_a_failed_model_summary_leaves_the_truncated_one(store):
    def script(messages, tools):
        if summary_request(messages):
            raise RuntimeError("the summary model broke")
        return "answer " + "x" * 300

    tm = manager(store, script, summaries="model")
    t = tm.create("report", "Write it.")
    await tm.execute(t.id)
    with pytest.raises(RuntimeError, match="the summary model broke"):
        await tm.summary_loop(t.id)
    assert tm.turns(t.id)[0]["summary"] == ("answer " + "x" * 300)[:200]


async def test_truncated_summaries_stay_the_default(store):
    tm = manager(store, lambda m, t: "y" * 300)
    t = tm.create("a", "b")
    await tm.execute(t.id)
    assert tm.summaries == "truncate" and tm.summary_loop(t.id) is None
    assert tm.turns(t.id)[0]["summary"] == "y" * 200
    with pytest.raises(u.UserError, match="summaries must be"):
        TasksManager(store=store, summaries="short")  # type: ignore[arg-type]
    with pytest.raises(u.UserError, match="parent_context must be"):
        TasksManager(store=store, parent_context="sometimes")  # type: ignore[arg-type]


async def test_a_task_running_in_another_kernel_is_not_started_twice(tmp_path):
    """Kernel B sharing the store messages a task kernel A runs: A delivers it into its running turn; B never
    starts a second run (which wrote the same conversation: a crash in A, its handle never ending)."""
    path = tmp_path / "state.db"
    release = asyncio.Event()
    seen = []

    async def slow(messages, tools):
        seen.append(users(messages))
        if not tool_messages(messages):
            await release.wait()
            return u.call_tool("execute_code", code="x = 1", intent="one step")
        return "done"

    s1, s2, tm1, tm2, t, h = await running_in_a_first_of_two_kernels(path, slow)
    tm2.send(t.id, "and also this")
    await settle()  # what B scheduled (a start, were it to make one) has run
    assert tm2.handle(t.id) is None
    with pytest.raises(u.UserError, match="running in another kernel"):
        tm2.execute(t.id)
    release.set()
    assert await asyncio.wait_for(h, T) == "done"
    assert seen[-1] == ["Task 'job': Take a while.", "and also this"]  # into A's running turn
    assert len(tm1.turns(t.id)) == 1 and tm1.get(t.id).status == "idle"
    assert users(tm1.messages(t.id)) == ["Task 'job': Take a while.", "and also this"]
    s1.close()
    s2.close()


class Racing(Store):
    """A kernel's store that, armed, lets another kernel act (``then``) just before this one first writes: after
    whatever it read before (a task seen not running elsewhere), before it starts the task."""

    then = None

    def transaction(self):
        then, self.then = self.then, None
        if then is not None:
            then()
        return super().transaction()


async def test_two_kernels_starting_an_idle_task_at_once_run_it_once(tmp_path):
    """Kernel B looks (the task is idle), then kernel A starts the task, then B goes on: B is told it runs
    elsewhere, starts nothing and takes nothing queued; A's one run has both messages."""
    path = tmp_path / "state.db"
    release = asyncio.Event()
    seen = []

    async def slow(messages, tools):
        seen.append(users(messages))
        await release.wait()
        return "done"

    s1, s2 = Store(path), Racing(path)
    tm1, tm2 = manager(s1, slow), manager(s2, slow)
    t = tm1.create("job", "Take a while.")
    started = []
    s2.then = lambda: started.append(tm1.execute(t.id))
    with pytest.raises(u.UserError, match="running in another kernel"):
        tm2.execute(t.id)
    assert len(started) == 1 and tm2.handle(t.id) is None
    assert tm2.get(t.id).status == "running"
    tm2.send(t.id, "and also this")  # B's message: queued for A's turn, not taken by B's refused start
    await settle()
    assert tm2.handle(t.id) is None
    release.set()
    h = started[0]
    assert await asyncio.wait_for(h, T) == "done"
    assert len(tm1.turns(t.id)) == 1
    await settle()
    # A delivered B's message before its next model call, or starts a turn for it: never lost, never run twice
    assert "and also this" in users(tm1.messages(t.id)) or tm1.handle(t.id) is not None
    s1.close()
    s2.close()


async def test_a_task_whose_loop_cannot_start_is_left_as_it_was(store, monkeypatch):
    """A start that fails before the task's loop runs leaves it idle, its queued message still queued, no turn
    begun: the next start has them."""
    t = manager(store, lambda m, t_: "first").create("job", "Do it.")
    tm = manager(store, lambda messages, tools: "answered " + users(messages)[-1])
    assert await tm.execute(t.id) == "answered Task 'job': Do it."
    tm.send(t.id, "again") if False else store.execute(
        "INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, 'user', 'again', 'me', 0)", (t.id,))
    monkeypatch.setattr(tm, "sees_parent", lambda task_id: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        tm.execute(t.id)
    assert tm.get(t.id).status == "idle" and len(tm.turns(t.id)) == 1
    monkeypatch.undo()
    assert await tm.execute(t.id) == "answered again"
    assert len(tm.turns(t.id)) == 2


async def test_a_turn_ending_on_a_full_disk_ends_and_is_written_once_space_returns(store, monkeypatch):
    """The store cannot take the turn's last messages (a full disk): the handle still ends with its answer (it
    never ended: the listener's error stopped it), and the turn is written when the file takes it again."""
    from unity_nb.managers import _tasks

    monkeypatch.setattr(_tasks, "_RETRY_FIRST", 0.05)
    gate = asyncio.Event()

    async def script(messages, tools):
        if not tool_messages(messages):
            return u.call_tool("execute_code", code="x = 1", intent="step")
        await gate.wait()
        return "answer " + "y" * 200_000

    tm = manager(store, script)
    t = tm.create("job", "Do it.")
    h = tm.execute(t.id)
    await h.wait_for("model_request", lambda e: e.step == 2, timeout=T)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
    gate.set()
    assert (await asyncio.wait_for(h, T)).startswith("answer y")
    with pytest.raises(u.UserError, match="has not taken that yet"):
        tm.execute(t.id)
    assert tm.turns(t.id)[0]["ended"] is None
    store._db.execute("PRAGMA max_page_count = 1000000")  # space returns
    for _ in range(100):
        await asyncio.sleep(0.05)
        if tm.get(t.id).status == "idle":
            break
    assert tm.get(t.id).status == "idle" and tm.turns(t.id)[0]["ended"] is not None
    assert tm.messages(t.id)[-1]["content"].startswith("answer y")


async def test_a_turn_starting_on_a_full_disk_keeps_its_message_and_is_written_once_space_returns(store, monkeypatch):
    """The store cannot take a new turn's first messages (a full disk): the start is no error raised beside a loop
    that runs on unwritten (its queued message taken and lost, the turn begun and never ended); the turn runs, its
    messages wait in the handle, and the turn is written whole when the file takes it again."""
    from unity_nb.managers import _tasks

    monkeypatch.setattr(_tasks, "_RETRY_FIRST", 0.05)
    tm = manager(store, lambda messages, tools: "answered " + users(messages)[-1][:5])
    t = tm.create("job", "Do it.")
    assert await tm.execute(t.id) == "answered Task "
    message = "again " + "ж" * 100_000  # six bytes a letter once written as JSON, two in the queue: no room is left
    store.execute("INSERT INTO task_queue (task_id, type, content, sender, ts) VALUES (?, 'user', ?, 'me', 0)",
                  (t.id, message))
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
    h = tm.execute(t.id)
    assert await asyncio.wait_for(h, T) == "answered again"
    assert len(tm.turns(t.id)) == 1  # not written yet
    store._db.execute("PRAGMA max_page_count = 1000000")  # space returns
    for _ in range(100):
        await asyncio.sleep(0.05)
        if tm.get(t.id).status == "idle":
            break
    turns = tm.turns(t.id)
    assert tm.get(t.id).status == "idle" and [x["ended"] is not None for x in turns] == [True, True]
    assert [m["content"] for m in turns[1]["messages"]] == [message, "answered again"]
    assert store.query("SELECT COUNT(*) AS n FROM task_queue")[0]["n"] == 0


async def test_a_task_message_changed_by_hand_is_a_clear_error(store):
    tm = manager(store, lambda m, t: "done")
    t = tm.create("job", "Do it.")
    assert await tm.execute(t.id) == "done"
    store.execute("UPDATE task_messages SET message = 'garbage' WHERE task_id = ? AND n = 1", (t.id,))
    with pytest.raises(u.UserError, match=r"message 1 in the store .*state\.db.* cannot be read"):
        tm.turns(t.id)
    with pytest.raises(u.UserError, match="cannot be read"):
        tm.execute(t.id)


class _Died(BaseException):
    """The kernel's process ending where it is raised (nothing after it is written)."""


async def test_a_turns_answer_and_its_end_are_written_together(tmp_path):
    """A kernel dying after its task's turn wrote the answer but before it wrote the turn's end left the answer in
    the turn's messages, the task's result never set and the turn never ended: both are one transaction now."""

    class DiesAtTheNextWrite(Store):
        armed = False
        died = False

        def transaction(self):
            if self.died:  # the process is gone: nothing more is written
                raise _Died
            if self.armed:
                self.writes_after += 1
                if self.writes_after == 2:  # the second write after the answer
                    type(self).died = True
                    raise _Died
            return super().transaction()

    path = tmp_path / "state.db"
    store = DiesAtTheNextWrite(path)
    store.writes_after = 0

    def script(messages, tools):
        DiesAtTheNextWrite.armed = True  # the answer is given: the writes that follow are counted
        return "the report"

    tm = manager(store, script)
    t = tm.create("report", "Write the weekly report.")
    handle = tm.execute(t.id)
    try:
        await asyncio.wait_for(handle.result(), T)
    except (_Died, asyncio.CancelledError, TimeoutError):  # (where the process died, its handle is gone too)
        pass
    await settle()
    DiesAtTheNextWrite.armed = False
    after = Store(path)  # (a plain store: the next kernel)  # the next kernel reads the file
    row = after.query("SELECT status, result FROM tasks WHERE id = ?", (t.id,))[0]
    turn = after.query("SELECT ended FROM task_turns WHERE task_id = ?", (t.id,))[0]
    messages = [json.loads(m["message"]) for m in after.query(
        "SELECT message FROM task_messages WHERE task_id = ? ORDER BY n", (t.id,))]
    assert messages[-1] == {"role": "assistant", "content": "the report"}
    assert (row["status"], row["result"]) == ("idle", "the report") and turn["ended"] is not None
    after.close()
