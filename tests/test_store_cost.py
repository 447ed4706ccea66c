"""What makes recording cheap keeps its results exact (issue 17): the stored JSON, the step counts,
the writes that wait for their half second, and ScriptedModel's usage estimate."""

import asyncio
import json

import unity_nb as u
from unity_nb import events as ev
from unity_nb.store import Store

LINEAGE = ("job(1a2b)",)


def loop_events(loop_id: str = "1a2b") -> list[ev.Event]:
    """Events of several kinds, with tuples of dicts, floats and text that is not ASCII."""
    common = {"loop_id": loop_id, "lineage": LINEAGE}
    return [
        ev.LoopStarted(**common, name="job", task="trouve « ça » — 日本語 ✓", model="scripted"),
        ev.ModelRequested(**common, step=1, messages=1, tools=("lookup", "final_answer"), tool_choice="auto",
                          last_user="naïve\nquestion \u2028 \"quoted\""),
        ev.ModelResponse(**common, step=1, content="d'accord 👍",
                         tool_calls=({"id": "c1", "name": "lookup", "arguments": '{"key": "é"}'},
                                     {"id": "c2", "name": "lookup", "arguments": {"nested": [1, 2.5, None, True]}}),
                         input_tokens=12, output_tokens=3, thinking="réflexion"),
        ev.ThinkingStep(**common, text="calling lookup"),
        ev.ToolStarted(**common, call_id="c1", name="lookup", arguments='{"key": "é"}'),
        ev.ToolOutput(**common, call_id="c1", name="lookup", text="printed\ttabs\x01"),
        ev.ToolFinished(**common, call_id="c1", name="lookup", result="ÉÉ", duration=0.000123456789),
        ev.ToolFinished(**common, call_id="c2", name="lookup", result="", duration=3.7685997085645795e-05),
        ev.Steering(**common, action="pause"),
        ev.Steering(**common, action="interject", message="plus vite"),
        ev.ModelRequested(**common, step=2, messages=5, tools=(), tool_choice="none"),
        ev.LoopFinished(**common, status="finished", result="fini ✓", steps=2),
    ]


def test_the_stored_json_is_what_model_dump_json_writes(tmp_path):
    store = Store(tmp_path / "s.db")
    events = loop_events()
    big = ev.ModelResponse(loop_id="1a2b", lineage=LINEAGE, step=3, content=None,  # past 64 bits: the other encoder
                           tool_calls=({"id": "c3", "name": "lookup", "arguments": {"n": 2**70}},))
    events.insert(-1, big)
    for e in events:
        store.record(e)
    store.flush()
    stored = [r["data"] for r in store.query("SELECT data FROM events ORDER BY seq")]
    assert all(type(s) is str for s in stored)  # text, as older kernels wrote and read it
    assert [json.loads(s) for s in stored] == [json.loads(e.model_dump_json()) for e in events]
    assert stored[0] == events[0].model_dump_json()  # compact, in field order
    assert "日本語 ✓" in stored[0] and "\\u" not in stored[0]  # non-ASCII kept as is
    assert '"n":1180591620717411303424' in stored[-2]
    # and read back as the same events, by kind and by loop
    assert store.events() == events
    assert store.events("job", kind="model_response") == [events[2], big]
    assert store.events("job", kind="model_response")[0].tool_calls == events[2].tool_calls
    (row,) = store.loops()
    assert (row["status"], row["steps"], row["result"]) == ("finished", 2, "fini ✓")
    store.close()


def test_a_loop_that_has_not_ended_shows_the_steps_its_events_count(tmp_path):
    store = Store(tmp_path / "s.db")
    common = {"loop_id": "9f9f", "lineage": ("run(9f9f)",)}
    store.record(ev.LoopStarted(**common, name="run", task="t", model="scripted"))
    for step in range(1, 8):  # many model calls within a second: the row's count is not written for each
        store.record(ev.ModelRequested(**common, step=step, messages=step, tools=("x",), tool_choice="auto"))
    (row,) = store.loops()
    assert (row["status"], row["steps"]) == ("running", 7)
    assert store.find("run")["steps"] == 7 and list(store.history()["steps"]) == [7]
    store.record(ev.Steering(**common, action="pause"))
    assert store.find("run")["status"] == "paused"
    store.record(ev.LoopFailed(**common, error="boom", steps=7))
    assert (store.find("run")["status"], store.find("run")["steps"]) == ("failed", 7)
    store.close()


