"""The SQLite store: recording events from the bus, rebuilding transcripts, migrations."""

import asyncio
import sqlite3

import pytest
from conftest import tool_messages

import unity_nb as u
from unity_nb._store_schema import MIGRATIONS
from unity_nb.store import SCHEMA_VERSION, Store


def lookup(key: str) -> str:
    """Look a key up."""
    return key * 2


async def test_every_event_is_recorded_and_the_transcript_rebuilt(tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    script = lambda m, t: u.call_tool("lookup", key="a") if not tool_messages(m) else "found aa"
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
    assert list(history.columns[:5]) == ["name", "kind", "task", "status", "started"]
    # another connection (another kernel) sees the same, committed
    other = Store(tmp_path / "s.db")
    assert [r["uid"] for r in other.loops()] == [row["uid"]] and other.loops()[0]["status"] == "finished"
    with pytest.raises(u.UserError, match="no loop 'nope'"):
        other.transcript("nope")
    store.close()
    other.close()


def test_a_loop_of_a_dead_session_shows_as_interrupted(tmp_path):
    store = Store(tmp_path / "s.db")
    store.execute("INSERT INTO sessions (id, pid, host, started) VALUES ('gone', 999999999, 'elsewhere', 0)")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, steps)"
                  " VALUES ('gone-1', 'gone', '1', 'old', 't', 'running', 1, 3)")
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
    old = u.events.ThinkingStep(loop_id="1", lineage=("kept(1)",), text="recorded by an old kernel")
    db.execute("INSERT INTO events (seq, loop_uid, kind, ts, data) VALUES (7, 'x-1', ?, ?, ?)",
               (old.kind, old.ts, old.model_dump_json()))
    db.commit()
    db.close()
    store = Store(path)
    assert store.version == SCHEMA_VERSION == 4
    assert store.loops()[0]["name"] == "kept"
    assert store.query("SELECT COUNT(*) AS n FROM tasks")[0]["n"] == 0  # the second step's tables exist
    assert store.query("SELECT loop_uid, seq FROM event_index") == [{"loop_uid": "x-1", "seq": 7}]  # the third's
    assert store.events("kept") == [old]
    new = u.events.ThinkingStep(loop_id="2", lineage=("new(2)",), text="recorded after the migration")
    store.record(new)
    assert store.events() == [old, new]  # kept, and in order
    assert [r["seq"] for r in store.query("SELECT seq FROM events ORDER BY seq")] == [7, 8]
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
    store.close()
    reader.close()


# ---------------------------------------------------------------------------- ids (issue 15, item 8)


async def test_loop_ids_are_unique_and_names_stay_short():
    from unity_nb.loop._handle import _new_id

    ids = {_new_id() for _ in range(100_000)}
    assert len(ids) == 100_000  # 4 hex digits had 65,536 values: 14 of 1,000 loops collided
    h = u.LoopHandle("t", model=u.ScriptedModel(["ok"]), bus=u.EventBus())
    assert h.name == f"loop-{h.id[:4]}" and h.tree.lineage == (f"{h.name}({h.id})",)


async def test_loops_of_two_kernels_on_one_file_never_merge_or_overwrite(tmp_path):
    kernels = []
    for _ in range(2):  # two stores on one file: two kernels
        bus, store = u.EventBus(), Store(tmp_path / "s.db")
        store.attach(bus)
        kernels.append((bus, store))
    handles = [u.start_loop(f"task {i}", model=u.ScriptedModel([f"answer {i}"]), bus=kernels[i % 2][0])
               for i in range(400)]
    await asyncio.gather(*handles)
    store = kernels[0][1]
    rows = store.loops()
    assert len(rows) == 400 and {r["task"] for r in rows} == {f"task {i}" for i in range(400)}
    starts = store.query("SELECT loop_uid, COUNT(*) AS n FROM events WHERE kind = 'loop_started' GROUP BY loop_uid")
    assert len(starts) == 400 and {r["n"] for r in starts} == {1}
    # a second start under a recorded id never overwrites the first loop's row
    first = rows[0]
    owner = next(s for _, s in kernels if s.session == first["session"])
    owner.record(u.events.LoopStarted(loop_id=first["loop_id"], lineage=("impostor",), name="impostor",
                                      task="an impostor", model="scripted"))
    assert owner.find(first["uid"])["task"] == first["task"]
    for _, s in kernels:
        s.close()


# ---------------------------------------------------------------------------- an unusable file (item 9)


