"""%unity topk and %unity filter killed mid-way in a real kernel and resumed in a new one: the rows their maps
committed are kept (no question asked twice), the rest asked, and the answers are the same as an unbroken run's."""

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
            if DIE and sum("\\nA:\\n" in t for t in seen) == 4:
                hung.set()
                await asyncio.Event().wait()  # the kernel dies while this comparison runs
            a, b = (int(text.split(f"\\n{s}:\\n")[1].split()[1]) for s in "AB")
            return u.call_tool("submit_answer", better="A" if a > b else "B", reason="bigger")
        if "Decide for this row" in text:
            n = int(text.split("Is ")[1].split()[0])
            if DIE and n == 3:
                await asyncio.Event().wait()  # and while this row runs
            return u.call_tool("submit_answer", keep=n % 2 == 0, reason="parity")
        return u.call_tool("submit_answer", score=int(text.split("item ")[-1].split()[0]) % 11, reason="r")


    m = u.ScriptedModel(answer)
    %unity model --var m
    items = [f"item {i} ." for i in range(12)]
    numbers = pd.Series(range(6), index=[f"n{i}" for i in range(6)], name="n")
    """
)

FIRST = "DIE = True\n" + MODEL + textwrap.dedent(
    """
    best = %unity topk items 2 --concurrency 1 --name best Which item is biggest?
    keep = %unity filter numbers --concurrency 1 --name keep Is {n} even?
    await asyncio.wait_for(hung.wait(), 30)
    await best.phase.wait_for("row_finished", lambda e: e.position == 2, timeout=20)
    await keep.wait_for("row_finished", lambda e: e.position == 2, timeout=20)
    """
)

SECOND = "DIE = False\n" + MODEL


def test_a_killed_topk_and_filter_resume_keeping_every_committed_row(tmp_path):
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run("%load_ext unity_nb")
        first.run(FIRST)
        assert first.value("[p.name for p in best.phases]") == ["best.score", "best.screen"]
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
        assert second.value("(await best).tolist()") == ["item 10 .", "item 9 ."]
        assert second.value("list((await keep).index)") == ["n0", "n2", "n4"]
        asked = second.value("seen")
        assert not any("Rate this row" in t for t in asked)  # every score was committed: none asked again
        screen = [t for t in asked if "\nA:\n" in t]
        # items 6-10 screened (10 pairs, 3 committed), then the 4 best in a round robin (6 pairs)
        assert len(screen) == 10 - 3 + 6
        assert sorted(int(t.split("Is ")[1].split()[0]) for t in asked if "Decide" in t) == [3, 4, 5]
        assert second.value("best.kept") == 12 + 3 and second.value("keep.kept") == 3
    finally:
        second.close()
