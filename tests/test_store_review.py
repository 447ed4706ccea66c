"""Adversarial checks of the store's deferred index (schema 3): several stores on one file, a migration from
version 2, a full disk while the index catches up, reads by kind from either side of the index mark, and
events the encoder refuses. Catch-ups are forced by setting the store's interval to zero, never by waiting."""

import sqlite3

import pytest

import unity_nb.store as store_mod
from unity_nb import events as ev
from unity_nb._store_schema import MIGRATIONS
from unity_nb.store import Store


def started(loop_id: str, name: str) -> ev.LoopStarted:
    return ev.LoopStarted(loop_id=loop_id, lineage=(f"{name}({loop_id})",), name=name, task="t", model="scripted")


def request(loop_id: str, name: str, step: int) -> ev.ModelRequested:
    return ev.ModelRequested(loop_id=loop_id, lineage=(f"{name}({loop_id})",), step=step, messages=step,
                             tools=("x",), tool_choice="auto")


def response(loop_id: str, name: str, step: int, text: str = "ok") -> ev.ModelResponse:
    return ev.ModelResponse(loop_id=loop_id, lineage=(f"{name}({loop_id})",), step=step, content=text)


def tool(loop_id: str, name: str, text: str) -> ev.ToolOutput:
    return ev.ToolOutput(loop_id=loop_id, lineage=(f"{name}({loop_id})",), call_id="c", name="note", text=text)


def mark(store: Store) -> int:
    rows = store.query("SELECT value FROM store_meta WHERE key = 'indexed'")
    return int(rows[0]["value"]) if rows else 0


def total(store: Store) -> int:
    return store.query("SELECT IFNULL(MAX(seq), 0) AS n FROM events")[0]["n"]


def indexed(store: Store) -> int:
    return store.query("SELECT COUNT(*) AS n FROM event_index")[0]["n"]


@pytest.fixture
def catch_up(monkeypatch):
    """``catch_up(True)``: every write of a batch that is not the fast path's brings the index up to date;
    ``catch_up(False)``: none does."""
    def set_(on: bool) -> None:
        monkeypatch.setattr(store_mod, "_INDEX_EVERY", 0.0 if on else 1e9)
    set_(False)
    return set_


def test_two_kernels_interleaving_loops_read_each_event_once_in_order_from_either(tmp_path, catch_up):
    path = tmp_path / "s.db"
    one, two = Store(path), Store(path)
    mine = {"a": [started("a1", "alpha")], "b": [started("b1", "beta")]}
    for store, key in ((one, "a"), (two, "b")):
        store.record(mine[key][0])
    for step in range(1, 31):
        for store, key, loop_id, name in ((one, "a", "a1", "alpha"), (two, "b", "b1", "beta")):
            # every few steps one of the two (in turn) catches up inside its write, the other does not
            catch_up(step % 4 == (0 if key == "a" else 2))
            batch = [request(loop_id, name, step), response(loop_id, name, step, f"{key}{step}")]
            for e in batch:
                store.record(e)
            store.flush()
            mine[key].extend(batch)
            for reader in (one, two):
                assert reader.events("alpha") == mine["a"]
                assert reader.events("beta") == mine["b"]
        if step == 15:
            assert 0 < mark(one) < total(one)  # the reads above covered both sides of the mark
    catch_up(False)
    three = Store(path)  # a third kernel, opened later, catches up on open
    assert mark(three) == total(three) and indexed(three) == total(three)
    late = request("a1", "alpha", 31)
    one.record(late)
    mine["a"].append(late)
    for reader in (one, two, three):
        assert reader.events("alpha") == mine["a"] and reader.events("beta") == mine["b"]
        assert [e.step for e in reader.events("alpha", kind="model_request")] == list(range(1, 32))
        assert [r["steps"] for r in reader.loops()] == [31, 30]
    for s in (one, two, three):
        s.close()