def garbage(path):
    path.write_bytes(bytes(range(256)) * 40)
    return path


def truncated(path):
    store = Store(path)
    store.execute("CREATE TABLE filler (x)")
    store.execute("INSERT INTO filler VALUES (zeroblob(100000))")
    store.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("make", [garbage, truncated])
def test_a_damaged_store_is_a_clear_error_naming_the_file_and_what_to_do(tmp_path, make):
    path = make(tmp_path / "state.db")
    with pytest.raises(u.UserError) as info:
        Store(path)
    text = str(info.value)
    assert str(path) in text and "move it aside" in text and "UNITY_NB_STORE" in text
    assert not isinstance(info.value, sqlite3.Error)


def test_a_store_that_cannot_be_opened_is_a_clear_error(tmp_path):
    folder = tmp_path / "a folder"
    folder.mkdir()
    with pytest.raises(u.UserError) as info:
        Store(folder)  # a folder, not a file (as a read-only folder, it cannot be opened for writing)
    assert str(folder) in str(info.value) and "UNITY_NB_STORE" in str(info.value)


class Malformed:
    """A connection whose file turned out damaged: every write fails as SQLite says then."""

    def __init__(self, db):
        self.db = db

    def __getattr__(self, name):
        return getattr(self.db, name)

    def execute(self, sql, *args):
        if sql.startswith("INSERT INTO events"):
            err = sqlite3.DatabaseError("database disk image is malformed")
            err.sqlite_errorcode = sqlite3.SQLITE_CORRUPT
            raise err
        return self.db.execute(sql, *args)


async def test_a_store_damaged_while_a_loop_runs_harms_nothing_and_says_what_to_do(tmp_path, caplog):
    bus, store = u.EventBus(), Store(tmp_path / "s.db")
    store.attach(bus)
    store._db = Malformed(store._db)  # type: ignore[assignment]
    h = u.start_loop("find a", model=u.ScriptedModel(script), tools=[lookup], bus=bus, name="job")
    assert await h == "found aa"  # the operation is unharmed
    (warning,) = [r for r in caplog.records if r.name.startswith("unity_nb")]
    assert warning.levelname == "WARNING" and warning.exc_info is None
    assert str(tmp_path / "s.db") in warning.getMessage() and "move it aside" in warning.getMessage()
    assert store.waiting == len([e for e in h.events if e.kind != "model_delta"])
    store._db = store._db.db  # type: ignore[attr-defined]
    store.close()


class Unwritable(Malformed):
    """A connection whose writes fail otherwise than SQLite fails (an OSError from beneath it)."""

    def execute(self, sql, *args):
        if sql.startswith("INSERT INTO events"):
            raise OSError(5, "Input/output error")
        return self.db.execute(sql, *args)


async def test_a_write_that_fails_otherwise_than_sqlite_fails_loses_nothing_and_says_so(tmp_path, caplog):
    """A batch whose write raised anything but a sqlite3 error (an OSError, a value no JSON encoder took) was
    dropped: its events were gone, and the error went up to whoever published the event."""
    store = Store(tmp_path / "s.db")
    seen: list[str | None] = []
    store.add_problem_listener(seen.append)
    common = {"loop_id": "l1", "lineage": ("odd",)}
    cyclic: list = [1]
    cyclic.append(cyclic)
    odd = u.events.ModelResponse(**common, step=1, content="x",
                                 tool_calls=({"id": "c", ("a", "b"): 1, "loop": cyclic},))
    events = [u.events.LoopStarted(**common, name="odd", task="t", model="m"), odd,
              u.events.LoopFailed(**common, error="boom", steps=1)]
    for e in events:  # one batch: written with the loop's end
        store.record(e)
    assert store.waiting == 0 and store.problem is None
    written = store.events("odd")
    assert [e.kind for e in written] == ["loop_started", "model_response", "loop_failed"]
    assert written[1].tool_calls == ({"id": "c", "('a', 'b')": 1, "loop": [1, "<list within itself>"]},)
    assert store.find("odd")["status"] == "failed"

    store._db = Unwritable(store._db)  # type: ignore[assignment]
    common = {"loop_id": "l2", "lineage": ("later",)}
    later = [u.events.LoopStarted(**common, name="later", task="t", model="m"),
             u.events.ToolOutput(**common, call_id="c", name="n", text="out"),
             u.events.LoopFailed(**common, error="boom", steps=1)]
    for e in later:
        store.record(e)
    store.flush()  # never raises
    assert store.waiting == 3 and "Input/output error" in (store.problem or "") and seen[-1] == store.problem
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "unity_nb.store"]  # once
    assert logged.startswith("store: 3 events waiting; ") and "Input/output error" in logged
    store._db = store._db.db  # type: ignore[attr-defined]
    store.flush()  # the next try writes them, in order
    assert store.waiting == 0 and store.problem is None and seen[-1] is None
    assert store.events("later") == later
    store.close()


