"""%unity topk, filter, extract, join and agg killed mid-way in a real kernel and resumed in a new one: the rows
their maps committed are kept (no question asked twice), the rest asked, and the answers are the same as an
unbroken run's."""

import textwrap

from _kernel import Kernel

MODEL = textwrap.dedent(
    """
    import asyncio, pandas as pd, unity_nb as u

    seen = []
    hung = asyncio.Event()


    def task_of(messages):
        return next(m["content"] for m in messages if m["role"] == "user")


    async def answer(messages, tools):
        text = task_of(messages)
        seen.append(text)
        if "\\nA:\\n" in text:
            if DIE and sum("\\nA:\\n" in t for t in seen) == 27:
                hung.set()
                await asyncio.Event().wait()  # the kernel dies while this comparison runs
            a, b = (int(text.split(f"\\n{s}:\\n")[1].split()[1]) for s in "AB")
            return u.call_tool("submit_answer", better="A" if a > b else "B", reason="bigger")
        if "Decide for this row" in text:
            n = int(text.split("Is ")[1].split()[0])
            if DIE and n == 3:
                await asyncio.Event().wait()  # and while this row runs
            return u.call_tool("submit_answer", keep=n % 2 == 0, reason="parity")
        if "Give the fields" in text:
            n = int(text.split("Halve ")[1].split()[0])
            if DIE and n == 3:
                await asyncio.Event().wait()
            return u.call_tool("submit_answer", half=n // 2)
        if "match true or false" in text:
            if DIE and sum("match true" in t for t in seen) == 3:  # two pairs committed (blocked or sampled)
                await asyncio.Event().wait()
            pie, jam = text.split(" pie and ")[0].split()[-1], text.split(" jam:")[0].split()[-1]
            return u.call_tool("submit_answer", match=pie == jam, reason="same fruit")
        if "Answer it for the group" in text:
            group = text.split("for the group ")[1].split()[0]
            if DIE and group == "c":
                await asyncio.Event().wait()
            return f"summary of {group}"
        return u.call_tool("submit_answer", score=int(text.split("item ")[-1].split()[0]) // 12, reason="r")


    m = u.ScriptedModel(answer)
    %unity model --var m
    items = [f"item {i} ." for i in range(36)]
    numbers = pd.Series(range(6), index=[f"n{i}" for i in range(6)], name="n")
    fruit = ["apple", "banana", "cherry", "date"]
    lefts = pd.DataFrame({"w": [f"{f} pie" for f in fruit]}, index=[f"l{i}" for i in range(4)])
    rights = pd.DataFrame({"w": [f"{f} jam" for f in fruit]}, index=[f"r{i}" for i in range(4)])
    groups = pd.DataFrame({"g": list("aabbcc"), "t": [f"finding {i}" for i in range(6)]})
    """
)

FIRST = "DIE = True\n" + MODEL + textwrap.dedent(
    """
    best = %unity topk items 2 --concurrency 1 --name best Which item is biggest?
    keep = %unity filter numbers --concurrency 1 --name keep Is {n} even?
    fields = %unity extract numbers --concurrency 1 --name fields --columns half:int Halve {n}
    pairs = %unity join lefts rights --concurrency 1 --name pairs On {lefts.w} and {rights.w}: the same fruit?
    summary = %unity agg groups --by g --concurrency 1 --name summary Summarise the findings.
    await asyncio.wait_for(hung.wait(), 30)
    await best.phase.wait_for("row_finished", lambda e: e.position == 2, timeout=20)
    await keep.wait_for("row_finished", lambda e: e.position == 2, timeout=20)
    await fields.wait_for("row_finished", lambda e: e.position == 2, timeout=20)
    await pairs.phase.wait_for("row_finished", lambda e: e.position == 1, timeout=20)
    await summary.phase.wait_for("row_finished", lambda e: e.position == 1, timeout=20)
    """
)

SECOND = "DIE = False\n" + MODEL


def test_killed_operators_resume_keeping_every_committed_row(tmp_path):
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run("%load_ext unity_nb")
        first.run(FIRST)
        assert first.value("[p.name for p in best.phases]") == ["best.score", "best.compare", "best.compare2"]
    finally:
        first.kill()
    second = Kernel(env={"UNITY_NB_STORE": store})
    try:
        second.run("%load_ext unity_nb")
        second.run(SECOND)
        second.run("history = %unity history")
        history = second.value("history[['name', 'status']].values.tolist()")
        assert ["best", "interrupted"] in history and ["keep", "interrupted"] in history
        out = second.run("best = %unity resume best\nkeep = %unity resume keep")
        assert "resumed from the store: 'best' (topk)" in out and "Kept 3 row(s)" in out
        assert second.value("(await best).tolist()") == ["item 35 .", "item 34 ."]
        assert second.value("list((await keep).index)") == ["n0", "n2", "n4"]
        asked = second.value("seen")
        assert not any("Rate this row" in t for t in asked)  # every score was committed: none asked again
        compared = [t for t in asked if "\nA:\n" in t]
        # items 12-35 (scored 1 or 2) met a pivot (23 pairs, all committed), then the 4 above it a round robin (6
        # pairs, 3 committed): the same rounds planned again from the same answers, only the 3 left asked
        assert len(compared) == 3 and second.value("best.exact") is True
        assert sorted(int(t.split("Is ")[1].split()[0]) for t in asked if "Decide" in t) == [3, 4, 5]
        assert second.value("best.kept") == 36 + 23 + 3 and second.value("keep.rows.kept") == 3
        second.run("fields = %unity resume fields\npairs = %unity resume pairs\nsummary = %unity resume summary")
        assert second.value("(await fields)['half'].tolist()") == [0, 0, 1, 1, 2, 2]
        found = second.value("list(zip((await pairs)['left'], (await pairs)['right']))")
        assert found == [["l0", "r0"], ["l1", "r1"], ["l2", "r2"], ["l3", "r3"]]
        assert second.value("(await summary).to_dict()") == {"a": "summary of a", "b": "summary of b",
                                                              "c": "summary of c"}
        asked = second.value("seen")
        assert sorted(int(t.split("Halve ")[1].split()[0]) for t in asked if "Give the fields" in t) == [3, 4, 5]
        assert sum("match true" in t for t in asked) == 16 - 2  # every pair: 4 blocked, 12 sampled; 2 committed
        assert [t.split("for the group ")[1].split()[0] for t in asked if "for the group" in t] == ["c"]
    finally:
        second.close()
