"""Durability in real kernels: a kernel killed with SIGKILL mid-loop; a fresh kernel on the same
store shows the transcript up to the last event and resumes the task."""

import textwrap

import pytest
from _kernel import Kernel

FIRST = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio, unity_nb as u
    from unity_nb.managers import TasksManager

    hang = asyncio.Event()

    async def first_run(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="found = 6 * 7\\nprint('computed', found)", intent="compute")
        await hang.wait()  # never released: the kernel is killed during this model call

    store = get_ipython().magics_manager.registry["UnityMagics"].store
    tm = TasksManager(store=store, model=u.ScriptedModel(first_run), namespace={})
    t = tm.create("job", "Compute the answer.")
    h = tm.execute(t.id)
    await h.wait_for("model_request", lambda e: e.step == 2, timeout=20)
    print(t.id)
    """
)

SECOND = textwrap.dedent(
    """
    %load_ext unity_nb
    import unity_nb as u
    from unity_nb.managers import TasksManager

    seen = []

    def second_run(messages, tools):
        seen.append(messages)
        return "the answer is 42"

    store = get_ipython().magics_manager.registry["UnityMagics"].store
    tm = TasksManager(store=store, model=u.ScriptedModel(second_run), namespace={})
    """
)


@pytest.fixture
def store_path(tmp_path):
    return str(tmp_path / "shared" / "state.db")


def test_a_killed_kernel_loses_at_most_the_step_in_flight_and_the_task_resumes(store_path):
    first = Kernel(env={"UNITY_NB_STORE": store_path})
    try:
        task_id = first.run(FIRST).strip().splitlines()[-1]
    finally:
        first.kill()

    second = Kernel(env={"UNITY_NB_STORE": store_path})
    try:
        second.run(SECOND)
        history = "get_ipython().run_line_magic('unity', 'history').drop(columns='started').to_dict('records')"
        rows = second.value(history, timeout=30)
        (row,) = [r for r in rows if r["name"] == "task job"]
        assert row["status"] == "interrupted" and row["steps"] == 2 and row["task"].startswith("Task 'job'")
        transcript = second.value("[[m.role, m.kind, m.content] for m in store.transcript('task job')]")
        kinds = [k for _r, k, _c in transcript]
        assert kinds == ["task", "text", "tool_result"]  # up to the last event: the plan ran, its result is kept
        assert transcript[2][2].startswith("success: true") and "computed 42" in transcript[2][2]
        assert second.value(f"tm.get('{task_id}').status") == "interrupted"
        assert second.value(f"await tm.execute('{task_id}')") == "the answer is 42"
        resumed = second.value("[[m['role'], str(m.get('content'))[:60]] for m in seen[0][1:]]")
        assert [r for r, _c in resumed] == ["user", "assistant", "tool", "user"]
        assert resumed[2][1].startswith("success: true") and "interrupted" in resumed[3][1]
        assert second.value(f"[t['turn'] for t in tm.turns('{task_id}')]") == [0]  # the same turn, resumed
        assert second.value(f"tm.get('{task_id}').status") == "idle"
    finally:
        second.close()


def test_two_kernels_share_one_store(store_path):
    a = Kernel(env={"UNITY_NB_STORE": store_path})
    b = Kernel(env={"UNITY_NB_STORE": store_path})
    try:
        setup = textwrap.dedent(
            """
            %load_ext unity_nb
            import unity_nb as u
            m = u.ScriptedModel(lambda ms, t: "ok")
            %unity model --var m
            """
        )
        a.run(setup)
        b.run(setup)
        # both kernels write at the same time: each cell runs ten operations back to back
        cell = "for _ in range(10):\n    h = get_ipython().run_line_magic('unity', 'act from {}')\n    await h"
        ids = {k: k.kc.execute(cell.format(name)) for k, name in ((a, "a"), (b, "b"))}
        for k, msg_id in ids.items():
            reply = k.kc.get_shell_msg(timeout=60)
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = k.kc.get_shell_msg(timeout=60)
            assert reply["content"]["status"] == "ok"
        rows_a = a.value("get_ipython().run_line_magic('unity', 'history').status.tolist()")
        rows_b = b.value("get_ipython().run_line_magic('unity', 'history').task.tolist()")
        assert rows_a == ["finished"] * 20
        assert sorted(rows_b) == ["from a"] * 10 + ["from b"] * 10
        store = "get_ipython().magics_manager.registry['UnityMagics'].store"
        assert a.value(store + ".execute('PRAGMA integrity_check').fetchone()[0]") == "ok"
    finally:
        a.close()
        b.close()