def test_an_event_no_try_can_write_is_left_out_saying_so_and_holds_up_no_other(tmp_path, caplog):
    """An event SQLite cannot take (a value it cannot bind), in a batch with others: the others are written; it is
    tried again with the next tries, then left out, said in the log and counted. Before, the whole batch waited for
    it forever (the store wrote nothing more)."""
    store = Store(tmp_path / "s.db")
    common = {"loop_id": "l1", "lineage": ("bad",)}
    bad = u.events.ToolOutput(**common, call_id="c", name="n", text="two", ts=complex(1, 2))  # no SQLite value
    events = [u.events.LoopStarted(**common, name="bad", task="t", model="m"),
              u.events.ToolOutput(**common, call_id="c", name="n", text="one"), bad,
              u.events.LoopFailed(**common, error="boom", steps=1)]
    for e in events:
        store.record(e)
    for _ in range(3):  # the tries: each writes what it can
        store.flush()
    assert store.waiting == 0 and store.problem is None and store.left_out == 1
    assert [e.text for e in store.events("bad", kind="tool_output")] == ["one"]
    assert store.find("bad")["status"] == "failed"  # the events after it written
    (said,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert "a tool_output event of loop l1" in said and "ProgrammingError" in said
    store.close()


def test_an_event_left_out_is_said_with_its_error_as_it_is(tmp_path, caplog):
    """The log line saying an event was left out gives the error's text as it is: braces in it were doubled (the
    text was escaped for a str.format template the line is not)."""

    class Braced:
        def __conform__(self, protocol):  # how SQLite asks a value to bind itself: this one cannot
            raise ValueError("cannot bind {this}")

    store = Store(tmp_path / "s.db")
    store.record(u.events.ToolOutput(loop_id="l1", lineage=("b",), call_id="c", name="n", text="x", ts=Braced()))
    for _ in range(3):
        store.flush()
    assert store.left_out == 1
    (said,) = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert "ValueError: cannot bind {this}" in said
    store.close()


# ---------------------------------------------------------------------------- a full disk (item 10)


def script(messages, tools):
    return u.call_tool("lookup", key="a") if not tool_messages(messages) else "found aa"


async def test_a_full_disk_is_reported_once_and_the_backlog_written_when_space_returns(tmp_path, caplog):
    bus, store = u.EventBus(), Store(tmp_path / "s.db")
    store.attach(bus)
    seen: list[str | None] = []
    store.add_problem_listener(seen.append)
    pages = store.query("PRAGMA page_count")[0]["page_count"]
    store.execute(f"PRAGMA max_page_count = {pages}")  # the file cannot grow: SQLite's own "disk full"
    handles = [u.start_loop(f"find a {i}", model=u.ScriptedModel(script), tools=[lookup], bus=bus) for i in range(40)]
    assert await asyncio.gather(*handles) == ["found aa"] * 40  # every loop unharmed
    logged = [r for r in caplog.records if r.name.startswith("unity_nb")]
    assert len(logged) == 1 and logged[0].exc_info is None, [r.getMessage() for r in logged]  # once, no traceback
    assert logged[0].getMessage().startswith("store: disk full, ") and "events waiting" in logged[0].getMessage()
    assert "cannot rollback" not in caplog.text
    assert store.waiting > 0 and (store.problem or "").startswith(f"store: disk full, {store.waiting} events waiting")
    assert seen and (seen[-1] or "").startswith("store: disk full, ")  # for a widget (the magics show it in theirs)
    # space returns: the next flush writes the whole backlog, in order
    store.execute("PRAGMA max_page_count = 1073741823")
    store.flush()
    assert store.waiting == 0 and store.problem is None and seen[-1] is None
    assert "recording again" in caplog.records[-1].getMessage()
    assert len(store.loops()) == 40
    for h in handles:
        assert [e.kind for e in store.events(h.name)] == [e.kind for e in h.events if e.kind != "model_delta"]
    store.close()


async def test_the_rebuilt_transcript_keeps_an_answer_that_is_not_the_model_s_last_text(tmp_path):
    """A loop a plan's ``final_answer`` ends, one whose answer a post-processor changed, and one that handed control
    to a child: the answer entry the live transcript ends with is rebuilt from the store too."""
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)

    def plan_ends_it(messages, tools):
        return u.call_tool("execute_code", code="final_answer(41 + 1)", intent="answer")

    async def delegate() -> object:
        """Hand the work to a sub-operation."""
        return u.HandOff(u.start_loop("go on", model=u.ScriptedModel(["child's answer"]), bus=bus, name="heir"))

    def hand_off(messages, tools):
        return u.call_tool("delegate")

    handles = [
        u.act("compute", model=u.ScriptedModel(plan_ends_it), namespace={}, bus=bus, name="planned"),
        u.start_loop("t", model=u.ScriptedModel(["raw"]), postprocessors=[lambda a: a.upper()], bus=bus, name="post"),
        u.start_loop("t", model=u.ScriptedModel(hand_off), tools=[delegate], bus=bus, name="handed"),
    ]
    for h in handles:
        await h
    store.flush()
    for h in handles:
        live = [(m.role, m.kind, m.content) for m in h.transcript if m.kind not in ("system", "context")]
        rebuilt = [(m.role, m.kind, m.content) for m in store.transcript(h.name)]
        assert live[-1][1] == "answer" and rebuilt == live, h.name
    store.close()


