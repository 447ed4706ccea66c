"""One source for a batch's counts (issue 34): done + running + queued + failed + stopped + not started = total, the
percentage the share of rows that ended, read from the same numbers everywhere (``h.progress``, its ``text``, the
widget, the handle's repr, the snapshot). A row waiting for its turn at the model (its rate limit, a one-slot server)
is queued, not running; a row the batch never started is "not started", never "failed".

Seen before: "1/30 done (30%)", "0/5 done (100%) · 2 failed", "21/28 done (100%)", "failed: not started: the batch
was stopped", "8 running" while a one-slot server served one request at a time."""

import asyncio
import re

import pandas as pd
import pytest
from conftest import Gate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import unity_nb as u

T = 10.0
STATUSES = ("done", "running", "queued", "failed", "stopped", "not_started")


async def until(predicate, what, timeout=T):
    async def spin():
        while not predicate():  # noqa: ASYNC110 - the rows' state changes without one event to wait on
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(spin(), timeout)
    except TimeoutError:
        raise AssertionError(what) from None


def shown(text):
    """The counts a person reads in a progress text: ``{"done": 3, "running": 2, ...}``, and the ended/total/%."""
    rows = text.split(" — ")[0]
    found = {k.replace(" ", "_"): int(n) for n, k in re.findall(r"(\d+) (done|running|queued|failed|stopped|not "
                                                                  r"started)", rows)}
    ended, total, percent = map(int, re.search(r"— (\d+) of (\d+) rows ended \((\d+)%\)", text).groups())
    return found, ended, total, percent


def check(h):
    """The invariant, and the text saying the same numbers."""
    p = h.progress
    counts = {k: p[k] for k in STATUSES}
    assert sum(counts.values()) == p["total"], p
    assert p["ended"] == p["done"] + p["failed"] + p["stopped"] and p["percent"] == 100 * p["ended"] // p["total"], p
    found, ended, total, percent = shown(p["text"])
    assert (ended, total, percent) == (p["ended"], p["total"], p["percent"]), p["text"]
    assert {k: n for k, n in counts.items() if n or k in found} == found, p["text"]  # every count shown is the one
    assert p["rows_text"] in repr(h) and p["text"].startswith(p["rows_text"])
    return p


def row_of(messages):
    return next(m["content"] for m in messages if m["role"] == "user").rsplit(" ", 1)[1]


async def test_a_held_batch_counts_running_and_queued_and_a_stop_leaves_rows_not_started(bus):
    gate = Gate(lambda m, t: "ok")
    h = u.map([f"row {i}" for i in range(5)], "Label {value}", model=u.ScriptedModel(gate), concurrency=2, bus=bus)
    await until(lambda: h.rows.started == 2 and h.progress["running"] == 2, "two rows running")
    p = check(h)
    assert (p["done"], p["running"], p["queued"], p["percent"]) == (0, 2, 3, 0)
    assert "0 done · 2 running · 3 queued — 0 of 5 rows ended (0%)" in p["text"]
    await h.stop("enough")
    p = check(h)
    assert (p["stopped"], p["not_started"], p["queued"], p["failed"]) == (2, 3, 0, 0)
    assert p["rows_text"] == "0 done · 2 stopped · 3 not started — 2 of 5 rows ended (40%)"
    reasons = h.results().attrs["reasons"]
    assert [reasons[i] for i in range(5)] == ["enough"] * 2 + ["not started: the batch was stopped"] * 3
    assert h.failures["status"].tolist() == ["stopped", "stopped"]  # rows never started did not fail


async def test_a_stopped_filter_says_its_rows_never_started_not_that_they_failed(bus):
    gate = Gate(lambda m, t: u.call_tool("submit_answer", keep=True, reason="yes"))
    papers = pd.DataFrame({"abstract": ["a", "b", "c", "d"]}, index=["p1", "p2", "p3", "p4"])
    h = u.filter(papers, "Is {abstract} good?", model=u.ScriptedModel(gate), concurrency=1, bus=bus)
    await until(lambda: h.rows.started == 1, "the first row started")
    await h.stop("seen enough")
    reasons = h.results().attrs["reasons"]
    assert reasons == {"p1": "stopped: seen enough", **dict.fromkeys(["p2", "p3", "p4"],
                                                                      "not started: the batch was stopped")}
    check(h)