def v2_file(path, loops: dict[str, list[ev.Event]], session: str = "oldsession") -> None:
    """A file as version 2 wrote it: the loops rows and their events (indexed by ``events_loop``)."""
    db = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:2]:
        db.executescript(step)
    db.execute("PRAGMA user_version = 2")
    db.execute("INSERT INTO sessions (id, pid, host, started) VALUES (?, 0, 'gone', 0)", (session,))
    for name, events in loops.items():
        first = events[0]
        assert isinstance(first, ev.LoopStarted)
        db.execute("INSERT INTO loops (uid, session, loop_id, name, task, model, lineage, status, started)"
                   " VALUES (?, ?, ?, ?, 't', 'm', '[]', 'running', ?)",
                   (f"{session}-{first.loop_id}", session, first.loop_id, name, first.ts))
    order = sorted(((e.seq, e) for events in loops.values() for e in events), key=lambda p: p[0])
    db.executemany("INSERT INTO events (loop_uid, kind, ts, data) VALUES (?, ?, ?, ?)",
                   [(f"{session}-{e.loop_id}", e.kind, e.ts, e.model_dump_json()) for _s, e in order])
    db.close()


def length(i: int) -> int:
    return min(40, 10 * (i + 1) - 2)


def test_a_version_2_file_with_many_events_of_several_loops_migrates_and_reads_by_loop(tmp_path, catch_up):
    path = tmp_path / "v2.db"
    loops: dict[str, list[ev.Event]] = {f"l{i}": [started(f"id{i}", f"l{i}")] for i in range(5)}
    for step in range(1, 41):  # interleaved, as concurrent loops write
        for i in range(5):
            if step <= length(i):  # loops of different lengths
                loops[f"l{i}"].extend([request(f"id{i}", f"l{i}", step), tool(f"id{i}", f"l{i}", f"s{step}")])
    v2_file(path, loops)
    store = Store(path)
    assert store.version == 4 and mark(store) == total(store) == sum(map(len, loops.values()))
    assert "events_loop" not in {r["name"] for r in store.query("SELECT name FROM sqlite_master")}
    for i in range(5):
        name = f"l{i}"
        assert store.events(name) == loops[name]
        assert [e.step for e in store.events(name, kind="model_request")] == list(range(1, length(i) + 1))
        assert store.events(name, kind="tool_output") == [e for e in loops[name] if e.kind == "tool_output"]
        assert store.events(name, kind="loop_started") == loops[name][:1]
    by_name = {r["name"]: r for r in store.loops()}
    assert {n: (r["status"], r["steps"]) for n, r in by_name.items()} == {
        f"l{i}": ("interrupted", length(i)) for i in range(5)}  # never ended: steps from the index
    assert store.find("l2")["steps"] == 28
    # a loop of this session with the old loop's id: another loop (another uid), never mixed with the old one
    more = [started("id0", "l0"), request("id0", "l0", 1)]
    for e in more:
        store.record(e)
    assert store.events("l0") == more  # the newest of that name: this session's, not mixed with the old
    assert store.events("oldsession-id0") == loops["l0"]
    store.close()


def record_unindexed(store: Store) -> list[ev.Event]:
    """A loop of 601 events, all written and none indexed yet: their catch-up needs pages of its own."""
    events: list[ev.Event] = [started("f1", "full")]
    for step in range(1, 301):
        events += [request("f1", "full", step), tool("f1", "full", "x" * 200)]
    for e in events:
        store.record(e)
    store.flush()
    assert store.waiting == 0 and mark(store) == 0
    return events


def test_a_full_disk_while_the_index_catches_up_loses_nothing_and_the_index_ends_whole(tmp_path, catch_up):
    path = tmp_path / "s.db"
    store = Store(path)
    events = record_unindexed(store)
    pages = store.query("PRAGMA page_count")[0]["page_count"]
    store.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
    catch_up(True)
    late = [request("f1", "full", 301), tool("f1", "full", "y" * 100_000), request("f1", "full", 302)]
    for e in late:
        store.record(e)
    assert store.waiting == 2 and store.problem is not None and "disk full" in store.problem  # the big one on
    assert mark(store) == 0  # the catch-up tried (after the small row that fit) and undone
    assert store.events("full") == events + late[:1]  # the reader sees everything written, nothing twice
    store.execute("PRAGMA max_page_count = 1073741823")  # space is back
    store.flush()
    assert store.waiting == 0 and store.problem is None
    assert mark(store) == total(store) and indexed(store) == len(events) + 3
    assert store.events("full") == events + late
    assert store.find("full")["steps"] == 302
    store.close()


