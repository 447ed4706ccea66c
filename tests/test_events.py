"""Events as frozen, slotted dataclasses: their public API, their validation, the bus's async
subscribers, and events read back from the store.

Async tests synchronise on events and futures with timeouts; nothing waits a fixed time and
nothing asserts on durations.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import typing

import pytest
from pydantic import TypeAdapter

import unity_nb as u
from unity_nb import events as ev
from unity_nb.store import Store

T = 10.0
EVERY_KIND = typing.get_args(typing.get_args(ev.AnyEvent)[0])


def sample(cls: type) -> ev.Event:
    """An instance of ``cls`` with every field given a value of its type (tuples as lists)."""
    values: dict[str, typing.Any] = {"loop_id": "loop1", "lineage": ["outer(1)", "inner(2)"]}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in ("kind", "ts", "seq", "loop_id", "lineage"):
            continue
        if (cls, f.name) == (ev.Steering, "action"):  # a registered verb (ev.STEERING_ACTIONS), not any text
            values[f.name] = "interject"
            continue
        hint = hints[f.name]
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Literal:
            values[f.name] = args[-1]
        elif origin is dict or any(typing.get_origin(a) is dict for a in args):
            values[f.name] = {"max_steps": 3, "note": f"{f.name} é ☕"}
        elif origin is tuple:
            values[f.name] = [{"id": "c1", "name": "n", "arguments": "{}"}] if args[0] is dict else ["a", "b"]
        elif hint is bool or bool in args:
            values[f.name] = True
        elif hint is int or int in args:
            values[f.name] = 3
        elif hint is float or float in args:
            values[f.name] = 0.5
        else:
            values[f.name] = f"{f.name} é ☕"
    return cls(**values)


def test_every_event_keeps_its_keyword_constructor_fields_and_order():
    assert len(EVERY_KIND) == 31  # provider_batch (a map via a Batch API: its file and batch ids) is the newest
    seqs = []
    for cls in EVERY_KIND:
        e = sample(cls)
        assert e.kind == cls.__dataclass_fields__["kind"].default
        assert e.loop_id == "loop1" and e.lineage == ("outer(1)", "inner(2)")  # a list given: a tuple kept
        assert isinstance(e.ts, float) and isinstance(e.seq, int)
        seqs.append(e.seq)
        dump = e.model_dump()
        assert list(dump)[:5] == ["kind", "loop_id", "lineage", "ts", "seq"]
        for name, value in dump.items():
            assert value == getattr(e, name)
            if typing.get_origin(typing.get_type_hints(cls)[name]) is tuple:
                assert isinstance(getattr(e, name), tuple)
        assert not hasattr(e, "__dict__")  # slotted: one small object per event
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_the_loops_constructors_as_it_calls_them():
    r = ev.ModelResponse(loop_id="a", lineage=("x(1)",), step=2, content=None,
                         tool_calls=tuple({"id": "c", "name": "f", "arguments": "{}"} for _ in range(2)),
                         input_tokens=5, output_tokens=7, thinking=None, refusal=None)
    assert (r.kind, r.step, r.content, r.interrupted, len(r.tool_calls)) == ("model_response", 2, None, False, 2)
    q = ev.ModelRequested(loop_id="a", lineage=("x(1)",), step=1, messages=3, tools=("f",), tool_choice="auto",
                          last_user="hi")
    assert q.kind == "model_request" and q.tools == ("f",)
    s = ev.Steering(loop_id="a", lineage=(), action="interject", message="m")
    assert s.request_id is None and s.action == "interject"


def test_a_kinds_maker_makes_the_event_its_class_makes():
    """The loop and the batch make their events per call and per row through ``maker``: the same event (every
    field, the same types), frozen, with the class's checks and errors."""
    from unity_nb._event_checks import maker

    for cls in EVERY_KIND:
        if cls.__post_init__ is not ev.Event.__post_init__:  # a kind that checks more (Steering) has none
            continue
        e = sample(cls)
        fields = {f.name: getattr(e, f.name) for f in dataclasses.fields(cls) if f.name not in ("ts", "seq")}
        fields["lineage"] = list(fields["lineage"])
        made = maker(cls)(**fields)
        assert type(made) is cls and made.seq > e.seq and made.ts >= e.ts
        assert made == dataclasses.replace(e, ts=made.ts, seq=made.seq)
        assert type(made.lineage) is tuple and not hasattr(made, "__dict__")
    make = maker(ev.LoopFinished)
    with pytest.raises(dataclasses.FrozenInstanceError):
        make(loop_id="a", lineage=(), status="finished").status = "stopped"  # type: ignore[misc]
    with pytest.raises(ValueError, match="status"):
        make(loop_id="a", lineage=(), status="done")
    with pytest.raises(ValueError, match="tuple"):
        maker(ev.ModelRequested)(loop_id="a", lineage=(), step=1, messages=1, tools="abc", tool_choice="auto")
    with pytest.raises(ValueError, match="kind"):
        maker(ev.ToolStarted)(kind="tool_finished", loop_id="a", lineage=(), call_id="c", name="f", arguments="{}")
    with pytest.raises(TypeError, match="call_id"):
        maker(ev.ToolStarted)(loop_id="a", lineage=(), name="f", arguments="{}")