async def test_the_rebuilt_transcript_keeps_what_the_model_was_told_when_its_answer_was_sent_back(tmp_path):
    """An answer that fails an evaluation, and one that is not the output type asked for, send the model back with a
    note in the transcript; the store rebuilds those notes too (from the evaluation's event)."""
    import pydantic

    class Pick(pydantic.BaseModel):
        n: int

    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    answers = iter(["answer 1", "answer 2"])
    handles = [
        u.start_loop("t", model=u.ScriptedModel(lambda m, t: next(answers)), evaluations=[lambda a: a.endswith("2")],
                     bus=bus, name="judged"),
        u.start_loop("t", model=u.ScriptedModel(["not json", '{"n": 3}']), output=Pick, bus=bus, name="typed"),
    ]
    for h in handles:
        await h
    store.flush()
    for h in handles:
        live = [(m.role, m.kind, m.content) for m in h.transcript if m.kind not in ("system", "context")]
        assert any(kind == "evaluation" for _r, kind, _c in live)
        assert [(m.role, m.kind, m.content) for m in store.transcript(h.name)] == live
    store.close()


async def test_a_call_made_where_no_tools_were_offered_is_rebuilt_as_the_loop_recorded_it(tmp_path):
    """At its last step no tools are offered; a model that calls one anyway is told so and asked once more, and the
    transcript records ``[called NAME]``, never a call that ran: the store rebuilds that, not a call left open."""
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    calls = iter([u.call_tool("lookup", q="x"), "the answer"])
    h = u.start_loop("t", model=u.ScriptedModel(lambda m, t: next(calls)), bus=bus, name="stray", max_steps=1)
    assert await h == "the answer"
    store.flush()
    live = [(m.role, m.kind, m.content, len(m.tool_calls)) for m in h.transcript if m.kind not in ("system", "context")]
    assert ("assistant", "text", "[called lookup]", 0) in live
    assert [(m.role, m.kind, m.content, len(m.tool_calls)) for m in store.transcript("stray")] == live
    store.close()


def test_an_event_changed_by_hand_is_a_clear_error_and_history_keeps_every_loop(tmp_path):
    """Garbage in one event's data: its loop's transcript names the file and the row to delete (was a raw
    JSONDecodeError); history lists every loop still (was a raw JSONDecodeError for the whole store)."""
    path = tmp_path / "s.db"
    store = Store(path)
    store.execute("INSERT INTO sessions (id, pid, host, started) VALUES ('gone', 999999999, 'elsewhere', 0)")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, steps, lineage)"
                  " VALUES ('gone-1', 'gone', '1', 'old', 't', 'running', 1, 3, 'garbage')")
    store.execute("INSERT INTO events (loop_uid, kind, ts, data) VALUES ('gone-1', 'model_request', 1, '{not json')")
    (row,) = store.loops()
    assert (row["name"], row["status"], row["steps"], row["lineage"]) == ("old", "interrupted", 3, ())
    assert list(store.history()["name"]) == ["old"]
    with pytest.raises(u.UserError, match=r"s\.db.*cannot read \(events row seq=1.*DELETE FROM events WHERE seq = 1"):
        store.transcript("old")
    with pytest.raises(u.UserError, match="cannot read"):
        store.events(kind="model_request")
    store.close()