def test_the_loop_of_a_kernel_that_died_shows_the_steps_it_recorded(tmp_path):
    store = Store(tmp_path / "s.db")
    store.execute("INSERT INTO sessions (id, pid, host, started) VALUES ('gone', 999999999, 'elsewhere', 0)")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, steps)"
                  " VALUES ('gone-dead', 'gone', 'dead', 'old', 't', 'running', 1, 1)")  # its count written at step 1
    for step in (1, 2, 3):  # then two more model calls before it died
        e = ev.ModelRequested(loop_id="dead", lineage=("old(dead)",), step=step, messages=step, tools=(),
                              tool_choice="auto")
        store.execute("INSERT INTO events (loop_uid, kind, ts, data) VALUES ('gone-dead', ?, ?, ?)",
                      (e.kind, e.ts, e.model_dump_json()))
    (row,) = store.loops()
    assert (row["status"], row["steps"]) == ("interrupted", 3)
    store.close()


async def until(predicate, timeout: float = 10) -> None:
    """Yield to the event loop until ``predicate()`` holds (bounded by ``timeout``)."""

    async def spin() -> None:
        while not predicate():  # noqa: ASYNC110 - the store's half-second write publishes no event
            await asyncio.sleep(0)

    await asyncio.wait_for(spin(), timeout)


def test_events_that_wait_are_written_within_half_a_second_also_on_a_later_event_loop(tmp_path):
    store = Store(tmp_path / "s.db")
    common = {"loop_id": "a1", "lineage": ("a(a1)",)}

    async def first() -> None:
        store.record(ev.LoopStarted(**common, name="a", task="t", model="scripted"))
        store.record(ev.ToolOutput(**common, call_id="c", name="n", text="waits"))  # arms the half-second write
        store.record(ev.ModelRequested(**common, step=1, messages=1, tools=(), tool_choice="auto"))  # commits now
        assert store.waiting == 0

    async def second() -> None:  # the first event loop has gone, its armed write with it
        store.record(ev.ToolOutput(**common, call_id="c", name="n", text="waits too"))
        assert store.waiting == 1
        await until(lambda: store.waiting == 0)

    asyncio.run(first())
    asyncio.run(second())
    assert [e.kind for e in store.events("a")] == ["loop_started", "tool_output", "model_request", "tool_output"]
    store.close()


# ---------------------------------------------------------------------------- ScriptedModel's usage estimate


def old_estimate(messages: list[dict]) -> int:
    """The estimate as it was computed before it was made incremental: every message, every call."""
    return sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1


async def test_the_scripted_models_usage_estimate_is_the_whole_history_count_made_incrementally():
    model = u.ScriptedModel(lambda messages, tools: "ok")

    async def estimate(messages: list[dict]) -> int:
        reply = await model.complete(u.ModelRequest(messages=messages))
        return reply.usage.input_tokens

    history: list[dict] = [{"role": "system", "content": "s" * 10}, {"role": "user", "content": "é" * 9}]
    seen = []
    for i in range(6):  # the loop's way: a new copy of a list that grows
        history.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}"}]})
        history.append({"role": "tool", "content": "r" * (i * 7)})
        seen.append(await estimate(list(history)) == old_estimate(history))
    same = list(history)
    for i in range(3):  # one list, grown in place
        same.append({"role": "user", "content": [{"type": "text", "text": "x" * i}]})
        seen.append(await estimate(same) == old_estimate(same))
    same[2] = {"role": "user", "content": "replaced in the same list, which then grew"}
    same.append({"role": "tool", "content": "t"})
    seen.append(await estimate(same) == old_estimate(same))
    replaced = [dict(m) for m in same]
    replaced[3]["content"] = "an earlier message changed, the same length of list"
    seen.append(await estimate(replaced) == old_estimate(replaced))
    shorter = [same[0], {"role": "user", "content": "summary"}, *same[-2:]]  # compressed
    seen.append(await estimate(shorter) == old_estimate(shorter))
    in_place = list(shorter)
    in_place[1] = {"role": "user", "content": "a different message at the same place"}
    seen.append(await estimate(in_place) == old_estimate(in_place))
    seen.append(await estimate([]) == old_estimate([]))
    seen.append(await estimate(list(history)) == old_estimate(history))
    assert seen == [True] * len(seen)
