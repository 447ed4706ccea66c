"""u.map / %unity map: one steerable operation over every row, its verbs at depth 2, its shared rate limit,
its durability (a resume skips committed rows, also after a SIGKILL in a real kernel)."""

import asyncio
import itertools
import json
import math
import textwrap
import time

import pandas as pd
import pydantic
import pytest
from _kernel import Kernel
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u


def last_user(messages):
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def label_script(messages, tools):
    return "label: " + last_user(messages).split()[-1]


async def test_a_series_gives_a_series_aligned_to_its_index(bus):
    papers = pd.Series(["a survey of cats", "an experiment on dogs", "a theory of fish"],
                       index=["p1", "p2", "p3"], name="abstract")
    h = u.map(papers, "Label the method of: {abstract}", model=u.ScriptedModel(label_script), bus=bus)
    assert isinstance(h, u.MapHandle) and h.status == "running"
    result = await asyncio.wait_for(h.result(), 10)
    assert list(result.index) == ["p1", "p2", "p3"] and result.name == "abstract"
    assert result.tolist() == ["label: cats", "label: dogs", "label: fish"]
    assert h.progress["done"] == 3 and h.progress["failed"] == 0 and result.attrs["reasons"] == {}
    assert h.children == []  # finished rows keep their answer, not their loops


async def test_a_dataframe_fills_the_template_per_row_and_a_list_works_too(bus):
    df = pd.DataFrame({"title": ["T1", "T2"], "year": [1999, 2024]}, index=[10, 20])
    seen = []

    def script(messages, tools):
        seen.append(last_user(messages))
        return "ok"

    result = await u.map(df, "Is {title} ({year}) recent?", model=u.ScriptedModel(script), bus=bus)
    assert sorted(seen) == ["Is T1 (1999) recent?", "Is T2 (2024) recent?"] and list(result.index) == [10, 20]
    listed = await u.map(["x", "y"], "Echo", model=u.ScriptedModel(lambda m, t: last_user(m)[-1]), bus=bus)
    assert listed.tolist() == ["x", "y"]
    with pytest.raises(u.UserError, match=r"\{abstract\}.*columns: \['title', 'year'\]"):
        u.map(df, "Label {abstract}", model=u.ScriptedModel(["x"]), bus=bus)


async def test_a_dataframe_with_a_column_called_name_gives_its_answers(bus):
    """df.name is the column 'name' (a Series): the result was named after it, and every such map failed at its end
    with 'Series.name must be a hashable type', after every row had run and been paid for."""
    people = pd.DataFrame({"name": ["ann", "bob"], "age": [31, 45]}, index=["a", "b"])
    h = u.map(people, "Greet {name}", model=u.ScriptedModel(label_script), bus=bus)
    result = await asyncio.wait_for(h.result(), 10)
    assert result.tolist() == ["label: ann", "label: bob"] and list(result.index) == ["a", "b"]
    assert result.name is None and h.results().name is None  # a DataFrame names no answer; a Series does
    named = await u.map(people["name"], "Greet {value}", model=u.ScriptedModel(label_script), bus=bus)
    assert named.name == "name"


class Method(pydantic.BaseModel):
    method: str
    confidence: float


async def test_structured_output_gives_typed_columns_and_a_bad_answer_is_a_missing_row(bus):
    def script(messages, tools):
        text = last_user(messages)
        if any("broken" in str(m["content"]) for m in messages):  # also when sent back with what was wrong
            return "I cannot say"
        return u.call_tool("submit_answer", method="survey" if "survey" in text else "theory", confidence=0.9)

    items = pd.Series(["a survey", "a theory", "broken"], name="abstract")
    h = u.map(items, "Label {abstract}", model=u.ScriptedModel(script), output=Method, max_steps=2, bus=bus)
    frame = await asyncio.wait_for(h.result(), 10)
    assert list(frame.columns) == ["method", "confidence"]
    assert frame.loc[0].tolist() == ["survey", 0.9] and frame.loc[1, "method"] == "theory"
    assert frame.loc[2].isna().all() and "not a Method" in frame.attrs["reasons"][2]
    assert h.failures[["key", "status"]].values.tolist() == [[2, "failed"]]
    by_columns = await u.map(["q"], "Answer", model=u.ScriptedModel(
        lambda m, t: u.call_tool("submit_answer", a="1", b="2")), columns=["a", "b"], bus=bus)
    assert by_columns.loc[0].tolist() == ["1", "2"]


