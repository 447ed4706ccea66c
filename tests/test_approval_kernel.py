"""Approval survives a dead kernel (issue 37, item 4): ``%unity resume`` of an ``--approval always`` operation
that a SIGKILL left waiting on a plan resumes as ``always``, so the plan the model sends again waits for Run; and,
in the same real kernel, a plan that calls a function marked ``@u.tool(needs_approval=True)`` by name waits."""

import textwrap

from _kernel import Kernel

PLAN = "marker = 'the plan ran'"

FIRST = textwrap.dedent(
    f"""
    %load_ext unity_nb
    import unity_nb as u

    m1 = u.ScriptedModel(lambda messages, tools: u.call_tool("execute_code", code={PLAN!r}, intent="mark"))
    %unity model --var m1
    h = %unity act --approval always --name guarded Mark the namespace.
    await h.wait_for("approval_requested", timeout=20)
    assert h.status == "waiting" and "marker" not in globals()
    get_ipython().magics_manager.registry["UnityMagics"].store.flush()
    """
)

def test_resume_after_sigkill_keeps_approval_always_and_the_plan_waits(tmp_path):
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run(FIRST)
    finally:
        first.kill()

    second = Kernel(env={"UNITY_NB_STORE": store})
    try:
        second.run(textwrap.dedent(
            f"""
            %load_ext unity_nb
            import unity_nb as u

            def again(messages, tools):
                done = [m for m in messages if m["role"] == "tool"]
                # the interrupted call has its "no result was recorded" result: send the plan again, then answer
                return u.call_tool("execute_code", code={PLAN!r}, intent="mark") if len(done) < 2 else "marked"

            m2 = u.ScriptedModel(again)
            %unity model --var m2
            h = %unity resume guarded
            asked = await h.wait_for("approval_requested", timeout=20)
            """
        ))
        assert second.value("[h.status.value, 'marker' in globals(), len(h.inbox.approvals)]") == ["waiting", False, 1]
        assert second.value("h.inbox.approvals[0]['code']") == PLAN
        assert "--approval always (as it was started)" in second.value(
            "get_ipython().magics_manager.registry['UnityMagics'].widgets['guarded'].notice"
        )
        second.run("await h.inbox.approve()")
        assert second.value("await h") == "marked"
        assert second.value("marker") == "the plan ran"
    finally:
        second.close()


def test_a_plan_calling_a_marked_function_by_name_waits_in_a_real_kernel(tmp_path):
    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / "state.db")})
    try:
        k.run(textwrap.dedent(
            """
            %load_ext unity_nb
            import unity_nb as u

            wiped = []

            @u.tool(needs_approval=True)
            def wipe(table: str) -> str:
                \"\"\"Wipe a table.\"\"\"
                wiped.append(table)
                return "wiped " + table

            def script(messages, tools):
                if not [m for m in messages if m["role"] == "tool"]:
                    return u.call_tool("execute_code", code="out = await wipe('sales')", intent="wipe")
                return "done"

            m = u.ScriptedModel(script)
            %unity model --var m
            h = %unity act --name wiper Wipe the sales table.
            asked = await h.wait_for("approval_requested", timeout=20)
            """
        ))
        assert k.value("[asked.tool, h.status.value, wiped]") == ["wipe", "waiting", []]
        k.run("%unity approve wiper")
        assert k.value("await h") == "done"
        assert k.value("[wiped, out]") == [["sales"], "wiped sales"]
    finally:
        k.close()
