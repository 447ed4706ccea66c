"""The tool loop and its handle at depth 1, driven by ScriptedModel, synchronised on events."""

import asyncio
import threading

import pytest
from conftest import assert_every_call_answered_once, settle, tool_messages

import unity_nb as u

DB = {"a": "1", "b": "2", "c": "3", "d": "4"}


def lookup(key: str) -> str:
    """Return the stored value for key."""
    return DB[key]


def lookup_script(keys="abc"):
    """Look up each key in turn, then summarise the results."""

    def script(messages, tools):
        done = tool_messages(messages)
        if tools and len(done) < len(keys):
            return u.call_tool("lookup", key=keys[len(done)])
        return "summary: " + ",".join(m["content"] for m in done)

    return script


class Gated:
    """A scripted model whose replies wait for the test to release them, one at a time."""

    def __init__(self, script):
        self.script = script
        self.gate = asyncio.Event()
        self.model = u.ScriptedModel(self._reply)

    async def _reply(self, messages, tools):
        await self.gate.wait()
        return self.script(messages, tools)

    def release(self):
        self.gate.set()

    def hold(self):
        self.gate.clear()


async def test_runs_tools_and_answers(bus):
    h = u.start_loop(
        "Look up a, b and c, then summarise.", model=u.ScriptedModel(lookup_script()), tools=[lookup], bus=bus
    )
    assert await h == "summary: 1,2,3"
    assert h.status == "finished" and h.status is u.Status.FINISHED
    assert h.done()
    assert (h.steps, h.tool_calls) == (4, 3)
    assert h.usage.input_tokens > 0 and h.usage.output_tokens > 0
    calls = [c for m in h.transcript for c in m.tool_calls]
    assert [(c.name, c.arguments, c.result) for c in calls] == [
        ("lookup", '{"key": "a"}', "1"),
        ("lookup", '{"key": "b"}', "2"),
        ("lookup", '{"key": "c"}', "3"),
    ]
    assert h.transcript[0].role == "user" and h.transcript[0].kind == "task"
    assert h.transcript[-1].kind == "answer"
    kinds = [e.kind for e in h.events]
    assert kinds[0] == "loop_started" and kinds[-1] == "loop_finished"
    assert kinds.count("model_request") == 4 and kinds.count("tool_finished") == 3
    assert all(e.lineage == h.tree.lineage for e in h.events)
    assert bus.history("tool_finished", loop_id=h.id) == [e for e in h.events if e.kind == "tool_finished"]


async def test_sync_tools_run_in_a_worker_thread_and_calls_run_in_parallel(bus):
    threads = []
    both_started = threading.Barrier(2, timeout=10)

    def slow(x: int) -> int:
        """Wait for the other call, proving the two run at once."""
        threads.append(threading.get_ident())
        both_started.wait()
        return x * 2

    def script(messages, tools):
        if not tool_messages(messages):
            return [u.call_tool("slow", x=1), u.call_tool("slow", x=2)]
        return "|".join(m["content"] for m in tool_messages(messages))

    h = u.start_loop("double", model=u.ScriptedModel(script), tools=[slow], bus=bus)
    assert await h == "2|4"
    assert threading.get_ident() not in threads and len(set(threads)) == 2


async def test_tool_errors_unknown_tools_and_bad_arguments_go_back_to_the_model(bus):
    def script(messages, tools):
        results = tool_messages(messages)
        if not results:
            return [u.call_tool("lookup", key="zz"), u.call_tool("nope"), u.ToolCall("lookup", '{"k": 1}')]
        return "\n".join(m["content"] for m in results)

    h = u.start_loop("try", model=u.ScriptedModel(script), tools=[lookup], bus=bus)
    out = await h
    first, second, third = out.split("\n")
    assert first.startswith("error: KeyError")
    assert "no tool named 'nope'" in second and "lookup" in second
    assert "invalid arguments for lookup" in third and "key" in third
    errors = [m.error for m in h.transcript if m.kind == "tool_result"]
    assert errors == [True, True, True]
    assert_every_call_answered_once(h)