async def test_failed_rows_are_missing_with_their_reason_and_the_batch_goes_on(bus):
    def script(messages, tools):
        if "bad" in last_user(messages):
            raise RuntimeError("provider exploded")
        return "fine"

    result = await u.map(["good", "bad", "good"], "Check", model=u.ScriptedModel(script), bus=bus)
    assert result.tolist() == ["fine", None, "fine"]
    assert "provider exploded" in result.attrs["reasons"][1]


async def test_concurrency_bounds_the_rows_running_at_once(bus):
    running = peak = 0
    release = asyncio.Event()

    async def script(messages, tools):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        if peak >= 3:
            release.set()
        await release.wait()
        running -= 1
        return "done"

    h = u.map(list(range(12)), "Do", model=u.ScriptedModel(script), concurrency=3, bus=bus)
    result = await asyncio.wait_for(h.result(), 10)
    assert peak == 3 and result.notna().all()


class Family:
    """A batch whose rows each start a child loop (depth 2), gated so a test can steer mid-flight."""

    def __init__(self, bus, rows=4, concurrency=2):
        self.gate = asyncio.Event()
        self.row_requests: list[str] = []
        child_model = u.ScriptedModel(self.child_script)

        def research(topic: str) -> object:
            """Research a topic in a sub-operation."""
            return u.start_loop(f"research {topic}", model=child_model, name="child")

        def row_script(messages, tools):
            self.row_requests.append("\n".join(m["content"] or "" for m in messages if m["role"] == "user"))
            results = [m["content"] for m in messages if m["role"] == "tool"]
            if results:
                return f"row answer: {results[0]}"
            return u.call_tool("research", topic=last_user(messages).split()[-1])

        self.handle = u.map([f"topic{i}" for i in range(rows)], "Study", model=u.ScriptedModel(row_script),
                            tools=[research], concurrency=concurrency, bus=bus)

    async def child_script(self, messages, tools):
        await self.gate.wait()
        return "found " + last_user(messages)

    async def children_running(self, n=2):
        h = self.handle
        for _ in range(200):
            kids = [c for row in h.run.live_children() for c in row.run.live_children()]
            if len(kids) >= n:
                return kids
            await h.wait_for("child_started", timeout=10)
            await asyncio.sleep(0)
        raise AssertionError("the rows' children did not start")


async def _until(predicate, what, timeout=10):
    async def spin():
        while not predicate():  # noqa: ASYNC110 - state the loops change without one event to wait on
            await asyncio.sleep(0)

    try:
        await asyncio.wait_for(spin(), timeout)
    except TimeoutError:
        raise AssertionError(what) from None


async def test_pause_and_resume_reach_every_row_and_its_child(bus):
    f = Family(bus)
    h = f.handle
    await _until(lambda: sum(1 for r in h.run.live_children() for _ in r.run.live_children()) == 2, "children start")
    await h.pause()
    rows = h.run.live_children()
    grandchildren = [c for r in rows for c in r.run.live_children()]
    assert h.status == "paused" and len(rows) == 2
    assert all(r.status == "paused" for r in rows) and all(c.status == "paused" for c in grandchildren)
    f.gate.set()  # in-flight calls finish; their replies wait for resume, and no new row starts
    for c in grandchildren:
        await c.wait_for("model_response", timeout=10)
    assert h.rows.started == 2 and not any(c.done() for c in grandchildren)
    await h.resume()
    result = await asyncio.wait_for(h.result(), 10)
    assert result.tolist() == [f"row answer: found research topic{i}" for i in range(4)]


