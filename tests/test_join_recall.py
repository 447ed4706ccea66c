"""A join checks its recall on every blocked join: a seeded sample of the pairs blocking left out, an estimate of
the matches missed with a bound, widening or asking every pair below the recall wanted, all said on the result; it
resists right rows stuffed with other rows' words; and it is streamed (its handle at once, pairs made as asked).

The model is a ScriptedModel oracle answering from ground truth hidden in the rows: each left row holds
``id:CODE`` and each right row ``ref:CODE``, codes blocking cannot read (``a1_7``: no part is three letters
long), so a pair matches when the two codes are the same, whatever words the rows share."""

import asyncio
import random
import re
import tracemalloc

import pandas as pd
import pytest
from conftest import settle

import unity_nb as u

TASK = "On {left.t} and {right.t}: the same record?"


def task_of(messages):
    return next(m["content"] for m in messages if m["role"] == "user")


def oracle(messages, tools):
    text = task_of(messages)
    a, b = re.search(r"id:(\w+)", text).group(1), re.search(r"ref:(\w+)", text).group(1)
    return u.call_tool("submit_answer", match=a == b, reason="same code" if a == b else "other code")


def codes(n):
    return [f"{a}{b}_{c}" for a in "abcdefghijklmnopqrstuvwxyz" for b in "0123456789" for c in "0123456789"][:n]


def chance_shared(n=100, seed=5):
    """Rows whose only words are two of 150 rare ones, shared by chance; the true pairs share none on purpose."""
    rng = random.Random(seed)
    vocab = [f"zq{a}{b}x" for a in "abcdefghijklmno" for b in "abcdefghij"]
    code = codes(n)
    order = list(range(n))
    rng.shuffle(order)
    left = pd.DataFrame({"t": [f"record {' '.join(rng.sample(vocab, 2))} id:{code[i]}" for i in range(n)]})
    right = pd.DataFrame({"t": [f"entry {' '.join(rng.sample(vocab, 2))} ref:{code[order[j]]}" for j in range(n)]})
    return left, right, {(order[j], j) for j in range(n)}


def stuffed(n=40, m=200, stuff=5, cover=36, seed=7):
    """Left row i holds four words of its own; its true right row two of them and two others; five right rows
    repeat the words of 36 of the 40 left rows (and match none)."""
    rng = random.Random(seed)
    own = [[f"w{i}x{k}" for k in range(4)] for i in range(n)]
    other = [f"o{a}q" for a in range(400)]
    code = codes(m)
    left = pd.DataFrame({"t": [f"{' '.join(own[i])} id:{code[i]}" for i in range(n)]})
    rows = []
    for j in range(m):
        if j < n:
            rows.append(f"{' '.join(rng.sample(own[j], 2) + rng.sample(other, 2))} ref:{code[j]}")
        elif j >= m - stuff:
            rows.append(" ".join(w for i in rng.sample(range(n), cover) for w in own[i]) + " ref:zz_0")
        else:
            rows.append(f"{' '.join(rng.sample(other, 4))} ref:{code[j]}")
    order = list(range(m))
    rng.shuffle(order)
    right = pd.DataFrame({"t": [rows[k] for k in order]})
    return left, right, {(order[p], p) for p in range(m) if order[p] < n}


def found(pairs):
    return {(int(a), int(b)) for a, b in zip(pairs["left"], pairs["right"], strict=True)}


async def test_a_join_whose_true_pairs_share_no_word_finds_them_and_says_it_asked_every_pair(bus):
    left, right, truth = chance_shared()
    h = u.join(left, right, TASK, model=u.ScriptedModel(oracle), concurrency=50, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 120)
    assert len(found(pairs) & truth) >= 0.99 * len(truth)  # blocking alone found a few: every pair was asked
    r = h.recall
    assert r.status == "exact" and r.fallback and r.estimate == 1.0 and r.found == len(truth)
    assert "every pair asked (10,000)" in r.text and pairs.attrs["recall"]["fallback"] is True
    assert [p.name.rsplit(".", 1)[1] for p in h.phases] == ["pairs", "all"]
    assert h.pairs_asked == h.pairs_total == 10_000 and h.progress["recall"]["status"] == "exact"
    v = h.verdicts
    assert {"blocked", "sample (far)", "all pairs"} <= set(v["asked"])
    sampled = v[v["asked"].str.startswith("sample")]
    assert 0 < sampled["match"].sum() < len(sampled)  # the sample found true pairs blocking left out


