"""Spending under control (issue 27): prices, a handle's and its tree's cost, a batch's dollars so far and
projected, the estimate, the budget, typed answers, the result cache, and rows made as they start."""

import asyncio
import itertools

import pandas as pd
import pytest
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u
from unity_nb.store import Store

T = 10.0
MINI = (0.40, 1.60)  # gpt-4.1-mini, dollars per million tokens in and out


def last_user(messages):
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def dollars(tokens_in, tokens_out, price=MINI):
    return (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000


# -- prices --------------------------------------------------------------------------------------------


def test_default_prices_are_data_a_person_sets_others_and_unknown_costs_none():
    assert u.price_of("gpt-4.1-mini") == u.price_of("gpt-4.1-mini-2025-04-14") == u.price_of("openai/gpt-4.1-mini")
    assert (u.price_of("gpt-4o").input, u.price_of("gpt-4o").output) == (2.50, 10.00)
    assert u.price_of("o4-mini") is not None and u.price_of("gpt-4o-mini") != u.price_of("gpt-4o")
    assert u.price_of("my-model-27") is None
    assert u.models.cost_of(u.Usage(10, 10), "my-model-27") is None  # unknown, never a made-up 0
    u.set_price("my-model-27", input=0.5, output=1.5)
    assert u.models.cost_of(u.Usage(1_000_000, 2_000_000), "my-model-27") == pytest.approx(3.5)
    for bad in ({"input": -1, "output": 1}, {"input": "1", "output": 1}, {"input": float("nan"), "output": 1}):
        with pytest.raises(u.UserError, match="dollars per million"):
            u.set_price("x", **bad)


async def test_a_handle_reports_its_own_and_its_whole_trees_usage_and_cost():
    def handler(body):
        text = " ".join(str(m.get("content")) for m in body["messages"])
        if "the child's task" in text:
            return Reply(content="child done", usage=(1, 4))
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply(content="parent done", usage=(5, 3))
        return Reply(tool_calls=[{"name": "sub", "arguments": "{}"}], usage=(5, 3))

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")

        async def sub() -> str:
            """Run a sub-operation."""
            return await u.start_loop("the child's task", model=model)

        h = u.start_loop("the parent's task", model=model, tools=[sub], bus=u.EventBus())
        assert await asyncio.wait_for(h.result(), T) == "parent done"
        (child,) = h.children
        assert (h.usage.input_tokens, h.usage.output_tokens) == (10, 6)  # its own: two calls of 5/3
        assert (h.tree.usage.input_tokens, h.tree.usage.output_tokens) == (11, 10)
        assert h.cost == pytest.approx(dollars(10, 6)) and child.cost == pytest.approx(dollars(1, 4))
        assert h.tree.cost == pytest.approx(dollars(11, 10))
        unknown = u.OpenAIModel("no-price-model", base_url=server.base_url, api_key="sk-test")
        other = u.start_loop("the child's task", model=unknown, bus=u.EventBus())
        await asyncio.wait_for(other.result(), T)
        assert other.cost is None and other.tree.cost is None


async def test_a_batch_shows_dollars_so_far_and_projected_for_the_whole_batch():
    release = asyncio.Event()

    async def handler(body):
        if "row 2" in last_user(body["messages"]):
            await release.wait()
        return Reply(content="ok", usage=(1000, 100))

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        bus = u.EventBus()
        h = u.map([f"row {i}" for i in range(4)], "Label {value}", model=model, concurrency=1, bus=bus)
        await asyncio.wait_for(server.wait_for_requests(3), T)  # rows 0 and 1 ended, row 2 held
        p = h.progress
        assert (p["done"], p["running"]) == (2, 1)
        assert p["cost"] == pytest.approx(2 * dollars(1000, 100))
        assert p["projected_cost"] == pytest.approx(4 * dollars(1000, 100))  # from the rows done so far
        release.set()
        await asyncio.wait_for(h.result(), T)
        assert h.cost == pytest.approx(4 * dollars(1000, 100)) == h.progress["projected_cost"]


# -- the estimate -----------------------------------------------------------------------------------


def test_an_estimate_runs_nothing_and_says_rows_tokens_dollars_and_minutes():
    papers = pd.DataFrame({"abstract": ["x" * 400, "y" * 800]})
    model = u.OpenAIModel("gpt-4.1-mini", base_url="http://127.0.0.1:9/v1", api_key="sk-test")  # never called
    est = u.map(papers, "Label {abstract}", model=model, estimate=True, rate="60/min")
    assert isinstance(est, u.Estimate) and est.rows == 2 and est.prompts[0] == "Label " + "x" * 400
    assert est.input_tokens == pytest.approx((406 + 806) / 4, abs=1)  # about 4 characters a token
    assert est.output_assumed and est.output_tokens == 2 * 50
    assert est.dollars == pytest.approx(dollars(est.input_tokens, est.output_tokens))
    assert est.minutes == pytest.approx(2 / 60)
    text = str(est)
    assert "2 rows" in text and "estimated" in text and "assumed" in text and "$" in text and "60 requests/min" in text
    typed = u.estimate(papers, "Label {abstract}", model=model, columns="method,n:int", expected_output_tokens=30)
    assert not typed.output_assumed and typed.output_tokens == 60 and typed.input_tokens > est.input_tokens  # schema
    scripted = u.ScriptedModel(["never"])
    blind = u.estimate(["a"], "Label {value}", model=scripted)
    assert blind.dollars is None and "dollars unknown" in str(blind) and "u.set_price" in str(blind)
    assert blind.minutes is None and scripted.requests == []


# -- the budget -------------------------------------------------------------------------------------


async def test_a_budget_pauses_the_batch_between_rows_and_resume_says_how_to_lift_it():
    async with FakeOpenAIServer(lambda body: Reply(content="ok", usage=(1_000_000, 0))) as server:  # $0.40 a row
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        bus = u.EventBus()
        h = u.map([f"row {i}" for i in range(6)], "Label {value}", model=model, concurrency=2, budget=0.40, bus=bus)
        reached = await asyncio.wait_for(h.wait_for("budget_reached"), T)
        assert reached.budget == 0.40 and reached.spent >= 0.40 and "set_budget" in reached.message
        await asyncio.wait_for(h.wait_for("row_finished", lambda e: e.position == 1), T)
        p = h.progress
        # the row in flight when the budget was reached finished; none started after it
        assert h.status == u.Status.PAUSED and p["budget_reached"]
        assert (p["done"], p["running"], p["stopped"]) == (2, 0, 0)
        assert len(server.requests) == 2
        with pytest.raises(u.UserError, match=r"budget.*h\.set_budget\(DOLLARS\).*--budget"):
            await h.resume()
        h.set_budget(1.00)  # $0.80 spent: two more rows
        await h.resume()
        await asyncio.wait_for(h.wait_for("budget_reached", lambda e: e.budget == 1.00), T)
        h.set_budget(None)
        await h.resume()
        assert (await asyncio.wait_for(h.result(), T)).tolist() == ["ok"] * 6


async def test_a_budget_needs_a_known_price_and_a_batch_that_would_clearly_exceed_it_says_so():
    with pytest.raises(u.UserError, match=r"price of 'scripted'.*u\.set_price"):
        u.map(["a"], "Label {value}", model=u.ScriptedModel(["x"]), budget=1.0, bus=u.EventBus())
    model = u.OpenAIModel("gpt-4.1", base_url="http://127.0.0.1:9/v1", api_key="sk-test")
    with pytest.raises(u.UserError, match="dollars"):
        u.map(["a"], "Label {value}", model=model, budget=-1, bus=u.EventBus())
    many = ["word " * 2000] * 1000  # ~2,500 tokens in a row at $2 a million: about $5
    h = u.map(many, "Label {value}", model=model, budget=1.0, bus=u.EventBus())
    small = u.map(many[:3], "Label {value}", model=model, budget=1.0, bus=u.EventBus())
    await h.stop("only the note was wanted")
    await small.stop("only the note was wanted")
    assert h.spending.note is not None and "exceeds its budget of $1.00" in h.spending.note
    assert "pause after about" in h.spending.note and small.spending.note is None


# -- typed answers ----------------------------------------------------------------------------------


async def test_typed_columns_validate_send_an_invalid_answer_back_once_then_fail_the_row(bus):
    seen = []

    def script(messages, tools):
        text = next(m["content"] for m in messages if m["role"] == "user")
        tries = sum(1 for m in messages if m["role"] == "tool")
        seen.append((text, [m["content"] for m in messages if m["role"] == "tool"]))
        if "good" in text:
            size = "many" if tries == 0 else 12  # the first answer does not validate; told so, it corrects
            return u.call_tool("submit_answer", method="survey", sample_size=size, score=0.5)
        return u.call_tool("submit_answer", method="theory", sample_size="lots", score="high")

    h = u.map(["good", "bad"], "Label {value}", model=u.ScriptedModel(script), max_steps=4,
              columns="method,sample_size:int,score:float", bus=bus)
    frame = await asyncio.wait_for(h.result(), T)
    assert frame.loc[0].tolist() == ["survey", 12, 0.5] and frame["sample_size"].iloc[0] == 12
    told = next(results for text, results in seen if "good" in text and results)
    assert "sample_size" in told[0] and "valid integer" in told[0]
    reason = frame.attrs["reasons"][1]
    assert "did not validate twice" in reason and "sample_size" in reason and "score" in reason
    assert h.progress["failed"] == 1
    for bad in ("method,n:complex", "a b", ""):
        with pytest.raises(u.UserError, match="columns takes"):
            u.map(["x"], "Label {value}", model=u.ScriptedModel(["x"]), columns=bad, bus=bus)


# -- the result cache -------------------------------------------------------------------------------


async def test_the_cache_answers_a_row_asked_before_without_a_call(tmp_path):
    store = Store(str(tmp_path / "state.db"))
    async with FakeOpenAIServer(lambda body: Reply(content="label " + last_user(body["messages"])[-1])) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        items = ["a", "b", "c"]
        first = await asyncio.wait_for(u.map(items, "Label {value}", model=model, cache=store, bus=u.EventBus()), T)
        assert len(server.requests) == 3
        bus = u.EventBus()
        again = u.map([*items, "d"], "Label {value}", model=model, cache=store, bus=bus)
        second = await asyncio.wait_for(again.result(), T)
        assert second.tolist() == [*first.tolist(), "label d"] and len(server.requests) == 4  # only d was asked
        assert again.progress["cached"] == 3 and again.rows.cached == 3 and again.cost is not None
        rows = [e for e in bus.history() if e.kind == "row_finished"]
        assert sorted(e.position for e in rows if e.cached) == [0, 1, 2]
        await asyncio.wait_for(u.map(items, "Label {value}", model=model, cache=False, bus=u.EventBus()), T)
        assert len(server.requests) == 7  # cache=False asks again
        await asyncio.wait_for(u.map(items, "Label {value}", model=model, cache=store, system="Be terse.",
                                     bus=u.EventBus()), T)
        assert len(server.requests) == 10  # another system prompt is another question
    scripted = u.map(items, "Label {value}", model=u.ScriptedModel(lambda m, t: "x"), cache=store, bus=u.EventBus())
    assert scripted.rows.plan.cache is None  # a script's answers are not a function of its name and the prompt
    await asyncio.wait_for(scripted.result(), T)
    store.close()


# -- rows made as they start ------------------------------------------------------------------------


async def test_rows_are_made_as_they_start_from_a_generator_of_ten_million(bus):
    made = itertools.count()

    def rows():
        for i in range(10_000_000):
            next(made)
            yield f"item {i}"

    ended = asyncio.Event()
    seen = []

    def script(messages, tools):
        seen.append(1)
        if len(seen) == 20:
            ended.set()
        return "ok"

    h = u.map(rows(), "Label {value}", model=u.ScriptedModel(script), concurrency=4, bus=bus)
    assert h.progress["total"] is None and h.progress["queued"] is None  # its length is not known
    await asyncio.wait_for(ended.wait(), T)
    await h.stop("enough")
    read = next(made)
    # read only as far as rows started (a wave more of 4 may start while the test wakes; plus one made ahead)
    assert read <= 20 + 2 * 4 + 2
    assert h.progress["done"] >= 19 and len(h.results().dropna()) == h.progress["done"]
    finite = await asyncio.wait_for(u.map((x for x in "abc"), "Echo {value}", model=u.ScriptedModel(
        lambda m, t: last_user(m)[-1]), bus=bus), T)
    assert finite.tolist() == ["a", "b", "c"] and list(finite.index) == [0, 1, 2]


async def test_the_widget_shows_a_batchs_dollars_its_cache_and_its_budget():
    from unity_nb.jupyter._widget import HandleWidget

    async with FakeOpenAIServer(lambda body: Reply(content="ok", usage=(1_000_000, 0))) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        h = u.map(["a", "b", "c"], "Label {value}", model=model, concurrency=1, budget=0.40, bus=u.EventBus())
        w = HandleWidget(h)
        await asyncio.wait_for(h.wait_for("budget_reached"), T)
        await asyncio.wait_for(h.wait_for("row_finished"), T)
        w.flush()
        p = w.nodes[0]["progress"]
        assert (p["cost"], p["projected_cost"]) == (pytest.approx(0.40), pytest.approx(1.20))
        assert p["budget"] == 0.40 and p["budget_reached"] and p["cached"] == 0 and w.nodes[0]["status"] == "paused"
        await h.stop("enough")


async def test_a_row_answered_through_a_tool_is_not_cached(tmp_path):
    store = Store(str(tmp_path / "state.db"))

    def lookup(key: str) -> str:
        """Today's value of key."""
        return f"value of {key}"

    def handler(body):
        if not any(m["role"] == "tool" for m in body["messages"]):
            return Reply(tool_calls=[{"name": "lookup", "arguments": '{"key": "k"}'}])
        return Reply(content="from the tool")

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        for _ in range(2):
            h = u.map(["a"], "Label {value}", model=model, cache=store, tools=[lookup], bus=u.EventBus())
            assert (await asyncio.wait_for(h.result(), T)).tolist() == ["from the tool"]
            assert h.rows.cached == 0
        assert len(server.requests) == 4  # asked again: the tool's result may have changed
    store.close()


async def test_a_batchs_own_events_stop_growing_with_its_rows(bus):
    h = u.map(list(range(2100)), "Echo {value}", model=u.ScriptedModel(lambda m, t: "ok"), concurrency=50, bus=bus)
    await asyncio.wait_for(h.result(), 60)
    row_events = [e for e in h.events if e.kind in ("row_finished", "child_started")]
    assert len(row_events) == 2000  # the first ones; the others are on the bus and in the store
    last = await h.wait_for("row_finished", lambda e: e.position == 2099, timeout=1)  # the last ones stay for this
    assert last.status == "finished" and h.progress["done"] == 2100


async def test_a_later_row_that_cannot_fill_the_template_fails_alone(bus):
    h = u.map([{"a": 1}, {"b": 2}, {"a": 3}], "Echo {a}", model=u.ScriptedModel(lambda m, t: "ok"), bus=bus)
    result = await asyncio.wait_for(h.result(), T)
    assert result.tolist() == ["ok", None, "ok"] and h.progress["failed"] == 1
    assert result.attrs["reasons"][1].startswith("row 1 cannot fill the task: the task names {a}")


async def test_a_row_whose_filled_task_is_blank_fails_alone(bus):
    """A loop takes no blank task: a row whose values fill the template with nothing fails with its reason, no call;
    it neither fails the batch (naming no row) nor stays counted running once the batch ended."""
    asked = []

    def script(messages, tools):
        asked.append(messages[-1]["content"])
        return "ok"

    h = u.map(["a", "", " ", "b"], "{value}", model=u.ScriptedModel(script), bus=bus)
    result = await asyncio.wait_for(h.result(), T)
    assert result.tolist() == ["ok", None, None, "ok"] and sorted(asked) == ["a", "b"]
    assert result.attrs["reasons"][1] == "row 1 cannot fill the task: its values make it blank ('{value}' gives '')"
    assert result.attrs["reasons"][2].startswith("row 2 cannot fill the task: its values make it blank")
    c = h.rows.counts
    assert (c["finished"], c["failed"], c["running"]) == (2, 2, 0)
    first = u.map(["", "b"], "{value}", model=u.ScriptedModel(script), bus=bus)  # the first row too: no refusal
    assert (await asyncio.wait_for(first.result(), T)).tolist() == [None, "ok"]


async def test_a_batch_whose_last_row_reaches_the_budget_ends_with_its_result():
    async with FakeOpenAIServer(lambda body: Reply(content="hi")) as server:
        model = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
        h = u.map(["a", "b"], "Say {value}", model=model, concurrency=1, budget=0.0000001, bus=u.EventBus())
        reached = await asyncio.wait_for(h.wait_for("budget_reached"), T)
        assert "paused" in reached.message and h.rows.counts["queued"] == 1  # row b is left: it waits
        await h.stop("enough")
        one = u.map(["a"], "Say {value}", model=model, concurrency=1, budget=0.0000001, bus=u.EventBus())
        # its only row reached the budget: nothing is left to run, so it ends rather than wait paused forever
        assert (await asyncio.wait_for(one.result(), T)).tolist() == ["hi"]


async def test_an_estimate_and_a_budgets_projection_leave_out_the_rows_that_are_never_asked():
    model = u.OpenAIModel("gpt-4.1-mini", base_url="http://127.0.0.1:9/v1", api_key="sk-test")  # never called
    papers = pd.DataFrame({"abstract": ["word " * 400] * 2 + [None] * 8})  # 8 rows with no value: not asked
    est = u.map(papers, "Label {abstract}", model=model, estimate=True)
    asked = u.map(papers.iloc[:2], "Label {abstract}", model=model, estimate=True)
    assert (est.rows, est.unasked) == (2, 8) and (asked.rows, asked.unasked) == (2, 0)
    assert (est.input_tokens, est.output_tokens, est.dollars) == (asked.input_tokens, asked.output_tokens,
                                                                  asked.dollars)
    assert "8 rows not asked" in str(est) and "not asked" not in str(asked)
    filtered = u.filter(papers, "Is {abstract} about cats?", model=model, estimate=True)
    assert (filtered.rows, filtered.unasked) == (2, 8)
    # a budget's projection before the start (from its first rows): the rows that will be asked, one in ten here
    many = pd.DataFrame({"abstract": ["a paper", *[None] * 9] * 100})
    small = u.map(many, "Label {abstract}", model=model, budget=1.0, expected_output_tokens=2000, bus=u.EventBus())
    large = u.map(many, "Label {abstract}", model=model, budget=0.2, expected_output_tokens=2000, bus=u.EventBus())
    for h in (small, large):
        await h.stop("only the note was wanted")
    assert small.spending.note is None  # 100 rows asked, about $0.0032 each: $0.32 of its $1.00
    assert large.spending.note is not None and "$0.32 for 1,000 rows" in large.spending.note


async def test_a_generators_batch_stopped_before_its_end_does_not_say_more_rows_are_to_come(bus):
    gate = asyncio.Event()

    async def script(messages, tools):
        await gate.wait()
        return "ok"

    h = u.map((f"row {i}" for i in range(50)), "Label {value}", model=u.ScriptedModel(script), concurrency=2, bus=bus)
    assert "more to come" in h.progress["rows_text"]  # while it runs, its length unknown
    await asyncio.wait_for(h.wait_for("child_started", lambda e: True), T)
    await asyncio.wait_for(h.stop("enough"), T)
    text = h.progress["rows_text"]
    assert "more to come" not in text and "2 stopped" in text and "the rest of its input was not read" in text
    assert "more to come" not in repr(h)
