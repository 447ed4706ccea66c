"""Approval survives a dead kernel (issue 37, item 4): ``%unity resume`` of an ``--approval always`` operation
that a SIGKILL left waiting on a plan resumes as ``always``, so the plan the model sends again waits for Run; and,
in the same real kernel, a plan that calls a function marked ``@u.tool(needs_approval=True)`` by name waits; and
``%unity approve NAME --always [TOOL]`` (issue 39, item 13) is the widget's "Always allow" from a cell."""

import re
import textwrap

from _kernel import Kernel, running

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


ALWAYS = textwrap.dedent(
    """
    %load_ext unity_nb
    import unity_nb as u

    ran = []

    @u.tool(needs_approval=True)
    def delete_rows(table: str) -> str:
        \"\"\"Delete every row of a table.\"\"\"
        ran.append(table)
        return "deleted " + table

    @u.tool(needs_approval=True)
    def drop_table(table: str) -> str:
        \"\"\"Drop a table.\"\"\"
        ran.append("drop " + table)
        return "dropped " + table

    def script(messages, tools):
        done = [m for m in messages if m["role"] == "tool"]
        if len(done) < 2:  # delete_rows twice, one step each
            return u.call_tool("delete_rows", table=f"t{len(done) + 1}")
        if len(done) == 2:  # then another tool
            return u.call_tool("drop_table", table="t9")
        return "done"

    m = u.ScriptedModel(script)
    %unity model --var m
    h = %unity act --name cleaner Clean up the tables.
    asked = await h.wait_for("approval_requested", timeout=20)
    """
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _usage_error(k, line):
    """What a person reads under a cell whose magic refuses its line (stderr's lines); the cell fails."""
    stderr: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stderr":
            stderr.append(msg["content"]["text"])

    reply = k.kc.execute_interactive(line, timeout=60, output_hook=hook)
    assert reply["content"]["status"] == "error"
    return ANSI.sub("", "".join(stderr)).strip().splitlines()


def test_approve_always_in_a_real_kernel_allows_the_tool_for_the_rest_of_the_operation(tmp_path):
    with running(ALWAYS, env={"UNITY_NB_STORE": str(tmp_path / "state.db")}) as k:
        assert k.value("[asked.tool, h.status.value, ran]") == ["delete_rows", "waiting", []]
        hint = "(%unity help approve shows its usage)"
        assert _usage_error(k, "%unity approve cleaner --always drop_table") == [
            "UsageError: 'cleaner' has no call of 'drop_table' waiting for approval (waiting: delete_rows)", hint]
        assert _usage_error(k, "%unity approve cleaner delete_rows") == [
            "UsageError: a tool's name goes after --always: %unity approve cleaner --always delete_rows", hint]
        assert _usage_error(k, "%unity approve cleaner --always=yes") == [
            "UsageError: --always is a flag: it takes no value", hint]
        assert k.value("[h.status.value, ran]") == ["waiting", []]  # a refused line decided nothing

        k.run("%unity approve cleaner --always")  # the widget's "Always allow delete_rows"
        # the second call of delete_rows ran unasked; drop_table, another tool, asks
        k.run("other = await h.wait_for('approval_requested', lambda e: e.tool == 'drop_table', timeout=20)")
        assert k.value("ran") == ["t1", "t2"]
        assert k.value("[e.tool for e in h.events if e.kind == 'approval_requested']") == ["delete_rows", "drop_table"]
        assert k.value("[a['tool'] for a in h.inbox.approvals]") == ["drop_table"]
        k.run("%unity approve cleaner")
        assert k.value("await h") == "done"
        assert k.value("ran") == ["t1", "t2", "drop t9"]

        # a plan is approved one at a time: --always refuses it, and it still waits
        k.run(textwrap.dedent(
            """
            planner = u.ScriptedModel(lambda messages, tools: "planned" if any(m["role"] == "tool" for m in messages)
                                      else u.call_tool("execute_code", code="x = 1", intent="one"))
            %unity model --var planner
            p = %unity act --name planner --approval first Set x.
            await p.wait_for("approval_requested", timeout=20)
            """
        ))
        assert _usage_error(k, "%unity approve planner --always") == [
            "UsageError: 'planner' waits on a plan: a plan is approved one at a time (%unity approve planner); "
            "--always is for a tool's calls", hint]
        k.run("%unity approve planner")
        assert k.value("await p") == "planned"
