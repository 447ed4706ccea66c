"""%unity resume of a durable task's turn a dead kernel cut short: named by its loop's uid (as %unity history shows
it) it was started again as a plain act, outside its task (whose conversation and status never heard of it, so
%unity task run later ran the turn once more); named by the task's id (as its widget says to steer it) it was 'no
operation'. Either way the usage error says %unity task run ID resumes it."""

import asyncio

import pytest
from conftest import magics
from IPython.core.error import UsageError

import unity_nb as u
from unity_nb.managers import TasksManager


@pytest.fixture
def ip(stored_shell):
    return stored_shell


async def test_a_task_turn_cut_short_is_resumed_by_task_run_not_as_an_act(ip):
    hold = asyncio.Event()

    async def silent(messages, tools):
        await hold.wait()  # the kernel dies while the model thinks
        return "never"

    other = u.Store(magics(ip).store.path)  # another "kernel" on the same file
    bus = u.EventBus()
    other.attach(bus)
    tm = TasksManager(store=other, model=u.ScriptedModel(silent), namespace={}, bus=bus)
    task = tm.create("report", "Write the report.")
    h = tm.execute(task.id)
    await h.wait_for("model_request", timeout=10)
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone

    ip.user_ns["m"] = u.ScriptedModel(["an act's answer"])
    ip.run_line_magic("unity", "model --var m")
    (row,) = [r for r in magics(ip).store.loops() if r["status"] == "interrupted"]
    for name in (row["uid"], task.id):
        with pytest.raises(UsageError, match=f"%unity task run {task.id}"):
            ip.run_line_magic("unity", f"resume {name}")
    assert not magics(ip).handles  # nothing started
    hold.set()
    await h.stop()
    other.close()