async def test_last_step_offers_no_tools_so_an_answer_always_comes(bus):
    seen = []

    def script(messages, tools):
        seen.append([t["function"]["name"] for t in tools])
        return u.call_tool("lookup", key="a") if tools else "forced answer"

    h = u.start_loop("loop forever", model=u.ScriptedModel(script), tools=[lookup], max_steps=3, bus=bus)
    assert await h == "forced answer"
    assert seen == [["lookup"], ["lookup"], []]


async def test_first_step_tools_are_forced_then_all_tools_offered(bus):
    def other(x: str) -> str:
        """Another tool."""
        return x

    model = u.ScriptedModel(lookup_script("a"))
    h = u.start_loop("go", model=model, tools=[lookup, other], first_step_tools=["lookup"], bus=bus)
    await h
    first, second = model.requests
    assert [t["function"]["name"] for t in first.tools] == ["lookup"] and first.tool_choice == "required"
    assert [t["function"]["name"] for t in second.tools] == ["lookup", "other"] and second.tool_choice == "auto"


async def test_tool_policy_chooses_tools_per_step(bus):
    def policy(step, tools):
        return ("required", ["lookup"]) if step == 0 else ("auto", [])

    model = u.ScriptedModel(lookup_script("a"))
    await u.start_loop("go", model=model, tools=[lookup], tool_policy=policy, bus=bus)
    assert [r.tool_choice for r in model.requests] == ["required", "none"]


async def test_pause_holds_model_calls_and_tool_starts_until_resume(bus):
    g = Gated(lookup_script("ab"))
    h = u.start_loop("look up", model=g.model, tools=[lookup], bus=bus)
    await h.wait_for("model_request")
    await h.pause()
    assert h.status == "paused"
    g.release()  # the in-flight call finishes while paused ...
    await h.wait_for("model_response")
    await settle()
    # ... but its tool does not start, and no new model call is made
    assert [e.kind for e in h.events].count("tool_started") == 0
    assert [e.kind for e in h.events].count("model_request") == 1
    await h.resume()
    assert await h == "summary: 1,2"
    kinds = [e.kind for e in h.events if e.kind in ("steering", "tool_started")]
    assert kinds[:3] == ["steering", "steering", "tool_started"]  # pause, resume, then the tool
    # the model is told what happened
    second_request = g.model.requests[1].messages
    assert any("[paused by the user]" in str(m["content"]) for m in second_request)
    # the reply that landed while paused is processed on resume
    assert [m.kind for m in h.transcript][:5] == ["task", "steering", "steering", "text", "tool_result"]


async def test_pause_while_tool_runs_lets_it_finish_and_holds_the_next_call(bus):
    started, finish = asyncio.Event(), asyncio.Event()

    async def work(n: int) -> int:
        """Work on n."""
        started.set()
        await finish.wait()
        return n

    def script(messages, tools):
        return (
            u.call_tool("work", n=7) if not tool_messages(messages) else "done " + tool_messages(messages)[0]["content"]
        )

    h = u.start_loop("work", model=u.ScriptedModel(script), tools=[work], bus=bus)
    await asyncio.wait_for(started.wait(), 10)
    await h.pause()
    finish.set()
    await h.wait_for("tool_finished")
    await settle()
    assert [e.kind for e in h.events].count("model_request") == 1
    await h.resume()
    assert await h == "done 7"


async def test_interject_interrupts_the_call_in_flight_and_reissues_it(bus):
    g = Gated(lambda messages, tools: "final: " + messages[-1]["content"])
    h = u.start_loop("look up", model=g.model, tools=[lookup], bus=bus)
    await h.wait_for("model_request")
    await h.interject("also look up d")
    second = await h.wait_for("model_request", lambda e: e.step == 2)
    assert "also look up d" in second.last_user
    interrupted = await h.wait_for("model_response", lambda e: e.interrupted)
    assert interrupted.step == 1
    g.release()
    assert await h == "final: [interjection from the user] also look up d"
    assert h.steps == 2
    assert any(m.kind == "interjection" and m.content == "also look up d" for m in h.transcript)


