"""Loop policies and answer hooks, driven by ScriptedModel, synchronised on events:
multi-request loops, context compression, tool policies and dynamic tools, time awareness,
prompt-caching hints, references, thinking steps, evaluations, post-processors, hand-off."""

import asyncio
import json

import pytest
from conftest import assert_every_call_answered_once, tool_messages
from fake_openai import FakeOpenAIServer

import unity_nb as u


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user"]


def assert_wire_is_valid(messages):
    """Every assistant tool call is answered by exactly one tool message right after it, and
    every tool message answers a call."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m["role"] != "tool", f"a tool result without its call at {i}: {m}"
        calls = [c["id"] for c in m.get("tool_calls") or ()]
        i += 1
        answered = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        assert sorted(answered) == sorted(calls), (calls, answered)


async def until(predicate, timeout=10):
    """Yield to the event loop until ``predicate()`` holds (bounded by ``timeout``)."""

    async def spin():
        while not predicate():  # noqa: ASYNC110 - state the loop changes without an event; bounded by timeout
            await asyncio.sleep(0)

    await asyncio.wait_for(spin(), timeout)


# ---------------------------------------------------------------------------- multi-request


async def test_two_requests_in_one_loop_completed_out_of_order(bus):
    second_seen = asyncio.Event()

    async def script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        assert "final_answer" in names
        text = "\n".join(users(messages))
        done = [m["content"] for m in tool_messages(messages)]
        if "[request r2]" not in text:
            await second_seen.wait()  # r1 is worked on until r2 arrives
        if not done:
            # the second request is answered first, from the shared context
            return u.call_tool("final_answer", request_id="r2", answer="beta done")
        if len(done) == 1:
            return u.call_tool("final_answer", request_id="r1", answer="alpha done")
        return "unused"

    model = u.ScriptedModel(script)
    h = u.start_loop("alpha", model=model, multi=True, bus=bus)
    assert [r.request_id for r in h.requests] == ["r1"]
    r1 = h.requests[0]
    await h.wait_for("model_request", timeout=10)
    r2 = h.requests.submit("beta")
    second_seen.set()
    assert isinstance(r2, u.RequestHandle) and r2.request_id == "r2"
    assert await r2 == "beta done"
    assert await r1 == "alpha done"
    assert await h == {"r1": "alpha done", "r2": "beta done"}
    finished = [(e.request_id, e.answer) for e in h.events if e.kind == "request_finished"]
    assert finished == [("r2", "beta done"), ("r1", "alpha done")]
    first_request = model.requests[0].messages
    assert "[request r1] alpha" in users(first_request)
    assert any("final_answer(request_id, answer)" in m["content"] for m in first_request if m["role"] == "system")
    assert_every_call_answered_once(h)


async def test_a_plain_answer_completes_the_only_open_request_and_persist_waits_for_more(bus):
    model = u.ScriptedModel(lambda m, t: "answer to " + users(m)[-1].split("] ", 1)[-1])
    h = u.start_loop("one", model=model, multi=True, persist=True, bus=bus)
    assert await h.requests[0] == "answer to one"
    await h.wait_for("request_finished", timeout=10)
    await until(lambda: h.status == "idle")  # the loop goes idle once its request is finished
    assert not h.done()
    r2 = h.requests.submit("two")
    assert await r2 == "answer to two"
    r3 = h.requests.submit("three")
    await h.stop("closing")
    assert h.status == "stopped"
    with pytest.raises(u.Stopped):
        await h
    assert r3.done() and r3.status in ("stopped", "finished")


async def test_several_open_requests_must_each_be_completed(bus):
    def script(messages, tools):
        done = tool_messages(messages)
        text = "\n".join(users(messages))
        if "requests are still open" in text and not done:
            return [
                u.call_tool("final_answer", request_id="r1", answer="A"),
                u.call_tool("final_answer", request_id="r2", answer="B"),
            ]
        return "an answer for nobody in particular"

    model = u.ScriptedModel(script)
    h = u.start_loop("first", model=model, multi=True, bus=bus)
    h.requests.submit("second")
    assert await h == {"r1": "A", "r2": "B"}


async def test_max_steps_with_open_requests_forces_final_answers_and_fails_the_rest(bus):
    def script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        if names == ["final_answer"]:  # the last step: only final_answer, and required
            return u.call_tool("final_answer", request_id="r1", answer="best effort")
        return u.call_tool("noop")

    def noop() -> str:
        """Do nothing."""
        return "ok"

    model = u.ScriptedModel(script)
    h = u.start_loop("first", model=model, tools=[noop], multi=True, max_steps=3, bus=bus)
    r2 = h.requests.submit("second")
    assert await h.requests[0] == "best effort"
    with pytest.raises(u.UnityError, match="max_steps=3"):
        await r2
    assert model.requests[-1].tool_choice == "required"
    assert await h == {"r1": "best effort"}


async def test_a_request_submitted_while_the_last_step_answers_gets_a_budget_of_its_own(bus):
    evaluating = asyncio.Event()
    release = asyncio.Event()

    async def slow_check(answer, loop):
        evaluating.set()
        await release.wait()
        return True

    def script(messages, tools):
        if "[request r2] beta" in "\n".join(users(messages)):
            return "beta done"
        return "alpha done"

    model = u.ScriptedModel(script)
    h = u.start_loop("alpha", model=model, multi=True, max_steps=1, evaluations=[slow_check], bus=bus)
    await asyncio.wait_for(evaluating.wait(), 10)  # r1's answer, at its last step, is being evaluated
    r2 = h.requests.submit("beta")  # max_steps counts from the latest request: r2 has a step of its own
    release.set()
    assert await asyncio.wait_for(h.requests[0].result(), 10) == "alpha done"
    assert await asyncio.wait_for(r2.result(), 10) == "beta done"
    assert await asyncio.wait_for(h.result(), 10) == {"r1": "alpha done", "r2": "beta done"}


async def test_plain_replies_at_the_last_step_with_open_requests_do_not_outlive_max_steps(bus):
    model = u.ScriptedModel(lambda m, t: "still thinking")  # never calls final_answer
    h = u.start_loop("first", model=model, multi=True, max_steps=2, bus=bus)
    r2 = h.requests.submit("second")
    try:
        with pytest.raises(u.UnityError, match="max_steps=2"):
            await asyncio.wait_for(r2.result(), 10)
        with pytest.raises(u.UnityError, match="max_steps=2"):
            await asyncio.wait_for(h.requests[0].result(), 10)
        assert await asyncio.wait_for(h.result(), 10) == {}
        assert len(model.requests) == 2
    finally:
        await h.stop()


async def test_a_request_has_its_own_clarifications_interjections_and_stop(bus):
    async def confirm(what: str, ctx: u.ToolContext) -> str:
        """Ask the person to confirm."""
        return await ctx.clarify(f"confirm {what}?")

    release = asyncio.Event()
    submitted = asyncio.Event()  # the first call is in flight when r2 comes (and is re-issued with it)

    async def script(messages, tools):
        done = tool_messages(messages)
        text = "\n".join(users(messages))
        if "[request r2]" in text and not done:
            return u.call_tool("confirm", what="beta", request_id="r2")
        if len(done) == 1:
            await release.wait()
            return u.call_tool("final_answer", request_id="r2", answer="r2: " + done[0]["content"])
        await submitted.wait()
        return "..."

    model = u.ScriptedModel(script)
    h = u.start_loop("alpha", model=model, tools=[confirm], multi=True, persist=True, bus=bus)
    r1 = h.requests[0]
    await h.wait_for("model_request", timeout=10)
    r2 = h.requests.submit("beta")
    submitted.set()
    question = await asyncio.wait_for(r2.inbox.next_question(), 10)
    assert question["question"] == "confirm beta?" and question["request_id"] == "r2"
    assert r2.status == "waiting" and r1.status == "running"
    assert r1.mailbox.questions.empty()  # r1's own queue saw nothing
    await r2.inbox.answer(question["call_id"], "yes")
    await r2.interject("make it short")
    release.set()
    assert await r2 == "r2: yes"
    steer = [e for e in h.events if e.kind == "steering" and e.action == "interject"]
    assert steer[0].request_id == "r2"
    assert any(
        "[interjection from the user about request r2] make it short" in t
        for r in model.requests
        for t in users(r.messages)
    )
    await r1.stop("not needed")
    with pytest.raises(u.Stopped, match="not needed"):
        await r1
    # the last open request of a persistent loop does not end the loop
    assert not h.done()
    await h.stop()
    with pytest.raises(u.UserError, match="multi=True"):
        u.start_loop("x", model=model, bus=bus).requests.submit("more")


async def test_stopping_the_last_open_request_stops_a_loop_that_does_not_persist(bus):
    async def never(messages, tools):
        await asyncio.Event().wait()

    h = u.start_loop("only", model=u.ScriptedModel(never), multi=True, bus=bus)
    await h.wait_for("model_request", timeout=10)
    await h.requests[0].stop("changed my mind")
    assert h.status == "stopped" and "changed my mind" in h.state.stop_reason


# ---------------------------------------------------------------------------- compression


async def test_a_long_transcript_is_compressed_and_keeps_working(bus):
    def fetch(page: int) -> str:
        """Fetch one page of a long document."""
        return f"page {page}: " + "lorem ipsum " * 60

    def script(messages, tools):
        if messages[0]["content"].startswith("You compress"):
            return "pages 0.. were fetched; nothing surprising in them"
        assert_wire_is_valid(messages)
        done = tool_messages(messages)
        fetched = sum(1 for r in model.requests if r.tools) - 1
        if fetched < 12:
            return u.call_tool("fetch", page=fetched)
        return f"read 12 pages; saw {len(done)} results in context"

    model = u.ScriptedModel(script)
    h = u.start_loop("Read the document.", model=model, tools=[fetch], context_window=1000, keep_last=4, bus=bus)
    answer = await h
    assert answer.startswith("read 12 pages")
    compressed = [e for e in h.events if e.kind == "context_compressed"]
    assert len(compressed) >= 2 and h.state.compressions == len(compressed)
    assert all(e.tokens_after < e.tokens_before for e in compressed)
    # every request the model got was a valid conversation, and stayed bounded
    work = [r for r in model.requests if not r.messages[0]["content"].startswith("You compress")]
    for r in work:
        assert_wire_is_valid(r.messages)
    later = work[-1].messages
    assert later[0]["content"] == "Read the document." and later[1]["content"].startswith(
        "[summary of the earlier conversation"
    )
    from unity_nb.loop._policies import estimate_tokens

    assert max(estimate_tokens(r.messages) for r in work) < 1000  # never past the window
    # the transcript (for people) keeps every call and result
    assert [c.name for m in h.transcript for c in m.tool_calls] == ["fetch"] * 12
    assert_every_call_answered_once(h)
    assert sum(1 for m in h.transcript if m.kind == "compression") == len(compressed)


def test_compression_never_separates_a_call_from_its_result():
    from unity_nb.loop._policies import split_for_compression

    call = lambda i: {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c{i}", "function": {"name": "f", "arguments": "{}"}}],
    }
    result = lambda i: {"role": "tool", "tool_call_id": f"c{i}", "content": "x"}
    wire = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(5):
        wire += [call(i), result(i)]
    for keep in range(1, 10):
        head, middle, tail = split_for_compression(wire, keep)
        assert head == wire[:2] and head + middle + tail == wire
        assert tail[0]["role"] != "tool" and len(tail) >= keep
        assert_wire_is_valid(middle) if middle else None


# ---------------------------------------------------------------------------- tool policies


def list_functions() -> str:
    """List the functions that exist."""
    return "lookup"


def list_guidance() -> str:
    """List the procedures that apply."""
    return "be careful"


def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


async def test_discovery_first_hides_tools_until_the_discovery_tools_were_called(bus):
    def script(messages, tools):
        names = sorted(t["function"]["name"] for t in tools)
        done = tool_messages(messages)
        if "lookup" not in names:
            return u.call_tool("list_functions") if not done else u.call_tool("list_guidance")
        if len(done) == 2:
            return u.call_tool("lookup", key="k")
        return "found " + done[-1]["content"]

    model = u.ScriptedModel(script)
    policy = u.discovery_first("list_functions", "list_guidance")
    h = u.start_loop("find k", model=model, tools=[list_functions, list_guidance, lookup], tool_policy=policy, bus=bus)
    assert await h == "found K"
    offered = [sorted(t["function"]["name"] for t in r.tools) for r in model.requests]
    assert offered[0] == offered[1] == ["list_functions", "list_guidance"]
    assert [r.tool_choice for r in model.requests[:2]] == ["required", "required"]
    assert offered[2] == ["list_functions", "list_guidance", "lookup"] and model.requests[2].tool_choice == "auto"
    assert h.state.called_tools == {"list_functions", "list_guidance", "lookup"}


async def test_a_failed_discovery_call_does_not_open_the_surface(bus):
    def broken() -> str:
        """List what exists (broken)."""
        raise RuntimeError("down")

    def script(messages, tools):
        return u.call_tool("broken") if len(model.requests) == 1 else "gave up"

    model = u.ScriptedModel(script)
    h = u.start_loop("x", model=model, tools=[broken, lookup], tool_policy=u.discovery_first("broken"), bus=bus)
    await h
    assert [t["function"]["name"] for t in model.requests[1].tools] == ["broken"]


async def test_dynamic_tools_are_computed_from_state_each_step(bus):
    inbox = ["hello", "world"]

    def make_tools(loop):
        def read_next() -> str:
            """Read the next message."""
            return inbox.pop(0)

        return [read_next] if inbox else []

    def script(messages, tools):
        names = [t["function"]["name"] for t in tools]
        return (
            u.call_tool("read_next")
            if "read_next" in names
            else "read: " + ",".join(m["content"] for m in tool_messages(messages))
        )

    model = u.ScriptedModel(script)
    h = u.start_loop("read all", model=model, dynamic_tools=make_tools, bus=bus)
    assert await h == "read: hello,world"
    assert [[t["function"]["name"] for t in r.tools] for r in model.requests] == [["read_next"], ["read_next"], []]


async def test_time_awareness_notes_the_clock_after_tool_results(bus):
    model = u.ScriptedModel(lambda m, t: u.call_tool("lookup", key="a") if not tool_messages(m) else "done")
    h = u.start_loop("go", model=model, tools=[lookup], time_awareness=True, bus=bus)
    await h
    last = model.requests[-1].messages
    assert last[-2]["role"] == "tool" and last[-1]["role"] == "user"
    assert last[-1]["content"].startswith("[time now: ") and "s since this task began]" in last[-1]["content"]
    assert_wire_is_valid(last)


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean-http", "client.post"])
async def test_prompt_cache_hints_reach_the_wire(fast_path, bus):
    async with FakeOpenAIServer() as server:
        server.script(["first", "second"])
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test", fast_path=fast_path)
        try:
            h = u.start_loop("hi", model=model, system="be brief", prompt_cache=True, bus=bus)
            assert await h == "first"
            h2 = u.start_loop("hi", model=model, system="be brief", prompt_cache="anthropic", bus=bus)
            assert await h2 == "second"
        finally:
            await model.client.close()
    openai_body, anthropic_body = server.requests
    assert openai_body["prompt_cache_key"] == f"unity_nb-{h.id}"
    system, user = anthropic_body["messages"]
    assert system["content"] == [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    assert user["content"][0]["cache_control"] == {"type": "ephemeral"} and "prompt_cache_key" not in anthropic_body


# ---------------------------------------------------------------------------- answers


def search(query: str) -> u.ToolResult:
    """Search the notes."""
    return u.ToolResult(
        f"2 hits for {query}",
        references=[
            u.Reference("Q3 report", "North fell 12%.", url="https://example.invalid/q3"),
            u.Reference("Memo", "South grew."),
        ],
    )


async def test_references_are_numbered_shown_and_kept_when_cited(bus):
    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return u.call_tool("search", query="north")
        assert "[1] Q3 report (https://example.invalid/q3): North fell 12%." in done[0]["content"]
        assert "[2] Memo: South grew." in done[0]["content"]
        return "North fell 12% [1]."

    h = u.start_loop("How did North do?", model=u.ScriptedModel(script), tools=[search], bus=bus)
    assert await h == "North fell 12% [1]."
    assert [r.number for r in h.state.all_references] == [1, 2]
    assert [(r.number, r.title, r.tool) for r in h.state.references] == [(1, "Q3 report", "search")]


CORPUS = [u.Reference("Q3 report", "North fell 12%."), u.Reference("Memo", "South grew.")]


def lookup_doc(query: str) -> u.ToolResult:
    """Look a document up in a fixed corpus."""
    return u.ToolResult(f"hit for {query}", references=[CORPUS[0] if "north" in query else CORPUS[1]])


async def test_a_reference_object_returned_twice_keeps_the_number_the_model_was_shown(bus):
    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < 3:
            return u.call_tool("lookup_doc", query=["north", "south", "north again"][len(done)])
        assert "[1] Q3 report" in done[0]["content"] and "[3] Q3 report" in done[2]["content"]
        return "North fell [1], South grew [2]."

    h = u.start_loop(
        "How did the regions do?",
        model=u.ScriptedModel(script),
        tools=[lookup_doc],
        evaluations=[u.cites_references()],
        max_corrections=0,
        bus=bus,
    )
    assert await h == "North fell [1], South grew [2]."
    assert [r.number for r in h.state.all_references] == [1, 2, 3]
    assert [(r.number, r.title) for r in h.state.references] == [(1, "Q3 report"), (2, "Memo")]
    assert [v.passed for v in h.state.evaluation_results] == [True]


async def test_an_evaluation_that_fails_once_sends_the_model_back_once(bus):
    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return u.call_tool("search", query="north")
        corrections = [t for t in users(messages) if "did not pass evaluation" in t]
        return "North fell 12% [1]." if corrections else "North fell a lot [7]."

    model = u.ScriptedModel(script)
    h = u.start_loop("How did North do?", model=model, tools=[search], evaluations=[u.cites_references()], bus=bus)
    assert await h == "North fell 12% [1]."
    runs = [(e.passed, e.sent_back) for e in h.events if e.kind == "evaluation_run"]
    assert runs == [(False, True), (True, False)]
    assert "cites [7], which no tool returned" in h.state.evaluation_results[0].feedback
    assert len(model.requests) == 3  # the tool step, the failed answer, the corrected one
    kinds = [m.kind for m in h.transcript if m.role == "assistant"]
    assert kinds == ["text", "text", "answer"]  # the failed answer stays in the transcript, not as the answer


async def test_evaluations_are_bounded_and_the_last_answer_stands(bus):
    calls = []

    async def strict(answer, loop):
        calls.append(answer)
        return "never good enough"

    model = u.ScriptedModel(lambda m, t: f"attempt {len(model.requests)}")
    h = u.start_loop("x", model=model, evaluations=[strict], max_corrections=2, bus=bus)
    assert await h == "attempt 3"
    assert calls == ["attempt 1", "attempt 2", "attempt 3"]
    assert [e.sent_back for e in h.events if e.kind == "evaluation_run"] == [True, True, False]
    assert [v.passed for v in h.state.evaluation_results] == [False, False, False]


async def test_evaluations_of_a_request_answer_keep_it_open_until_corrected(bus):
    def script(messages, tools):
        done = tool_messages(messages)
        if not done:
            return u.call_tool("final_answer", request_id="r1", answer="too short")
        if len(done) == 1:
            assert "did not pass evaluation" in done[0]["content"]
            return u.call_tool("final_answer", request_id="r1", answer="long enough now")
        return "unused"

    h = u.start_loop(
        "x",
        model=u.ScriptedModel(script),
        multi=True,
        evaluations=[lambda a, loop: len(a) > 10 or "longer please"],
        bus=bus,
    )
    assert await h.requests[0] == "long enough now"


async def test_corrections_of_plain_answers_are_counted_per_request(bus):
    def script(messages, tools):
        return "corrected" if "did not pass evaluation" in users(messages)[-1] else "draft"

    h = u.start_loop(
        "one",
        model=u.ScriptedModel(script),
        multi=True,
        persist=True,
        evaluations=[lambda a, loop: a == "corrected" or "say corrected"],
        bus=bus,
    )
    try:
        assert await asyncio.wait_for(h.requests[0].result(), 10) == "corrected"
        r2 = h.requests.submit("two")  # max_corrections=1 holds for each request, not once for the loop
        assert await asyncio.wait_for(r2.result(), 10) == "corrected"
        assert [e.sent_back for e in h.events if e.kind == "evaluation_run"] == [True, False, True, False]
    finally:
        await h.stop()


async def test_postprocessors_transform_the_answer_and_the_transcript_keeps_the_original(bus):
    async def follow_ups(answer, loop):
        return answer + "\n\nFollow-up: want it by quarter?"

    h = u.start_loop("x", model=u.ScriptedModel(["North fell."]), postprocessors=[str.upper, follow_ups], bus=bus)
    assert await h == "NORTH FELL.\n\nFollow-up: want it by quarter?"
    answers = [(m.kind, m.content) for m in h.transcript if m.role == "assistant"]
    assert answers == [("text", "North fell."), ("answer", "NORTH FELL.\n\nFollow-up: want it by quarter?")]


async def test_thinking_steps_show_what_the_loop_is_doing(bus):
    def script(messages, tools):
        if not tool_messages(messages):
            return u.Reply(content="Looking up the key first.\nthen more", tool_calls=[u.call_tool("lookup", key="a")])
        if len(tool_messages(messages)) == 1:
            return u.call_tool("lookup", key="b")
        return "done"

    h = u.start_loop("x", model=u.ScriptedModel(script), tools=[lookup], bus=bus)
    await h
    assert h.state.thinking == ["Looking up the key first.", "calling lookup"]
    assert [e.text for e in h.events if e.kind == "thinking_step"] == h.state.thinking


async def test_a_tool_can_hand_off_control_to_its_loop(bus):
    gate = asyncio.Event()

    async def researcher(messages, tools):
        await gate.wait()
        return "deep research result"

    async def deep_research(topic: str) -> u.HandOff:
        """Start a long research run that talks to the person itself."""
        return u.handoff(u.start_loop(f"research {topic}", model=u.ScriptedModel(researcher), name="research", bus=bus))

    parent_model = u.ScriptedModel(
        lambda m, t: u.call_tool("deep_research", topic="markets") if not tool_messages(m) else "never"
    )
    h = u.start_loop("research markets", model=parent_model, tools=[deep_research], bus=bus)
    child = await h
    assert isinstance(child, u.LoopHandle) and child.name == "research" and not child.done()
    assert h.status == "finished" and h.children == [child] and len(parent_model.requests) == 1
    assert [e.child_name for e in h.events if e.kind == "control_handed_off"] == ["research"]
    await child.interject("focus on Europe")  # the person steers it directly now
    gate.set()
    assert await child == "deep research result"


def test_bad_policy_options_are_clear_errors():
    async def main():
        m = u.ScriptedModel(["x"])
        with pytest.raises(u.UserError, match="persist=True needs multi=True"):
            u.start_loop("x", model=m, persist=True)
        with pytest.raises(u.UserError, match="context_window"):
            u.start_loop("x", model=m, context_window=10)
        with pytest.raises(u.UserError, match="compress_at"):
            u.start_loop("x", model=m, context_window=1000, compress_at=2)
        with pytest.raises(u.UserError, match="evaluations must be functions"):
            u.start_loop("x", model=m, evaluations=["strict"])
        with pytest.raises(u.UserError, match="prompt_cache"):
            u.start_loop("x", model=m, prompt_cache="gemini")
        with pytest.raises(u.UserError, match="discovery_first needs"):
            u.discovery_first()

    asyncio.run(main())


def test_events_of_policies_parse_from_json():
    from pydantic import TypeAdapter

    adapter = TypeAdapter(u.AnyEvent)
    e = adapter.validate_python(
        {
            "kind": "context_compressed",
            "loop_id": "a",
            "lineage": ["x"],
            "messages_before": 9,
            "messages_after": 5,
            "tokens_before": 900,
            "tokens_after": 300,
            "summarised": 5,
        }
    )
    assert e.kind == "context_compressed" and json.loads(e.model_dump_json())["summarised"] == 5
