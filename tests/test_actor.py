"""The CodeAct actor outside a kernel: plans in a namespace dict, variables by reference,
primitives, approval, the watchdog and steering, driven by ScriptedModel, synchronised on events."""

import asyncio
import json
import re
from typing import Any

import pandas as pd
import pytest
from conftest import assert_every_call_answered_once, tool_messages

import unity_nb as u
from unity_nb.events import ApprovalDecided, ApprovalRequested, CodeExecuted, ToolDisplay, VariablesChanged


def plans(*steps, answer="done"):
    """A script that runs each step in turn (a str of code, or a ToolCall), then answers.

    ``answer`` may be a function of the messages (to report what the model saw)."""

    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < len(steps):
            step = steps[len(done)]
            if isinstance(step, str):
                return u.call_tool("execute_code", code=step, intent=f"step {len(done) + 1}")
            return step
        return answer(messages) if callable(answer) else answer

    return script


def results(model):
    """The tool results the model received, in order (from its last request)."""
    return [m["content"] for m in tool_messages(model.requests[-1].messages)]


def code_has(text):
    """An event filter: the event's plan code holds ``text``."""
    return lambda e: text in getattr(e, "code", "")


def offered(request):
    return [t["function"]["name"] for t in request.tools]


async def test_a_plan_runs_in_the_namespace_and_reports_what_it_did(bus):
    ns = {"sales": pd.DataFrame({"region": list("abcd"), "delta": [5, -3, -9, 1]})}
    model = u.ScriptedModel(plans(
        "worst = sales.nsmallest(2, 'delta')\nprint('found', len(worst))\nworst.region.tolist()",
        "total = int(worst.delta.sum())",
    ))
    h = u.act("Find the two worst regions; put them in `worst`.", model=model, namespace=ns, bus=bus)
    assert await h == "done"
    assert isinstance(h, u.ActorHandle) and h.plans == 2
    assert ns["worst"].region.tolist() == ["c", "b"] and ns["total"] == -12  # there for the next cell
    first, second = results(model)
    assert first.startswith("success: true")
    assert "stdout:\nfound 2" in first
    assert "value of the last expression: list, length 2: ['c', 'b']" in first
    assert "variables created:\n- worst: pd.DataFrame, shape (2, 2)" in first
    assert "variables created:\n- total: int: -12" in second  # the second plan saw the first's variable
    kinds = [e.kind for e in h.events]
    assert kinds.count("code_executed") == 2 and "variables_changed" in kinds
    executed = [e for e in h.events if isinstance(e, CodeExecuted)]
    assert executed[0].intent == "step 1" and executed[0].success
    assert_every_call_answered_once(h)


async def test_the_model_sees_descriptions_not_data(bus):
    n = 200_000
    ns = {
        "big": pd.DataFrame({"x": range(n), "label": [f"row{i}" for i in range(n)]}),
        "small": pd.DataFrame({"x": range(10), "label": [f"row{i}" for i in range(10)]}),
        "numbers": list(range(10_000)),
        "note": "y" * 50_000,
        "_private": 1,
        "json": json,  # a module
    }
    model = u.ScriptedModel(plans())
    await u.act("look", model=model, namespace=ns, bus=bus)
    system = model.requests[0].messages[0]["content"]
    assert "- big: pd.DataFrame, shape (200,000, 2); columns: x: int64, label:" in system
    assert "row199999" not in system and "row5 " not in system  # only a few head rows
    assert "- numbers: list, length 10,000: [0, 1, 2, 3, 4, ...]" in system
    assert "(50,000 characters)" in system and "y" * 1000 not in system
    assert "_private" not in system and "- json:" not in system
    # the description of a huge frame is as long as that of a small one
    big = u.actor.describe_value(ns["big"])
    small = u.actor.describe_value(ns["small"])
    assert abs(len(big) - len(small)) <= 10


def test_the_namespace_listing_is_bounded_whatever_the_data():
    many = {f"frame{i:03d}": pd.DataFrame({"a": range(1000)}) for i in range(300)}
    text = u.actor.describe_namespace(many, budget=6000)
    assert len(text) < 8000
    assert "more, not described for space" in text and text.endswith("and 188 more)")


async def test_a_failing_plan_reports_its_changes_and_points_at_its_own_line(bus):
    ns = {"keep": [1, 2], "gone": "bye", "untouched": {"k": 1}}
    model = u.ScriptedModel(plans("created = 1\nkeep.append(3)\ndel gone\n\n1 / 0\nnever = 2"))
    await u.act("fail", model=model, namespace=ns, bus=bus)
    (text,) = results(model)
    assert text.startswith("success: false")
    assert 'line 5, in <module>\n    1 / 0' in text and "ZeroDivisionError: division by zero" in text
    assert "_executor.py" not in text  # the executor's own frames are not shown
    assert "variables created:\n- created: int: 1" in text
    assert "variables changed:\n- keep: list, length 3" in text
    assert "variables deleted: gone" in text
    assert "never" not in ns and ns["untouched"] == {"k": 1} and ns["keep"] == [1, 2, 3]
    call = next(c for m in model.requests[-1].messages if m.get("tool_calls") for c in m["tool_calls"])
    assert json.loads(call["function"]["arguments"])["code"].startswith("created = 1")


