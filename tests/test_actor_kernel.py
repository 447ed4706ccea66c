"""The CodeAct actor in a real kernel (jupyter_client): ``%unity act`` with a ScriptedModel whose
script chooses plans from what it sees; plans run in the kernel's namespace, the next cell
sees what they did, and the widget's Run/Skip clicks (comm messages, as a browser sends them)
gate them.

Every test synchronises on events (``h.wait_for``) or on the handle (``await h``), never on
sleeps. Each test creates the variables it uses, so the order of the tests does not matter.
"""

import re
import textwrap

import pytest
from _kernel import running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import json as _j
    import numpy as np
    import pandas as pd
    import unity_nb as u

    def _results(model):
        \"\"\"The tool results the model received, in order (from its latest request).\"\"\"
        return [m["content"] for m in model.requests[-1].messages if m["role"] == "tool"]

    def _widget(name):
        return get_ipython().magics_manager.registry['UnityMagics'].widgets[name]
    """
)


@pytest.fixture(scope="module")
def kernel():
    with running(SETUP) as k:
        yield k


def plans(*codes, answer="done"):
    """A cell defining ``script``: run ``codes`` one plan per step, then answer."""
    return textwrap.dedent(
        f"""
        def script(messages, tools):
            plans = {list(codes)!r}
            done = [m for m in messages if m["role"] == "tool"]
            if len(done) < len(plans):
                return u.call_tool("execute_code", code=plans[len(done)], intent=f"plan {{len(done) + 1}}")
            return {answer!r}
        """
    )


def reported(result: str) -> dict:
    """The variables a plan's tool result says it created, changed and deleted."""
    out: dict = {"created": set(), "changed": set(), "deleted": set()}
    section = None
    for line in result.splitlines():
        if line in ("variables created:", "variables changed:"):
            section = line.split()[1].rstrip(":")
        elif line.startswith("variables deleted: "):
            out["deleted"] = set(line.removeprefix("variables deleted: ").split(", "))
            section = None
        elif line.startswith("note: "):
            section = None
        elif section and line.startswith("- "):  # the variables sections come last
            out[section].add(line[2:].split(":", 1)[0])
    return out


def test_a_dataframe_a_plan_makes_is_there_for_the_next_cell_and_rows_never_reach_the_model(kernel):
    k = kernel
    k.run(textwrap.dedent(
        """
        _rng = np.random.default_rng(0)
        _n = 100_000
        sales_df = pd.DataFrame({
            "region": np.array(["north", "south", "east", "west"])[np.arange(_n) % 4],
            "product": [f"p{i % 97}" for i in range(_n)],
            "delta": _rng.integers(-100, 100, _n).astype(float),
        })
        sales_df.loc[[30, 10, 20], "delta"] = [-1000.0, -999.0, -998.0]
        sales_df.loc[99_998, "product"] = "ZQX-late-row-marker"
        """
    ))
    k.run(plans("worst = sales_df.nsmallest(3, 'delta')", answer="the three worst rows are in `worst`"))
    k.run("m1 = u.ScriptedModel(script)\n%unity model --var m1")
    k.run("h1 = %unity act --name sales find the 3 worst rows of sales_df by delta and keep them in `worst`")
    assert k.value("await h1") == "the three worst rows are in `worst`"

    # the next cell reads what the plan made
    assert k.value("type(worst).__name__") == "DataFrame"
    assert k.value("worst.index.tolist()") == [30, 10, 20]
    assert k.value("worst['delta'].tolist()") == [-1000.0, -999.0, -998.0]
    assert k.value("worst.columns.tolist()") == ["region", "product", "delta"]
    result = k.value("_results(m1)")[0]
    assert result.startswith("success: true") and "worst" in reported(result)["created"]

    # the model was told what sales_df is (its shape and columns) ...
    first = k.value("_j.dumps(m1.requests[0].messages)")
    assert "sales_df" in first and "(100,000, 3)" in first
    assert all(c in first for c in ("region: str", "product: str", "delta: float64"))
    # ... but never its rows: a value of a late row is in no request
    assert k.value("bool((sales_df['product'] == 'ZQX-late-row-marker').any())")
    assert k.value("len(m1.requests)") == 2
    marked = "[('ZQX-late-row-marker' in _j.dumps([r.messages, r.tools])) for r in m1.requests]"
    assert k.value(marked) == [False, False]