async def test_an_interjection_reaches_running_rows_and_rows_not_started(bus):
    f = Family(bus, rows=4, concurrency=2)
    h = f.handle
    await _until(lambda: sum(1 for r in h.run.live_children() for _ in r.run.live_children()) == 2, "children start")
    await h.interject("also flag anything about medicine")
    f.gate.set()
    await asyncio.wait_for(h.result(), 10)
    later_rows = [r for r in f.row_requests if "topic2" in r or "topic3" in r]
    assert later_rows and all("also flag anything about medicine" in r for r in later_rows)
    first_rows_after = [r for r in f.row_requests if ("topic0" in r or "topic1" in r) and "found" not in r]
    assert any("medicine" in r for r in f.row_requests if "topic0" in r or "topic1" in r), first_rows_after


async def test_stop_ends_the_batch_its_rows_and_their_children_with_partial_results(bus):
    f = Family(bus)
    h = f.handle
    await _until(lambda: sum(1 for r in h.run.live_children() for _ in r.run.live_children()) == 2, "children start")
    rows = h.run.live_children()
    grandchildren = [c for r in rows for c in r.run.live_children()]
    await h.stop("enough")
    assert h.status == "stopped" and all(r.done() for r in rows) and all(c.done() for c in grandchildren)
    with pytest.raises(u.Stopped):
        await h
    partial = h.results()
    assert partial.isna().all() and set(partial.attrs["reasons"]) == {0, 1, 2, 3}
    assert h.progress["stopped"] == 2 and h.progress["not_started"] == 2


async def test_ask_answers_about_the_batch_so_far(bus):
    f = Family(bus)
    h = f.handle
    await _until(lambda: sum(1 for r in h.run.live_children() for _ in r.run.live_children()) == 2, "children start")
    seen = []

    def inspector(messages, tools):
        seen.append(messages[0]["content"])
        return "two rows are running"

    answer = await (await h.ask("how far along?", model=u.ScriptedModel(inspector))).result()
    assert answer == "two rows are running"
    assert "of 4 rows" in seen[0] and "2 running" in seen[0] and "2 queued" in seen[0]
    f.gate.set()
    await asyncio.wait_for(h.result(), 10)


async def test_one_rate_limit_is_shared_by_all_rows_and_a_429_pauses_them_all(bus):
    times: list[float] = []

    def script(messages, tools):
        times.append(time.monotonic())
        return "ok"

    model = u.ScriptedModel(script)
    h = u.map(list(range(6)), "Do", model=model, concurrency=6, rate="20/s", bus=bus)
    await asyncio.wait_for(h.result(), 10)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 6 and min(gaps) >= 0.05 - 1e-3  # spaced at 1/20 s although six rows ran at once
    limit = u.models.rate_limit_of(model)
    limit.cooldown(0.3)  # what a 429 on any row does
    resumed_after = time.monotonic()
    await asyncio.wait_for(u.map(["again"], "Do", model=model, bus=bus).result(), 10)
    assert times[-1] - resumed_after >= 0.3 - 1e-3 and limit.cooldowns == 1
    with pytest.raises(u.UserError, match="rate"):
        u.map(["x"], "Do", model=u.ScriptedModel(["x"]), rate="fast")


