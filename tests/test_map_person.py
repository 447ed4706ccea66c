"""u.map as a person meets it (issue 26, issue 24 items 5 and 9): one prompt per row, templates that say what
they may hold, a resume that keeps a row only where it is asked the same (duplicate labels included), an error
that fails every row ending the batch at once (over real HTTP), rows never started saying why, progress that
means something, and a batch listed as one line in the store's history."""

import asyncio
import json

import pandas as pd
import pytest
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u


def last_user(messages):
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def echo(messages, tools):
    return "label: " + last_user(messages).split("\n\n")[-1]


async def test_a_named_series_row_holds_its_value_once(bus):
    reviews = pd.Series([f"review {i}" for i in range(3)], name="text")
    h = u.map(reviews, "Label the sentiment", model=u.ScriptedModel(echo), bus=bus)
    assert u.estimate(reviews, "Label the sentiment", model=u.ScriptedModel(echo)).prompts == tuple(
        f"Label the sentiment\n\nreview {i}" for i in range(3))
    assert (await asyncio.wait_for(h.result(), 10)).tolist() == [f"label: review {i}" for i in range(3)]
    frame = pd.DataFrame({"a": [1], "b": [2]})
    assert u.map(frame, "Sum", model=u.ScriptedModel(echo), estimate=True).prompts == ("Sum\n\na: 1\nb: 2",)


async def test_a_template_says_what_it_may_hold_and_integer_columns_work(bus):
    m = u.ScriptedModel(echo)
    for template in ["Label {0}", "Label {}", "Label {value!z}", "Label {value:>>>}", "Label {value[0]}"]:
        with pytest.raises(u.UserError, match="a template may hold"):
            u.map(pd.Series(["x"]), template, model=m, bus=bus)
    with pytest.raises(u.UserError, match=r"\{value\} for a Series"):
        u.map(pd.Series(["x"]), "Label {0}", model=m, bus=bus)
    numbered = pd.DataFrame({0: ["left"], 1: ["right"]})
    h = u.map(numbered, "Compare {0!r} with {1:>6}", model=m, bus=bus)
    assert u.estimate(numbered, "Compare {0!r} with {1:>6}", model=m).prompts == ("Compare 'left' with  right",)
    await asyncio.wait_for(h.result(), 10)


def test_done_takes_only_what_finished_rows_gives():
    m = u.ScriptedModel(["x"])

    async def main():
        for done in ([1, 2], "rows", {'"a"': "old"}, {"[0, 1]": "old"}):
            with pytest.raises(u.UserError, match="finished_rows"):
                u.map(["a"], "Do", model=m, done=done)

    asyncio.run(main())


async def _stopped_after(h, rows, bus):
    await h.wait_for("row_finished", lambda e: e.position == rows - 1, timeout=10)
    await h.stop("enough for now")


async def test_duplicate_labels_keep_their_own_answers_when_a_stopped_batch_is_resumed(bus, tmp_path):
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    hang = asyncio.Event()

    async def first(messages, tools):
        text = last_user(messages).split("\n\n")[-1]
        if text == "third":
            await hang.wait()
        return f"ans {text}"

    items = pd.Series(["first", "second", "third", "fourth"], index=["a", "a", "b", "b"])
    h = u.map(items, "Do", model=u.ScriptedModel(first), concurrency=1, name="dup", bus=bus)
    await _stopped_after(h, 2, bus)
    done = u.finished_rows(store, "dup")
    again = u.map(items, "Do", model=u.ScriptedModel(lambda m, t: "again " + last_user(m).split()[-1]),
                  done=done, name="dup", bus=bus)
    result = await asyncio.wait_for(again.result(), 10)
    assert result.tolist() == ["ans first", "ans second", "again third", "again fourth"]
    assert again.rows.kept == 2 and again.progress["kept"] == 2
    store.close()


async def test_a_row_is_kept_only_if_asked_the_same_and_a_new_run_of_the_name_is_a_new_run(bus, tmp_path):
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    old = pd.Series(["a", "b", "c"], name="text")
    await asyncio.wait_for(u.map(old, "Label", model=u.ScriptedModel(lambda m, t: "old"), name="lab", bus=bus), 10)
    new = pd.Series(["a", "B", "c"], name="text")
    gate = asyncio.Event()

    async def held(messages, tools):
        if last_user(messages).endswith("c"):
            await gate.wait()
        return "new"

    second = u.map(new, "Label", model=u.ScriptedModel(held), concurrency=1, name="lab", bus=bus)
    await _stopped_after(second, 2, bus)
    done = u.finished_rows(store, "lab")  # the newest run alone: rows 0 and 1, answered "new"
    assert sorted(done.values()) == ["new", "new"]
    third = u.map(new, "Label", model=u.ScriptedModel(lambda m, t: "third"), done=done, name="lab", bus=bus)
    assert (await asyncio.wait_for(third.result(), 10)).tolist() == ["new", "new", "third"]
    other_task = u.map(new, "Classify", model=u.ScriptedModel(lambda m, t: "fresh"), done=done, bus=bus)
    assert (await asyncio.wait_for(other_task.result(), 10)).tolist() == ["fresh"] * 3
    assert (other_task.rows.kept, other_task.rows.set_aside) == (0, 2)
    store.close()