def test_a_plan_that_raises_keeps_exactly_the_changes_it_reports(kernel):
    k = kernel
    k.run(textwrap.dedent(
        """
        existing_list = [1, 2, 3]
        to_delete = "bye"
        keep_dict = {"a": 1}
        keep_frame = pd.DataFrame({"x": [1, 2]})
        untouched = 42
        """
    ))
    k.run(plans("a_new = 1\nexisting_list.append(9)\ndel to_delete\n1/0\nnever_made = 2", answer="it failed"))
    k.run("m2 = u.ScriptedModel(script)\n%unity model --var m2")
    k.run("_before = dict(get_ipython().user_ns)\nh2 = %unity act --name crash change a few things")
    assert k.value("await h2") == "it failed"

    # the tool result the model received: a failure reporting exactly what the plan did
    result = k.value("_results(m2)")[0]
    assert result.startswith("success: false")
    assert reported(result) == {"created": {"a_new"}, "changed": {"existing_list"}, "deleted": {"to_delete"}}
    # the traceback points at the plan's own line
    assert re.search(r'File "<plan crash #\d+>", line 4, in <module>\n\s+1/0\n', result), result
    assert "ZeroDivisionError: division by zero" in result
    assert "_executor.py" not in result and "never_made" not in result

    # the namespace: those changes, and nothing else (every user variable is the same object;
    # `primitives` and `final_answer` are the actor's own names, put there for each run)
    k.run(textwrap.dedent(
        """
        _ns = get_ipython().user_ns
        _user = lambda names: sorted(n for n in names
                                     if not n.startswith("_") and n not in ("primitives", "final_answer"))
        _diff = {
            "created": [n for n in _user(_ns) if n not in _before and n != "h2"],
            "deleted": [n for n in _user(_before) if n not in _ns],
            "rebound": [n for n in _user(_before) if n in _ns and _ns[n] is not _before[n]],
        }
        """
    ))
    diff = k.value("_diff")
    assert diff == {"created": ["a_new"], "deleted": ["to_delete"], "rebound": []}
    assert k.value("[a_new, existing_list, keep_dict, keep_frame['x'].tolist(), untouched]") == [
        1, [1, 2, 3, 9], {"a": 1}, [1, 2], 42,
    ]
    assert k.value("'never_made' in globals()") is False


def test_a_reference_reaches_a_json_tool_as_the_very_object_and_return_names_the_result(kernel):
    k = kernel
    k.run(textwrap.dedent(
        '''
        df = pd.DataFrame({"x": [1, 2, 3, 4]})
        ref_seen = []

        @u.tool
        def summarize(frame: pd.DataFrame, column: str) -> dict:
            """Row count and total of one column."""
            out = {"rows": len(frame), "total": int(frame[column].sum())}
            ref_seen.append({"arg": id(frame), "is_df": frame is df, "result": id(out)})
            return out

        def script(messages, tools):
            done = [m for m in messages if m["role"] == "tool"]
            if not done:
                return u.call_tool("summarize", frame="<<var:df>>", column="x", **{"return": "stats"})
            return "summarized"

        m3 = u.ScriptedModel(script)
        %unity model --var m3
        '''
    ))
    try:
        k.run("h3 = %unity act --name refs summarize df into stats")
        assert k.value("await h3") == "summarized"
        # the tool got df itself (no copy), and `stats` is the very object it returned
        assert k.value("[(s['arg'] == id(df), s['is_df'], s['result'] == id(stats)) for s in ref_seen]") == [
            [True, True, True]
        ]
        # the next cell sees the result under the name the model chose
        assert k.value("stats") == {"rows": 4, "total": 10}
        result = k.value("_results(m3)")[0]
        assert "[stored in variable `stats`; pass it on as <<var:stats>>]" in result
    finally:
        k.run("u.unregister_tool('summarize')")


def test_a_dataframe_tool_is_offered_only_once_a_dataframe_exists(kernel):
    k = kernel
    k.run(textwrap.dedent(
        '''
        for _name in [n for n, v in list(globals().items()) if isinstance(v, pd.DataFrame) and not n.startswith("_")]:
            del globals()[_name]

        @u.tool
        def top_rows(frame: pd.DataFrame, n: int = 3) -> str:
            """The first n rows of a table, as text."""
            return frame.head(n).to_string()
        '''
    ))
    k.run(plans("fresh_df = pd.DataFrame({'v': range(5)})", answer="made fresh_df"))
    k.run("m4 = u.ScriptedModel(script)\n%unity model --var m4")
    try:
        k.run("h4 = %unity act --name offer make a table")
        assert k.value("await h4") == "made fresh_df"
        names = k.value("[[t['function']['name'] for t in r.tools] for r in m4.requests]")
        assert names[0] == ["execute_code"]  # no DataFrame yet: top_rows is not offered
        assert names[1] == ["execute_code", "top_rows"]  # the plan made one
        frame_param = k.value(
            "[t for t in m4.requests[1].tools if t['function']['name'] == 'top_rows'][0]['function']['parameters']"
        )
        assert frame_param["properties"]["frame"]["enum"] == ["<<var:fresh_df>>"]
        assert "frame" in frame_param["required"]
    finally:
        k.run("u.unregister_tool('top_rows')")