async def test_a_429_storm_on_one_row_slows_every_row_as_the_server_sees_it(bus):
    """Over real HTTP: one row gets 429s with Retry-After; every row waits them out, and the server sees
    requests no closer together than the shared limit allows."""
    seen: list[tuple[float, str, int]] = []
    storm = {"left": 2}

    def handler(body):
        text = body["messages"][-1]["content"]
        if text.endswith("row3") and storm["left"]:
            storm["left"] -= 1
            seen.append((time.monotonic(), text, 429))
            return Reply(status=429, headers={"retry-after": "0.3"})
        seen.append((time.monotonic(), text, 200))
        return Reply(content="ok " + text.split()[-1], headers={"x-ratelimit-limit-requests": "100000"})

    async with FakeOpenAIServer(handler) as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test", max_retries=4)
        h = u.map([f"row{i}" for i in range(8)], "Do", model=model, concurrency=8, rate="20/s", bus=bus)
        result = await asyncio.wait_for(h.result(), 30)
        await model.close()
    assert result.tolist() == [f"ok row{i}" for i in range(8)]
    times = [t for t, _text, _status in seen]
    assert len(seen) == 10
    # the shared limit (20/s) as the server sees it: any run of requests spans at least its count's share of
    # seconds, less one allowance for when each arrives (a loaded machine delays one send, never the rate)
    for i, j in itertools.combinations(range(len(times)), 2):
        assert times[j] - times[i] >= (j - i) * 0.05 - 0.02, (i, j, times)
    for i, (t, _text, status) in enumerate(seen[:-1]):
        if status == 429:  # nobody (this row or another) sent anything while its Retry-After ran
            assert seen[i + 1][0] - t >= 0.3 - 0.01, seen
    limit = u.models.rate_limit_of(model)
    assert limit.cooldowns >= 2 and limit.requests_per_minute == 1200  # the person's limit, not the header's


async def test_a_limit_is_learned_from_the_provider_s_headers(bus):
    async with FakeOpenAIServer(lambda body: Reply(content="ok", headers={
        "x-ratelimit-limit-requests": "600", "x-ratelimit-limit-tokens": "90000"})) as server:
        model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test")
        await asyncio.wait_for(u.start_loop("hi", model=model, bus=bus).result(), 10)
        await model.close()
    limit = u.models.rate_limit_of(model)
    assert (limit.requests_per_minute, limit.tokens_per_minute, limit.learned) == (600, 90000, True)


async def test_done_rows_are_skipped_and_a_stopped_batch_resumes_from_the_store(bus, tmp_path):
    store = u.Store(str(tmp_path / "s.db"))
    store.attach(bus)
    ran = []

    async def script(messages, tools):
        row = last_user(messages).split()[-1]
        ran.append(row)
        if row == "c":
            await asyncio.Event().wait()  # never answers: the batch is stopped while it runs
        return f"answer {row}"

    items = pd.Series(list("abcd"), index=list("wxyz"))
    first = u.map(items, "Do", model=u.ScriptedModel(script), concurrency=1, name="batch", bus=bus)
    await _until(lambda: "c" in ran, "row c starts")
    await first.stop("kernel going down")
    done = u.finished_rows(store, "batch")
    assert {tuple(json.loads(k)[:2]): v for k, v in done.items()} == {(0, '"w"'): "answer a", (1, '"x"'): "answer b"}
    ran.clear()
    second = u.map(items, "Do", model=u.ScriptedModel(lambda m, t: "again " + last_user(m).split()[-1]),
                   done=done, name="batch", bus=bus)
    result = await asyncio.wait_for(second.result(), 10)
    assert result.tolist() == ["answer a", "answer b", "again c", "again d"] and ran == []
    assert [e.row for e in second.events if e.kind == "row_finished" and not e.kept] == ['"y"', '"z"']
    assert second.rows.kept == 2
    assert [e.row for e in second.events if e.kind == "row_finished" and e.kept] == ['"w"', '"x"']
    store.close()


def test_bad_map_input_is_refused_clearly():
    async def main():
        m = u.ScriptedModel(["x"])
        for items, task, options, match in [
            (42, "Do", {}, "Series, a DataFrame or a list"),
            ([], "Do", {}, "at least one row"),
            (["a"], "", {}, "needs a task"),
            (["a"], "Do", {"concurrency": 0}, "concurrency"),
            (["a"], "Do", {"max_steps": math.nan}, "max_steps"),
            (["a"], "Do", {"output": dict}, "pydantic model"),
            (["a"], "Do", {"columns": ["not an id"]}, "columns"),
            (["a"], "Do {", {}, "template"),
        ]:
            with pytest.raises(u.UserError, match=match):
                u.map(items, task, model=m, **options)

    asyncio.run(main())