def test_a_store_closed_twice_and_one_in_memory(tmp_path):
    store = Store(tmp_path / "s.db")
    store.record(started("c1", "closed"))
    store.close()
    store.close()  # nothing raised, nothing written twice
    again = Store(tmp_path / "s.db")
    assert len(again.events("closed")) == 1 and mark(again) == total(again) == 1
    again.close()

    memory = Store(":memory:")
    events = [started("m1", "mem"), request("m1", "mem", 1), response("m1", "mem", 1)]
    for e in events:
        memory.record(e)
    assert memory.events("mem") == events and memory.find("mem")["steps"] == 1
    memory.close()
    memory.close()


def test_reading_by_kind_finds_kinds_only_in_the_index_and_only_after_it(tmp_path, catch_up):
    store = Store(tmp_path / "s.db")
    head = [started("k1", "kinds"), request("k1", "kinds", 1), tool("k1", "kinds", "one")]
    for e in head:
        store.record(e)
    store.flush()
    catch_up(True)
    store.record(ev.Steering(loop_id="k1", lineage=("kinds(k1)",), action="pause"))  # a write that catches up
    catch_up(False)
    assert mark(store) == total(store) == 4
    tail = [response("k1", "kinds", 1), request("k1", "kinds", 2)]
    for e in tail:
        store.record(e)
    assert mark(store) == 4 and total(store) == 6
    assert store.events("kinds", kind="tool_output") == head[2:]  # only in the index
    assert store.events("kinds", kind="model_response") == tail[:1]  # only after it
    assert store.events("kinds", kind="model_request") == [head[1], tail[1]]  # both sides, in order
    assert store.events("kinds", kind="nothing") == []
    assert store.find("kinds")["steps"] == 2 and store.find("kinds")["status"] == "paused"
    store.close()


def test_many_running_loops_count_their_steps_from_the_index_or_from_after_it(tmp_path, catch_up):
    path = tmp_path / "s.db"
    store = Store(path)
    for i in range(60):
        store.record(started(f"r{i}", f"run{i}"))
        store.record(request(f"r{i}", f"run{i}", i + 1))
    catch_up(True)
    store.record(started("z", "zero"))  # a write that catches up: every request above in the index
    store.flush()
    catch_up(False)
    assert mark(store) == total(store)
    for i in range(0, 60, 2):  # half the loops move on after the mark
        store.record(request(f"r{i}", f"run{i}", i + 100))
    store.record(started("t", "tailonly"))
    store.record(request("t", "tailonly", 7))
    store.execute("UPDATE loops SET steps = 0")  # only the events count (a row's count lags by a second)
    want = {f"run{i}": i + (100 if i % 2 == 0 else 1) for i in range(60)} | {"zero": 0, "tailonly": 7}
    assert mark(store) < total(store)

    def check(reader: Store) -> None:
        assert {r["name"]: r["steps"] for r in reader.loops()} == want
        assert reader.find("run3")["steps"] == 4 and reader.find("run4")["steps"] == 104
        assert reader.find("tailonly")["steps"] == 7

    check(store)  # the requests after the mark, found by one scan (loops) and one per loop (find)
    other = Store(path)  # catches up on open: every request in the index now
    assert mark(other) == total(other)
    check(other)
    other.close()
    store.close()


def test_one_loop_id_in_two_sessions_is_two_loops_never_mixed(tmp_path, catch_up):
    path = tmp_path / "s.db"
    one, two = Store(path), Store(path)
    a = [started("same", "first")]
    b = [started("same", "second")]
    one.record(a[0])
    two.record(b[0])
    for step in range(1, 6):
        catch_up(step == 3)
        for store, lst, name in ((one, a, "first"), (two, b, "second")):
            e = request("same", name, step * (1 if name == "first" else 10))
            store.record(e)
            lst.append(e)
    assert one.uid("same") != two.uid("same")
    for reader in (one, two):
        assert reader.events(one.uid("same")) == a and reader.events(two.uid("same")) == b
        assert reader.events("first") == a and reader.events("second") == b
        steps = {r["name"]: r["steps"] for r in reader.loops()}
        assert steps == {"first": 5, "second": 50}
    one.close()
    two.close()


