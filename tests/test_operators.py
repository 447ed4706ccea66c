"""The operators built on the map: filter, extract, top-k, join and aggregate (ScriptedModel for their logic,
the fake OpenAI server for the wire), and steering an operator made of several maps."""

import asyncio
import json
import math

import pandas as pd
import pytest
from conftest import settle
from fake_openai import FakeOpenAIServer, Reply

import unity_nb as u


def last_user(messages):
    return next(m["content"] for m in reversed(messages) if m["role"] == "user")


def task_of(messages):
    """A row's task: its first user message (an answer sent back, or an interjection, comes after it)."""
    return next(m["content"] for m in messages if m["role"] == "user")


def scripted(oracle):
    """A ScriptedModel answering what ``oracle(text)`` says: a dict is a submit_answer call, a str the text."""

    def script(messages, tools):
        out = oracle(task_of(messages))
        return u.call_tool("submit_answer", **out) if isinstance(out, dict) else out

    return u.ScriptedModel(script)


def served(oracle):
    """The fake server's handler answering what ``oracle(text)`` says, as a real model would (a tool call)."""

    def handler(body):
        out = oracle(task_of(body["messages"]))
        if isinstance(out, dict):
            return Reply(tool_calls=[{"name": "submit_answer", "arguments": json.dumps(out)}])
        return Reply(content=out)

    return handler


PAPERS = pd.DataFrame(
    {
        "abstract": [
            "We ran an experiment on 40 humans: sleep deprivation impairs memory consolidation.",
            "A survey of mouse models of hippocampal memory.",
            "The text of this abstract was lost.",
            "An experiment on 12 humans measuring reaction times under caffeine.",
            "A theory of quantum lasers.",
        ],
        "field": ["neuro", "neuro", "neuro", "psych", "physics"],
    },
    index=pd.Index(["p1", "p2", "p3", "p4", "p5"], name="paper"),
)


def filter_oracle(text):
    if "lost" in text:
        return {"keep": None, "reason": "the abstract says nothing"}
    if "caffeine" in text:
        return "I refuse to answer in fields"  # not a Verdict: the row fails
    return {"keep": "humans:" in text or "humans " in text.split("?")[0], "reason": "it says so"}


async def test_filter_keeps_rows_and_says_why_for_every_row_it_could_not_decide(bus):
    h = u.filter(PAPERS, "Does {abstract} report an experiment on humans?", model=scripted(filter_oracle), bus=bus)
    assert isinstance(h, u.FilterHandle) and isinstance(h, u.MapHandle)
    kept = await asyncio.wait_for(h.result(), 10)
    assert list(kept.index) == ["p1"] and list(kept.columns) == ["abstract", "field"]
    reasons = kept.attrs["reasons"]
    assert reasons["p3"] == "undecided: the abstract says nothing"
    assert reasons["p4"].startswith("failed: ") and "not a Verdict" in reasons["p4"]
    assert set(reasons) == {"p3", "p4"}  # p2 and p5 were decided: dropped, with their verdicts
    v = h.verdicts
    assert list(v.index) == list(PAPERS.index) and str(v["keep"].dtype) == "boolean"
    assert v.loc["p1", "keep"] and not v.loc["p2", "keep"] and not v.loc["p5", "keep"]
    assert pd.isna(v.loc["p3", "keep"]) and pd.isna(v.loc["p4", "keep"]) and "not a Verdict" in v.loc["p4", "reason"]
    assert h.progress["outcome"] == "finished with failures"