def test_each_row_s_options_are_the_batch_s_under_the_row_s_name():
    import dataclasses

    m = u.ScriptedModel(["x"])
    config = u.LoopOptions.make(model=m, max_steps=3, options={"temperature": 0}, system="s", tools=[len])
    row = config.named("batch[1]")
    assert type(row) is type(config) and row is not config and row.name == "batch[1]" and config.name is None
    for f in dataclasses.fields(config):
        if f.name != "name":
            assert getattr(row, f.name) is getattr(config, f.name), f.name
    assert row == dataclasses.replace(config, name="batch[1]")
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.name = "other"  # type: ignore[misc]
    with pytest.raises(u.UserError, match="non-empty"):
        config.named(" ")


MAP_FIRST = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio, pandas as pd, unity_nb as u

    papers = pd.DataFrame({"abstract": [f"paper {i}" for i in range(6)]}, index=[f"p{i}" for i in range(6)])
    hang = asyncio.Event()

    async def first(messages, tools):
        text = messages[-1]["content"]
        if text.endswith("paper 3"):
            await hang.wait()  # the kernel dies while this row runs
        return "label " + text.split()[-1]

    m1 = u.ScriptedModel(first)
    %unity model --var m1
    labels = %unity map papers --concurrency 1 --name labels Label {abstract}
    await labels.wait_for("row_finished", lambda e: e.row == '"p2"', timeout=20)
    """
)

MAP_SECOND = textwrap.dedent(
    """
    %load_ext unity_nb
    import pandas as pd, unity_nb as u

    papers = pd.DataFrame({"abstract": [f"paper {i}" for i in range(6)]}, index=[f"p{i}" for i in range(6)])
    seen = []

    def second(messages, tools):
        seen.append(messages[-1]["content"])
        return "again " + messages[-1]["content"].split()[-1]

    m2 = u.ScriptedModel(second)
    %unity model --var m2
    """
)


def test_a_batch_resumes_after_its_kernel_is_killed_without_redoing_a_committed_row(tmp_path):
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run(MAP_FIRST)
    finally:
        first.kill()
    second = Kernel(env={"UNITY_NB_STORE": store})
    try:
        second.run(MAP_SECOND)
        second.run("labels = %unity resume labels")
        result = second.value("(await labels).tolist()")
        assert result == ["label 0", "label 1", "label 2", "again 3", "again 4", "again 5"]
        assert second.value("sorted(seen)") == ["Label paper 3", "Label paper 4", "Label paper 5"]
        assert second.value("list((await labels).index)") == [f"p{i}" for i in range(6)]
        notice = second.value("get_ipython().magics_manager.registry['UnityMagics'].widgets['labels'].notice")
        assert notice.startswith("resumed from the store: the kernel running 'labels' died with 3 row(s) finished")
        assert "kept 3 row(s) finished before; 3 to run" in notice
    finally:
        second.close()


async def test_a_batch_of_which_every_row_failed_names_a_row_that_was_asked_not_one_never_asked(bus):
    """A row with no value fails at once, unasked: when every other row fails too, the error says why an asked row
    failed (what the person must fix), and how many were not asked, not the first row to end (the unasked one)."""
    items = pd.DataFrame({"text": [None, "a cat", "a dog"]})
    h = u.map(items, "Label {text}", model=u.ScriptedModel(lambda m, t: "   "), bus=bus)
    with pytest.raises(u.UnityError) as said:
        await asyncio.wait_for(h.result(), 10)
    text = str(said.value)
    assert text.startswith("every row of the batch failed (3: 1 not asked")
    assert "the first that was asked: " in text and "no value" not in text.split("the first that was asked: ")[1]
