"""A budget that cannot be fooled (issue 37, items 12-14): a model without a price anywhere under a row holds the
batch at once and says which price to set (never the budget silently off); provider usage that is not a count of
tokens is ignored with a recorded warning (never negative spending, never a TypeError); every operator's budget
is checked up front."""

import asyncio

import pandas as pd
import pytest
from fake_openai import FakeOpenAIServer, Reply
from IPython.core.error import UsageError

import unity_nb as u

T = 10.0


def first_user(messages):
    return next(m["content"] for m in messages if m["role"] == "user")


# -- item 12: an unpriced loop under a row -----------------------------------------------------------------------


async def test_an_unpriced_sub_loop_under_a_row_holds_the_budgeted_batch_until_it_is_priced(bus):
    main = u.ScriptedModel(lambda m, t: "done" if any(x["role"] == "tool" for x in m) else u.call_tool("look"),
                           name="guard-main-37")
    helper = u.ScriptedModel(lambda m, t: "found it " * 50, name="guard-unpriced-37")
    u.set_price(main, input=1.0, output=1.0)
    assert u.price_of(helper) is None

    async def look() -> str:
        """Look it up (a sub-loop on another model)."""
        return await u.start_loop("look it up", model=helper, bus=bus)

    h = u.map([f"row {i}" for i in range(30)], "Label {value}", model=main, tools=[look], concurrency=2,
              budget=100.0, bus=bus)
    held = await asyncio.wait_for(h.wait_for("budget_reached"), T)
    assert f"{helper.name!r}" in held.message and f"u.set_price({helper.name!r}" in held.message
    await asyncio.wait_for(h.wait_for("row_finished", lambda e: e.position == 1), T)
    assert h.status == u.Status.PAUSED and h.spending.reached
    assert h.rows.started == 2 and h.progress["done"] == 2  # the rows in flight finished; none started after
    assert h.cost is None  # what the helper spent is not known: never counted as 0
    with pytest.raises(u.UserError, match=r"price is unknown.*u\.set_price\('scripted:guard-unpriced-37'"):
        await h.resume()
    u.set_price(helper, input=2.0, output=2.0)  # now the budget can count it: what it spent counts too
    spent_before = h.spending.spent
    assert h.cost is not None and h.cost == pytest.approx(spent_before) and spent_before > 0
    await h.resume()
    result = await asyncio.wait_for(h.result(), T)
    assert result.tolist() == ["done"] * 30 and not h.spending.reached


async def test_an_unpriced_sub_loop_without_a_budget_leaves_the_cost_unknown_and_the_batch_running(bus):
    main = u.ScriptedModel(lambda m, t: "done" if any(x["role"] == "tool" for x in m) else u.call_tool("look"),
                           name="guard-main-37b")
    helper = u.ScriptedModel(lambda m, t: "found", name="guard-unpriced-37b")
    u.set_price(main, input=1.0, output=1.0)

    async def look() -> str:
        """Look it up."""
        return await u.start_loop("look it up", model=helper, bus=bus)

    h = u.map(["a", "b", "c"], "Label {value}", model=main, tools=[look], bus=bus)
    assert (await asyncio.wait_for(h.result(), T)).tolist() == ["done"] * 3
    assert h.cost is None and not h.spending.reached


# -- item 13: provider usage taken as sent -------------------------------------------------------------------------

USAGES = {
    "negative": {"prompt_tokens": -1_000_000, "completion_tokens": 5},
    "text": {"prompt_tokens": "100", "completion_tokens": 5},
    "absurd": {"prompt_tokens": 10**15, "completion_tokens": 5},
    "fraction": {"prompt_tokens": 12.5, "completion_tokens": 5},
    "counted": {"prompt_tokens": 1_000_000, "completion_tokens": 0},  # $0.40 at gpt-4.1-mini
}


async def test_provider_usage_that_is_not_a_count_of_tokens_is_ignored_with_a_warning():
    def handler(body):
        word = first_user(body["messages"]).split()[-1]
        return Reply(content=f"label {word}", raw_usage=USAGES[word])

    bus = u.EventBus()
    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        h = u.map(list(USAGES), "Label {value}", model=model, concurrency=1, budget=0.41, bus=bus)
        result = await asyncio.wait_for(h.result(), T)
    assert result.tolist() == [f"label {w}" for w in USAGES]  # no row failed on a count that was text
    assert h.progress["failed"] == 0
    # never negative: the counted row's $0.40, and a few estimated tokens for each of the others
    assert 0.40 <= h.cost < 0.401 and h.usage.input_tokens >= 1_000_000 and h.usage.estimated
    responses = {e.content.split()[-1]: e for e in bus.history() if e.kind == "model_response"}
    for word in ("negative", "text", "absurd", "fraction"):
        said = responses[word]
        assert said.estimated and "not a count of tokens" in said.warnings[0], word
        assert 0 <= said.input_tokens < 1000, word
    assert not responses["counted"].warnings and responses["counted"].input_tokens == 1_000_000


