"""%unity task new --parent/--parent-context, task settings as traitlets, and the notebook's tools in tasks.

Issue 28: `%unity task` could not make a child task nor let it see its parent's conversation, summaries were
the manager's default only, and a task's turns were not offered the notebook's `@unity_nb.tool` tools.
"""

import asyncio

import pytest
from conftest import magics
from IPython.core.error import UsageError

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def measure_plums(count: int) -> int:
    """How many plums, measured."""
    return count * 2


async def test_a_task_is_offered_the_notebooks_registered_tools(ip):
    offered = []

    def script(messages, tools):
        offered.append([t["function"]["name"] for t in tools])
        return "done"

    u.register_tool(measure_plums)
    try:
        ip.user_ns["m"] = u.ScriptedModel(script)
        ip.run_line_magic("unity", "model --var m")
        ip.run_line_magic("unity", "task new plums Measure the plums.")
        assert await asyncio.wait_for(ip.run_line_magic("unity", "task run plums"), 10) == "done"
    finally:
        u.unregister_tool("measure_plums")
    assert "measure_plums" in offered[0] and "spawn_task" in offered[0]


async def test_a_child_task_made_with_parent_context_sees_its_parents_conversation(ip, capsys):
    seen = {}

    def script(messages, tools):
        text = " ".join(str(m.get("content")) for m in messages)
        task = next(m["content"] for m in messages if m["role"] == "user" and "Task '" in str(m["content"]))
        seen.setdefault(task.split("'")[1], text)
        return "PARENT-FINDING-17" if "Task 'lead'" in task else "child done"

    ip.user_ns["m"] = u.ScriptedModel(script)
    ip.run_line_magic("unity", "model --var m")
    ip.run_line_magic("unity", "task new lead Find the plums.")
    await asyncio.wait_for(ip.run_line_magic("unity", "task run lead"), 10)
    ip.run_line_magic("unity", "task new helper --parent lead --parent-context Count them.")
    ip.run_line_magic("unity", "task new loner --parent lead Count them alone.")
    assert "task 'helper' created, a child of 'lead'" in capsys.readouterr().out
    table = ip.run_line_magic("unity", "tasks")
    lead = table["id"][0]
    assert list(table["parent"][1:]) == [lead, lead]
    await asyncio.wait_for(ip.run_line_magic("unity", "task run helper"), 10)
    await asyncio.wait_for(ip.run_line_magic("unity", "task run loner"), 10)
    assert "PARENT-FINDING-17" in seen["helper"]
    assert "PARENT-FINDING-17" not in seen["loner"]  # without the flag, the manager's setting: never
    with pytest.raises(UsageError, match="--parent-context is for a child task"):
        ip.run_line_magic("unity", "task new orphan --parent-context Count.")


async def test_task_settings_are_traitlets(ip):
    try:
        ip.run_line_magic("config", 'UnityMagics.task_summaries = "model"')
        ip.run_line_magic("config", 'UnityMagics.task_parent_context = "always"')
        tm = magics(ip).tasks_manager
        assert (tm.summaries, tm.parent_context) == ("model", "always")
    finally:  # %config stays on the shell, which the other tests share
        ip.run_line_magic("config", 'UnityMagics.task_summaries = "truncate"')
        ip.run_line_magic("config", 'UnityMagics.task_parent_context = "never"')


async def test_a_task_run_from_the_notebook_follows_the_kernels_approval_and_code_timeout(ip):
    """%config UnityMagics.approval = "first" ('for every operation', as the act notice says) was not a task's: its
    plans ran unasked; and a code_timeout set after the first %unity task line never reached a task."""
    from conftest import tool_messages

    ran: list[int] = []

    def script(messages, tools):
        if not tool_messages(messages):
            return u.call_tool("execute_code", code="ran.append(1)", intent="note it")
        return "done"

    ip.user_ns.update(ran=ran, m=u.ScriptedModel(script))
    ip.run_line_magic("unity", "model --var m")
    ip.run_line_magic("unity", "task new careful Note it.")
    try:
        ip.run_line_magic("config", 'UnityMagics.approval = "first"')
        ip.run_line_magic("config", "UnityMagics.code_timeout = 7.0")
        assert magics(ip).tasks_manager.actor_options["code_timeout"] == 7.0
        h = ip.run_line_magic("unity", "task run careful")
        await h.wait_for("approval_requested", timeout=10)
        assert ran == []  # it waits for the person
        await h.inbox.approve()
        assert await asyncio.wait_for(h, 10) == "done" and ran == [1]
    finally:
        ip.run_line_magic("config", 'UnityMagics.approval = "never"')
        ip.run_line_magic("config", "UnityMagics.code_timeout = 60.0")
