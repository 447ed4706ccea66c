"""The engine's seams and the semantics the audit found wrong: each test fails on the engine before the split."""

import asyncio
import itertools
import math
import threading

import pytest

import unity_nb as u
from unity_nb.loop import VERBS, LoopHandle, LoopOptions, current_call


def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user" and isinstance(m.get("content"), str)]


async def test_an_interjection_sent_while_an_evaluation_runs_reaches_the_model(bus):
    evaluating, release = asyncio.Event(), asyncio.Event()

    async def slow_check(answer, loop):
        evaluating.set()
        await release.wait()
        return True

    def script(messages, tools):
        return "west first, then east" if any("west" in t for t in users(messages)) else "east"

    h = u.start_loop("plan a tour", model=u.ScriptedModel(script), evaluations=[slow_check], bus=bus)
    await asyncio.wait_for(evaluating.wait(), 10)
    await h.interject("look at the west first")
    release.set()
    assert await asyncio.wait_for(h.result(), 10) == "west first, then east"
    answers = [m.content for m in h.transcript if m.kind == "answer"]
    assert answers == ["west first, then east"]  # the answer written before the interjection is not final


async def test_a_tool_call_at_the_last_step_is_ignored_and_the_model_asked_once_more(bus):
    def script(messages, tools):
        if any("no tools are available" in t for t in users(messages)):
            return "the value is 1"
        return u.call_tool("lookup", key="a")  # also at the last step, where no tools are offered

    model = u.ScriptedModel(script)
    h = u.start_loop("find a", model=model, tools=[lookup], max_steps=2, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "the value is 1"
    assert [r.tool_choice for r in model.requests] == ["auto", "none", "none"]
    assert h.tool_calls == 1  # the stray call did not run
    wire = h.messages
    for i, m in enumerate(wire):  # the wire stays valid: every tool call is answered
        for c in m.get("tool_calls") or ():
            assert any(x.get("tool_call_id") == c["id"] for x in wire[i + 1 :])


async def test_a_model_that_keeps_calling_tools_at_the_last_step_fails_clearly(bus):
    h = u.start_loop("x", model=u.ScriptedModel(lambda m, t: u.call_tool("lookup", key="a")), tools=[lookup],
                     max_steps=1, bus=bus)
    with pytest.raises(u.UnityError, match="asked once more"):
        await asyncio.wait_for(h.result(), 10)


async def test_a_sync_tool_can_start_a_child_loop_that_becomes_its_child(bus):
    child_model = u.ScriptedModel(["tides are high at noon"])

    def research(topic: str) -> object:
        """Research a topic in a sub-operation (a sync tool: it runs in a worker thread)."""
        return u.start_loop(f"research {topic}", model=child_model, name="researcher")

    def script(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return f"report: {results[0]}" if results else u.call_tool("research", topic="tides")

    h = u.start_loop("report on tides", model=u.ScriptedModel(script), tools=[research], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "report: tides are high at noon"
    assert [c.name for c in h.children] == ["researcher"] and h.children[0].parent is h
    call = next(c for m in h.transcript for c in m.tool_calls)
    assert call.child is h.children[0] and not call.error


async def test_each_forced_first_step_tool_is_called(bus):
    def other(key: str) -> str:
        """Another lookup."""
        return f"other {key}"

    def third(key: str) -> str:
        """Not forced."""
        return key

    def script(messages, tools):
        if any(m["role"] == "tool" for m in messages):
            return "done"
        return u.call_tool(tools[0]["function"]["name"], key="k")  # a forced request offers one tool

    model = u.ScriptedModel(script)
    h = u.start_loop("go", model=model, tools=[lookup, other, third], first_step_tools=["lookup", "other"], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "done"
    first, second = model.requests[:2]
    assert [t["function"]["name"] for t in first.tools] == ["lookup"] and first.tool_choice == "required"
    assert [t["function"]["name"] for t in second.tools] == ["other"] and second.tool_choice == "required"
    assert h.state.called_tools == {"lookup", "other"}
    step = next(m for m in h.transcript if m.tool_calls)
    assert [c.name for c in step.tool_calls] == ["lookup", "other"]  # one step, both calls


async def test_current_call_names_the_loop_and_call_a_tool_runs_in(bus):
    seen = []

    def where() -> str:
        """Say where it runs."""
        call = current_call()
        seen.append((call.loop, call.call_id))
        return "here"

    def script(messages, tools):
        return "ok" if any(m["role"] == "tool" for m in messages) else u.call_tool("where")

    h = u.start_loop("x", model=u.ScriptedModel(script), tools=[where], bus=bus)
    await asyncio.wait_for(h.result(), 10)
    call_id = next(c.id for m in h.transcript for c in m.tool_calls)
    assert seen == [(h, call_id)] and current_call() is None


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_tool_past_its_timeout_fails_with_an_error_the_model_sees(bus, kind):
    ended = threading.Event()

    async def hang_async() -> str:
        """Never returns."""
        try:
            await asyncio.Event().wait()
        finally:
            ended.set()
        return "never"

    def hang_sync() -> str:
        """Spins until interrupted."""
        try:
            while True:
                pass
        finally:
            ended.set()

    tool = u.as_tool(hang_async if kind == "async" else hang_sync, name="hang")

    def script(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return f"saw: {results[0]}" if results else u.call_tool("hang")

    h = u.start_loop("x", model=u.ScriptedModel(script), tools=[tool], tool_timeout=0.2, bus=bus)
    answer = await asyncio.wait_for(h.result(), 10)
    assert answer.startswith("saw: error: hang did not finish within its timeout of 0.2 s")
    assert await asyncio.to_thread(ended.wait, 10)  # the tool itself was stopped, a sync tool's thread too


async def test_a_tool_s_own_timeout_wins_over_the_loop_s(bus):
    async def slow() -> str:
        """Slow."""
        await asyncio.Event().wait()
        return "never"

    def script(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        return results[0] if results else u.call_tool("slow")

    h = u.start_loop("x", model=u.ScriptedModel(script), tools=[u.as_tool(slow, timeout=0.1)], bus=bus)
    assert "timeout of 0.1 s" in await asyncio.wait_for(h.result(), 10)
    with pytest.raises(u.ToolDefinitionError, match="timeout"):
        u.as_tool(slow, timeout=-1)


class _SyncComplete:
    def complete(self, request, on_delta=None):
        return "not awaitable"


def _fn(x: str) -> str:
    """A tool."""
    return x


@pytest.mark.parametrize(
    "option, value",
    [
        ("max_steps", "x"), ("max_steps", math.nan), ("max_steps", math.inf), ("max_steps", 0), ("max_steps", True),
        ("max_parallel_tools", 2.5), ("tools", _fn), ("tools", "lookup"), ("bus", "x"), ("tool_policy", 42),
        ("model", _SyncComplete()), ("model", None), ("evaluations", _fn), ("first_step_tools", "lookup"),
        ("options", "temperature=0"), ("multi", "yes"), ("tool_timeout", 0), ("tool_timeout", math.nan),
        ("compress_at", math.nan), ("system", 42),
    ],
)
async def test_bad_options_are_refused_at_start_naming_the_option(option, value):
    options = {"model": u.ScriptedModel(["x"]), option: value}
    name = "model" if option == "model" else option
    with pytest.raises(u.UserError, match=name):
        u.start_loop("x", **options)


async def test_an_unknown_option_is_refused_with_the_known_ones():
    with pytest.raises(u.UserError, match=r"unknown option.*max_step.*max_steps"):
        u.start_loop("x", model=u.ScriptedModel(["x"]), max_step=3)


def test_loop_options_are_a_frozen_checked_dataclass():
    opts = LoopOptions(model=u.ScriptedModel(["x"]), tools=[lookup], first_step_tools=["lookup"])
    assert opts.tools == (lookup,) and opts.max_steps == 30
    with pytest.raises(AttributeError):
        opts.max_steps = 3  # type: ignore[misc]


async def test_steering_from_another_thread_is_handed_to_the_loop_s_thread(bus):
    gate = asyncio.Event()

    async def script(messages, tools):
        await gate.wait()
        return "done"

    h = u.start_loop("x", model=u.ScriptedModel(script), bus=bus)
    await h.wait_for("model_request", timeout=10)
    await asyncio.to_thread(lambda: asyncio.run(h.pause()))
    assert h.status == "paused"
    await asyncio.to_thread(lambda: asyncio.run(h.resume()))
    assert h.status == "running"
    await asyncio.to_thread(lambda: asyncio.run(h.stop("from another thread")))
    assert h.status == "stopped" and h.state.stop_reason == "from another thread"
    with pytest.raises(u.Stopped):
        await h


def test_every_steering_verb_has_its_method_event_and_transcript_entry():
    from unity_nb.events import Steering

    for name, verb in VERBS.items():
        assert callable(getattr(LoopHandle, name))
        assert Steering(loop_id="x", lineage=("x",), action=name).action == name
        assert isinstance(verb.entry("m", None), str)
    assert u.loop.steering_entry("pause", None) == ("[paused by the user]", "steering")
    assert u.loop.steering_entry("interject", "hi") == ("hi", "interjection")


async def test_a_json_tool_under_the_actor_reports_what_it_printed_and_what_it_changed_in_place(bus):
    import sys

    import pandas as pd

    def normalise(frame: pd.DataFrame, column: str) -> int:
        """Scale a column to 0..1 in place; returns how many rows."""
        print(f"normalising {column}")
        print("2 values clipped", file=sys.stderr)
        frame[column + "_norm"] = frame[column] / frame[column].max()
        return len(frame)

    def plain(x: int) -> int:
        """Prints nothing, changes nothing."""
        return x + 1

    ns = {"df": pd.DataFrame({"a": [1.0, 2.0, 4.0]})}
    seen: list[str] = []

    def script(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if len(results) == 2:
            seen.extend(results)
            return "done"
        return [u.call_tool("normalise", frame="<<var:df>>", column="a"), u.call_tool("plain", x=1)]

    h = u.act("normalise", model=u.ScriptedModel(script), namespace=ns, tools=[normalise, plain], bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "done"
    report, quiet = seen
    assert "stdout:\nnormalising a" in report and "stderr:\n2 values clipped" in report
    assert "changed in place: df: " in report and "a_norm" in report
    assert "stdout" not in quiet and "changed in place" not in quiet
    call = next(c for m in h.transcript for c in m.tool_calls if c.name == "normalise")
    assert "normalising a" in call.output  # the call record (and the widget) still get what it printed


async def test_a_conversation_continues_from_its_history(bus):
    history = [
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "hello Ada"},
    ]
    model = u.ScriptedModel(lambda m, t: "you are " + m[0]["content"].split()[-1])
    h = u.start_loop("who am I?", model=model, history=history, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "you are Ada"
    assert model.requests[0].messages[:2] == history and model.requests[0].messages[2]["content"] == "who am I?"
    with pytest.raises(u.UserError, match="history"):
        u.start_loop("x", model=model, history=[{"content": "no role"}])


async def test_adding_a_steering_verb_is_one_entry_and_its_method(bus):
    """A verb `hurry`: its table entry and its method; the transcript, the event, the store's rebuild,
    the widget's command table and the magics take it from there."""
    from unity_nb.jupyter._args import HELP, parse
    from unity_nb.jupyter._widget import HandleWidget
    from unity_nb.loop import Verb, register_verb

    class Hurried(LoopHandle):
        async def hurry(self, why: str) -> None:
            self.run.steer("hurry", why)
            self.run.nudge()

    register_verb(Verb(
        "hurry", entry=lambda m, _r: f"[told to hurry: {m}]", note=lambda m, _r: f"[the user asks you to hurry: {m}]",
        message="required", doc="Ask the operation NAME to hurry.",
    ))
    try:
        gate = asyncio.Event()

        async def script(messages, tools):
            await gate.wait()
            return "done: " + users(messages)[-1]

        h = Hurried("slow task", model=u.ScriptedModel(script), bus=bus)
        await h.wait_for("model_request", timeout=10)
        await h.hurry("the meeting starts")
        gate.set()
        assert await asyncio.wait_for(h.result(), 10) == "done: [the user asks you to hurry: the meeting starts]"
        assert [m.content for m in h.transcript if m.kind == "steering"] == ["[told to hurry: the meeting starts]"]
        assert next(e for e in h.events if e.kind == "steering").action == "hurry"
        assert u.loop.steering_entry("hurry", "x") == ("[told to hurry: x]", "steering")  # the store's rebuild
        assert "hurry" in HandleWidget(h).commands
        cmd = parse("hurry tour now please")
        assert (cmd.sub, cmd.name, cmd.text) == ("hurry", "tour", "now please")
        assert HELP["hurry"] == "%unity hurry NAME MESSAGE\n    Ask the operation NAME to hurry."
        with pytest.raises(Exception, match="needs a message"):
            parse("hurry tour")
    finally:
        VERBS.pop("hurry", None)
        u.loop.unregister_verb("hurry")


async def test_a_loop_that_ended_has_the_model_drop_what_it_kept_of_its_conversation(bus):
    from fake_openai import FakeOpenAIServer

    async with FakeOpenAIServer(lambda body: "done") as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test")
        handles = [u.start_loop(f"task {i}", model=model, bus=bus) for i in range(3)]
        await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), 10)
        assert len(model.wire_cache) == 0  # each ended loop's encoded conversation is gone
        await model.close()


async def test_a_finished_loop_leaves_no_reference_cycle_for_the_collector(bus):
    """A handle and its parts are freed by reference counting once dropped (a batch of thousands of rows
    must not leave each row's loop to full garbage collections)."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        h = u.start_loop("x", model=u.ScriptedModel(lambda m, t: "done"), bus=bus)
        assert await asyncio.wait_for(h.result(), 10) == "done"
        await asyncio.sleep(0)  # the task's done callbacks run
        gone = weakref.ref(h)
        parts = [weakref.ref(p) for p in (h.run, h._turn, h._runner, h._router, h._engine)]
        del h
        assert gone() is None and all(p() is None for p in parts)
    finally:
        gc.enable()


async def test_each_request_says_how_many_of_its_messages_the_previous_one_sent_unchanged(bus):
    def script(messages, tools):
        done = sum(1 for m in messages if m["role"] == "tool")
        return u.call_tool("tick", n=done) if done < 3 else "done"

    async def tick(n: int) -> int:
        """Count."""
        return n + 1

    model = u.ScriptedModel(script)
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "noted"}]
    assert await u.start_loop("count", model=model, tools=[tick], history=history, bus=bus) == "done"
    first = model.requests[0]
    assert first.continues == 0
    for before, request in itertools.pairwise(model.requests):
        assert request.continues == len(before.messages)
        assert all(a is b for a, b in zip(request.messages[: request.continues], before.messages))
    # the loop's messages are its own: the caller's history dicts are copied, never sent (or changed) as they are
    assert first.messages[0] == history[0] and first.messages[0] is not history[0]


async def test_a_compressed_conversation_promises_nothing_about_its_new_messages(bus):
    calls = []

    def script(messages, tools):
        if messages[0]["content"].startswith("You compress"):
            return "SUMMARY"
        calls.append(1)  # counted here: compression takes earlier results out of the messages
        return u.call_tool("tick", n=len(calls)) if len(calls) <= 4 else "done"

    async def tick(n: int) -> str:
        """Count."""
        return "x" * 400

    model = u.ScriptedModel(script)
    h = u.start_loop("count", model=model, tools=[tick], context_window=300, compress_at=0.5, keep_last=1, bus=bus)
    assert await h == "done" and h.state.compressions >= 1
    steps = [r for r in model.requests if not r.messages[0]["content"].startswith("You compress")]
    assert any(r.continues == 0 for r in steps[1:])  # the request right after a compression
    for before, request in itertools.pairwise(steps):
        assert all(a is b for a, b in zip(request.messages[: request.continues], before.messages))