async def test_rows_never_started_say_why_and_a_stopped_batch_shows_no_time_left(bus):
    gate = asyncio.Event()

    async def script(messages, tools):
        if last_user(messages).endswith(" 3"):
            await gate.wait()
        return "ok"

    h = u.map([f"row {i}" for i in range(10)], "Do", model=u.ScriptedModel(script), concurrency=1, bus=bus)
    await h.wait_for("child_started", lambda e: e.child_name.endswith("[3]"), timeout=10)
    await h.stop("no longer needed")
    with pytest.raises(u.Stopped):
        await h
    partial = h.results()
    reasons = partial.attrs["reasons"]
    assert partial.tolist()[:3] == ["ok"] * 3 and reasons[3] == "no longer needed"
    assert all(reasons[i] == "not started: the batch was stopped" for i in range(4, 10))
    p = h.progress
    assert p["eta_seconds"] is None and p["not_started"] == 6 and p["queued"] == 0 and p["outcome"] == "stopped"


async def test_the_rate_is_over_a_window_that_means_something_and_totals_have_one_source(bus):
    gate = asyncio.Event()

    async def script(messages, tools):
        if int(last_user(messages).split()[-1]) >= 20:
            await gate.wait()
        return "ok"

    h = u.map([f"row {i}" for i in range(40)], "Do", model=u.ScriptedModel(script), concurrency=20, bus=bus)
    await h.wait_for("row_finished", lambda e: e.position == 19, timeout=10)
    for _ in range(20):  # the second wave is in flight
        await asyncio.sleep(0)
    p = h.progress
    assert p["done"] == 20 and p["rows_per_second"] <= 20  # 20 rows in the first moments: at most 20 a second
    assert (h.usage.input_tokens, h.usage.output_tokens) == (p["input_tokens"], p["output_tokens"]) != (0, 0)
    assert h.steps >= 20
    gate.set()
    await asyncio.wait_for(h.result(), 10)
    assert h.steps == 40 and h.usage.input_tokens == h.progress["input_tokens"]


async def test_a_batch_whose_rows_failed_does_not_look_like_a_success(bus):
    def some_fail(messages, tools):
        if last_user(messages).endswith("bad"):
            raise RuntimeError("the model returned an empty reply")
        return "ok"

    h = u.map(["good", "bad"], "Do", model=u.ScriptedModel(some_fail), bus=bus)
    await asyncio.wait_for(h.result(), 10)
    assert h.progress["outcome"] == "finished with failures" and "finished with failures" in repr(h)
    every = u.map(["bad", "bad"], "Do", model=u.ScriptedModel(some_fail), bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(every.result(), 10)
    assert every.status == "failed"


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_an_error_every_row_would_meet_ends_the_batch_at_once_over_http(bus, status):
    seen = []

    async def handler(body):
        seen.append(body["messages"][-1]["content"])
        return Reply(status=status)

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test", max_retries=2)
        h = u.map([f"row {i}" for i in range(60)], "Do", model=model, concurrency=4, bus=bus)
        with pytest.raises(u.ModelError, match=str(status)):
            await asyncio.wait_for(h.result(), 30)
        await model.close()
    assert 1 <= len(seen) <= 4  # about the concurrency, not every row
    assert h.status == "failed" and h.progress["done"] == 0
    reasons = h.results().attrs["reasons"]
    assert reasons[59].startswith("not started: the batch failed (ModelError:") and str(status) in reasons[59]


async def test_a_400_is_the_batch_s_only_before_any_row_succeeded_and_not_about_one_row(bus):
    async def shape(body):
        return Reply(status=400)  # "fake error 400": about the request, as an unknown parameter is

    async with FakeOpenAIServer(shape) as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test")
        h = u.map([f"row {i}" for i in range(20)], "Do", model=model, concurrency=2, bus=bus)
        with pytest.raises(u.ModelError, match="400"):
            await asyncio.wait_for(h.result(), 30)
        await model.close()
    assert h.rows.started <= 2

    def one_too_long(body):
        text = body["messages"][-1]["content"]
        if text.endswith("long"):
            return Reply(status=400, content=None, headers={})
        return Reply(content="ok")

    async with FakeOpenAIServer(one_too_long) as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test")
        h = u.map(["a", "b", "long", "c"], "Do", model=model, concurrency=1, bus=bus)
        result = await asyncio.wait_for(h.result(), 30)  # a row's 400 after a success: that row fails alone
        await model.close()
    assert result.tolist() == ["ok", "ok", None, "ok"] and h.progress["outcome"] == "finished with failures"


async def test_history_lists_a_batch_as_one_line_counting_its_rows(bus, tmp_path):
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)

    def script(messages, tools):
        if last_user(messages).endswith("bad"):
            raise RuntimeError("no")
        return "ok"

    h = u.map(["a", "b", "bad"], "Do", model=u.ScriptedModel(script), name="lab", bus=bus)
    await asyncio.wait_for(h.result(), 10)
    await asyncio.wait_for(u.start_loop("hi", model=u.ScriptedModel(["hello"]), name="solo", bus=bus), 10)
    history = store.history()
    assert history["name"].tolist() == ["lab", "solo"]
    assert history.set_index("name").loc["lab", "rows"] == "2 finished, 1 failed"
    assert len(store.loops()) == 5  # the rows' loops are still there to open
    store.close()


