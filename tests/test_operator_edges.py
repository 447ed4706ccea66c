"""Operators on edge inputs: every row's reason is its own where labels repeat, a row a reason names is named by
its label, and a bound an aggregate hits is said."""

import asyncio

import numpy as np
import pandas as pd
import pytest
from test_operators import scripted, task_of

import unity_nb as u


async def test_a_filter_says_each_rows_own_reason_where_labels_repeat(bus):
    rows = pd.DataFrame({"t": ["yes a", "no b", "unclear c", "garbled d"]}, index=["x", "x", "y", "y"])

    def oracle(text):
        if "unclear" in text:
            return {"keep": None, "reason": "cannot tell"}
        if "garbled" in text:
            return "not a verdict"
        return {"keep": "yes " in text, "reason": f"said {text.split()[1]}"}

    h = u.filter(rows, "Is {t} good?", model=scripted(oracle), bus=bus)
    kept = await asyncio.wait_for(h.result(), 10)
    assert kept["t"].tolist() == ["yes a"]
    v = h.verdicts
    assert v["reason"].iloc[1] == "said no"  # a decided row keeps its own reason
    assert v["reason"].iloc[2] == "cannot tell"  # not the failure of the other row labelled y
    assert "not a Verdict" in v["reason"].iloc[3]
    why = kept.attrs["reasons"]["y"]  # both rows labelled y, each with its own reason
    assert why.startswith("undecided: cannot tell; failed: ") and "not a Verdict" in why
    assert set(kept.attrs["reasons"]) == {"y"}


async def test_a_topk_reason_names_the_other_row_by_its_label(bus):
    def oracle(text):
        if "\nA:\n" in text:
            a, b = text.split("\nA:\n")[1].split("\n\nB:\n")
            if "item 11" in (a, b):
                return "no idea"
            return {"better": "A" if int(a.split()[1]) > int(b.split()[1]) else "B", "reason": "bigger"}
        return {"score": 5, "reason": "all alike"}

    items = pd.Series([f"item {i}" for i in range(12)], index=[f"r{i}" for i in range(12)])
    h = u.topk(items, 3, "Which item is biggest?", model=scripted(oracle), bus=bus)
    best = await asyncio.wait_for(h.result(), 30)
    assert not h.exact
    why = best.attrs["reasons"]["r11"]
    other = why.split("its comparison with row ")[1].split(" got")[0]
    assert other.startswith("'r") and other.strip("'") in items.index


async def test_an_agg_says_which_groups_reached_its_depth_bound(bus):
    rows = pd.DataFrame({"field": ["big"] * 60 + ["small"],
                         "abstract": [f"finding {i}: " + "x" * 80 for i in range(61)]})
    sizes = []

    def oracle(text):
        sizes.append(len(text))
        return "note " + "y" * 150

    h = u.agg(rows, "Summarise", by="field", model=scripted(oracle), chunk_chars=500, max_depth=2, bus=bus)
    out = await asyncio.wait_for(h.result(), 30)
    assert max(sizes) > 2 * 500  # the bound put more than a chunk into one request...
    assert set(out.attrs["bounded"]) == {"big"} and out.attrs["bounded"]["big"] > 1  # ...and says so
    assert "max_depth=2" in h.summary()
    one = u.agg(rows, "Summarise", by="field", model=scripted(oracle), chunk_chars=500, max_depth=1, bus=bus)
    assert set((await asyncio.wait_for(one.result(), 30)).attrs["bounded"]) == {"big"}


