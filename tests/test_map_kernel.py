"""%unity map killed and resumed in real kernels (issue 26 item 1 and 6, issue 24 item 5): a batch run to the
end, its data changed, the same line run again under the same name and killed mid-way; in a new kernel
history says what died, a resume before the data exists says what to re-create, and the resume returns no
stale answer (rows sharing a label keep their own)."""

import textwrap

from _kernel import Kernel

FIRST = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio, pandas as pd, unity_nb as u

    def make(texts):
        return pd.DataFrame({"text": texts}, index=["x", "x", "y", "y", "z", "z"])  # labels shared by two rows

    run = "run1"
    hang = asyncio.Event()

    async def first(messages, tools):
        text = messages[-1]["content"].split("\\n\\n")[-1]
        if run == "run2" and text == "new 3":
            await hang.wait()  # the kernel dies while this row runs
        return f"{run}: {text}"

    m1 = u.ScriptedModel(first)
    %unity model --var m1
    df = make([f"old {i}" for i in range(6)])
    lab = %unity map df.text --concurrency 1 --name lab Label the sentiment
    await lab
    """
)

SECOND_RUN = textwrap.dedent(
    """
    run = "run2"
    df = make([f"new {i}" for i in range(6)])
    lab = %unity map df.text --concurrency 1 --name lab Label the sentiment
    await lab.wait_for("row_finished", lambda e: e.position == 2, timeout=20)
    """
)

AFTER = textwrap.dedent(
    """
    %load_ext unity_nb
    import pandas as pd, unity_nb as u
    from IPython.core.error import UsageError

    seen = []

    def second(messages, tools):
        text = messages[-1]["content"].split("\\n\\n")[-1]
        seen.append(text)
        return f"again: {text}"

    m2 = u.ScriptedModel(second)
    %unity model --var m2
    history = %unity history
    try:
        %unity resume lab
    except UsageError as err:
        refused = str(err)
    """
)


def test_a_killed_batch_rerun_under_its_name_with_changed_data_resumes_with_no_stale_answer(tmp_path):
    store = str(tmp_path / "state.db")
    first = Kernel(env={"UNITY_NB_STORE": store})
    try:
        first.run(FIRST)
        first.run(SECOND_RUN)
    finally:
        first.kill()
    second = Kernel(env={"UNITY_NB_STORE": store})
    try:
        second.run(AFTER)
        history = second.value("history[['name', 'status', 'rows']].values.tolist()")
        assert [h[:2] for h in history] == [["lab", "finished"], ["lab", "interrupted"]]  # no line per row loop
        assert history[1][2].startswith("3 finished, 0 failed; 1 running when its kernel died")
        refused = second.value("refused")
        assert "this kernel has no `df`: re-create it" in refused and "%unity resume lab" in refused
        out = second.run(
            'df = pd.DataFrame({"text": [f"new {i}" for i in range(6)]}, index=["x", "x", "y", "y", "z", "z"])\n'
            "lab = %unity resume lab"
        )
        assert "kept 3 row(s) finished before; 3 to run" in out and "1 running" in out
        result = second.value("(await lab).tolist()")
        assert result == ["run2: new 0", "run2: new 1", "run2: new 2", "again: new 3", "again: new 4", "again: new 5"]
        assert second.value("sorted(seen)") == ["new 3", "new 4", "new 5"]
        assert second.value("list((await lab).index)") == ["x", "x", "y", "y", "z", "z"]
    finally:
        second.close()