@pytest.mark.parametrize(
    "code, expected",
    [
        ("x = (", "SyntaxError"),
        ("return 5", "SyntaxError: 'return' outside function"),
        ("import sys\nsys.exit(3)", "(sys.exit in a plan ends the plan, not the kernel)"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
        ("raise SystemExit", "SystemExit"),
    ],
)
async def test_plans_that_would_kill_a_kernel_become_error_results(bus, code, expected):
    model = u.ScriptedModel(plans(code, "after = 'still alive'"))
    h = u.act("try", model=model, namespace={}, bus=bus)
    assert await h == "done"
    first, second = results(model)
    assert first.startswith("success: false") and expected in first
    assert second.startswith("success: true") and h.namespace["after"] == "still alive"



@pytest.mark.parametrize(
    "code, expected",
    [
        ("import asyncio\nt = asyncio.ensure_future(asyncio.sleep(10))\nt.cancel()\nawait t", "CancelledError"),
        ("import asyncio\nraise asyncio.CancelledError('mine')", "CancelledError: mine"),
        ("class Odd(BaseException): pass\nraise Odd('odd')", "Odd: odd"),
    ],
)
async def test_a_cancellation_or_base_exception_a_plan_raises_is_its_error_not_a_stop(bus, code, expected):
    """Only a cancellation of the call (a stop, a timeout) is one: what a plan raises itself, a CancelledError of a
    task it cancelled or another BaseException, is the plan's error, with its traceback, for the model to read."""
    model = u.ScriptedModel(plans(code, "after = 'still alive'"))
    h = u.act("try", model=model, namespace={}, bus=bus)
    assert await h == "done"
    first, second = results(model)
    assert first.startswith("success: false") and expected in first and "Traceback" in first
    assert second.startswith("success: true") and h.namespace["after"] == "still alive"

async def test_final_answer_returns_a_value_and_cannot_be_swallowed(bus):
    ns = {"df": pd.DataFrame({"a": [3, 1, 2]})}
    model = u.ScriptedModel(plans(
        "try:\n    final_answer(df.sort_values('a'))\nexcept Exception:\n    print('swallowed')",
        "print('a plan after final_answer must never run')",
    ))
    h = u.act("sort", model=model, namespace=ns, bus=bus)
    value = await h
    assert isinstance(value, pd.DataFrame) and value.a.tolist() == [1, 2, 3]
    assert h.plans == 1 and len(model.requests) == 1
    assert "swallowed" not in (h.transcript[-2].content or "")
    assert h.transcript[-1].kind == "answer" and "pd.DataFrame, shape (3, 1)" in (h.transcript[-1].content or "")


async def test_output_is_captured_and_long_output_is_truncated_saying_so(bus):
    model = u.ScriptedModel(plans("import sys\nprint('x' * 20000)\nprint('to stderr', file=sys.stderr)"))
    h = u.act("print", model=model, namespace={}, bus=bus)
    await h
    (text,) = results(model)
    assert "truncated: 16,001 characters omitted" in text
    assert "stderr:\nto stderr" in text
    assert len(text) < 5000
    rec = next(c for m in h.transcript for c in m.tool_calls)
    assert len(rec.output) > 20000  # the person's record keeps it all


async def test_a_plan_printing_without_end_is_held_within_a_bound_and_counted_whole(bus):
    # 3,000,000 characters in 30,000 writes: the result keeps its first and last 100,000, saying how many were cut,
    # and the model and the events are told how much was printed in all
    code = "for i in range(30000):\n    print('%099d' % i)"
    res = await u.actor.Executor({}).run(code)
    assert res.success and res.stdout_chars == 3_000_000
    assert len(res.stdout) < 200_100
    assert res.stdout.startswith("0" * 99 + "\n") and res.stdout.endswith(f"{29999:099d}\n")
    assert "[... 2,800,000 characters cut ...]" in res.stdout
    assert "truncated: 2,996,000 characters omitted" in res.for_model()

    model = u.ScriptedModel(plans(code))
    h = u.act("print", model=model, namespace={}, bus=bus)
    await h
    (text,) = results(model)
    assert "truncated: 2,996,000 characters omitted" in text and f"{29999:099d}\n" in text
    (done,) = [e for e in h.events if isinstance(e, CodeExecuted)]
    assert done.stdout_chars == 3_000_000


async def test_protected_names_are_restored(bus):
    ns = {"In": ["cell"], "data": 1}
    model = u.ScriptedModel(
        plans("primitives = None\nfinal_answer = print\nIn = 'clobbered'\ndata = 2", "ok = callable(final_answer)")
    )
    h = u.act("clobber", model=model, namespace=ns, bus=bus)
    await h
    first, _ = results(model)
    for name in ("primitives", "final_answer", "In"):
        assert f"a plan may not rebind or delete `{name}`" in first
    assert ns["In"] == ["cell"] and ns["data"] == 2 and ns["ok"] is True
    assert isinstance(ns["primitives"], u.actor.Primitives)


async def test_top_level_await_and_a_namespace_change_between_steps(bus):
    ns: dict[str, Any] = {}
    gate = asyncio.Event()

    async def reply(messages, tools):
        done = tool_messages(messages)
        if not done:
            return u.call_tool("execute_code", code="import asyncio\nawait asyncio.sleep(0)\nfirst = 1", intent="await")
        if len(done) == 1:
            await gate.wait()  # the person runs a cell meanwhile
            return u.call_tool("execute_code", code="seen = person", intent="use it")
        return "done"

    model = u.ScriptedModel(reply)
    h = u.act("await", model=model, namespace=ns, bus=bus)
    await h.wait_for("code_executed", timeout=10)
    ns["person"] = "made in a cell"
    gate.set()
    await h
    assert ns["first"] == 1 and ns["seen"] == "made in a cell"
    # the change made outside the plans reached the model before its next step
    notes = [m["content"] for m in model.requests[-2].messages if m["role"] == "user"]
    assert any("namespace changed outside your plans" in n and "created person: str" in n for n in notes)


async def test_code_timeout_interrupts_a_plan_spinning_without_awaiting(bus):
    model = u.ScriptedModel(plans("n = 0\nwhile True:\n    n += 1", "after = n > 0"))
    h = u.act("spin", model=model, namespace={}, code_timeout=0.3, bus=bus)
    assert await h == "done"
    first, _second = results(model)
    assert first.startswith("success: false") and "code_timeout=0.3 s" in first
    assert re.search(r'File "<plan [^>]+>", line [23], in <module>', first)  # the plan's own line
    assert h.namespace["after"] is True  # what the plan did before it was interrupted is kept


async def test_time_spent_awaiting_does_not_count_against_code_timeout(bus):
    release = asyncio.Event()

    async def slow_source() -> str:
        await release.wait()
        return "arrived"

    ns = {"slow_source": slow_source}
    model = u.ScriptedModel(plans("got = await slow_source()"))
    h = u.act("wait", model=model, namespace=ns, code_timeout=0.05, bus=bus)
    await h.wait_for("tool_started", timeout=10)
    # the plan awaits far longer than code_timeout: the watchdog is not armed while it awaits
    await asyncio.sleep(0.2)  # not a synchronisation: time has to pass for the point to be made
    release.set()
    await h
    assert ns["got"] == "arrived" and results(model)[0].startswith("success: true")


async def test_stop_takes_effect_at_the_plans_next_await(bus):
    ns: dict[str, Any] = {}
    model = u.ScriptedModel(plans("import asyncio\nbefore = 1\nawait asyncio.Event().wait()\nafter = 1"))
    h = u.act("hang", model=model, namespace=ns, bus=bus)
    await h.wait_for("tool_started", timeout=10)
    await h.stop("enough")
    with pytest.raises(u.Stopped, match="enough"):
        await h
    assert ns["before"] == 1 and "after" not in ns
    assert_every_call_answered_once(h)


# ---------------------------------------------------------------------------- references


class Registry:
    """Tools that record what they received."""

    def __init__(self):
        self.seen = []

    def tools(self):
        seen = self.seen

        def summarise(frame: pd.DataFrame, column: str) -> dict:
            """Summarise one column of a DataFrame."""
            seen.append(frame)
            return {"mean": float(frame[column].mean()), "n": len(frame)}

        def scale(values: list[int], factor: int = 2) -> list[int]:
            """Multiply each value."""
            seen.append(values)
            return [v * factor for v in values]

        return [summarise, scale]


async def test_a_variable_passed_by_reference_is_the_same_object(bus):
    reg = Registry()
    df = pd.DataFrame({"a": [1.0, 2.0, 3.0]})
    ns = {"df": df, "nums": [1, 2, 3]}
    model = u.ScriptedModel(plans(
        u.call_tool("summarise", frame="<<var:df>>", column="a", **{"return": "stats"}),
        u.call_tool("scale", values="<<var:nums>>"),
        u.call_tool("scale", values=[5], factor=3),
    ))
    h = u.act("summarise", model=model, namespace=ns, tools=reg.tools(), bus=bus)
    await h
    assert reg.seen[0] is df and reg.seen[1] is ns["nums"]  # identity, not a copy
    assert ns["stats"] == {"mean": 2.0, "n": 3}
    assert "scale_result" not in ns  # JSON the model read whole is kept only under a `return` name
    first, second, third = results(model)
    assert "[stored in variable `stats`; pass it on as <<var:stats>>]" in first
    assert (second, third) == ("[2, 4, 6]", "[15]")
    changed = [e for e in h.events if isinstance(e, VariablesChanged)]
    assert [e.created for e in changed][:1] == [("stats",)]


async def test_schemas_list_compatible_variables_and_hide_tools_until_one_exists(bus):
    reg = Registry()
    ns = {"nums": [1, 2], "word": "hi"}
    model = u.ScriptedModel(plans("df = pd.DataFrame({'a': [1.5]})"))
    await u.act("look", model=model, namespace={**ns, "pd": pd}, tools=reg.tools(), bus=bus)
    first, second = model.requests
    assert offered(first) == ["execute_code", "scale"]  # summarise needs a DataFrame: none yet
    assert offered(second) == ["execute_code", "summarise", "scale"]
    summarise = next(t for t in second.tools if t["function"]["name"] == "summarise")["function"]["parameters"]
    assert summarise["properties"]["frame"]["enum"] == ["<<var:df>>"]
    assert "frame" in summarise["required"] and "return" in summarise["properties"]
    scale = next(t for t in first.tools if t["function"]["name"] == "scale")["function"]["parameters"]
    alternatives = scale["properties"]["values"]["anyOf"]
    assert alternatives[0]["type"] == "array" and alternatives[1]["enum"] == ["<<var:nums>>"]  # not `word`


async def test_the_offered_references_follow_every_change_a_plan_makes(bus):
    """The tools' compatible variables are worked out from each step's snapshot, and a step that changes no
    variable's compatibility reuses the last step's schemas: every kind of change must still show."""
    reg = Registry()
    ns = {"nums": [1, 2], "other": [3], "df": pd.DataFrame({"a": [1.0]})}
    model = u.ScriptedModel(plans(
        "i = 1",  # a counter: changes no compatibility
        "nums.append('x')",  # in place: a list of int no more
        "del other",
        "other = pd.DataFrame({'b': [2.0]})",  # the name back, as another type
        "df = [7]",  # a frame rebound to a list of int
    ))
    await u.act("go", model=model, namespace={**ns, "pd": pd}, tools=reg.tools(), bus=bus)

    def enums(request) -> dict[str, list[str]]:
        out = {}
        for t in request.tools:
            props = t["function"]["parameters"]["properties"]
            param = {"summarise": "frame", "scale": "values"}.get(t["function"]["name"])
            spec = props.get(param, {})
            names = spec.get("enum") or (spec["anyOf"][1]["enum"] if "anyOf" in spec else None)
            if names:
                out[t["function"]["name"]] = names
        return out

    seen = [enums(r) for r in model.requests]
    assert seen == [
        {"summarise": ["<<var:df>>"], "scale": ["<<var:nums>>", "<<var:other>>"]},
        {"summarise": ["<<var:df>>"], "scale": ["<<var:nums>>", "<<var:other>>"]},
        {"summarise": ["<<var:df>>"], "scale": ["<<var:other>>"]},
        {"summarise": ["<<var:df>>"]},
        {"summarise": ["<<var:df>>", "<<var:other>>"]},
        {"summarise": ["<<var:other>>"], "scale": ["<<var:df>>"]},
    ]


async def test_bad_references_are_errors_the_model_can_correct(bus):
    reg = Registry()
    ns = {"df": pd.DataFrame({"a": [1]}), "word": "hi"}
    model = u.ScriptedModel(plans(
        u.call_tool("summarise", frame="<<var:nope>>", column="a"),
        u.call_tool("scale", values="<<var:word>>"),
        u.call_tool("summarise", frame={"a": [1]}, column="a"),
        u.call_tool("scale", values=[1], **{"return": "primitives"}),
        u.call_tool("summarise", frame="<<var:df>>", column="a"),
    ))
    h = u.act("try", model=model, namespace=ns, tools=reg.tools(), bus=bus)
    await h
    missing, incompatible, inline, reserved, good = results(model)
    assert "there is no variable named 'nope'" in missing and "compatible variables: ['df']" in missing
    assert "variable 'word'" in incompatible and "not compatible with parameter values" in incompatible
    assert "takes a variable by reference" in inline
    assert "`return` may not name 'primitives'" in reserved
    assert good == '{"mean": 1.0, "n": 1}'  # JSON read whole: shown as such, kept in no variable
    assert len(reg.seen) == 1 and reg.seen[0] is ns["df"]  # no call with a bad reference ran
    assert_every_call_answered_once(h)


async def test_references_off(bus):
    reg = Registry()
    with pytest.raises(u.UserError, match="by reference only, and references=False"):
        u.act("x", model=u.ScriptedModel(plans()), namespace={}, tools=reg.tools(), references=False, bus=bus)

    def plain(n: int) -> int:
        """Double n."""
        return 2 * n

    model = u.ScriptedModel(plans(u.call_tool("plain", n=4)))
    ns: dict[str, Any] = {}
    h = u.act("x", model=model, namespace=ns, tools=[plain], references=False, bus=bus)
    await h
    assert results(model) == ["8"] and ns == {}
    params = model.requests[0].tools[1]["function"]["parameters"]
    assert "return" not in params["properties"]


# ---------------------------------------------------------------------------- primitives


async def test_primitives_are_awaited_in_plans_and_their_loops_are_children(bus):
    def child_script(messages, tools):
        return "child says hi"

    child_model = u.ScriptedModel(child_script)

    class Notes:
        """A tiny manager: each method starts a loop."""

        def ask(self, question: str) -> u.LoopHandle:
            """Answer a question about the notes."""
            return u.start_loop(question, model=child_model, name="notes.ask", bus=bus)

    def add(a: int, b: int) -> int:
        """Add two numbers (runs in a worker thread)."""
        return a + b

    model = u.ScriptedModel(
        plans("answer = await primitives.notes.ask('hello?')\ntotal = await primitives.maths.add(2, 3)")
    )
    ns: dict[str, Any] = {}
    h = u.act("use primitives", model=model, namespace=ns, primitives={"notes": Notes(), "maths": [add]}, bus=bus)
    await h
    assert ns["answer"] == "child says hi" and ns["total"] == 5
    system = model.requests[0].messages[0]["content"]
    assert "await primitives.notes.ask(question: str) -> LoopHandle" in system
    assert "await primitives.maths.add(a: int, b: int) -> int" in system
    assert [c.name for c in h.children] == ["notes.ask"]
    assert h.children[0].tree.lineage[0] == h.tree.lineage[0]


async def test_a_blocking_primitive_and_a_json_tool_stopped_or_timed_out_are_interrupted_in_their_threads(bus):
    """Both ran in asyncio's default executor, where a stop or a timeout left them running on unseen (and
    ``asyncio.run`` waited for them at its end): now in the loop's own workers, which interrupt the call."""
    import threading

    ended: dict[str, threading.Event] = {"spin": threading.Event(), "crunch": threading.Event()}
    entered = threading.Event()

    def spin(rounds: int) -> str:
        """Spin in Python for ``rounds`` (forever, here)."""
        try:
            while True:
                pass
        finally:
            ended["spin"].set()

    def crunch(rounds: int) -> int:
        """Crunch numbers for ``rounds`` (forever, here)."""
        entered.set()
        try:
            while True:
                pass
        finally:
            ended["crunch"].set()

    h = u.act("spin", model=u.ScriptedModel([u.call_tool("spin", rounds=1), "done"]), namespace={}, tools=[spin],
              tool_timeout=0.2, bus=bus)
    assert await asyncio.wait_for(h.result(), 20) == "done"
    assert "did not finish within its timeout of 0.2 s" in tool_messages(h.messages)[0]["content"]
    assert await asyncio.to_thread(ended["spin"].wait, 10)  # the call in its thread was interrupted too

    h = u.act("crunch", model=u.ScriptedModel(plans("await primitives.maths.crunch(1)")), namespace={},
              primitives={"maths": [crunch]}, bus=bus)
    assert await asyncio.to_thread(entered.wait, 10)
    await asyncio.wait_for(h.stop("enough"), 10)
    assert h.status == u.Status.STOPPED
    assert await asyncio.to_thread(ended["crunch"].wait, 10)


async def test_registered_primitives_and_clear_errors(bus):
    @u.primitive(alias="mine")
    def triple(x: int) -> int:
        """Triple x."""
        return 3 * x

    try:
        assert u.registered_primitives()["mine"]["triple"] is triple
        model = u.ScriptedModel(
            plans("t = await primitives.mine.triple(4)", "primitives.mine.nothing", "primitives.other")
        )
        ns: dict[str, Any] = {}
        await u.act("triple", model=model, namespace=ns, bus=bus)
        assert ns["t"] == 12
        _, no_method, no_alias = results(model)
        assert "primitives.mine has no 'nothing'; it has: triple" in no_method
        assert "there are no primitives.other" in no_alias
    finally:
        u.actor.unregister_primitive("triple", alias="mine")
    with pytest.raises(u.UserError, match="identifier"):
        u.primitive(alias="not valid")(triple)


async def test_steering_reaches_a_loop_a_primitive_started(bus):
    gate = asyncio.Event()

    async def slow_child(messages, tools):
        await gate.wait()
        return "child done"

    child_model = u.ScriptedModel(slow_child)

    async def research(topic: str) -> u.LoopHandle:
        """Research a topic."""
        return u.start_loop(topic, model=child_model, name="research", bus=bus)

    model = u.ScriptedModel(plans("found = await primitives.r.research('x')"))
    h = u.act("go", model=model, namespace={}, primitives={"r": {"research": research}}, bus=bus)
    await h.wait_for("child_started", timeout=10)
    child = h.children[0]
    await h.pause()
    assert child.status == "paused"
    await h.resume()
    assert child.status == "running"
    await h.stop("no more")
    assert child.status == "stopped" and h.status == "stopped"


# ---------------------------------------------------------------------------- approval and steering


async def test_approval_first_waits_for_run_and_skip_tells_the_model(bus):
    ns: dict[str, Any] = {}
    model = u.ScriptedModel(
        plans("a = 1", "b = 2", "c = 3", answer=lambda ms: "saw: " + tool_messages(ms)[0]["content"])
    )
    h = u.act("approve", model=model, namespace=ns, approval="first", bus=bus)
    requested = await h.wait_for("approval_requested", timeout=10)
    assert isinstance(requested, ApprovalRequested)
    assert h.status == "waiting" and "a" not in ns
    assert h.inbox.approvals == [
        {"call_id": requested.call_id, "code": "a = 1", "intent": "step 1", "loop": h.name, "loop_id": h.id}
    ]
    with pytest.raises(u.UserError, match="no plan with call_id 'nope'"):
        await h.inbox.skip("nope")
    await h.inbox.skip(reason="not that way")
    # a skip is no approval: the next plan waits too; once one is approved, the rest run ("first")
    await h.wait_for("approval_requested", code_has("b = "), timeout=10)
    assert "b" not in ns
    await h.inbox.approve()
    assert await h == "saw: [the person skipped this plan; it did not run]: not that way"
    assert "a" not in ns and ns["b"] == 2 and ns["c"] == 3
    assert [e.approved for e in h.events if isinstance(e, ApprovalDecided)] == [False, True]


async def test_approval_always_runs_each_plan_only_after_approve(bus):
    ns: dict[str, Any] = {}
    model = u.ScriptedModel(plans("a = 1", "b = 2"))
    h = u.act("approve", model=model, namespace=ns, approval="always", bus=bus)
    for name in ("a", "b"):
        await h.wait_for("approval_requested", code_has(f"{name} = "), timeout=10)
        assert name not in ns and h.status == "waiting"
        await h.inbox.approve()
        await h.wait_for("code_executed", code_has(f"{name} = "), timeout=10)
        assert name in ns
    assert await h == "done"
    with pytest.raises(u.HandleStateError, match="finished"):
        await h.inbox.approve()


async def test_pause_holds_the_next_plan_and_an_interjection_reaches_the_model_first(bus):
    ns: dict[str, Any] = {}
    go = asyncio.Event()

    async def reply(messages, tools):
        done = tool_messages(messages)
        if not done:
            await go.wait()
            return u.call_tool("execute_code", code="first = 1", intent="one")
        users = [m["content"] for m in messages if m["role"] == "user"]
        if len(done) == 1:
            return u.call_tool("execute_code", code=f"heard = {users[-1]!r}", intent="two")
        return "done"

    model = u.ScriptedModel(reply)
    h = u.act("work", model=model, namespace=ns, bus=bus)
    await h.wait_for("model_request", timeout=10)
    await h.pause()
    go.set()
    await h.wait_for("model_response", timeout=10)
    assert "first" not in ns and h.status == "paused"  # the reply landed while paused: the plan waits
    await h.interject("use the blue data")
    await h.resume()
    assert await h == "done"
    assert ns["first"] == 1 and "use the blue data" in ns["heard"]


async def test_ask_sees_the_plans_and_their_outputs(bus):
    gate = asyncio.Event()

    async def reply(messages, tools):
        if messages[0]["content"].startswith("You are inspecting"):
            context = messages[0]["content"]
            seen = ("PLAN-MARKER" if "PLAN-MARKER" in context else "") + (" OUT-42" if "OUT-42" in context else "")
            return "I see: " + seen
        done = tool_messages(messages)
        if not done:
            return u.call_tool("execute_code", code="x = 'PLAN-MARKER'\nprint('OUT-' + str(6 * 7))", intent="mark")
        await gate.wait()
        return "done"

    model = u.ScriptedModel(reply)
    h = u.act("work", model=model, namespace={}, bus=bus)
    await h.wait_for("code_executed", timeout=10)
    answer = await (await h.ask("what have you done?")).result()
    assert answer == "I see: PLAN-MARKER OUT-42"
    gate.set()
    await h


def test_bad_options_are_clear_errors():
    with pytest.raises(u.UserError, match="approval must be"):
        u.Actor(u.ScriptedModel(plans()), approval="sometimes")  # type: ignore[arg-type]
    with pytest.raises(u.UserError, match="code_timeout must be a positive number"):
        u.Actor(u.ScriptedModel(plans()), code_timeout=0)
    with pytest.raises(u.UserError, match="namespace must be a dict"):
        u.Actor(u.ScriptedModel(plans()), namespace=[1])  # type: ignore[arg-type]


async def test_without_a_model_the_error_says_what_to_do(monkeypatch):
    monkeypatch.delenv("UNITY_NB_MODEL", raising=False)
    with pytest.raises(u.UserError, match="the actor needs model="):
        u.act("x", namespace={})


async def test_a_figure_a_plan_draws_is_shown_with_its_call_and_closed(bus):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = u.ScriptedModel(plans("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('sales')\nNone"))
    h = u.act("plot", model=model, namespace={}, bus=bus)
    await h
    (call,) = [c for m in h.transcript for c in m.tool_calls]
    (figure,) = call.displays
    assert figure["data"]["image/png"].startswith("iVBOR")  # a PNG, base64
    assert plt.get_fignums() == []  # closed: no later cell shows it again
    assert "displayed to the user (image/png)" in results(model)[0]
    assert [e.mime_types for e in h.events if isinstance(e, ToolDisplay)] == [("image/png", "text/plain")]


async def test_builtins_a_plan_rebinds_are_restored_for_the_next_plan(bus):
    ns: dict[str, Any] = {}
    model = u.ScriptedModel(plans("__builtins__ = {}", "print('still here', len([1, 2]))"))
    h = u.act("clobber the builtins", model=model, namespace=ns, bus=bus)
    assert await h == "done"
    first, second = results(model)
    assert "a plan may not rebind or delete `__builtins__`" in first
    assert second.startswith("success: true") and "still here 2" in second


async def test_a_return_target_may_not_shadow_a_builtin(bus):
    reg = Registry()
    model = u.ScriptedModel(plans(
        u.call_tool("scale", values=[1], **{"return": "print"}),
        "print('printing works')",
    ))
    ns: dict[str, Any] = {}
    h = u.act("store it", model=model, namespace=ns, tools=reg.tools(), bus=bus)
    assert await h == "done"
    refused, after = results(model)
    assert "`return` may not name 'print': that is a Python builtin" in refused and "'print_result'" in refused
    assert "print" not in ns and reg.seen == []
    assert after.startswith("success: true") and "printing works" in after


async def test_in_place_changes_to_a_dataframe_are_seen_after_its_fingerprint_was_cached(bus):
    """Fingerprints of unchanged frames are cached between steps; every in-place change still shows."""
    df = pd.DataFrame({"a": [1, 2, 3]})
    ns = {"df": df, "other": pd.DataFrame({"z": [0.5]})}
    gate = asyncio.Event()
    steps = [
        "n = len(df)",  # df and other are fingerprinted (and cached) before and after this plan
        None,  # the person changes df in place meanwhile
        "df['a'] = df['a'].astype(str)",
        "df.columns = ['x', 'y']",
        "df.loc[3] = ['4', 0.0]",
        "del df['y']",
        "other.iloc[0, 0] = 1.5",  # a value rewritten in place: shape, labels and dtypes unchanged
    ]

    async def reply(messages, tools):
        done = len(tool_messages(messages))
        if done == 1:
            await gate.wait()
        code = [s for s in steps if s is not None]
        return u.call_tool("execute_code", code=code[done], intent="change") if done < len(code) else "done"

    model = u.ScriptedModel(reply)
    h = u.act("change it", model=model, namespace=ns, bus=bus)
    await h.wait_for("code_executed", timeout=10)
    df["b"] = [0.1, 0.2, 0.3]  # in place: the same object, a new column
    gate.set()
    assert await h == "done"
    notes = [m["content"] for m in model.requests[1].messages if m["role"] == "user"]
    assert any("changed df: pd.DataFrame, shape (3, 2); columns: a: int64, b: float64" in n for n in notes)
    _, astype, rename, grow, drop, value = results(model)
    assert "variables changed:\n- df: pd.DataFrame, shape (3, 2); columns: a: str, b: float64" in astype
    assert "variables changed:\n- df: pd.DataFrame, shape (3, 2); columns: x: str, y: float64" in rename
    assert "variables changed:\n- df: pd.DataFrame, shape (4, 2)" in grow
    assert "variables changed:\n- df: pd.DataFrame, shape (4, 1); columns: x: str" in drop
    assert "variables changed" not in value  # as documented: a rewritten value keeps the fingerprint
    assert ns["df"] is df  # every change was in place


async def test_two_actors_at_once_each_run_plans_in_their_own_namespace_and_describe_no_tool_again(bus, monkeypatch):
    import pydantic

    first, second = {"x": 1}, {"x": 2}
    a = u.act("one", model=u.ScriptedModel(plans("y = x * 10")), namespace=first, bus=bus)
    b = u.act("two", model=u.ScriptedModel(plans("y = x * 100")), namespace=second, bus=bus)
    assert await a == "done" and await b == "done"
    assert first["y"] == 10 and second["y"] == 200  # each run's execute_code ran its own plan in its own namespace

    made: list[str] = []
    real = pydantic.create_model
    monkeypatch.setattr(pydantic, "create_model", lambda name, **kw: made.append(name) or real(name, **kw))
    model = u.ScriptedModel(plans("z = x + y"))
    assert await u.act("three", model=model, namespace=first, bus=bus) == "done"
    assert first["z"] == 11
    # execute_code is offered with its schema, made once per process (pydantic takes about a millisecond a model)
    (tool,) = [t for t in model.requests[0].tools if t["function"]["name"] == "execute_code"]
    assert set(tool["function"]["parameters"]["properties"]) == {"code", "intent"}
    assert "notebook's namespace" in tool["function"]["description"]
    assert made == []


async def test_a_run_with_the_tools_of_an_earlier_one_makes_no_pydantic_model_and_references_still_fit(
    bus, monkeypatch
):
    import pydantic

    def run(ns):
        reg = Registry()  # new functions of the same defs, as a notebook cell run again makes
        model = u.ScriptedModel(plans(
            u.call_tool("summarise", frame="<<var:df>>", column="a", **{"return": "stats"}),
            u.call_tool("scale", values="<<var:nums>>"),
        ))
        return reg, model, u.act("go", model=model, namespace=ns, tools=reg.tools(), bus=bus)

    first = {"df": pd.DataFrame({"a": [1.0, 3.0]}), "nums": [1, 2]}
    _, _, h = run(first)
    await h
    assert first["stats"] == {"mean": 2.0, "n": 2}

    made: list[str] = []
    real = pydantic.create_model
    monkeypatch.setattr(pydantic, "create_model", lambda name, **kw: made.append(name) or real(name, **kw))
    second = {"df": pd.DataFrame({"a": [5.0]}), "nums": [4], "word": "hi"}
    reg, model, h = run(second)
    await h
    assert reg.seen[0] is second["df"] and reg.seen[1] is second["nums"]  # each run's own variables, by reference
    assert second["stats"] == {"mean": 5.0, "n": 1} and results(model)[1] == "[8]"
    scale = next(t for t in model.requests[0].tools if t["function"]["name"] == "scale")["function"]["parameters"]
    assert "<<var:nums>>" in json.dumps(scale) and "<<var:word>>" not in json.dumps(scale)  # a str fits no list[int]
    assert made == []


async def test_a_namespace_key_that_is_no_string_is_no_variable_and_breaks_nothing(bus):
    """``globals()[1] = ...`` in a cell or a plan binds a key no code can name: the actor starts, plans run and
    their changes are told, references are offered, as if it were not there."""
    reg = Registry()
    ns: dict[Any, Any] = {1: "one", ("t",): 2, "nums": [1, 2]}
    model = u.ScriptedModel(plans(
        "globals()[2.5] = 'made'\ny = 1",
        u.call_tool("scale", values="<<var:nums>>", **{"return": "doubled"}),
        "z = doubled",
    ))
    h = u.act("keys", model=model, namespace=ns, tools=reg.tools(), bus=bus)
    assert await h == "done"
    first, _second, third = results(model)
    assert first.startswith("success: true") and "variables created:\n- y: int: 1" in first
    assert third.startswith("success: true") and "- z: list, length 2: [2, 4]" in third
    assert ns[2.5] == "made" and ns[1] == "one"
    system = model.requests[0].messages[0]["content"]
    assert "nums" in system and "'one'" not in system


async def test_a_key_in_the_environment_a_plan_prints_shows_as_its_reference(bus, monkeypatch):
    """A plan that prints ``os.environ`` (or one key of it) never puts the key where the model, the person's record
    or a saved transcript can read it: a variable whose name says it holds a key is scrubbed as a secret."""
    key = "sk-env-7f3c9a1b2d4e6f80"
    monkeypatch.setenv("MY_SERVICE_API_KEY", key)
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # too short to be a key: left as it is
    monkeypatch.setenv("HF_TOKEN_PATH", "/home/person/.cache/hf/token")  # where a key is kept, not the key: shown
    model = u.ScriptedModel(plans(
        "import os\nprint(os.environ['MY_SERVICE_API_KEY'])\n"
        "print({k: v for k, v in os.environ.items() if k in ('MY_SERVICE_API_KEY', 'TOKENIZERS_PARALLELISM')})\n"
        "print(os.environ['HF_TOKEN_PATH'])\n"
        "os.environ['MY_SERVICE_API_KEY']",
    ))
    h = u.act("env", model=model, namespace={}, bus=bus)
    assert await h == "done"
    (text,) = results(model)
    assert "<<secret:MY_SERVICE_API_KEY>>" in text and key not in text
    rec = next(c for m in h.transcript for c in m.tool_calls)
    assert "<<secret:MY_SERVICE_API_KEY>>" in rec.output and key not in rec.output
    assert key not in json.dumps([m.content for m in h.transcript]) + repr(rec.result) + repr(rec.displays)
    assert "'TOKENIZERS_PARALLELISM': 'false'" in text
    assert "/home/person/.cache/hf/token" in text and "<<secret:HF_TOKEN_PATH>>" not in text


@pytest.mark.parametrize("code", ["", "   \n", "# only a comment\n"])
async def test_an_empty_plan_is_no_success_and_a_silent_one_says_it_did_nothing(bus, code):
    model = u.ScriptedModel(plans(code, "if False:\n    x = 1", "x = 1"))
    h = u.act("nothing", model=model, namespace={}, bus=bus)
    assert await h == "done"
    empty, silent, real = results(model)
    assert empty.startswith("success: false") and "the plan has no statements" in empty
    assert silent.startswith("success: true") and "created, changed and deleted no variable" in silent
    assert "did nothing" not in real and "no variable" not in real and "- x: int: 1" in real
