"""%unity resume of a durable task's turn a dead kernel cut short: named by its loop's uid (as %unity history shows
it) it was started again as a plain act, outside its task (whose conversation and status never heard of it, so
%unity task run later ran the turn once more); named by the task's id (as its widget says to steer it) it was 'no
operation'. Either way the usage error says %unity task run ID resumes it."""


import pytest
from conftest import dead_kernel, kill, magics
from IPython.core.error import UsageError

import unity_nb as u
from unity_nb.managers import TasksManager


@pytest.fixture
def ip(stored_shell):
    return stored_shell


async def test_a_task_turn_cut_short_is_resumed_by_task_run_not_as_an_act(ip):
    other, bus, silent = dead_kernel(ip)  # another "kernel" on the same file; it dies while its model thinks
    tm = TasksManager(store=other, model=u.ScriptedModel(silent), namespace={}, bus=bus)
    task = tm.create("report", "Write the report.")
    h = tm.execute(task.id)
    await h.wait_for("model_request", timeout=10)
    kill(other)

    ip.user_ns["m"] = u.ScriptedModel(["an act's answer"])
    ip.run_line_magic("unity", "model --var m")
    (row,) = [r for r in magics(ip).store.loops() if r["status"] == "interrupted"]
    for name in (row["uid"], task.id):
        with pytest.raises(UsageError, match=f"%unity task run {task.id}"):
            ip.run_line_magic("unity", f"resume {name}")
    assert not magics(ip).handles  # nothing started
    silent.event.set()
    await h.stop()
    other.close()
