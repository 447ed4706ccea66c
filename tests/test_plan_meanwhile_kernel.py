"""The actor names only what a plan made (issue 39, item 16), in a real kernel (jupyter_client; every wait has a
timeout): while a plan awaits, the person runs a cell making ``y``; the plan's result tells the model the plan
created ``z`` (not ``y``), and the next step tells it the person's cell created ``y``."""

import textwrap

from _kernel import running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio
    import unity_nb as u

    gate = asyncio.Event()

    def script(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="await gate.wait()\\nz = 2\\nfrom math import pi as tau",
                               intent="wait, then make z")
        return "done"

    m = u.ScriptedModel(script)
    %unity model --var m
    """
)


def test_a_variable_the_person_made_while_a_plan_ran_is_theirs_not_the_plans():
    with running(SETUP) as k:
        k.run("h = %unity act --name p go")
        k.run("_ = await h.wait_for('tool_started', timeout=30)")  # the plan runs, and awaits the gate
        k.run("y = 41")  # the person's own cell, meanwhile
        k.run("gate.set()\nanswer = await h")
        result = k.value("[m.content for m in h.transcript if m.role == 'tool'][0]")
        created = result.split("variables created:\n", 1)[1]
        assert "- z:" in created and "- tau:" in created  # what the plan made ...
        assert "- y:" not in result  # ... and not what the person made
        plan = k.value("[list(e.created) for e in h.events if e.kind == 'variables_changed' and e.call_id]")
        assert plan == [["z", "tau"]]
        # the next step tells the model the person made y
        told = "[x['content'] for x in m.requests[-1].messages if 'outside your plans' in str(x.get('content'))]"
        notes = k.value(told)
        assert len(notes) == 1 and "created y: int" in notes[0], notes
        person = k.value("[list(e.created) for e in h.events if e.kind == 'variables_changed' and not e.call_id]")
        assert person == [["y"]]
        assert k.value("[y, z]") == [41, 2]