async def test_extract_gives_the_columns_aligned_to_the_index_with_failures_missing(bus):
    def oracle(text):
        if "lost" in text:
            return "no fields"
        size = next((int(w) for w in text.split() if w.isdigit()), 0)
        return {"method": "experiment" if "experiment" in text else "other", "venue": "", "size": size}

    h = u.extract(PAPERS, "From {abstract}", columns="method,venue,size:int", model=scripted(oracle), bus=bus)
    assert isinstance(h, u.ExtractHandle)
    frame = await asyncio.wait_for(h.result(), 10)
    assert list(frame.columns) == ["method", "venue", "size"] and list(frame.index) == list(PAPERS.index)
    assert frame["size"].tolist()[:2] == [40, 0] and frame.loc["p4", "size"] == 12  # typed as the map types them
    assert frame["method"].tolist()[:2] == ["experiment", "other"] and frame.loc["p4", "method"] == "experiment"
    assert frame.loc["p3"].isna().all() and "p3" in frame.attrs["reasons"]


def rank_oracle(text):
    """Items are 'item N': bigger N fits better. Scores are N // 10 (ties); comparisons are exact."""
    if "\nA:\n" in text:
        a = int(text.split("\nA:\n")[1].split()[1])
        b = int(text.split("\nB:\n")[1].split()[1])
        return {"better": "A" if a > b else "B", "reason": "bigger"}
    n = int(text.split("item ")[-1].split()[0])
    if n == 7:
        return "cannot rate"
    return {"score": min(10, n // 10), "reason": f"{n}"}


async def test_topk_scores_every_row_once_then_compares_only_the_rows_the_scores_cannot_separate(bus):
    items = pd.Series([f"item {i}" for i in range(100)], index=[f"r{i}" for i in range(100)], name="text")
    model = scripted(rank_oracle)
    h = u.topk(items, 5, "Which item is biggest?", model=model, concurrency=16, bus=bus)
    assert isinstance(h, u.TopKHandle)
    best = await asyncio.wait_for(h.result(), 30)
    assert list(best.index) == ["r99", "r98", "r97", "r96", "r95"]  # scores tie (9): the comparisons decided
    # one question per row; then only the 20 rows scored 8 or 9 (within a point of the 5th best) compared, in
    # rounds, never every pair of them (190), let alone of all (4,950)
    compared = h.questions - 100
    assert 0 < compared < math.comb(20, 2) and h.questions <= h.bound and h.exact and h.inconsistent == 0
    assert set(h.comparisons["first"]) | set(h.comparisons["second"]) <= {f"r{i}" for i in range(80, 100)}
    assert h.calls == len(model.requests) == h.questions + 1  # r7's answer was sent back once, then failed
    rounds = [p.name.rsplit(".", 1)[1] for p in h.phases]
    assert rounds == ["score", "compare"] + [f"compare{i}" for i in range(2, len(rounds))] and len(rounds) > 2
    assert h.ranking["rank"].dropna().tolist() == [1, 2, 3, 4, 5] and list(h.ranking.index[:5]) == list(best.index)
    assert pd.isna(h.scores.loc["r7", "score"]) and "r7" in best.attrs["reasons"]


async def test_topk_keeps_within_its_bound_and_orders_a_large_k(bus):
    items = [f"item {i}" for i in range(120)]
    model = scripted(rank_oracle)
    h = u.topk(items, 30, "Which item is biggest?", model=model, concurrency=32, max_comparisons=300, bus=bus)
    best = await asyncio.wait_for(h.result(), 60)
    compared = len(model.requests) - 120
    # the 40 rows scored 8 or more compared (items 80-119), far fewer than their every pair
    assert compared < math.comb(40, 2) and h.questions <= h.bound == 120 + 300
    assert best.tolist() == [f"item {i}" for i in range(119, 89, -1)] and h.exact


GRANTS = pd.DataFrame(
    {"aims": ["Study memory consolidation during sleep in humans.", "Build quantum lasers.",
              "Breed zebrafish.", "Caffeine and reaction times in humans."]},
    index=pd.Index(["g1", "g2", "g3", "g4"], name="grant"),
)


def join_oracle(text):
    pairs = {("deprivation", "consolidation during"), ("lasers.", "quantum lasers"), ("caffeine.", "Caffeine and")}
    left, _, right = text.partition(" and ")  # "On {abstract} and {aims}: ..." (no abstract holds " and ")
    return {"match": any(a in left and b in right for a, b in pairs), "reason": "shared topic"}


async def test_join_asks_only_pairs_sharing_rare_words_and_gives_the_matched_pairs(bus):
    model = scripted(join_oracle)
    h = u.join(PAPERS, GRANTS, "On {papers.abstract} and {grants.aims}: is this grant funding this work?",
               names=("papers", "grants"), model=model, bus=bus)
    assert isinstance(h, u.JoinHandle)
    pairs = await asyncio.wait_for(h.result(), 10)
    assert sorted(zip(pairs["left"], pairs["right"])) == [("p1", "g1"), ("p4", "g4"), ("p5", "g2")]
    assert (pairs["reason"] == "shared topic").all()
    assert h.pairs_total == 20 and h.pairs_blocked < 20
    # fewer pairs left out than the recall sample takes: every one of them is asked, and the recall is known
    assert h.pairs_asked == len(model.requests) == 20
    v = h.verdicts
    assert list(v.index.names) == ["left", "right"]
    assert set(v.xs("g3", level="right")["asked"]) == {"sample (far)"}  # g3 shares no word with any paper
    assert h.recall.estimate == 1.0 and h.recall.missed_bound == 0 and h.recall.sample_found == 0
    assert pairs.attrs["recall"]["estimate"] == 1.0
    every = u.join(PAPERS, GRANTS, "On {left.abstract} and {right.aims}: funded?", blocking=None,
                   model=scripted(join_oracle), bus=bus)
    await asyncio.wait_for(every.result(), 10)
    assert every.pairs_asked == every.pairs_total == 20


async def test_agg_answers_per_group_and_reduces_a_large_group_within_its_depth(bus):
    rows = pd.DataFrame({"field": ["big"] * 40 + ["small"] * 2,
                         "abstract": [f"finding {i}: " + "x" * 80 for i in range(42)]})
    seen = []

    def oracle(text):
        seen.append(text)
        pad = " " + "y" * 150  # notes long enough that a group's notes need combining twice
        if "one part of the group" in text:
            return f"note[{text.count('finding ')}]" + pad
        if "cover some parts" in text:
            return f"note[{sum(int(n.split(']')[0]) for n in text.split('note[')[1:])}]" + pad
        counted = text.count("finding ") + sum(int(n.split("]")[0]) for n in text.split("note[")[1:])
        return f"{counted} findings"

    h = u.agg(rows, "Summarise the main findings", by="field", model=scripted(oracle), chunk_chars=500,
              max_depth=3, bus=bus)
    assert isinstance(h, u.AggHandle)
    answers = await asyncio.wait_for(h.result(), 30)
    assert answers.to_dict() == {"big": "40 findings", "small": "2 findings"}  # every row counted once
    assert answers.index.name == "field" and h.depth == 3  # chunks, combined notes, then one answer
    assert all(len(t) < 1200 for t in seen)  # no request holds the big group whole
    assert h.calls == len(seen) < 42
    one = await asyncio.wait_for(u.agg(rows, "Summarise", model=scripted(oracle), bus=bus).result(), 10)
    assert one.to_dict() == {"all": "42 findings"}


async def test_each_operator_over_real_http(bus):
    async def run(oracle, start):
        async with FakeOpenAIServer(served(oracle)) as server:
            model = u.OpenAIModel("m", base_url=server.base_url, api_key="sk-test")
            try:
                return await asyncio.wait_for(start(model).result(), 30)
            finally:
                await model.close()

    q = "Does {abstract} report an experiment on humans?"
    kept = await run(filter_oracle, lambda m: u.filter(PAPERS, q, model=m, bus=bus))
    assert list(kept.index) == ["p1"] and set(kept.attrs["reasons"]) == {"p3", "p4"}
    fields = await run(lambda t: {"method": "m", "venue": "v"},
                       lambda m: u.extract(PAPERS, "From {abstract}", columns=["method", "venue"], model=m, bus=bus))
    assert fields.values.tolist() == [["m", "v"]] * 5
    best = await run(rank_oracle, lambda m: u.topk([f"item {i}" for i in range(30)], 3, "Biggest?", model=m,
                                                            candidates=10, bus=bus))
    assert best.tolist() == ["item 29", "item 28", "item 27"]
    pairs = await run(join_oracle, lambda m: u.join(PAPERS, GRANTS, "On {left.abstract} and {right.aims}: funded?",
                                                    model=m, bus=bus))
    assert sorted(zip(pairs["left"], pairs["right"])) == [("p1", "g1"), ("p4", "g4"), ("p5", "g2")]
    summary = await run(lambda t: f"{t.count('abstract:')} rows",
                        lambda m: u.agg(PAPERS, "Summarise", by="field", model=m, bus=bus))
    assert summary.to_dict() == {"neuro": "3 rows", "physics": "1 rows", "psych": "1 rows"}


async def test_an_operator_of_several_maps_is_paused_interjected_and_stopped(bus):
    release, three, compared = asyncio.Event(), asyncio.Event(), asyncio.Event()
    started = []

    async def script(messages, tools):
        text = next(m["content"] for m in messages if m["role"] == "user")  # the row's task (notes come after)
        started.append(messages)
        if len(started) >= 3:
            three.set()
        if "\nA:\n" in text:
            compared.set()
            await asyncio.Event().wait()  # comparisons never answer: the operation is stopped in that phase
        if "item 0" not in text and "item 1 " not in text:
            await release.wait()
        return u.call_tool("submit_answer", score=int(text.split("item ")[1].split()[0]) % 11, reason="r")

    h = u.topk([f"item {i} ." for i in range(12)], 2, "Biggest?", model=u.ScriptedModel(script), concurrency=3,
               bus=bus)

    await asyncio.wait_for(three.wait(), 10)  # three rows running
    await h.pause()
    assert h.phase.run.gate.paused and all(c.run.gate.paused for c in h.phase.run.live_children())
    release.set()
    await settle(200)
    held = len(started)
    assert held <= 5 and h.progress["phase"] == "score"  # paused: no row starts
    await h.interject("prefer odd items")
    await h.resume()
    await asyncio.wait_for(compared.wait(), 10)  # the comparisons started
    later = [m for m in started[held:]]
    assert later and all(any("prefer odd items" in str(x.get("content")) for x in m) for m in later)
    answer = await h.ask("how far along?", model=u.ScriptedModel(lambda m, t: m[0]["content"][:200]))
    assert "topk" in await answer.result()
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), 10)
    assert h.status == "stopped" and h.scores is not None and h.scores["score"].notna().sum() == 12
    assert all(p.done() for p in h.phases) and h.phases[-1].status == "stopped"