async def test_right_rows_stuffed_with_other_rows_words_do_not_hide_true_pairs(bus):
    left, right, truth = stuffed()
    h = u.join(left, right, TASK, model=u.ScriptedModel(oracle), concurrency=50, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 60)
    assert len(found(pairs) & truth) >= 0.99 * len(truth)
    blocked = h.verdicts
    blocked = blocked[blocked["asked"] == "blocked"]
    assert blocked["match"].sum() == len(truth)  # blocking itself found them: the stuffed rows crowd out nothing
    r = h.recall
    assert r.status == "checked" and r.estimate == 1.0 and r.sample_found == 0 and r.found == len(truth)
    assert pairs.attrs["recall"] == r.as_dict()


async def test_a_join_whose_sample_finds_no_miss_says_its_estimate_and_its_bound(bus):
    left, right, truth = stuffed(n=60, m=300, stuff=0)
    h = u.join(left, right, TASK, model=u.ScriptedModel(oracle), concurrency=50, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 60)
    assert found(pairs) == truth
    r = h.recall
    assert r.status == "checked" and not r.widened and not r.fallback and r.refused is None
    assert r.sampled == 500 and r.sample_found == 0 and r.missed == 0 and r.estimate == 1.0
    assert 0 < r.missed_bound < r.left_out and 0 < r.bound < 1  # a sample of 500 cannot prove none was missed
    assert r.left_out == 60 * 300 - h.pairs_asked and "0 of 500 sampled left-out pairs matched" in r.text
    assert f"at most {int(-(-r.missed_bound // 1)):,} at 95%" in r.text and "Clopper-Pearson" in r.method
    progress = h.progress
    assert progress["recall"]["text"] == r.text and progress["pairs_asked"] == h.pairs_asked == len(h.verdicts)


async def test_misses_that_share_words_widen_the_blocks_until_the_sample_finds_none(bus):
    # each left row meets seven right rows repeating its four words (no match), and its true row sharing two:
    # blocking asks five, the true rows rank eighth or later; a small sample of the crowded-out ones finds them
    rng = random.Random(3)
    n, code = 30, codes(300)
    own = [[f"w{i}x{k}" for k in range(4)] for i in range(n)]
    left = pd.DataFrame({"t": [f"{' '.join(own[i])} id:{code[i]}" for i in range(n)]})
    rows = [f"{' '.join(own[i][:2])} ofill{i}q ref:{code[i]}" for i in range(n)]
    rows += [f"{' '.join(own[i])} ref:{code[n + 7 * i + d]}" for i in range(n) for d in range(7)]
    rng.shuffle(rows)
    right = pd.DataFrame({"t": rows})
    truth = {(i, j) for i in range(n) for j, t in enumerate(rows) if f"ref:{code[i]}" in t}
    h = u.join(left, right, TASK, model=u.ScriptedModel(oracle), concurrency=50, sample=40, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 60)
    assert found(pairs) == truth
    r = h.recall
    assert r.widened and r.per_left == 8 and not r.fallback and r.status == "checked"  # every candidate: 7 + 1
    assert [p.name.rsplit(".", 1)[1] for p in h.phases][:2] == ["pairs", "widen1"]
    assert f"widened to {r.per_left} right rows per left row" in r.text
    assert h.pairs_asked < h.pairs_total / 2  # widened, not every pair


async def test_below_the_recall_wanted_past_max_pairs_the_join_says_how_to_raise_it(bus):
    left, right, truth = chance_shared()
    h = u.join(left, right, TASK, model=u.ScriptedModel(oracle), concurrency=50, max_pairs=1000, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 60)
    r = h.recall
    assert len(found(pairs) & truth) < 20 and r.status == "checked" and not r.fallback
    assert r.estimate < 0.95 and r.sample_found > 0 and r.missed > 0 and r.missed_bound > r.missed
    assert "max_pairs=1,000" in r.refused and "--max-pairs" in r.refused and r.refused in r.text
    assert pairs.attrs["recall"]["refused"] == r.refused and h.pairs_asked < 1000


async def test_the_sample_is_seeded_so_a_rerun_asks_the_same_pairs(bus):
    left, right, _truth = stuffed(n=20, m=400, stuff=0)
    asked = []
    for seed in (0, 0, 1):
        h = u.join(left, right, TASK, model=u.ScriptedModel(oracle), concurrency=20, sample=60, seed=seed, bus=bus)
        await asyncio.wait_for(h.result(), 60)
        asked.append(list(h.verdicts.index))
    assert asked[0] == asked[1] and asked[0] != asked[2]