async def test_interject_without_interrupt_waits_for_the_next_call(bus):
    g = Gated(lookup_script("a"))
    h = u.start_loop("look up", model=g.model, tools=[lookup], interrupt_on_interject=False, bus=bus)
    await h.wait_for("model_request")
    await h.interject("and be brief")
    await settle()
    assert not any(e.kind == "model_response" and e.interrupted for e in h.events)
    g.release()
    await h
    second = g.model.requests[1].messages
    # the tool result stays right after its call; the interjection follows it
    assert [m["role"] for m in second[-3:]] == ["assistant", "tool", "user"]
    assert "and be brief" in second[-1]["content"]


async def test_stop_cancels_the_model_call_and_result_raises_stopped(bus):
    g = Gated(lookup_script())
    h = u.start_loop("look up", model=g.model, tools=[lookup], bus=bus)
    await h.wait_for("model_request")
    await h.stop("no longer needed")
    assert h.done() and h.status == "stopped"
    with pytest.raises(u.Stopped) as info:
        await h.result()
    assert info.value.reason == "no longer needed"
    assert h.transcript[-1].kind == "steering" and "no longer needed" in h.transcript[-1].content
    finished = h.events[-1]
    assert finished.kind == "loop_finished" and finished.status == "stopped" and finished.reason == "no longer needed"
    with pytest.warns(UserWarning, match="'no longer needed': this stop's reason 'again' was not taken"):
        await h.stop("again")  # idempotent, and said
    assert h.state.stop_reason == "no longer needed"



async def test_a_reply_the_model_gives_after_swallowing_the_stop_is_not_acted_on(bus):
    """A model (any object with an async ``complete``) that swallows the stop's cancellation and replies anyway: the
    reply's tool calls do not run, and the loop ends stopped."""
    ran = []

    async def side_effect() -> str:
        """Something that must not happen once stopped."""
        ran.append(1)
        return "done"

    async def deaf(messages, tools):
        if tool_messages(messages):
            return "finished"
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # swallowed, as a careless client might
            pass
        return u.call_tool("side_effect")

    h = u.start_loop("go", model=u.ScriptedModel(deaf), tools=[side_effect], bus=bus)
    await h.wait_for("model_request")
    await asyncio.wait_for(h.stop("halt"), 10)
    assert h.status == "stopped" and ran == []
    assert not [m for m in h.transcript if m.tool_calls]
    with pytest.raises(u.Stopped, match="halt"):
        await h.result()

async def test_stop_while_tools_run_gives_every_call_a_result(bus):
    started = asyncio.Event()

    async def forever(n: int) -> int:
        """Never returns."""
        started.set()
        await asyncio.Event().wait()
        return n

    h = u.start_loop(
        "go",
        model=u.ScriptedModel(lambda m, t: [u.call_tool("forever", n=i) for i in range(3)]),
        tools=[forever],
        max_parallel_tools=2,
        bus=bus,
    )
    await asyncio.wait_for(started.wait(), 10)
    await h.stop("enough")
    results = [m for m in h.transcript if m.kind == "tool_result"]
    assert len(results) == 3 and all(m.content == "cancelled: enough" and m.error for m in results)
    assert_every_call_answered_once(h)


