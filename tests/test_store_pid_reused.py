"""A kernel that died leaves its session's process id in the store; once another process has that id (pids are
reused: a container restarted starts its processes at the same small ids), the dead kernel's loops still showed
running, and %unity resume refused them as live forever. A process that started after the session did is not
the session's."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import unity_nb as u
from unity_nb import events as ev


def _holding(path: str) -> subprocess.Popen:
    """Another kernel on the store: a process with its file open (until its stdin closes)."""
    code = f"import sys; f = open({path!r}, 'rb'); print('open', flush=True); sys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "open\n"  # it has the file open (EOF, not a hang, if it died)
    return holder


@pytest.mark.parametrize("kernel", [False, True], ids=["another process", "another kernel on the store"])
def test_a_dead_kernels_loop_shows_interrupted_though_its_pid_now_runs_another_process(tmp_path, kernel):
    """The process with the dead kernel's pid may itself be a kernel with the store's file open: taken for the dead
    kernel (the clock's fallback below), its loops showed running forever. The session's recorded process start
    tells the two apart."""
    path = str(tmp_path / "state.db")
    dead = u.Store(path)  # the kernel that died, an hour ago
    dead.record(ev.LoopStarted(loop_id="a1", name="tour", task="go", model="m", lineage=()))
    dead.flush()
    # another process, started now, has the dead kernel's pid
    other = _holding(path) if kernel else subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                                           stdin=subprocess.PIPE, text=True)
    try:
        dead.execute("UPDATE sessions SET pid = ?, started = ? WHERE id = ?", (other.pid, time.time() - 3600,
                                                                               dead.session))
        dead.close()
        store = u.Store(path)
        assert store.find("tour")["status"] == "interrupted"
        assert [r["status"] for r in store.loops()] == ["interrupted"]
        store.close()
    finally:
        other.communicate("", timeout=30)


def test_a_kernel_with_the_file_open_is_alive_though_the_clock_says_it_started_after_its_session(tmp_path):
    """A wall clock stepped forward (a paused virtual machine) makes a live kernel seem to have started after its
    session: it has the store's file open, so it is the kernel, and its loops still show running."""
    path = str(tmp_path / "state.db")
    live = u.Store(path)
    live.record(ev.LoopStarted(loop_id="c1", name="job", task="go", model="m", lineage=()))
    live.flush()
    code = f"import sys; f = open({path!r}, 'rb'); print('open', flush=True); sys.stdin.read()"
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"  # it has the file open (EOF, not a hang, if it died)
        live.execute("UPDATE sessions SET pid = ?, started = ? WHERE id = ?", (holder.pid, time.time() - 3600,
                                                                               live.session))
        # a session recorded before sessions recorded their process's start (which no clock moves)
        live.execute("DELETE FROM store_meta WHERE key = ?", (f"proc:{live.session}",))
        reader = u.Store(path)
        assert reader.find("job")["status"] == "running"
        reader.close()
    finally:
        holder.communicate("", timeout=30)
        live.close()


def test_a_live_kernels_loop_still_shows_running(tmp_path):
    path = str(tmp_path / "state.db")
    live = u.Store(path)  # another kernel, alive: this process, which started before its store opened
    live.record(ev.LoopStarted(loop_id="b1", name="job", task="go", model="m", lineage=()))
    live.flush()
    reader = u.Store(path)
    assert reader.find("job")["status"] == "running"
    reader.close()
    live.close()


@pytest.mark.parametrize("pid", ["abc", -1, 2**70])
def test_a_pid_changed_by_hand_into_no_process_is_a_dead_kernel(tmp_path, pid):
    """Text, a process group (-1: every process), past any pid: Store.loops raised a raw TypeError or OverflowError
    for the whole store (history, show, resume), or took every process for the kernel."""
    path = str(tmp_path / "state.db")
    dead = u.Store(path)
    dead.record(ev.LoopStarted(loop_id="a1", name="tour", task="go", model="m", lineage=()))
    dead.flush()
    dead.execute("UPDATE sessions SET pid = ? WHERE id = ?", (pid if pid != 2**70 else str(pid), dead.session))
    dead.close()
    store = u.Store(path)
    assert [r["status"] for r in store.loops()] == ["interrupted"]
    store.close()


def test_a_kernel_whose_clock_stepped_is_alive_by_its_recorded_start(tmp_path):
    """A wall clock stepped forward makes a live kernel seem to have started after its session; its recorded start
    (clock ticks from boot) is its own, so its loops show running, its file open or not."""
    path = str(tmp_path / "state.db")
    live = u.Store(path)
    live.record(ev.LoopStarted(loop_id="c1", name="job", task="go", model="m", lineage=()))
    live.flush()
    assert live.query("SELECT value FROM store_meta WHERE key = ?", (f"proc:{live.session}",)), "its start recorded"
    kernel = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:  # the kernel (no file of the store open), its session's clock an hour behind its process's start
        with open(f"/proc/{kernel.pid}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        live.execute("UPDATE sessions SET pid = ?, started = ? WHERE id = ?", (kernel.pid, time.time() - 3600,
                                                                               live.session))
        live.execute("UPDATE store_meta SET value = ? WHERE key = ?", (ticks, f"proc:{live.session}"))
        reader = u.Store(path)
        assert reader.find("job")["status"] == "running"
        reader.close()
        live.close()
    finally:
        kernel.communicate(b"", timeout=30)