def test_operators_refuse_bad_input_saying_what_they_take():
    async def main():
        m = u.ScriptedModel(["x"])
        cases = [
            (lambda: u.filter(PAPERS, "", model=m), "filter needs a condition"),
            (lambda: u.filter(PAPERS, "Is {nope}?", model=m), "{nope}"),
            (lambda: u.topk(PAPERS, 0, "Best?", model=m), "k, a whole number"),
            (lambda: u.topk(PAPERS, 3, "Best?", model=m, candidates=2), "candidates"),
            (lambda: u.join(PAPERS, GRANTS, "On {abstract} and {aims}?", model=m), "{left.column}"),
            (lambda: u.join(PAPERS, GRANTS, "On {left.nope} and {right.aims}?", model=m), "no column 'nope'"),
            (lambda: u.join(PAPERS, GRANTS, "On {left.abstract} and {right.aims}?", recall=1.5, model=m),
             "recall takes the share of true pairs wanted"),
            (lambda: u.join(PAPERS, GRANTS, "On {left.abstract} and {right.aims}?", max_pairs=-1, model=m),
             "max_pairs takes a whole number"),
            (lambda: u.agg(PAPERS, "Sum", by="nope", model=m), "by names a column"),
        ]
        for make, said in cases:
            with pytest.raises(u.UserError, match=None) as info:
                make()
            assert said in str(info.value), (said, str(info.value))

    asyncio.run(main())