async def test_the_handle_comes_back_before_any_pair_is_made_however_large_the_sides(bus):
    n = 200_000
    left = pd.DataFrame({"t": [f"paper {i} about w{i % 5000}x id:a0_{i % 10}" for i in range(n)]})
    right = pd.DataFrame({"t": [f"grant w{j}x ref:a0_{j % 10}" for j in range(2000)]})
    first = asyncio.Event()

    async def held(messages, tools):
        first.set()
        await asyncio.Event().wait()

    tracemalloc.start()
    try:
        h = u.join(left, right, TASK, model=u.ScriptedModel(held), concurrency=4, bus=bus)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000  # nothing of the 400,000 blocked pairs was built: no frame of pairs, no index yet
    assert h.pairs_asked == 0 and h.phases == [] and h.recall.status == "checking"
    assert h.progress["right_rows"] == 2000 and h.progress["recall"]["text"].startswith("indexing the right side")
    await asyncio.wait_for(first.wait(), 60)
    phase = h.phase
    assert phase.rows.total is None  # the pairs are a stream, made as they start
    assert h.pairs_asked < 1000 and h.progress["pairs_total"] == n * 2000
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), 30)


async def test_the_magics_take_the_recall_wanted_the_sample_and_the_bound(stored_shell):
    from IPython.core.error import UsageError

    ip = stored_shell
    left, right, _truth = stuffed(n=5, m=10, stuff=0)
    ip.user_ns.update(m=u.ScriptedModel(oracle), lefts=left, rights=right)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "join lefts rights --recall 0.99 --sample 7 --max-pairs 30 "
                                   "On {lefts.t} and {rights.t}: the same record?")
    assert (h.target, h.max_pairs, h.recall.target) == (0.99, 30, 0.99) and "up to 7 pairs" in h.recall.text
    await h.stop()
    with pytest.raises(UsageError, match="recall takes the share"):
        ip.run_line_magic("unity", "join lefts rights --recall most On {lefts.t} and {rights.t}?")


async def test_a_join_stopped_while_its_right_side_is_indexed_stops_there(bus):
    right = pd.DataFrame({"t": [f"grant w{j}x about q{j % 997}z" for j in range(200_000)]})
    left = pd.DataFrame({"t": ["paper w1x", "paper w2x"]})
    model = u.ScriptedModel(oracle)
    h = u.join(left, right, TASK, model=model, bus=bus)
    await settle()
    assert h.progress["phase"] == "index" and h.recall.status == "checking"  # in its worker thread
    await h.stop("enough")
    with pytest.raises(u.Stopped):
        await asyncio.wait_for(h.result(), 30)
    assert h.phases == [] and h.pairs_asked == 0 and model.requests == [] and h.status == "stopped"


async def test_lists_are_joined_as_they_are_their_positions_the_labels(bus):
    fruit = ["apple", "banana", "cherry", "date"]

    def same(messages, tools):
        text = task_of(messages)
        pie, jam = text.split(" pie and ")[0].split()[-1], text.split(" jam:")[0].split()[-1]
        return u.call_tool("submit_answer", match=pie == jam, reason="same fruit")

    h = u.join([f"{f} pie" for f in fruit], tuple(f"{f} jam" for f in reversed(fruit)),
               "On {left.value} and {right.value}: the same fruit?", model=u.ScriptedModel(same), bus=bus)
    pairs = await asyncio.wait_for(h.result(), 30)
    assert sorted(zip(pairs["left"], pairs["right"], strict=True)) == [(0, 3), (1, 2), (2, 1), (3, 0)]
    assert h.recall.estimate == 1.0 and h.pairs_asked == 16  # 4 blocked, the 12 left out sampled