@pytest.mark.parametrize("step", ['"two"', "[2]", "{}", "1e999"])
def test_a_model_call_whose_step_was_changed_by_hand_costs_history_nothing(tmp_path, step):
    """Readable JSON in a loop's newest model call, its step no number: history, find and the loop's transcript
    raised a raw ValueError (or TypeError) for the whole store; the step is not counted, and every loop listed."""
    path = tmp_path / "s.db"
    store = Store(path)
    store.execute("INSERT INTO sessions (id, pid, host, started) VALUES ('gone', 999999999, 'elsewhere', 0)")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, steps, lineage)"
                  " VALUES ('gone-1', 'gone', '1', 'old', 't', 'running', 1, 3, '[]')")
    data = ('{"kind": "model_request", "loop_id": "1", "lineage": [], "step": ' + step + ', "messages": 1,'
            ' "tools": [], "tool_choice": "auto"}')
    store.execute("INSERT INTO events (loop_uid, kind, ts, data) VALUES ('gone-1', 'model_request', 1, ?)", (data,))
    (row,) = store.loops()
    assert (row["name"], row["status"], row["steps"]) == ("old", "interrupted", 3)
    assert list(store.history()["name"]) == ["old"]
    assert store.find("old")["steps"] == 3
    store.close()


@pytest.mark.parametrize("started", ["yesterday", 1e300])
def test_a_loops_start_changed_by_hand_costs_history_nothing(tmp_path, started):
    """A loops row whose start time is no time (text, out of any calendar): history raised pandas' raw parse error for
    the whole store; that loop's start is shown empty (NaT), every loop listed."""
    store = Store(tmp_path / "s.db")
    for uid, name, at in (("s-1", "odd", started), ("s-2", "fine", 1_700_000_000)):
        store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, ended, steps, lineage)"
                      " VALUES (?, ?, '1', ?, 't', 'finished', ?, 1, 0, '[]')", (uid, store.session, name, at))
    frame = store.history()
    assert sorted(frame["name"]) == ["fine", "odd"]
    assert frame.set_index("name")["started"].isna().to_dict() == {"odd": True, "fine": False}
    store.close()


@pytest.mark.parametrize("data", ['{"kind": "row_finished", "status": "fini', "[1]", '{"status": ["finished"]}'])
def test_a_batchs_row_event_cut_by_hand_costs_history_nothing(tmp_path, data):
    """One of a batch's row events cut short (or not an object): history raised a raw JSONDecodeError (an
    AttributeError, a TypeError) for the whole store; that row is not counted, every loop listed, the others' rows
    counted."""
    store = Store(tmp_path / "s.db")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, ended, steps, lineage, kind,"
                  " batch) VALUES ('s-1', ?, '1', 'labels', 'x', 'finished', 1, 2, 0, '[]', 'map', 1)",
                  (store.session,))
    good = '{"kind": "row_finished", "loop_id": "1", "lineage": [], "row": "0", "position": 0, "status": "finished"}'
    for text in (good, data):
        store.execute("INSERT INTO events (loop_uid, kind, ts, data) VALUES ('s-1', 'row_finished', 1, ?)", (text,))
    frame = store.history()
    assert list(frame["name"]) == ["labels"]
    assert frame["rows"][0].startswith("1 finished, 0 failed")
    store.close()


async def test_a_loop_whose_task_and_answer_hold_a_lone_surrogate_is_recorded(tmp_path):
    """Text decoded with surrogateescape (a lone surrogate) in a loop's task and answer: SQLite takes none in its
    loops row, and the batch failed with every event in it (the loop missing from the store, silently)."""
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    odd = "caf\udce9 😀"
    assert await u.start_loop(f"say {odd}", model=u.ScriptedModel([odd]), bus=bus, name="odd") == odd
    (row,) = store.loops()
    assert (row["task"], row["result"], row["status"]) == ("say caf\\udce9 😀", "caf\\udce9 😀", "finished")
    assert [(m.role, m.content) for m in store.transcript("odd")] == [("user", f"say {odd}"), ("assistant", odd)]
    assert store.waiting == 0 and store.problem is None
    store.close()