def test_events_are_frozen_and_validated_where_it_matters():
    e = ev.ToolStarted(loop_id="a", lineage=(), call_id="c", name="f", arguments="{}")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.name = "g"  # type: ignore[misc]
    with pytest.raises(ValueError, match="action"):
        ev.Steering(loop_id="a", lineage=(), action="jump")
    with pytest.raises(ValueError, match="status"):
        ev.LoopFinished(loop_id="a", lineage=(), status="done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="status"):
        ev.RequestFinished(loop_id="a", lineage=(), request_id="r", status="ok")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        ev.ToolStarted(kind="tool_finished", loop_id="a", lineage=(), call_id="c", name="f",  # type: ignore[arg-type]
                       arguments="{}")
    with pytest.raises(ValueError, match="tuple"):
        ev.ModelRequested(loop_id="a", lineage=(), step=1, messages=1, tools="abc",  # type: ignore[arg-type]
                          tool_choice="auto")
    with pytest.raises(TypeError, match="call_id"):
        ev.ToolStarted(loop_id="a", lineage=(), name="f", arguments="{}")  # type: ignore[call-arg]
    copy = e.model_copy(update={"name": "g"})
    assert (copy.name, copy.seq, e.name) == ("g", e.seq, "f")


def test_every_event_round_trips_through_json_and_pydantic():
    adapter = TypeAdapter(u.AnyEvent)
    for cls in EVERY_KIND:
        e = sample(cls)
        text = e.model_dump_json()
        assert json.loads(text) == e.model_dump(mode="json")
        assert "é ☕" in text or cls in (ev.ModelRetry, ev.ContextCompressed)  # non-ASCII kept, as pydantic wrote it
        assert ev.parse_event(text) == e
        assert ev.Event.model_validate_json(text) == e
        assert cls.model_validate(json.loads(text)) == e
        assert adapter.validate_json(text) == e  # pydantic still parses any event
    with pytest.raises(ValueError, match="unknown event kind"):
        ev.parse_event({"kind": "nope", "loop_id": "a", "lineage": []})
    with pytest.raises(ValueError, match="takes kind"):
        ev.ToolStarted.model_validate(sample(ev.ToolFinished).model_dump())
    # keys that are not fields are ignored, as pydantic ignored them
    data = {**sample(ev.ThinkingStep).model_dump(mode="json"), "extra": 1}
    parsed = ev.parse_event(data)
    assert isinstance(parsed, ev.ThinkingStep) and parsed.text == data["text"]


def test_model_dump_copies_what_the_event_holds():
    r = sample(ev.ModelResponse)
    assert isinstance(r, ev.ModelResponse)
    r.model_dump()["tool_calls"][0]["name"] = "changed"
    assert r.tool_calls[0]["name"] == "n"
    assert r.model_dump(include={"kind", "step"}) == {"kind": "model_response", "step": 3}
    assert "content" not in r.model_dump(exclude={"content"})


async def test_a_loops_events_and_their_dataframe():
    bus = u.EventBus()
    h = u.start_loop("go", model=u.ScriptedModel(["done"], chunk=2), bus=bus)
    assert await asyncio.wait_for(h.result(), T) == "done"
    kinds = [e.kind for e in h.events]
    assert kinds[0] == "loop_started" and kinds[-1] == "loop_finished" and "model_delta" in kinds
    assert [e.seq for e in bus.history(loop_id=h.id)] == [e.seq for e in h.events]
    df = bus.dataframe(loop_id=h.id)
    assert list(df.columns[:5]) == ["seq", "ts", "kind", "loop_id", "lineage"]
    assert len(df) == len(h.events) and df["lineage"].iloc[0] == "/".join(h.tree.lineage)
    assert str(df["ts"].dtype).startswith("datetime64")


async def test_an_async_subscriber_is_held_until_it_ends_and_its_failure_logged(caplog):
    bus = u.EventBus()
    release = asyncio.Event()
    ran: asyncio.Future = asyncio.get_running_loop().create_future()

    async def slow(event: ev.Event) -> None:
        await release.wait()
        ran.set_result(event.kind)

    async def broken(event: ev.Event) -> None:
        raise RuntimeError(f"broken on {event.kind}")

    bus.subscribe(slow)
    bus.subscribe(broken)
    with caplog.at_level(logging.ERROR, logger="unity_nb.events"):
        bus.publish(ev.ThinkingStep(loop_id="a", lineage=(), text="t"))
        assert bus.pending == 2
        gc.collect()  # held by the bus: nothing else refers to the tasks
        release.set()
        assert await asyncio.wait_for(ran, T) == "thinking_step"
        await bus.drain(timeout=T)
    assert bus.pending == 0
    assert any("broken" in r.getMessage() and "failed" in r.getMessage() and r.exc_info for r in caplog.records)


def test_an_async_subscriber_with_no_event_loop_running_is_reported(caplog):
    bus = u.EventBus()

    async def sub(event: ev.Event) -> None:
        pass

    bus.subscribe(sub)
    with caplog.at_level(logging.ERROR, logger="unity_nb.events"):
        bus.publish(ev.ThinkingStep(loop_id="a", lineage=(), text="t"))
    assert bus.pending == 0
    assert any("no event loop running" in r.getMessage() for r in caplog.records)


def test_every_event_kind_reads_back_from_the_store_as_it_was(tmp_path):
    store = Store(tmp_path / "s.db")
    bus = u.EventBus()
    store.attach(bus)
    started = ev.LoopStarted(loop_id="loop1", lineage=("outer(1)", "inner(2)"), name="job", task="t", model="m")
    sent = [started] + [sample(cls) for cls in EVERY_KIND if cls not in (ev.LoopStarted, ev.ModelDelta)]
    for e in sent:
        bus.publish(e)
    back = store.events("job")
    assert back == sent
    assert all(type(a) is type(b) for a, b in zip(back, sent, strict=True))
    store.close()


def test_a_subscriber_that_unsubscribes_itself_leaves_the_others_their_event():
    """A one-shot subscriber (it unsubscribes in its callback) took the next subscriber's event: the bus walked
    the list it was changing, so the subscriber after it was skipped for that event."""
    bus = u.EventBus()
    seen: list[tuple[str, str]] = []

    def once(event: ev.Event) -> None:
        seen.append(("once", event.kind))
        unsubscribe_once()

    unsubscribe_once = bus.subscribe(once)
    bus.subscribe(lambda event: seen.append(("every", event.kind)))
    bus.publish(ev.ThinkingStep(loop_id="a", lineage=(), text="first"))
    bus.publish(ev.ThinkingStep(loop_id="a", lineage=(), text="second"))
    assert seen == [("once", "thinking_step"), ("every", "thinking_step"), ("every", "thinking_step")]


async def test_a_waiters_predicate_that_raises_fails_the_wait_not_the_loop():
    """``h.wait_for(kind, where)`` whose ``where`` raised on an event (an attribute that kind lacks) raised into
    the loop publishing it: the operation failed with the waiter's error, and the waiter itself timed out."""
    gate = asyncio.Event()

    async def script(messages, tools):
        await gate.wait()
        return "done"

    bus = u.EventBus()
    h = u.start_loop("go", model=u.ScriptedModel(script), bus=bus, name="watched")
    await h.wait_for("model_request", timeout=T)
    on_loop = asyncio.ensure_future(h.wait_for("model_response", where=lambda e: e.no_such_field, timeout=T))
    on_bus = asyncio.ensure_future(bus.wait_for("model_response", where=lambda e: 1 / 0, timeout=T))
    await asyncio.sleep(0)  # (both registered: each waits for an event to come)
    gate.set()
    assert await asyncio.wait_for(h.result(), T) == "done"  # the operation goes on and ends as it would
    with pytest.raises(AttributeError, match="no_such_field"):
        await on_loop  # the waiter is told, at once, what its predicate raised
    with pytest.raises(ZeroDivisionError):
        await on_bus