async def test_ask_answers_from_a_snapshot_with_rewritten_roles(bus):
    g = Gated(lookup_script("ab"))
    asked = []

    def inspector(messages, tools):
        asked.append(messages)
        return "it has looked up a"

    h = u.start_loop("look up a and b", model=g.model, tools=[lookup], bus=bus)
    g.release()
    await h.wait_for("tool_finished")
    g.hold()
    status = await h.ask("what have you found so far?", model=u.ScriptedModel(inspector))
    assert isinstance(status, u.LoopHandle)
    answer = await status.result()
    assert answer == "it has looked up a" and isinstance(answer, str)
    system = asked[0][0]["content"]
    assert "inner_user: look up a and b" in system and "inner_tool[lookup]: 1" in system
    assert asked[0][-1] == {"role": "user", "content": "what have you found so far?"}
    assert not h.done()  # read-only: the inspected loop goes on
    g.release()
    assert await h == "summary: 1,2"
    assert not any("what have you found" in str(m["content"]) for r in g.model.requests for m in r.messages)


async def test_clarification_waits_for_the_person(bus):
    async def book(city: str, ctx: u.ToolContext) -> str:
        """Book a trip to city."""
        when = await ctx.clarify(f"When do you want to go to {city}?")
        ctx.notify("booking now")
        return f"booked {city} on {when}"

    def script(messages, tools):
        return (
            u.call_tool("book", city="Oslo") if not tool_messages(messages) else tool_messages(messages)[0]["content"]
        )

    model = u.ScriptedModel(script)
    h = u.start_loop("book a trip", model=model, tools=[book], bus=bus)
    q = await asyncio.wait_for(h.inbox.next_question(), 10)
    assert q["question"] == "When do you want to go to Oslo?" and q["tool"] == "book"
    assert h.status == "waiting"
    assert "ctx" not in model.requests[0].tools[0]["function"]["parameters"]["properties"]
    await h.inbox.answer(q["call_id"], "Friday")
    note = await asyncio.wait_for(h.inbox.next_notification(), 10)
    assert note["text"] == "booking now"
    assert await h == "booked Oslo on Friday"
    with pytest.raises(u.UserError, match="no open clarification"):
        await h.inbox.answer("nope", "x")


async def test_steering_a_finished_handle_names_its_state(bus):
    h = u.start_loop("hi", model=u.ScriptedModel(["hello"]), bus=bus)
    assert await h == "hello"
    for verb in (h.pause, h.resume):
        with pytest.raises(u.HandleStateError, match="the loop is finished"):
            await verb()
    with pytest.raises(u.HandleStateError, match=r"cannot interject 'loop-.*': the loop is finished"):
        await h.interject("more")
    await h.stop()  # stop is idempotent, also on an ended loop
    assert repr(h) == f"<unity handle {h.name!r}: finished, 1 steps>"


async def test_a_failing_model_fails_the_loop_and_result_raises_it(bus):
    def script(messages, tools):
        raise RuntimeError("model exploded")

    h = u.start_loop("x", model=u.ScriptedModel(script), bus=bus)
    with pytest.raises(RuntimeError, match="model exploded"):
        await h
    assert h.status == "failed" and h.events[-1].kind == "loop_failed"


def test_start_loop_needs_a_running_event_loop():
    with pytest.raises(u.UserError, match="running event loop"):
        u.start_loop("x", model=u.ScriptedModel(["y"]))


def test_tools_need_type_hints():
    def untyped(x):
        """No hints."""

    with pytest.raises(u.ToolDefinitionError, match="parameter 'x' has no type hint"):
        u.as_tool(untyped)


async def test_bad_start_arguments_are_user_errors():
    with pytest.raises(u.UserError, match="needs a task"):
        u.start_loop("  ", model=u.ScriptedModel(["y"]))
    with pytest.raises(u.UserError, match="needs model"):
        u.start_loop("x", model=None)
    with pytest.raises(u.UserError, match="first_step_tools"):
        u.start_loop("x", model=u.ScriptedModel(["y"]), tools=[lookup], first_step_tools=["nope"])


def test_tool_schema_comes_from_signature_and_docstring():
    def search(query: str, limit: int = 5) -> list:
        """Search the notes.

        Returns matching lines."""

    schema = u.as_tool(search).schema()["function"]
    assert schema["name"] == "search" and schema["description"].startswith("Search the notes.")
    assert schema["parameters"]["properties"] == {
        "query": {"type": "string"},
        "limit": {"default": 5, "type": "integer"},
    }
    assert schema["parameters"]["required"] == ["query"]