async def test_a_model_of_ones_own_that_reports_bad_usage_is_set_right_at_the_loops_door(bus):
    class Sloppy:
        name = "gpt-4.1-mini"

        async def complete(self, request, on_delta=None):
            return u.Reply(content="ok", usage=u.Usage(-1_000_000, "12"))

    h = u.start_loop("hi", model=Sloppy(), bus=bus)
    assert await asyncio.wait_for(h.result(), T) == "ok"
    assert (h.usage.input_tokens, h.usage.output_tokens) == (0, 0) and h.cost == 0
    said = next(e for e in h.events if e.kind == "model_response")
    assert "not a count of tokens" in said.warnings[0] and said.estimated


# -- item 14: budgets checked up front -----------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [-1, float("nan"), "5", float("inf"), True])
async def test_every_operator_refuses_a_budget_that_is_not_dollars_at_once(budget):
    model = u.OpenAIModel("gpt-4.1-mini", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    frame = pd.DataFrame({"text": ["a", "b", "c"], "group": ["x", "x", "y"]})
    starts = {
        "map": lambda: u.map(frame, "Label {text}", model=model, budget=budget, bus=u.EventBus()),
        "filter": lambda: u.filter(frame, "Is {text} good?", model=model, budget=budget, bus=u.EventBus()),
        "topk": lambda: u.topk(frame, 2, "Which {text} is best?", model=model, budget=budget, bus=u.EventBus()),
        "agg": lambda: u.agg(frame, "Summarise {text}", by="group", model=model, budget=budget, bus=u.EventBus()),
    }
    for what, start in starts.items():
        with pytest.raises(u.UserError, match=r"a budget takes dollars \(a number >= 0"):
            start()
        assert what


async def test_an_operators_budget_needs_a_price_and_set_budget_is_checked_too(bus):
    frame = pd.DataFrame({"text": ["a", "b"]})
    unpriced = u.ScriptedModel(lambda m, t: "x", name="guard-op-unpriced-37")
    with pytest.raises(u.UserError, match=r"price of 'scripted:guard-op-unpriced-37'.*u\.set_price"):
        u.topk(frame, 1, "Best {text}?", model=unpriced, budget=1.0, bus=bus)
    with pytest.raises(u.UserError, match=r"price of 'scripted:guard-op-unpriced-37'"):
        u.agg(frame, "Summarise {text}", model=unpriced, budget=1.0, bus=bus)
    priced = u.ScriptedModel(lambda m, t: "x", name="guard-op-priced-37")
    u.set_price(priced, input=1.0, output=1.0)
    h = u.agg(frame, "Summarise {text}", model=priced, budget=1.0, bus=bus)
    for bad in (-1, float("nan"), "5"):
        with pytest.raises(u.UserError, match="a budget takes dollars"):
            h.set_budget(bad)
    assert h.budget == 1.0
    await asyncio.wait_for(h.result(), T)


async def test_a_magic_refuses_a_bad_budget_as_a_usage_error(stored_shell):
    stored_shell.user_ns.update(m=u.ScriptedModel(lambda m, t: "x", name="guard-magic-37"),
                                items=["a", "b", "c"])
    stored_shell.run_line_magic("unity", "model --var m")
    for line in ("topk items 2 --budget -1 Best?", "agg items --budget nan Summarise.",
                 "topk items 2 --budget 1 Best?"):  # the last: a budget needs the model's price
        with pytest.raises(UsageError) as info:
            stored_shell.run_line_magic("unity", line)
        assert "budget" in str(info.value) or "dollars" in str(info.value), line


async def test_an_operator_resumed_counts_what_its_earlier_run_spent_against_its_budget(bus):
    model = u.ScriptedModel(lambda m, t: "summary", name="guard-op-carry-37")
    u.set_price(model, input=1.0, output=1.0)
    h = u.agg(pd.DataFrame({"text": ["a", "b"]}), "Summarise {text}", model=model, budget=1.0, bus=bus)
    h.carry_spent(0.6, origin="an earlier run")  # what %unity resume does before the first phase starts
    await asyncio.wait_for(h.result(), T)
    assert h.phases[0].spending.budget == pytest.approx(0.4)  # the first phase gets what the earlier run left
    carried = [e for e in h.events if e.kind == "spending_carried"]
    assert [(e.dollars, e.origin) for e in carried] == [(0.6, "an earlier run")]


@pytest.mark.parametrize("budget", [None, 1.0])
async def test_expected_output_tokens_that_are_no_count_are_refused_before_anything_starts(budget):
    """With a budget, the count was read by the projection once the batch had started: u.map raised, no handle was
    given, and every row was asked all the same; without one, it was never read at all."""
    model = u.ScriptedModel(lambda m, t: "ok", name="guard-expected-tokens")
    u.set_price(model, input=1.0, output=1.0)
    for bad in (-5, "lots", 2.5, True):
        bus = u.EventBus()
        with pytest.raises(u.UserError, match="expected_output_tokens takes a whole number of tokens"):
            u.map(["a", "b", "c"], "Label {value}", model=model, budget=budget, expected_output_tokens=bad, bus=bus)
        assert bus.history() == [] and model.requests == []  # no batch started: nothing runs on without a handle
        with pytest.raises(u.UserError, match="expected_output_tokens"):
            u.topk(["a", "b", "c"], 1, "Which is best?", model=model, budget=budget, expected_output_tokens=bad,
                   bus=bus)
        assert bus.history() == []
    h = u.map(["a"], "Label {value}", model=model, budget=budget, expected_output_tokens=30, bus=u.EventBus())
    assert (await asyncio.wait_for(h.result(), T)).tolist() == ["ok"]


async def test_a_row_in_flight_as_the_budget_is_reached_is_settled_as_it_ends_while_the_batch_is_held(bus):
    """Held at its budget, the batch waited for a resume before it heard of its rows in flight ending: their answers,
    counts and row_finished events (what the store keeps) came only once it was resumed, never if it was not."""
    gate = asyncio.Event()

    async def script(messages, tools):
        if first_user(messages).endswith("b"):
            await gate.wait()
        return u.Reply(content="ok " + first_user(messages)[-1], usage=u.Usage(0, 1))

    model = u.ScriptedModel(script, name="guard-in-flight")
    u.set_price(model, input=0.0, output=1_000_000.0)  # a dollar a token out
    h = u.map(["a", "b", "c", "d"], "Do {value}", model=model, concurrency=2, budget=1.0, bus=bus)
    await asyncio.wait_for(h.wait_for("budget_reached"), T)  # row a spent $1; row b is in flight
    gate.set()
    await asyncio.wait_for(h.wait_for("row_finished", lambda e: e.position == 1), T)
    assert h.status == u.Status.PAUSED and h.rows.started == 2 and h.progress["done"] == 2
    assert h.results().tolist() == ["ok a", "ok b", None, None] and h.spending.spent == pytest.approx(2.0)
    h.set_budget(None)
    await h.resume()
    assert (await asyncio.wait_for(h.result(), T)).tolist() == ["ok a", "ok b", "ok c", "ok d"]


async def test_a_budget_counts_the_calls_of_a_long_row_still_running(bus):
    """The budget counted rows that ended only: a row of many steps spent unseen while the batch started row after
    row. Each model call that ends under a running row counts at once; the row's whole tree as it ends."""
    stepped, gate = asyncio.Event(), asyncio.Event()

    async def hold() -> str:
        """Wait for the data."""
        stepped.set()  # the long row's first call ended (and was counted): the short rows may answer
        await gate.wait()
        return "the data"

    async def script(messages, tools):
        task = first_user(messages)
        if task.endswith("long"):
            if any(m["role"] == "tool" for m in messages):
                return u.Reply(content="long done", usage=u.Usage(0, 1))
            return u.Reply(tool_calls=[u.call_tool("hold")], usage=u.Usage(0, 8))  # $8 spent, the row runs on
        await stepped.wait()
        return u.Reply(content="short done", usage=u.Usage(0, 1))  # $1 each

    model = u.ScriptedModel(script, name="guard-running-rows")
    u.set_price(model, input=0.0, output=1_000_000.0)  # a dollar a token out
    h = u.map(["long", "short 1", "short 2", "short 3"], "Do {value}", model=model, tools=[hold], concurrency=2,
              budget=10.0, bus=bus)
    # short 1 ends: $1 ended and $8 of the long row running, under $10: short 2 starts; once it ends, $10: held
    held = await asyncio.wait_for(h.wait_for("budget_reached"), T)
    assert held.spent == pytest.approx(10.0) and h.spending.running == pytest.approx(8.0)
    gate.set()
    await asyncio.wait_for(h.wait_for("row_finished", lambda e: e.position == 0), T)
    assert h.status == u.Status.PAUSED and h.spending.reached
    assert h.rows.started == 3 and h.progress["done"] == 3  # short 3 never started
    assert h.spending.running == 0 and h.spending.spent == pytest.approx(11.0)  # the long row's tree: $9
    h.set_budget(None)
    await h.resume()
    assert (await asyncio.wait_for(h.result(), T)).tolist() == ["long done", "short done", "short done", "short done"]
