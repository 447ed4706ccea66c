"""The index of events by loop is derived data: damaged by hand, it is found and rebuilt (issue 24, 8)."""

from __future__ import annotations

import logging
import sqlite3

import pytest
from test_store_index import request, started
from test_store_review import v2_file

import unity_nb as u
from unity_nb import _store_schema
from unity_nb.store import Store


def two_loops(path) -> dict[str, list]:
    """A file with two loops' events, interleaved, all indexed (the store closed)."""
    store = Store(path)
    loops: dict[str, list] = {"alpha": [started("a1", "alpha")], "beta": [started("b2", "beta")]}
    for e in (*loops["alpha"], *loops["beta"]):
        store.record(e)
    for step in range(1, 21):
        for name, lid in (("alpha", "a1"), ("beta", "b2")):
            e = request(lid, name, step)
            loops[name].append(e)
            store.record(e)
    store.close()
    return loops


def by_hand(path, *statements: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for sql in statements:
        db.execute(sql)
    db.close()


def entries(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*) FROM event_index").fetchone()[0]
    finally:
        db.close()


MOVE_FIVE = ("UPDATE event_index SET loop_uid = (SELECT uid FROM loops WHERE name = 'alpha')"
             " WHERE seq IN (SELECT seq FROM event_index WHERE loop_uid = (SELECT uid FROM loops WHERE name = 'beta')"
             " ORDER BY seq LIMIT 5 OFFSET 3)")

DAMAGE = {
    "dropped": ("DROP TABLE event_index",),
    "emptied": ("DELETE FROM event_index",),
    "half gone": ("DELETE FROM event_index WHERE seq % 2 = 0",),
    "pointing at another loop": (MOVE_FIVE,),
    "mark gone": ("DROP TABLE store_meta",),
}


def assert_reads_whole(store: Store, loops: dict[str, list]) -> None:
    for name, events in loops.items():
        assert store.events(name) == events
        assert store.events(name, kind="model_request") == events[1:]
        assert [m.kind for m in store.transcript(name)] == ["task"]
    assert [(r["name"], r["steps"]) for r in store.loops()] == [("alpha", 20), ("beta", 20)]


@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_a_store_opened_on_a_damaged_index_rebuilds_it_and_reads_every_event_under_its_loop(
    tmp_path, caplog, damage
):
    path = tmp_path / "s.db"
    loops = two_loops(path)
    by_hand(path, *DAMAGE[damage])
    with caplog.at_level(logging.WARNING, logger="unity_nb.store"):
        store = Store(path)
    assert "rebuilt from the events" in caplog.text
    assert entries(path) == 42
    assert_reads_whole(store, loops)
    store.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="unity_nb.store"):
        Store(path).close()  # whole now: nothing to rebuild
    assert "rebuilt" not in caplog.text


@pytest.mark.parametrize("damage", ["dropped", "mark gone"])
def test_a_read_that_meets_a_missing_index_rebuilds_it(tmp_path, damage):
    path = tmp_path / "s.db"
    loops = two_loops(path)
    store = Store(path)
    by_hand(path, *DAMAGE[damage])  # under a store that is open: another process did it
    assert_reads_whole(store, loops)  # no raw sqlite3.OperationalError
    assert entries(path) == 42
    store.close()


def test_a_read_that_finds_entries_pointing_at_another_loop_shows_only_its_own_and_rebuilds(tmp_path):
    path = tmp_path / "s.db"
    loops = two_loops(path)
    store = Store(path)
    by_hand(path, MOVE_FIVE)
    assert store.events("alpha") == loops["alpha"]  # not beta's five
    assert store.events("beta") == loops["beta"]  # the read of alpha found the damage: rebuilt
    store.close()


def test_a_big_index_is_checked_by_a_sample(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    loops = two_loops(path)
    monkeypatch.setattr(_store_schema, "CHECK_WHOLE_UP_TO", 10)  # 42 events: "big"
    Store(path).close()
    assert entries(path) == 42
    by_hand(path, "DELETE FROM event_index WHERE seq > 20")
    store = Store(path)
    assert entries(path) == 42
    assert_reads_whole(store, loops)
    store.close()


def test_a_version_2_file_locked_past_the_wait_says_it_is_locked_not_damaged(tmp_path):
    path = tmp_path / "v2.db"
    v2_file(path, {"old": [started("o1", "old")]})
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another kernel writing (or migrating) it
    try:
        with pytest.raises(u.UserError) as info:
            Store(path, timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    text = str(info.value)
    assert "locked by another process" in text and "UNITY_NB_STORE" in text
    assert "damaged" not in text.replace("the file itself is fine", "") and "folder you can write" not in text
    store = Store(path)  # once let go, it opens and migrates
    assert store.version == _store_schema.SCHEMA_VERSION and [r["name"] for r in store.loops()] == ["old"]
    store.close()