def test_finished_rows_keys_name_position_label_and_question(tmp_path):
    async def main():
        bus = u.EventBus()
        store = u.Store(str(tmp_path / "s.db"))
        store.attach(bus)
        await u.map(pd.Series(["x"], index=["k"]), "Do", model=u.ScriptedModel(["y"]), name="b", bus=bus)
        done = u.finished_rows(store, "b")
        store.close()
        return done

    done = asyncio.run(main())
    [(key, answer)] = done.items()
    position, label, asked = json.loads(key)
    assert (position, label, answer) == (0, '"k"', "y") and len(asked) == 24


async def test_a_row_answered_under_one_system_prompt_is_not_kept_under_another(bus, tmp_path):
    """``done=`` keeps a row asked the same: its task, model, fields and the system prompt its loop was given."""
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    rows = pd.Series(["a", "b"], name="text")
    first = u.map(rows, "Label", model=u.ScriptedModel(lambda m, t: "terse"), system="Answer in one word.",
                  name="lab", bus=bus)
    await asyncio.wait_for(first.result(), 10)
    done = u.finished_rows(store, "lab")
    assert sorted(done.values()) == ["terse", "terse"]
    same = u.map(rows, "Label", model=u.ScriptedModel(lambda m, t: "again"), system="Answer in one word.",
                 done=done, bus=bus)
    assert (await asyncio.wait_for(same.result(), 10)).tolist() == ["terse", "terse"]
    other = u.map(rows, "Label", model=u.ScriptedModel(lambda m, t: "long"), system="Answer at length.",
                  done=done, bus=bus)
    assert (await asyncio.wait_for(other.result(), 10)).tolist() == ["long", "long"]
    assert (other.rows.kept, other.rows.set_aside) == (0, 2)
    none = u.map(rows, "Label", model=u.ScriptedModel(lambda m, t: "plain"), done=done, bus=bus)
    assert (await asyncio.wait_for(none.result(), 10)).tolist() == ["plain", "plain"]
    store.close()


async def test_a_continued_generator_batch_stopped_early_keeps_the_rows_it_never_read_for_the_next_run(bus, tmp_path):
    """A list's kept rows are all written again at the start of the run that continues it; a generator's are as they
    come: a run stopped before reading them left them out, and the run after it asked them again."""
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)

    def rows():
        yield from (f"row {i}" for i in range(6))

    def first(messages, tools):  # row 1 answers nothing (twice): it fails, the others finish
        task = next(m["content"] for m in messages if m["role"] == "user")
        return "" if task.endswith("row 1") else "first"

    h = u.map(rows(), "Do", model=u.ScriptedModel(first), concurrency=1, name="gen", bus=bus)
    assert (await asyncio.wait_for(h.result(), 10)).tolist() == ["first", None, *["first"] * 4]
    hang = asyncio.Event()

    async def held(messages, tools):
        await hang.wait()
        return "second"

    second = u.map(rows(), "Do", model=u.ScriptedModel(held), concurrency=1, done=u.finished_rows(store, "gen"),
                   name="gen", bus=bus)
    await second.wait_for("child_started", lambda e: e.child_name.endswith("[1]"), timeout=10)
    await second.stop("enough for now")  # rows 2 to 5 never read
    with pytest.raises(u.Stopped):
        await second
    done = u.finished_rows(store, "gen")
    assert sorted(json.loads(k)[0] for k in done) == [0, 2, 3, 4, 5]
    asked = []

    def third_script(messages, tools):
        asked.append(last_user(messages))
        return "third"

    third = u.map(rows(), "Do", model=u.ScriptedModel(third_script), done=done, name="gen", bus=bus)
    assert (await asyncio.wait_for(third.result(), 10)).tolist() == ["first", "third", *["first"] * 4]
    assert [a.split()[-1] for a in asked] == ["1"] and third.rows.kept == 5
    store.close()