async def test_a_topk_says_how_many_rows_its_scores_left_out_where_exact_rests_on_them(bus):
    scores = {0: 4, 1: 5, 2: 5, 3: 2}  # item 3 is the best by every comparison, but scored far below the rest

    def oracle(text):
        if "\nA:\n" in text:
            a, b = text.split("\nA:\n")[1].split("\n\nB:\n")
            return {"better": "A" if int(a.split()[1]) > int(b.split()[1]) else "B", "reason": "bigger"}
        return {"score": scores[int(text.split("item ")[-1].split()[0])], "reason": "scored"}

    items = pd.Series([f"item {i}" for i in range(4)])
    h = u.topk(items, 1, "Which item is biggest?", model=scripted(oracle), bus=bus)
    best = await asyncio.wait_for(h.result(), 10)
    assert list(best) == ["item 2"]  # the best among the rows the scores let in (4 and 5), not item 3
    assert h.exact and h.uncompared == 1 and best.attrs["uncompared"] == 1
    said = h.summary()
    assert "exact: its 3 comparisons were consistent, among the rows scored 4 or more" in said
    assert "1 row(s) scored lower were not compared" in said
    wider = u.topk(items, 1, "Which item is biggest?", model=scripted(oracle), bus=bus, margin=3)
    assert list(await asyncio.wait_for(wider.result(), 10)) == ["item 3"]
    assert wider.uncompared == 0 and "scored lower" not in wider.summary()


async def test_a_map_says_the_reason_of_every_row_without_an_answer_where_labels_repeat(bus):
    def script(messages, tools):
        text = task_of(messages)
        if "bad" in text:
            raise ValueError(f"cannot read {text.split()[-1]}")
        return "fine"

    rows = pd.Series(["good a", "bad b", "bad c", "good d"], index=["x", "y", "y", "z"])
    h = u.map(rows, "Read {value}", model=u.ScriptedModel(script), bus=bus)
    out = await asyncio.wait_for(h.result(), 10)
    assert out.tolist() == ["fine", None, None, "fine"]
    why = out.attrs["reasons"]["y"]  # both rows labelled y: neither reason lost
    assert "cannot read b" in why and "cannot read c" in why and why.index("read b") < why.index("read c")
    assert set(out.attrs["reasons"]) == {"y"}


async def test_a_join_keeps_the_reason_of_each_failed_pair_where_labels_repeat(bus):
    def script(messages, tools):
        text = task_of(messages)
        if "pie" in text:
            raise ValueError(f"cannot compare {text.split('broken ')[1].split()[0]}")
        return u.call_tool("submit_answer", match=False, reason="different")

    left = pd.DataFrame({"t": ["apple broken one", "apple broken two"]}, index=["L", "L"])
    right = pd.DataFrame({"t": ["apple pie", "apple tart"]}, index=["R", "S"])
    h = u.join(left, right, "On {left.t} and {right.t}: the same?", model=u.ScriptedModel(script), bus=bus,
               blocking=None)
    pairs = await asyncio.wait_for(h.result(), 10)
    why = pairs.attrs["reasons"][("L", "R")]  # two pairs labelled (L, R): both reasons said
    assert set(pairs.attrs["reasons"]) == {("L", "R")} and pairs.empty
    assert "cannot compare one" in why and "cannot compare two" in why


