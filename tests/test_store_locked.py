"""Another process holding the store's write lock: the events a running loop records on the kernel's event loop
do not wait for it there (every loop and button of the kernel would freeze); they wait in memory, the store says
why, and they are written once the lock is let go. A flush asked for outside the event loop still waits."""

import asyncio
import sqlite3
import threading

from unity_nb import events as ev
from unity_nb.store import Store


def _started(loop_id: str) -> ev.LoopStarted:
    return ev.LoopStarted(loop_id=loop_id, lineage=(f"a({loop_id})",), name="a", task="t", model="scripted")


def _request(loop_id: str) -> ev.ModelRequested:
    return ev.ModelRequested(loop_id=loop_id, lineage=(f"a({loop_id})",), step=1, messages=1, tools=("x",),
                             tool_choice="auto")


class Holder(threading.Thread):
    """Another process's writer: holds the file's write lock until the event loop has run ``answered`` (or
    ``patience`` seconds have passed), then lets go and says whether the event loop answered while it held it."""

    def __init__(self, path, patience: float) -> None:
        super().__init__(daemon=True)
        self.path, self.patience = path, patience
        self.holding, self.answered = threading.Event(), threading.Event()
        self.answered_while_held = False

    def run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("BEGIN IMMEDIATE")
        self.holding.set()
        self.answered_while_held = self.answered.wait(self.patience)
        db.execute("ROLLBACK")
        db.close()


async def test_events_recorded_on_the_event_loop_while_another_process_holds_the_lock_do_not_freeze_it(tmp_path):
    path = tmp_path / "state.db"
    store = Store(path, timeout=60)  # a flush asked for may wait a minute; the event loop must not
    holder = Holder(path, patience=20)
    holder.start()
    assert await asyncio.to_thread(holder.holding.wait, 10)
    loop = asyncio.get_running_loop()
    loop.call_soon(holder.answered.set)  # runs once the event loop has its next turn
    store.record(_started("a1"))
    store.record(_request("a1"))  # written at once (before the loop's model call): the file is locked
    assert store.problem is not None and "locked by another process" in store.problem
    assert "2 events waiting" in store.problem
    await asyncio.to_thread(holder.join, 30)
    assert holder.answered_while_held, "the event loop waited for the other process's lock"

    store.flush()  # the lock let go: the events waiting are written, none lost
    assert store.problem is None and store.waiting == 0
    assert [e.kind for e in store.events("a1")] == ["loop_started", "model_request"]
    store.close()


def test_a_flush_asked_for_outside_the_event_loop_waits_for_the_lock(tmp_path):
    path = tmp_path / "state.db"
    store = Store(path, timeout=60)
    holder = Holder(path, patience=1)  # lets go after a second (nothing answers it)
    holder.start()
    assert holder.holding.wait(10)
    store.record(_started("b1"))  # no event loop here: written at once, waiting for the lock (up to a minute)

    assert store.problem is None and store.waiting == 0
    assert [e.kind for e in store.events("b1")] == ["loop_started"]
    holder.join(30)
    store.close()
