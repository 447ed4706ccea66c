"""A store file whose tables were dropped by hand is said to be damaged when it opens, naming what is missing and
what to do: it opened, and every read of the history or a transcript then raised SQLite's raw 'no such table', and
every event waited in memory for a table that never came back."""

from __future__ import annotations

import sqlite3

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from unity_nb import UserError
from unity_nb.store import Store


def dropped(path, table: str) -> None:
    Store(path).close()  # a whole store, made as any kernel makes it
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(f"DROP TABLE {table}")
    db.close()


@pytest.mark.parametrize("table", ["loops", "events", "sessions", "tasks", "task_messages"])
def test_a_file_missing_a_table_is_refused_naming_the_table_and_what_to_do(tmp_path, table):
    path = str(tmp_path / "state.db")
    dropped(path, table)
    with pytest.raises(UserError) as info:
        Store(path)
    said = str(info.value)
    assert path in said and f"'{table}'" in said and "missing" in said
    assert "move the file aside" in said and "UNITY_NB_STORE" in said


def test_the_index_dropped_is_still_rebuilt_not_refused(tmp_path):
    path = str(tmp_path / "state.db")
    dropped(path, "event_index")  # derived data: rebuilt from the events (test_store_index_damage)
    store = Store(path)
    assert store.history().empty
    store.close()


def test_history_on_a_file_missing_its_loops_table_is_a_usage_error_saying_what_to_do(tmp_path, monkeypatch):
    monkeypatch.delenv("UNITY_NB_STORE", raising=False)
    path = str(tmp_path / "state.db")
    dropped(path, "loops")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "unity_nb")
    try:
        magics = shell.magics_manager.registry["UnityMagics"]
        magics.close()  # the store it opened on loading
        magics.store_path = path
        with pytest.raises(UsageError, match="move the file aside") as info:
            shell.run_line_magic("unity", "history")
        assert "'loops'" in str(info.value)
    finally:
        magics.store_path = ""
        shell.run_line_magic("unload_ext", "unity_nb")


def test_a_file_whose_version_was_set_back_by_hand_is_said_so(tmp_path):
    """Its user_version set back (2) while it holds a later version's tables: the migration met a table that already
    exists, said as a file in a folder that cannot be written; it is said to be a mismatch, and what to do."""
    path = str(tmp_path / "state.db")
    Store(path).close()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA user_version = 2")
    db.close()
    with pytest.raises(UserError) as info:
        Store(path)
    said = str(info.value)
    assert "version 2" in said and "already exists" in said and "folder you can write" not in said
    assert "move the file aside" in said and "UNITY_NB_STORE" in said