async def test_an_answer_missing_a_field_or_not_json_is_sent_back_once_then_its_row_fails_saying_why(bus):
    calls = {"missing": 0, "garbled": 0}

    def script(messages, tools):
        text = task_of(messages)
        if "garbled" in text:
            calls["garbled"] += 1
            return u.ToolCall("submit_answer", arguments='{"method": "survey", ')  # not JSON
        calls["missing"] += 1
        return u.call_tool("submit_answer", method="survey")  # no size

    rows = pd.Series(["missing a", "garbled b"], index=["m", "g"])
    h = u.extract(rows, "From {value}", columns="method,size:int", model=u.ScriptedModel(script), bus=bus)
    with pytest.raises(u.UnityError, match="every row of the batch failed"):
        await asyncio.wait_for(h.result(), 10)
    assert calls == {"missing": 2, "garbled": 2}  # sent back once each: not again and again up to max_steps (30)
    why = h.results().attrs["reasons"]
    assert "did not validate twice" in why["m"] and "size" in why["m"] and "Field required" in why["m"]
    assert "did not validate twice" in why["g"] and "not JSON" in why["g"]
    kept = u.filter(pd.Series(["one"]), "Is {value} good?", bus=bus,
                    model=u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", keep=True)))  # no reason
    with pytest.raises(u.UnityError):
        await asyncio.wait_for(kept.result(), 10)
    assert kept.steps == 2 and "reason" in kept.results().attrs["reasons"][0]


async def test_an_operator_of_several_maps_refuses_an_option_its_maps_would_refuse_before_it_starts(bus):
    model = u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", score=5, reason="r"))
    rows = pd.DataFrame({"t": ["apple pie", "apple tart", "plum jam"], "g": ["a", "a", "b"]})
    starts = {
        "topk": lambda **o: u.topk(rows, 2, "Best {t}?", model=model, bus=bus, **o),
        "join": lambda **o: u.join(rows, rows, "On {left.t} and {right.t}: same?", model=model, bus=bus, **o),
        "agg": lambda **o: u.agg(rows, "Summarise", by="g", model=model, bus=bus, **o),
    }
    bad = [({"concurrency": 0}, "concurrency takes a whole number"), ({"rate": "lots"}, "a rate is"),
           ({"cache": "yes"}, "cache takes"), ({"max_step": 3}, "unknown option(s) max_step"),
           ({"tool_timeout": -1}, "tool_timeout takes"), ({"via": "carrier pigeon"}, "via takes")]
    for kind, start in starts.items():
        for options, said in bad:
            with pytest.raises(u.UserError) as info:  # at the call: not from await, once a phase starts
                start(**options)
            assert said in str(info.value), (kind, options, str(info.value))
    assert model.requests == []


async def test_a_topk_whose_rows_got_no_score_says_so_beside_exact_and_how_many_it_gives(bus):
    def oracle(text):
        if "\nA:\n" in text:
            a, b = text.split("\nA:\n")[1].split("\n\nB:\n")
            return {"better": "A" if int(a.split()[1]) > int(b.split()[1]) else "B", "reason": "bigger"}
        n = int(text.split("item ")[-1].split()[0])
        return "cannot rate" if n == 3 else {"score": 5, "reason": "alike"}

    items = pd.Series([f"item {i}" for i in range(4)], index=[f"r{i}" for i in range(4)])
    h = u.topk(items, 1, "Which item is biggest?", model=scripted(oracle), bus=bus)
    best = await asyncio.wait_for(h.result(), 10)
    assert list(best.index) == ["r2"] and "r3" in best.attrs["reasons"]  # the true best, r3, got no score
    assert h.unscored == 1 and best.attrs["unscored"] == 1  # exact among the rows scored: said beside it
    said = h.summary()
    assert "exact: its 3 comparisons were consistent, among the rows scored 4 or more" in said
    assert said.endswith("; 1 row(s) got no score (.attrs['reasons'] says why) and were never compared")
    every = u.topk(items, 4, "Which item is biggest?", model=scripted(oracle), bus=bus)
    four = await asyncio.wait_for(every.result(), 10)
    assert list(four.index) == ["r2", "r1", "r0"] and every.unscored == 1
    assert every.summary().startswith("top 4 of 4 rows, only 3 given: ") and "got no score" in every.summary()


async def test_a_later_phase_whose_every_row_failed_leaves_the_rest_of_the_operation_s_answer(bus):
    rows = pd.DataFrame({"g": ["small"] + ["big"] * 10, "t": ["tiny"] + [f"row {i} " + "x" * 150 for i in range(10)]})

    def notes_fail(text):
        return "   " if "from these notes" in text else "answer"  # only the big group's combining fails

    h = u.agg(rows, "Summarise {t}", by="g", model=scripted(notes_fail), chunk_chars=400, bus=bus)
    out = await asyncio.wait_for(h.result(), 20)
    assert out["small"] == "answer" and pd.isna(out["big"])  # the small group's answer is not lost with the big one
    assert out.attrs["reasons"]["big"].startswith("level 2: ") and "answered nothing" in out.attrs["reasons"]["big"]
    nothing = u.agg(rows[rows["g"] == "big"], "Summarise {t}", by="g", model=scripted(notes_fail), chunk_chars=400,
                    bus=bus)
    with pytest.raises(u.UnityError, match=r"no group was answered.*big.*level 2"):  # nothing came of it: an error
        await asyncio.wait_for(nothing.result(), 20)

    def unsure(text):
        if "\nA:\n" in text:
            return "junk"  # every comparison fails
        return {"score": int(text.split("item ")[-1].split()[0]), "reason": "scored"}

    top = u.topk(pd.Series(["item 1", "item 5", "item 5"]), 1, "Best?", model=scripted(unsure), bus=bus)
    best = await asyncio.wait_for(top.result(), 20)
    assert len(best) == 1 and best.iloc[0] == "item 5" and top.exact is False
    assert "NOT exact" in top.summary() and "1 comparison(s) got no answer" in top.summary()


async def test_an_answer_with_a_blank_reason_is_sent_back_so_no_row_comes_without_one(bus):
    def script(messages, tools):
        sent_back = any(m["role"] == "tool" and "does not validate" in (m.get("content") or "") for m in messages)
        if "stubborn" in task_of(messages):
            return u.call_tool("submit_answer", keep=None, reason="  ")
        return u.call_tool("submit_answer", keep=None, reason="the text is cut off" if sent_back else "")

    h = u.filter(pd.Series(["cut", "stubborn"], index=["c", "s"]), "Is {value} good?", model=u.ScriptedModel(script),
                 bus=bus)
    kept = await asyncio.wait_for(h.result(), 10)
    why = kept.attrs["reasons"]
    assert why["c"] == "undecided: the text is cut off"  # not "undecided: " with nothing after it
    assert why["s"].startswith("failed: ") and "reason" in why["s"] and "did not validate twice" in why["s"]
    assert all(v.strip() for v in h.verdicts["reason"])


async def test_a_row_with_no_value_for_what_the_task_names_is_not_asked_and_says_so(bus):
    """'Is nan good?' was asked (None, NaN, pd.NA and NaT went into the prompt as text) and decided: a row whose
    every field the task names is missing is not asked; it has its reason. A row with one of two fields is asked."""
    asked = []

    def model(messages, tools):
        asked.append(messages[-1]["content"])
        return u.call_tool("submit_answer", keep=True, reason="fine")

    items = pd.Series(["good", None, np.nan, pd.NA, "bad"], name="text")
    h = u.filter(items, "Is {text} good?", model=u.ScriptedModel(model), bus=bus)
    kept = await asyncio.wait_for(h.result(), 20)
    assert list(kept.index) == [0, 4] and len(asked) == 2
    reasons = kept.attrs["reasons"]
    assert all("has no value for what the task names" in reasons[i] and "not asked" in reasons[i] for i in (1, 2, 3))
    frame = pd.DataFrame({"a": ["x", None, np.nan], "b": [pd.NaT, pd.NaT, "y"]})
    asked.clear()
    m = u.map(frame, "Label {a} and {b}", model=u.ScriptedModel(lambda ms, ts: asked.append(1) or "ok"), bus=bus)
    out = await asyncio.wait_for(m.result(), 20)
    assert out.tolist()[0] == "ok" and pd.isna(out[1]) and out[2] == "ok" and len(asked) == 2  # row 1: neither
    assert "not asked" in out.attrs["reasons"][1]
    unlabelled = u.map([None, "z"], "Label it", model=u.ScriptedModel(lambda ms, ts: "ok"), bus=bus)  # no fields
    out = await asyncio.wait_for(unlabelled.result(), 20)
    assert pd.isna(out[0]) and out[1] == "ok" and "has no value (None): not asked" in out.attrs["reasons"][0]


async def test_a_missing_value_the_tasks_format_cannot_take_is_no_value_not_a_template_the_map_refuses(bus):
    """A missing date (NaT) under {day:%Y-%m-%d}, or None under {who:>4}: the whole map was refused when the first
    row had one (its template said to be wrong), and a later row failed saying it could not fill the task. The value
    is missing: a row with nothing else to ask about is not asked, and one with another field is asked, the value said
    missing (no format applied)."""
    asked = []
    model = u.ScriptedModel(lambda ms, ts: asked.append(ms[-1]["content"]) or "ok")
    frame = pd.DataFrame({"day": pd.to_datetime([None, "2024-01-02", None]), "who": [None, "bob", "ann"]})
    h = u.map(frame, "When is {day:%Y-%m-%d}?", model=model, bus=bus)
    out = await asyncio.wait_for(h.result(), 20)
    assert out.tolist() == [None, "ok", None] and asked == ["When is 2024-01-02?"]
    assert all("has no value for what the task names (day: NaT): not asked" in out.attrs["reasons"][i] for i in (0, 2))
    asked.clear()
    both = u.map(frame, "Is {who:>4} free on {day:%Y-%m-%d}?", model=model, bus=bus)
    out = await asyncio.wait_for(both.result(), 20)
    assert out.tolist() == [None, "ok", "ok"]
    assert sorted(asked) == ["Is  ann free on (missing)?", "Is  bob free on 2024-01-02?"]
    assert "not asked" in out.attrs["reasons"][0]


async def test_a_join_of_every_pair_past_max_pairs_is_refused_at_once_saying_how_to_ask_them(bus):
    """blocking=None asked every one of n x m pairs with no count bound (only a budget, if one was given)."""
    left = pd.DataFrame({"t": [f"a{i}" for i in range(400)]})
    right = pd.DataFrame({"t": [f"b{i}" for i in range(300)]})
    model = u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", match=False, reason="no"))
    with pytest.raises(u.UserError, match=r"120,000 questions, more than max_pairs=100,000\. Pass max_pairs=120000"):
        u.join(left, right, "Do {left.t} and {right.t} match?", model=model, blocking=None, bus=bus)
    every = u.join(left[:3], right[:3], "Do {left.t} and {right.t} match?", model=model, blocking=None, max_pairs=9,
                   bus=bus)
    await asyncio.wait_for(every.result(), 20)
    assert every.pairs_total == 9 and every.pairs_asked == 9


async def test_a_join_of_every_pair_refuses_the_options_that_only_tune_blocking(bus):
    """blocking=None asks every pair: per_left, sample, recall, common and seed (which tune blocking and its recall
    check) change nothing there, and were taken without a word; given beside it, they are refused at once, saying
    so (estimate=True too); left out, every pair is asked."""
    left, right = pd.DataFrame({"t": ["apple", "berry"]}), pd.DataFrame({"t": ["apple", "cherry"]})
    model = u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", match=False, reason="no"))
    task = "Do {left.t} and {right.t} match?"
    for options, said in [({"per_left": 2}, "per_left= (--per-left) only apply with blocking"),
                          ({"sample": 0}, "sample= (--sample) only apply with blocking"),
                          ({"recall": 0.99}, "recall= (--recall) only apply with blocking"),
                          ({"common": 0.5}, "common= only apply with blocking"),
                          ({"seed": 3}, "seed= only apply with blocking"),
                          ({"per_left": 5, "sample": 500}, "per_left= (--per-left) and sample= (--sample) only")]:
        for estimate in (False, True):
            with pytest.raises(u.UserError) as info:
                u.join(left, right, task, model=model, blocking=None, estimate=estimate, bus=bus, **options)
            assert said in str(info.value) and "asks every pair, where" in str(info.value), (options, str(info.value))
    assert model.requests == []
    every = u.join(left, right, task, model=model, blocking=None, bus=bus)
    await asyncio.wait_for(every.result(), 20)
    assert every.pairs_asked == 4 and every.recall.status == "exact"
    blocked = u.join(left, right, task, model=model, per_left=1, sample=0, recall=0.9, common=1.0, seed=3, bus=bus)
    await asyncio.wait_for(blocked.result(), 20)  # with blocking, each is taken as before
    assert blocked.pairs_asked == 1 and blocked.recall.target == 0.9


async def test_a_field_with_no_value_is_said_missing_in_the_prompt_not_written_as_nan(bus):
    """A row with one of two fields missing was asked 'Label x and NaT' (None, NaN, pd.NA, NaT written as text, as
    if a value; with a format, NaT refused the map): the prompt says the field is missing, in a template's field
    (its format or conversion too), after a template naming no field, in a join's pair, an aggregate's rows and a
    topk's comparison."""
    asked = []

    def model(messages, tools):
        asked.append(task_of(messages))
        return "ok"

    frame = pd.DataFrame({"a": ["x", None, np.nan, pd.NA], "b": [pd.NaT, 1.5, "y", "z"]}, dtype=object)
    m = u.map(frame, "Label {a!r} and {b:>4}", model=u.ScriptedModel(model), bus=bus)
    await asyncio.wait_for(m.result(), 20)
    assert sorted(asked) == sorted(["Label 'x' and (missing)", "Label (missing) and  1.5", "Label (missing) and    y",
                                    "Label (missing) and    z"])
    asked.clear()
    await asyncio.wait_for(u.map(frame[["a", "b"]], "Label it", model=u.ScriptedModel(model), bus=bus).result(), 20)
    assert sorted(asked) == sorted(["Label it\n\na: (missing)\nb: 1.5", "Label it\n\na: (missing)\nb: y",
                                    "Label it\n\na: (missing)\nb: z", "Label it\n\na: x\nb: (missing)"])
    asked.clear()

    def match(messages, tools):
        asked.append(task_of(messages))
        return u.call_tool("submit_answer", match=False, reason="no")

    left = pd.DataFrame({"t": ["p", "q"], "n": [np.nan, 2.0]})
    h = u.join(left, pd.DataFrame({"t": ["p"]}), "Do {left.t} ({left.n}) and {right.t} match?",
               model=u.ScriptedModel(match), blocking=None, bus=bus)
    await asyncio.wait_for(h.result(), 20)
    assert any(t.startswith("Do p ((missing)) and p match?") for t in asked) and not any("nan" in t for t in asked)
    asked.clear()
    bare = u.join(pd.Series(["p", None]), ["p"], "Do these match?", model=u.ScriptedModel(match), blocking=None,
                  bus=bus)  # a task naming no column: each side's text follows it
    await asyncio.wait_for(bare.result(), 20)
    assert any("left: (missing)" in t for t in asked) and not any("None" in t for t in asked)
    asked.clear()
    whole = u.agg(pd.DataFrame({"t": ["p", None], "n": [np.nan, 2]}), "Summarise {t} and {n}",
                  model=u.ScriptedModel(model), bus=bus)
    await asyncio.wait_for(whole.result(), 20)
    assert any("t: p\nn: (missing)" in t and "t: (missing)\nn: 2" in t for t in asked)
    assert not any("nan" in t or "None" in t for t in asked)
    asked.clear()

    def rank(messages, tools):
        text = task_of(messages)
        asked.append(text)
        if "\nA:\n" in text:
            return u.call_tool("submit_answer", better="A", reason="first")
        return u.call_tool("submit_answer", score=5, reason="alike")

    items = pd.DataFrame({"name": ["a", "b", "c"], "size": [1.0, None, 3.0]})
    best = u.topk(items, 2, "Which {name} of {size} is biggest?", model=u.ScriptedModel(rank), bus=bus)
    await asyncio.wait_for(best.result(), 20)
    compared = [t for t in asked if "\nA:\n" in t]
    assert compared and any("size: (missing)" in t for t in compared)
    assert not any("nan" in t or "None" in t for t in asked)


async def test_a_topk_rows_failed_scoring_says_failed_as_a_failed_comparison_does(bus):
    """A row whose scoring failed had its reason bare (the map's 'ValueError: ...'), where a row whose comparison
    failed says 'failed: ...' (as a filter's failed row does): it says 'failed: ' too, each row's own where labels
    repeat."""
    def oracle(text):
        if "\nA:\n" in text:
            return {"better": "A", "reason": "first"}
        return "cannot rate" if "item 0" in text or "item 3" in text else {"score": 5, "reason": "alike"}

    items = pd.Series([f"item {i}" for i in range(4)], index=["x", "y", "z", "x"])
    h = u.topk(items, 1, "Which item is biggest?", model=scripted(oracle), bus=bus)
    best = await asyncio.wait_for(h.result(), 10)
    assert len(best) == 1 and h.unscored == 2 and list(best.attrs["reasons"]) == ["x"]
    first, second = best.attrs["reasons"]["x"].split("; ")  # rows 0 and 3, both labelled x, both failed scoring
    assert first.startswith("failed: ") and second.startswith("failed: ")
    assert "not a Score" in first and "not a Score" in second
