"""The index of events by loop is brought up to date in bulk (issue 17): a loop's events are read whole
whether the index covers them yet or not, across kernels sharing a file, and without scanning the table."""

import unity_nb as u
from unity_nb import events as ev
from unity_nb._store_schema import OF_LOOP
from unity_nb.store import Store


def started(loop_id: str, name: str) -> ev.LoopStarted:
    return ev.LoopStarted(loop_id=loop_id, lineage=(f"{name}({loop_id})",), name=name, task="t", model="scripted")


def request(loop_id: str, name: str, step: int) -> ev.ModelRequested:
    return ev.ModelRequested(loop_id=loop_id, lineage=(f"{name}({loop_id})",), step=step, messages=step,
                             tools=("x",), tool_choice="auto")


def indexed(store: Store) -> int:
    return store.query("SELECT COUNT(*) AS n FROM event_index")[0]["n"]


def test_a_loop_reads_whole_before_and_after_the_index_takes_its_events(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    a, b = [started("a1", "alpha")], [started("b2", "beta")]
    for step in range(1, 6):  # two loops interleaved, each model call committed (the index left for later)
        a.append(request("a1", "alpha", step))
        b.append(request("b2", "beta", step))
    for x, y in zip(a, b):
        store.record(x)
        store.record(y)
    store.flush()
    assert indexed(store) == 0  # recorded within the second: not indexed yet
    assert store.events("alpha") == a and store.events("beta") == b
    assert store.events("alpha", kind="model_request") == a[1:]
    assert [(r["name"], r["status"], r["steps"]) for r in store.loops()] == [
        ("alpha", "running", 5), ("beta", "running", 5)]
    store.close()  # brings the index up to date
    again = Store(path)
    assert indexed(again) == 12
    assert again.events("alpha") == a and again.events("beta") == b  # each once, in order
    assert [r["steps"] for r in again.loops()] == [5, 5]
    again.close()


def test_a_kernel_that_died_leaves_its_events_for_the_next_store_to_index(tmp_path):
    path = tmp_path / "s.db"
    first = Store(path)  # never closed: as a kernel killed mid-loop leaves it
    events = [started("d1", "doomed"), request("d1", "doomed", 1), request("d1", "doomed", 2)]
    for e in events:
        first.record(e)
    assert indexed(first) == 0
    second = Store(path)  # another kernel (or the restarted one) opens the file
    assert indexed(second) == 3
    assert second.events("doomed") == events
    third = request("d1", "doomed", 3)
    first.record(third)  # the first one goes on writing: the second reads the index, then what follows it
    assert second.events("doomed") == [*events, third]
    assert [e.step for e in second.events("doomed", kind="model_request")] == [1, 2, 3]
    assert second.find("doomed")["steps"] == 3
    first.close()
    second.close()


def test_reading_a_loop_looks_rows_up_by_key_never_scanning_the_events(tmp_path):
    store = Store(tmp_path / "s.db")
    plan = " ".join(r["detail"] for r in store.query("EXPLAIN QUERY PLAN " + OF_LOOP, {"uid": "x"}))
    assert "SCAN events" not in plan and "INTEGER PRIMARY KEY" in plan, plan
    store.close()


async def test_a_recorded_loop_is_read_back_from_the_store_in_the_order_it_ran(tmp_path):
    store = Store(tmp_path / "s.db")
    bus = u.EventBus()
    store.attach(bus)
    script = iter([u.call_tool("note", text="one"), u.call_tool("note", text="two"), "done"])

    async def note(text: str) -> str:
        """Note it."""
        return text

    h = u.start_loop("go", model=u.ScriptedModel(lambda m, t: next(script)), tools=[note], bus=bus, name="noted")
    await h
    recorded = [e for e in h.events if e.kind != "model_delta"]
    assert store.events("noted") == recorded
    assert [m.content for m in store.transcript("noted") if m.role == "tool"] == ["one", "two"]
    store.close()


def test_an_index_whose_mark_was_lost_is_rebuilt_whole(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    events = [started("k1", "kept"), request("k1", "kept", 1)]
    for e in events:
        store.record(e)
    store.close()
    damaged = Store(path)
    damaged.execute("DELETE FROM store_meta")  # as a hand-edited file might be
    damaged.execute("DELETE FROM event_index")
    assert damaged.events("kept") == events  # every event after "nothing indexed" is read by the scan
    damaged.close()
    again = Store(path)
    assert indexed(again) == 2 and again.events("kept") == events
    again.close()
