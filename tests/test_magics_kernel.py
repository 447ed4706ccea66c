"""%unity resume in real kernels: an operation a SIGKILLed kernel left interrupted continues in a
fresh kernel on the same store, its conversation rebuilt and its history repaired."""

import json
import textwrap

from _kernel import Kernel

FIRST = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio, unity_nb as u

    hang = asyncio.Event()

    def first(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="found = 6 * 7\\nprint('computed', found)", intent="compute")
        return u.call_tool("execute_code", code="await hang.wait()", intent="wait for ever")

    m1 = u.ScriptedModel(first)
    %unity model --var m1
    h = %unity act --name tour Compute the answer.
    await h.wait_for("tool_started", lambda e: sum(x.kind == "tool_started" for x in h.events) >= 2, timeout=20)
    get_ipython().magics_manager.registry["UnityMagics"].store.flush()
    """
)

SECOND = textwrap.dedent(
    """
    %load_ext unity_nb
    import unity_nb as u

    seen = []

    def second(messages, tools):
        seen.append(messages)
        return "the answer is 42"

    m2 = u.ScriptedModel(second)
    %unity model --var m2
    magics = get_ipython().magics_manager.registry["UnityMagics"]

    from IPython.core.error import UsageError

    def refusal(line):
        try:
            get_ipython().run_line_magic("unity", line)
        except UsageError as err:
            return str(err)
        return "accepted"
    """
)


def test_resume_continues_an_interrupted_operation_from_the_store(tmp_path):
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run(FIRST)
    finally:
        first.kill()

    second = Kernel(env={"UNITY_NB_STORE": store})
    try:
        second.run(SECOND)
        history = second.value("get_ipython().run_line_magic('unity', 'history')[['name', 'status']].values.tolist()")
        assert history == [["tour", "interrupted"]]
        second.run("h = %unity resume tour")
        assert second.value("[h.name, h.task, h is magics.handles['tour']]") == ["tour", "Compute the answer.", True]
        assert second.value("await h") == "the answer is 42"
        sent = second.value("seen[0]")  # the earlier conversation as messages, then the task again
        system, earlier = sent[0]["content"], sent[1:-1]
        assert earlier[0] == {"role": "user", "content": "Compute the answer."} and sent[-1] == earlier[0]
        text = json.dumps(earlier)
        assert "computed 42" in text  # the first plan's result, as recorded
        assert "await hang.wait()" in text  # the call cut short ...
        assert "error: no result was recorded (the run was interrupted)" in text  # ... has a result now
        calls = [c["id"] for m in earlier if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
        assert calls == [m["tool_call_id"] for m in earlier if m["role"] == "tool"]  # every call has its result
        assert "Continue where it left off" in system and "Variables in the namespace now" in system
        notice = second.value("magics.widgets['tour'].notice")  # its live widget
        assert notice.startswith("resumed from the store") and "1 tool call(s) without a result" in notice
        history = second.value("get_ipython().run_line_magic('unity', 'history')[['name', 'status']].values.tolist()")
        assert history == [["tour", "interrupted"], ["tour", "finished"]]
        assert "cannot resume 'tour': it is finished" in second.value("refusal('resume tour')")
        refused = second.value("refusal('resume nobody')")
        assert "no operation named 'nobody' in this kernel (known: tour) or in the store" in refused
    finally:
        second.close()