async def test_a_parameter_s_annotated_description_and_bounds_reach_the_model_and_are_enforced(bus):
    from typing import Annotated

    from pydantic import Field

    async def find_notes(
        query: Annotated[str, Field(description="Words to look for")],
        limit: Annotated[int, Field(ge=1, le=50, description="How many notes at most")] = 5,
    ) -> str:
        """Find notes."""
        return f"{limit} notes about {query}"

    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return u.call_tool("find_notes", query="tides", limit=0)
        if len(done) == 1:
            return u.call_tool("find_notes", query="tides", limit=2)
        return done[-1]["content"]

    model = u.ScriptedModel(script)
    h = u.start_loop("find", model=model, tools=[find_notes], bus=bus)
    assert await h == "2 notes about tides"
    params = model.requests[0].tools[0]["function"]["parameters"]["properties"]
    assert params["query"] == {"description": "Words to look for", "type": "string"}
    assert params["limit"] == {"default": 5, "description": "How many notes at most", "maximum": 50, "minimum": 1,
                               "type": "integer"}
    refused = tool_messages(model.requests[1].messages)[0]["content"]
    assert "limit" in refused and "greater than or equal to 1" in refused  # told to the model, the tool never ran


def test_tools_of_one_def_share_what_pydantic_made_and_each_calls_its_own_function(monkeypatch):
    import pydantic

    made: list[str] = []
    real = pydantic.create_model
    monkeypatch.setattr(pydantic, "create_model", lambda name, **kw: made.append(name) or real(name, **kw))

    def make(n, default):
        def scale_one_def(x: int, by: float = default) -> str:
            """Scale x."""
            return f"{n}:{x * by}"

        return scale_one_def

    first, second = u.as_tool(make(1, 2.0)), u.as_tool(make(2, 2.0))
    assert made == ["scale_one_def_args"]  # one def, the same parameters: its models made once
    assert first.fn is not second.fn and first.schema() == second.schema()
    assert first.fn(**first.parse('{"x": 3}')) == "1:6.0" and second.fn(**second.parse('{"x": 3}')) == "2:6.0"
    # a default that differs, even one equal to it (2 == 2.0 == True as Python compares), is a schema of its own
    schemas = [u.as_tool(make(0, d)).schema()["function"]["parameters"] for d in (2, 3.5, True)]
    shown = [s["properties"]["by"]["default"] for s in schemas]
    assert [(type(v), v) for v in shown] == [(int, 2), (float, 3.5), (bool, True)] and len(made) == 4
    with pytest.raises(ValueError, match="invalid arguments for scale_one_def"):
        second.parse('{"x": "many"}')
    # a tool's schema is its own: changing one (a parameter's description, say) changes no other tool's
    first.parameters_schema["properties"]["x"]["description"] = "the count of widgets"
    assert "description" not in second.schema()["function"]["parameters"]["properties"]["x"]
    assert "description" not in u.as_tool(make(3, 2.0)).parameters_schema["properties"]["x"]


def test_equal_defaults_and_types_in_another_order_keep_their_own_meaning():
    def make(default):
        def pick(x: int, opts: tuple = default) -> tuple:
            """Pick."""
            return opts

        return pick

    ints, bools = u.as_tool(make((1, 0))), u.as_tool(make((True, False)))  # equal tuples, not the same default
    assert ints.fn(**ints.parse('{"x": 1}')) == (1, 0) and bools.fn(**bools.parse('{"x": 1}')) == (True, False)
    assert [type(v) for v in bools.fn(**bools.parse('{"x": 1}'))] == [bool, bool]
    assert bools.schema()["function"]["parameters"]["properties"]["opts"]["default"] == [True, False]

    def either(order):
        def choose(value: order) -> str:  # type: ignore[valid-type]
            """Choose."""
            return str(value)

        return choose

    shown = [u.as_tool(either(t)).parameters_schema["properties"]["value"]["anyOf"] for t in (int | str, str | int)]
    assert shown == [[{"type": "integer"}, {"type": "string"}], [{"type": "string"}, {"type": "integer"}]]


