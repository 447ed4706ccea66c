"""Every row of a batch reaches a bus subscriber and the store as events, in order: its loop's events from its
start to its end, then the batch's ``row_finished`` naming that loop. A guard on how a row runs (issue 38 item 3:
a row is its loop's task alone, settled by the batch as its loop ends)."""

from __future__ import annotations

import asyncio

import unity_nb as u

ROW_LOOP = ["loop_started", "model_request", "model_delta", "model_response", "loop_finished"]


def _rows_in_order(events: list, n: int) -> dict[int, list]:
    """Check each row's events are in order; {position: its row_finished and its loop's events}."""
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    rows = [e for e in events if e.kind == "row_finished"]
    assert sorted(e.position for e in rows) == list(range(n))
    out = {}
    for r in rows:
        started = [e for e in events if e.kind == "child_started" and e.child_id == r.child_id]
        own = [e for e in events if e.loop_id == r.child_id]
        assert len(started) == 1 and own and started[0].seq < own[0].seq
        assert own[-1].seq < r.seq, f"row {r.position}: row_finished before its loop's last event"
        out[r.position] = [r, *own]
    return out


def _kept(seen: list) -> list[tuple]:
    """What the store keeps of the events a subscriber saw: every one but the streamed deltas."""
    return [(e.kind, e.loop_id, e.seq) for e in seen if e.kind != "model_delta"]


def _stored(store: u.Store) -> list[tuple]:
    """Every event the store committed, in order."""
    return [(e.kind, e.loop_id, e.seq) for e in store.events()]


async def test_every_row_s_events_reach_a_subscriber_and_the_store_in_order(tmp_path):
    bus = u.EventBus()
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    seen: list = []
    bus.subscribe(seen.append)
    model = u.ScriptedModel(lambda messages, tools: "ok " + messages[-1]["content"].split()[-1])
    h = u.map([f"item {i}" for i in range(40)], "Label {value}", model=model, concurrency=7, name="rows", bus=bus)
    assert (await asyncio.wait_for(h, 20)).tolist() == [f"ok {i}" for i in range(40)]

    rows = _rows_in_order(seen, 40)
    for position, (finished, *own) in rows.items():
        assert [e.kind for e in own] == ROW_LOOP
        assert (finished.status, finished.answer) == ("finished", f'"ok {position}"')
    assert seen[-1].kind == "loop_finished" and seen[-1].loop_id == h.id  # the batch ends after its rows

    assert _stored(store) == _kept(seen)
    assert len(u.finished_rows(store, "rows")) == 40
    store.close()


async def test_rows_running_when_the_batch_stops_end_stopped_and_say_so_in_order(tmp_path):
    bus = u.EventBus()
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    seen: list = []
    bus.subscribe(seen.append)
    started = asyncio.Event()
    running = 0

    async def script(messages: list, tools: list) -> str:
        nonlocal running
        text = messages[-1]["content"]
        if text.endswith(("item 3", "item 4", "item 5")):  # never answer: running when the batch stops
            running += 1
            if running == 3:
                started.set()
            await asyncio.Event().wait()
        return "ok"

    h = u.map([f"item {i}" for i in range(6)], "Label {value}", model=u.ScriptedModel(script), concurrency=3,
              name="stopping", bus=bus)
    await asyncio.wait_for(started.wait(), 10)
    await h.stop("enough")
    rows = _rows_in_order(seen, 6)
    for position, (finished, *own) in rows.items():
        if position < 3:
            assert finished.status == "finished" and [e.kind for e in own] == ROW_LOOP
        else:
            assert (finished.status, finished.reason) == ("stopped", "enough")
            assert [e.kind for e in own][:2] == ["loop_started", "model_request"]
            assert own[-1].kind == "loop_finished" and own[-1].status == "stopped"
    assert _stored(store) == _kept(seen)
    assert [h.rows.counts[k] for k in ("finished", "stopped")] == [3, 3]
    store.close()