def test_an_endless_plan_is_interrupted_by_code_timeout_and_the_run_goes_on(kernel):
    k = kernel
    k.run(plans(
        "while True:\n    pass",
        "import asyncio\nawait asyncio.sleep(0)\nwhile True:\n    pass",  # the same after an await
        "after_timeout = 'ok'",
        answer="recovered",
    ))
    k.run("m5 = u.ScriptedModel(script)\n%unity model --var m5")
    k.run("h5 = %unity act --name spin --code-timeout 0.5 spin forever")
    assert k.value("await h5", timeout=30) == "recovered"
    assert k.value("h5.status") == "finished"
    first, second, third = k.value("_results(m5)")
    for result, line in ((first, 1), (second, 3)):
        assert result.startswith("success: false") and "code_timeout=0.5" in result
        assert re.search(rf'File "<plan spin #\d+>", line [{line}{line + 1}], in <module>\n\s+(while True:|pass)\n',
                         result), result
    assert third.startswith("success: true")
    assert k.value("[e.success for e in h5.events if e.kind == 'code_executed']") == [False, False, True]
    # the kernel is alive and answers the next cell; the plan after the timeout ran
    assert k.run("print(6 * 7)").strip() == "42"
    assert k.value("after_timeout") == "ok"


def test_with_approval_first_a_plan_waits_for_the_run_click(kernel):
    k = kernel
    k.run(plans("approved_effect = 'ran'", "second_effect = 2", answer="both ran"))
    k.run("m6 = u.ScriptedModel(script)\n%unity model --var m6")
    k.run("h6 = %unity act --name appr --approval first set approved_effect")
    k.run("await h6.wait_for('approval_requested', timeout=20)")
    assert k.value("h6.status") == "waiting"
    assert k.value("'approved_effect' in globals()") is False
    comm_id, node = k.value("[_widget('appr').model_id, h6.id]")
    k.run("_widget('appr').flush()")
    approvals = k.value("_widget('appr').nodes[0]['approvals']")
    assert len(approvals) == 1 and approvals[0]["code"] == "approved_effect = 'ran'"
    assert k.value("[a['call_id'] for a in h6.inbox.approvals]") == [approvals[0]["call_id"]]
    assert k.value("'approved_effect' in globals()") is False  # still waiting

    k.click(comm_id, action="approve", node=node, call_id=approvals[0]["call_id"])
    assert k.value("(await h6.wait_for('approval_decided', timeout=20)).approved") is True
    assert k.value("await h6") == "both ran"
    assert k.value("[approved_effect, second_effect]") == ["ran", 2]
    # "first": only the first plan of the run waited
    assert k.value("[e.kind for e in h6.events].count('approval_requested')") == 1
    assert k.value("_results(m6)")[0].startswith("success: true")


def test_a_skip_click_tells_the_model_why_and_the_plan_never_runs(kernel):
    k = kernel
    k.run(plans("skipped_effect = 1", answer="ok, not doing it"))
    k.run("m7 = u.ScriptedModel(script)\n%unity model --var m7")
    k.run("h7 = %unity act --name skipper --approval first set skipped_effect")
    k.run("await h7.wait_for('approval_requested', timeout=20)")
    assert k.value("h7.status") == "waiting"
    comm_id, node, call_id = k.value("[_widget('skipper').model_id, h7.id, h7.inbox.approvals[0]['call_id']]")

    k.click(comm_id, action="skip", node=node, call_id=call_id, text="not on the production data")
    assert k.value("await h7") == "ok, not doing it"
    (result,) = k.value("_results(m7)")
    assert "skipped" in result and "did not run" in result and "not on the production data" in result
    assert k.value("'skipped_effect' in globals()") is False
    decided = k.value("[(e.approved, e.reason) for e in h7.events if e.kind == 'approval_decided']")
    assert decided == [[False, "not on the production data"]]


def test_sys_exit_and_keyboard_interrupt_in_a_plan_are_error_results(kernel):
    k = kernel
    k.run(plans("import sys\nsys.exit(3)", "raise KeyboardInterrupt", "survived = True", answer="still here"))
    k.run("m8 = u.ScriptedModel(script)\n%unity model --var m8")
    k.run("h8 = %unity act --name exits try to leave")
    assert k.value("await h8") == "still here"
    exit_result, interrupt_result, last = k.value("_results(m8)")
    assert exit_result.startswith("success: false") and "SystemExit: 3" in exit_result
    assert "sys.exit in a plan ends the plan, not the kernel" in exit_result
    assert interrupt_result.startswith("success: false") and "KeyboardInterrupt" in interrupt_result
    assert last.startswith("success: true")
    assert k.value("survived") is True
    assert k.run("print(sum(range(10)))").strip() == "45"