def test_a_function_made_a_tool_is_freed_once_dropped():
    import gc
    import weakref

    def make(state):
        def keep(x: int) -> str:
            """Keep."""
            return f"{state}:{x}"

        return keep

    fn = make(bytearray(10))
    tool = u.as_tool(fn)
    assert u.as_tool(fn).fn is fn and tool.fn(x=1).endswith(":1")  # the tool calls the very function
    dropped = weakref.ref(fn)
    del fn, tool
    gc.collect()
    assert dropped() is None  # (a parent's steering tools are made of closures holding each child)


async def test_events_as_a_dataframe(bus):
    h = u.start_loop("look", model=u.ScriptedModel(lookup_script("a")), tools=[lookup], bus=bus)
    await h
    df = bus.dataframe(loop_id=h.id)
    assert list(df.columns[:5]) == ["seq", "ts", "kind", "loop_id", "lineage"]
    assert df["kind"].iloc[0] == "loop_started" and df["kind"].iloc[-1] == "loop_finished"
    assert len(df) == len(h.events)


async def test_an_answer_written_before_an_interjection_is_not_final(bus):
    g = Gated(lambda messages, tools: "answer to: " + messages[-1]["content"])
    h = u.start_loop("draft", model=g.model, interrupt_on_interject=False, bus=bus)
    await h.wait_for("model_request")
    await h.interject("make it shorter")
    g.release()
    assert await h == "answer to: [interjection from the user] make it shorter"
    assert h.steps == 2 and [m.kind for m in h.transcript][-2:] == ["text", "answer"]


async def test_cancelling_the_task_from_outside_is_not_a_stop(bus):
    h = u.start_loop("x", model=u.ScriptedModel(["y"]), bus=bus)
    h._task.cancel()  # e.g. the event loop shutting down: not a stop we issued
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(h.result(), 10)
    assert h.done() and h.state.stop_reason is None


async def test_a_listener_that_fails_is_logged_and_the_loop_still_ends(bus, caplog):
    """A listener (a widget, a manager) that raises on an event does not stop the loop from going on and ending:
    a raise in ``loop_finished``'s listeners left the handle never ending."""
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    h = u.start_loop("t", model=u.ScriptedModel([u.call_tool("add", a=1, b=2), "three"]), tools=[add], bus=bus)
    told = []

    def broken(_source, event):
        told.append(event.kind)
        if event.kind in ("tool_finished", "loop_finished"):
            raise RuntimeError("the listener broke")

    h.run.add_listener(broken)
    assert await asyncio.wait_for(h.result(), 10) == "three"
    assert "loop_finished" in told and h.done()
    failed = [r for r in caplog.records if r.name == "unity_nb.loop" and "listener" in r.getMessage()]
    assert [r.getMessage().rsplit(" ", 2)[-2] for r in failed] == ["tool_finished", "loop_finished"]


async def test_a_listener_that_removes_itself_leaves_the_next_one_its_event(bus):
    """A one-shot listener (it removes itself when called): the listener after it is still told of that event.
    The run's listeners were a list the publish walked while the call changed it, so the next one was skipped."""
    h = u.start_loop("t", model=u.ScriptedModel(["done"]), bus=bus)
    first: list[str] = []
    second: list[str] = []
    remove: list = []

    def once(_source, event):
        first.append(event.kind)
        remove[0]()

    remove.append(h.run.add_listener(once))
    h.run.add_listener(lambda _source, event: second.append(event.kind))
    assert await asyncio.wait_for(h.result(), 10) == "done"
    assert len(first) == 1 and second[0] == first[0]
