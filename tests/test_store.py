"""The SQLite store: recording events from the bus, rebuilding transcripts, migrations."""

import sqlite3

import pytest

import unity_nb as u
from conftest import tool_messages
from unity_nb.store import MIGRATIONS, SCHEMA_VERSION, Store


def lookup(key: str) -> str:
    """Look a key up."""
    return key * 2


async def test_every_event_is_recorded_and_the_transcript_rebuilt(tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    script = lambda m, t: u.call_tool("lookup", key="a") if not tool_messages(m) else "found aa"  # noqa: E731
    h = u.start_loop("find a", model=u.ScriptedModel(script, chunk=2), tools=[lookup], bus=bus, name="job")
    await h.interject("quickly")
    assert await h == "found aa"
    kinds = [e.kind for e in store.events("job")]
    assert kinds[0] == "loop_started" and kinds[-1] == "loop_finished"
    assert "model_delta" not in kinds and [e.kind for e in h.events if e.kind != "model_delta"] == kinds
    (row,) = store.loops()
    assert (row["name"], row["status"], row["steps"], row["result"]) == ("job", "finished", h.steps, "found aa")
    rebuilt = [(m.role, m.kind, m.content) for m in store.transcript("job")]
    live = [(m.role, m.kind, m.content) for m in h.transcript]
    assert rebuilt == live
    history = store.history()
    assert list(history.columns[:5]) == ["name", "task", "status", "started", "steps"]
    # another connection (another kernel) sees the same, committed
    other = Store(tmp_path / "s.db")
    assert [r["uid"] for r in other.loops()] == [row["uid"]] and other.loops()[0]["status"] == "finished"
    with pytest.raises(u.UserError, match="no loop 'nope'"):
        other.transcript("nope")
    store.close(), other.close()


def test_a_loop_of_a_dead_session_shows_as_interrupted(tmp_path):
    store = Store(tmp_path / "s.db")
    store.execute("INSERT INTO sessions (id, pid, host, started) VALUES ('gone', 999999999, 'elsewhere', 0)")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, steps) VALUES ('gone-1', 'gone', '1', 'old', 't', 'running', 1, 3)")
    assert store.loops()[0]["status"] == "interrupted"
    store.close()


def test_an_old_schema_is_migrated_and_keeps_its_data(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for statement in MIGRATIONS[0].split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO loops (uid, name, status, started) VALUES ('x-1', 'kept', 'finished', 1)")
    db.commit()
    db.close()
    store = Store(path)
    assert store.version == SCHEMA_VERSION == 2
    assert store.loops()[0]["name"] == "kept"
    assert store.query("SELECT COUNT(*) AS n FROM tasks")[0]["n"] == 0  # the new step's tables exist
    store.close()


def test_a_newer_schema_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "new.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(u.UserError, match="newer than this unity_nb understands"):
        Store(path)


def test_an_unusable_path_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(u.UserError, match="cannot create the store's folder"):
        Store(blocker / "sub" / "state.db")


async def test_every_event_is_committed_before_the_next_model_call(tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    reader = Store(tmp_path / "s.db")  # another connection: sees only what was committed
    seen = []

    def script(messages, tools):
        seen.append([r["kind"] for r in reader.query("SELECT kind FROM events ORDER BY seq")])
        return u.call_tool("lookup", key="a") if not tool_messages(messages) else "done"

    h = u.start_loop("find a", model=u.ScriptedModel(script), tools=[lookup], bus=bus)
    await h
    assert seen[0] == ["loop_started", "model_request"]
    assert seen[1][-1] == "model_request" and {"model_response", "tool_started", "tool_finished"} <= set(seen[1])
    store.close(), reader.close()