async def test_a_sample_that_got_no_answer_says_the_recall_is_unknown_not_a_hundred_percent(bus):
    n = 30
    left = pd.DataFrame({"t": [f"w{i}x alpha id:{c}" for i, c in enumerate(codes(n))]})
    right = pd.DataFrame({"t": [f"w{i}x beta ref:{c}" for i, c in enumerate(codes(n))]})

    def only_blocked(messages, tools):  # every pair sharing no word (the whole sample) fails
        text = task_of(messages)
        a, b = re.search(r"id:(\w+)", text).group(1), re.search(r"ref:(\w+)", text).group(1)
        return oracle(messages, tools) if a == b else "I cannot say"

    h = u.join(left, right, TASK, model=u.ScriptedModel(only_blocked), sample=50, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 30)
    assert len(pairs) == n and len(pairs.attrs["reasons"]) == 50
    r = h.recall
    assert r.sampled == 0 and r.unanswered == 50 and r.left_out == n * n - 80
    assert r.estimate is None and r.status == "not checked"  # nothing was learnt of the pairs left out
    assert "100" not in r.text and "met by the estimate" not in r.text
    assert r.text.startswith("recall unknown") and "none of the 50 sampled pairs got an answer" in r.text
    v = h.verdicts  # "h.verdicts says why": each failed pair's reason in its row, as a filter's verdicts say it
    failed = v[v["match"].isna()]
    assert len(failed) == 50 and all(isinstance(why, str) and why.strip() for why in failed["reason"])
    assert set(failed["reason"]) == set(v.attrs["reasons"].values())
    unchecked = u.join(left, right, TASK, model=u.ScriptedModel(only_blocked), sample=0, bus=bus)
    await asyncio.wait_for(unchecked.result(), 30)
    assert unchecked.recall.estimate is None and "100" not in unchecked.recall.text
    assert unchecked.recall.text.startswith("recall not checked (sample=0): unknown")


async def test_every_pair_asked_with_some_unanswered_gives_a_bound_not_an_exact_hundred_percent(bus):
    """Every pair asked, 2 of 9 with no answer: the recall said estimate=1.0 (its text counting the 2), though
    either might have been a match. It is unknown (None), with its bound: every unanswered pair counted a miss."""
    left = pd.DataFrame({"t": [f"id:{c}" for c in codes(3)]})
    right = pd.DataFrame({"t": [f"ref:{c}" for c in codes(3)]})

    def some_fail(messages, tools):
        text = task_of(messages)
        a, b = re.search(r"id:(\w+)", text).group(1), re.search(r"ref:(\w+)", text).group(1)
        return "I cannot say" if (a, b) in {("a0_0", "a0_1"), ("a0_2", "a0_2")} else oracle(messages, tools)

    h = u.join(left, right, TASK, model=u.ScriptedModel(some_fail), blocking=None, bus=bus)
    pairs = await asyncio.wait_for(h.result(), 30)
    assert len(pairs) == 2 and h.pairs_asked == 9
    r = h.recall
    assert r.unanswered == 2 and r.found == 2 and r.status == "exact"
    assert r.estimate is None and r.bound == 0.5 and r.missed_bound == 2  # 2 found, at most 2 more among the 2
    assert r.text.startswith("recall unknown: every pair asked (9), 2 matched; 2 got no answer (h.verdicts says why)")
    assert "at least 50.0% (each pair without an answer counted a miss)" in r.text and "100" not in r.text
    assert pairs.attrs["recall"]["estimate"] is None
    whole = u.join(left, right, TASK, model=u.ScriptedModel(oracle), blocking=None, bus=bus)
    await asyncio.wait_for(whole.result(), 30)
    assert whole.recall.estimate == whole.recall.bound == 1.0 and whole.recall.text.startswith("recall exact: ")


async def test_missing_values_give_blocking_no_words(bus):
    """Blocking read a missing value as the word 'nan', 'none' or 'nat' (its str), so rows with nothing in a column
    shared a rare word and were blocked together (asked as if alike). A missing value gives no word: only pairs
    sharing a word of a value are blocked; the rest are left to the recall sample, as any pair sharing no word."""
    import numpy as np

    left = pd.DataFrame({"t": ["apple pie", None, np.nan, pd.NaT, pd.NA], "u": ["x1", "x2", None, "x4", "x5"]})
    right = pd.DataFrame({"t": ["apple tart", None, np.nan, pd.NaT, pd.NA, "cherry jam"],
                          "u": [None, "y2", np.nan, "y4", "y5", "y6"]})
    asked = []

    def script(messages, tools):
        asked.append(task_of(messages))
        return u.call_tool("submit_answer", match=False, reason="no")

    h = u.join(left, right, "On {left.t} {left.u} and {right.t} {right.u}: the same?", model=u.ScriptedModel(script),
               sample=0, bus=bus)
    await asyncio.wait_for(h.result(), 20)
    assert list(h.verdicts.index) == [(0, 0)] and h.pairs_blocked == 1  # apple: the only word a value gives
    assert len(asked) == 1 and "apple pie" in asked[0]