OPERATORS = {
    "filter": lambda m, bus: u.filter(PAPERS, "Does {abstract} report humans?", model=m, concurrency=2, bus=bus),
    "extract": lambda m, bus: u.extract(PAPERS, "From {abstract}", columns="method", model=m, concurrency=2, bus=bus),
    "topk": lambda m, bus: u.topk(PAPERS, 2, "Most about sleep?", model=m, concurrency=2, bus=bus),
    "join": lambda m, bus: u.join(PAPERS, GRANTS, "On {left.abstract} and {right.aims}?", model=m, concurrency=2,
                                  bus=bus),
    "agg": lambda m, bus: u.agg(PAPERS, "Summarise", by="field", model=m, concurrency=2, bus=bus),
}


@pytest.mark.parametrize("kind", list(OPERATORS))
async def test_every_verb_reaches_every_operator_s_running_rows(bus, kind):
    asked = asyncio.Event()

    async def held(messages, tools):
        asked.set()
        await asyncio.Event().wait()  # every row runs until the operation is stopped

    h = OPERATORS[kind](u.ScriptedModel(held), bus)
    await asyncio.wait_for(asked.wait(), 10)
    batch = h if isinstance(h, u.MapHandle) else h.phase  # topk and agg: the map of the phase running
    rows = batch.run.live_children()
    assert len(rows) == 2 and h.progress["running"] == 2
    await h.pause()
    assert h.status == "paused" and all(r.run.gate.paused for r in rows)
    await h.interject("only the abstracts about sleep")
    assert all(any("only the abstracts about sleep" in str(m.content) for m in r.transcript) or
               "only the abstracts about sleep" in " ".join(r.run.conversation.pending) for r in rows)
    inspector = u.ScriptedModel(lambda messages, tools: messages[0]["content"])  # what the ask was told
    assert "2 running" in await (await h.ask("how far along?", model=inspector)).result()
    await h.resume()
    assert h.status == "running" and not any(r.run.gate.paused for r in rows)
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), 10)
    assert all(r.done() for r in rows) and batch.status == "stopped"


async def test_a_budget_caps_the_whole_operation_not_each_phase(bus):
    def script(messages, tools):
        text = task_of(messages)
        if "\nA:\n" in text:
            return u.call_tool("submit_answer", better="A", reason="r")
        return u.call_tool("submit_answer", score=5, reason="r")

    model = u.ScriptedModel(script, name="operators-budget-test")
    u.set_price(model, input=2.0, output=8.0)
    items = [f"item {i} " + "x" * 2000 for i in range(20)]  # about 500 tokens a row: 0.001 dollars
    h = u.topk(items, 2, "Best?", model=model, budget=0.05, concurrency=2, bus=bus)
    phase = await h.wait_for("child_started", lambda e: e.child_name.endswith(".compare"), timeout=10)
    compare = next(p for p in h.phases if p.name == phase.child_name)
    await compare.wait_for("budget_reached", timeout=10)
    scoring = h.phases[0].cost
    assert 0 < scoring < 0.05 and compare.spending.budget == pytest.approx(0.05 - scoring)  # what scoring left
    assert h.progress["budget_reached"] and compare.status == "paused"
    h.set_budget(None)
    await h.resume()
    best = await asyncio.wait_for(h.result(), 10)
    assert len(best) == 2 and h.phases[-1].spending.budget is None