async def test_rows_waiting_for_the_models_rate_limit_are_queued_not_running(bus):
    model = u.ScriptedModel(lambda m, t: "ok", name="counts-limited-34")
    h = u.map([f"row {i}" for i in range(4)], "Label {value}", model=model, concurrency=2, rate="1/min", bus=bus)

    def two_waiting():
        p = h.progress
        return p["done"] == 1 and h.rows.started == 3 and p["queued"] == 3

    await until(two_waiting, "row 0 done; rows 1 and 2 waiting for the limiter, row 3 not started")
    p = check(h)
    assert (p["done"], p["running"], p["queued"]) == (1, 0, 3)  # two started rows wait for their turn: queued
    assert len(model.requests) == 1
    await h.stop("no need to wait a minute")
    p = check(h)
    assert (p["done"], p["stopped"], p["not_started"], p["running"], p["queued"]) == (1, 2, 1, 0, 0)


async def test_rows_of_a_finished_batch_with_failures_add_up_and_say_what_the_percentage_is_of(bus):
    def script(messages, tools):
        if row_of(messages) in ("1", "3"):
            raise RuntimeError("no answer for this one")
        return "ok"

    h = u.map([f"row {i}" for i in range(5)], "Label {value}", model=u.ScriptedModel(script), bus=bus)
    await asyncio.wait_for(h.result(), T)
    p = check(h)
    assert p["rows_text"] == "3 done · 2 failed — 5 of 5 rows ended (100%)" and p["outcome"] == "finished with failures"


# -- the invariant over random stops and failures ---------------------------------------------------------------

ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["finish", "fail"]), st.integers(min_value=0, max_value=7)),
        st.tuples(st.sampled_from(["pause", "resume", "stop", "tick"]), st.just(0)),
    ),
    max_size=14,
)


async def scenario(n, concurrency, actions, end_by_stop):
    """``n`` rows, each held until the test finishes or fails it; the counts are checked after every step."""
    held = {str(i): asyncio.Event() for i in range(n)}
    failing: set[str] = set()

    async def script(messages, tools):
        row = row_of(messages)
        await held[row].wait()
        if row in failing:
            raise RuntimeError(f"row {row} fails")
        return f"answer {row}"

    h = u.map([f"row {i}" for i in range(n)], "Label {value}", model=u.ScriptedModel(script),
              concurrency=concurrency, bus=u.EventBus())
    for action, i in actions:
        row = str(i % n)
        if action in ("finish", "fail"):
            if action == "fail":
                failing.add(row)
            held[row].set()
        elif action == "stop":
            await asyncio.wait_for(h.stop("a random stop"), T)
        elif action in ("pause", "resume") and not h.done():
            await getattr(h, action)()
        for _ in range(20):
            await asyncio.sleep(0)
        p = check(h)
        assert p["running"] + p["queued"] <= n - p["ended"] - p["not_started"]
        assert h.rows.started - p["ended"] <= concurrency
    if end_by_stop:
        await asyncio.wait_for(h.stop("the end"), T)
    else:
        if not h.done():
            await h.resume()
        for event in held.values():
            event.set()
    try:
        await asyncio.wait_for(h.result(), T)
    except (u.Stopped, u.UnityError):
        pass
    p = check(h)
    assert p["running"] == p["queued"] == 0
    started = h.rows.started
    assert p["not_started"] == n - started  # every row the batch did not start, and no other
    reasons = h.results().attrs["reasons"]
    never = [k for k, why in reasons.items() if why is not None and why.startswith("not started")]
    assert len(never) == p["not_started"]
    assert p["failed"] == sum(1 for s in h.failures["status"] if s == "failed") <= len(failing)


# a sequence stops a stopped batch again with another reason: said by a warning (tests/test_stop_said.py), not here
@pytest.mark.filterwarnings("ignore:.*this stop's reason .* was not taken:UserWarning")
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(min_value=1, max_value=8), concurrency=st.integers(min_value=1, max_value=4), actions=ACTIONS,
       end_by_stop=st.booleans())
def test_the_counts_add_up_to_the_total_after_any_stops_and_failures(n, concurrency, actions, end_by_stop):
    asyncio.run(scenario(n, concurrency, actions, end_by_stop))


async def test_an_operator_of_several_phases_says_when_rows_of_its_phases_failed(bus):
    """A top-k whose scoring failed a row said only "finished, phase compare, N calls"."""

    def script(messages, tools):
        text = " ".join(str(m["content"]) for m in messages if m["role"] == "user")
        if "tool" in {m["role"] for m in messages}:
            return "done"
        if "bad row" in text:
            raise RuntimeError("no score for this one")
        fields = next(t["function"]["parameters"]["properties"] for t in tools
                      if t["function"]["name"] == "submit_answer")
        return u.call_tool("submit_answer", **({"score": len(text) % 10} if "score" in fields else {"better": "A"}),
                           reason="because")

    h = u.topk(["one", "two", "bad row", "three"], 2, "Which is best?", model=u.ScriptedModel(script), bus=bus)
    await asyncio.wait_for(h.result(), T)
    assert "1 row(s) of its phases failed" in repr(h)
    assert any("1 failed" in repr(phase) for phase in h.phases)