async def test_an_event_the_encoders_refuse_is_not_lost_nor_the_batch_with_it(tmp_path):
    store = Store(tmp_path / "s.db")
    odd = tool("u1", "odd", "bad \udcff byte")  # a lone surrogate, as text decoded with surrogateescape holds
    events = [started("u1", "odd"), tool("u1", "odd", "fine"), odd, request("u1", "odd", 1)]
    for e in events:  # in an event loop: one batch, written at the model call
        store.record(e)
    assert store.waiting == 0 and store.problem is None
    assert store.events("odd") == events
    assert store.events("odd")[2].text == "bad \udcff byte"
    store.close()


def test_a_lost_index_mark_with_the_index_kept_reads_each_event_once(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    events = [started("k1", "kept"), request("k1", "kept", 1), request("k1", "kept", 2)]
    for e in events:
        store.record(e)
    store.close()
    damaged = Store(path)
    assert indexed(damaged) == 3
    damaged.execute("DELETE FROM store_meta")  # the mark alone lost (a hand-edited file): "nothing indexed"
    assert damaged.events("kept") == events
    assert damaged.events("kept", kind="model_request") == events[1:]
    damaged.close()
    again = Store(path)
    assert mark(again) == 3 and indexed(again) == 3 and again.events("kept") == events
    again.close()


def test_a_store_opens_on_a_full_disk_though_the_index_cannot_catch_up(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    dead = Store(path)  # a kernel that died, leaving its events for the next store to index
    events = [started("d1", "dead")]
    for step in range(1, 301):
        events += [request("d1", "dead", step), tool("d1", "dead", "x" * 200)]
    for e in events:
        dead.record(e)
    assert dead.waiting == 0 and mark(dead) == 0
    pages = dead.query("PRAGMA page_count")[0]["page_count"]
    connect = sqlite3.connect

    def full_disk(*args, **kwargs):  # every connection made from here on finds the disk full
        db = connect(*args, **kwargs)
        db.execute(f"PRAGMA max_page_count = {pages}")
        return db

    monkeypatch.setattr(sqlite3, "connect", full_disk)
    store = Store(path)  # recording goes on (events wait in memory), as before the index was deferred
    monkeypatch.undo()
    assert mark(store) == 0 and store.events("dead") == events
    mine = [started("n1", "new"), request("n1", "new", 1)]
    for e in mine:
        store.record(e)
    store.execute("PRAGMA max_page_count = 1073741823")  # space is back
    store.flush()
    assert store.waiting == 0 and store.events("new") == mine
    store.close()
    again = Store(path)
    assert mark(again) == total(again) and again.events("dead") == events and again.events("new") == mine
    again.close()


def test_events_that_fit_on_a_nearly_full_disk_are_written_though_the_index_cannot_catch_up(tmp_path, catch_up):
    path = tmp_path / "s.db"
    store = Store(path)
    events = record_unindexed(store)
    pages = store.query("PRAGMA page_count")[0]["page_count"]
    store.execute(f"PRAGMA max_page_count = {pages}")  # the disk is nearly full: a few small rows still fit
    catch_up(True)
    late = [request("f1", "full", 301), tool("f1", "full", "z")]
    for e in late:
        store.record(e)
    assert store.waiting == 0 and store.problem is None  # written: the index waits, not the events
    assert mark(store) == 0 and store.events("full") == events + late
    assert store.find("full")["steps"] == 301
    store.execute("PRAGMA max_page_count = 1073741823")  # space is back
    store.record(request("f1", "full", 302))
    assert mark(store) == total(store) == indexed(store) == len(events) + 3
    assert store.events("full")[-1].step == 302 and len(store.events("full")) == len(events) + 3
    store.close()


def test_an_event_holding_what_json_cannot_is_kept_as_its_repr_with_its_batch(tmp_path):
    store = Store(tmp_path / "s.db")
    odd = ev.ModelResponse(loop_id="r1", lineage=("repr(r1)",), step=1, content=None,
                           tool_calls=({"id": "c1", "name": "t", "arguments": {"when": {1, 2}}},))
    events = [started("r1", "repr"), odd, request("r1", "repr", 2)]
    for e in events:
        store.record(e)
    assert store.waiting == 0 and store.problem is None
    back = store.events("repr")
    assert back[0] == events[0] and back[2] == events[2]
    assert back[1].tool_calls[0]["arguments"] == {"when": "{1, 2}"}
    store.close()
