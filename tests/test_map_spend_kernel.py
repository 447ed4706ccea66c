"""%unity map's spending in a real kernel (issue 27): --estimate prints and runs nothing, --budget pauses the
batch and %unity resume refuses until --budget lifts the cap, answers come from the store's cache on a rerun
(--no-cache asks again), and --columns takes a type per column."""

import os
import textwrap

from _kernel import Kernel

SETUP = textwrap.dedent(
    f"""
    import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
    %load_ext unity_nb
    import unity_nb as u
    from fake_openai import FakeOpenAIServer, Reply
    from IPython.core.error import UsageError

    def handler(body):
        text = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        return Reply(content="label " + text.split()[-1], usage=(1_000_000, 0))  # $0.40 a row at gpt-4.1-mini

    server = FakeOpenAIServer(handler).start_in_thread()
    m = u.OpenAIModel("gpt-4.1-mini", base_url=server.base_url, api_key="sk-test")
    %unity model --var m
    items = ["a", "b", "c"]

    def refused(line):
        try:
            get_ipython().run_line_magic("unity", line)
        except UsageError as err:
            return str(err)
        return None
    """
)


def test_estimate_budget_resume_cache_and_typed_columns_through_the_magics(tmp_path):
    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / "state.db")})
    try:
        k.run(SETUP)
        printed = k.run("%unity map items --estimate --rate 60/min Label {value}")
        assert "Estimate for 3 rows of gpt-4.1-mini (nothing was run)" in printed
        assert "tokens in (estimated" in printed and "$" in printed and "60 requests/min" in printed
        assert k.value("len(server.requests)") == 0
        k.run("h = %unity map items --budget 0.40 --concurrency 1 --name spend Label {value}\n"
              "await h.wait_for('budget_reached', timeout=20)\n"
              "await h.wait_for('row_finished', timeout=20)")
        assert k.value("[h.status.value, h.progress['done'], h.progress['budget_reached']]") == ["paused", 1, True]
        told = k.value("refused('resume spend')")
        assert "paused at its budget" in told and "--budget" in told and "set_budget" in told
        assert "takes dollars" in k.value("refused('resume spend --budget lots')")
        k.run("%unity resume spend --budget 10\nawait h")
        assert k.value("(await h).tolist()") == ["label a", "label b", "label c"]
        assert k.value("len(server.requests)") == 3
        # the same rows, model and task again: from the store's cache, no call
        k.run("again = %unity map items --concurrency 1 Label {value}\nawait again")
        assert k.value("[again.progress['cached'], len(server.requests)]") == [3, 3]
        k.run("fresh = %unity map items --no-cache Label {value}\nawait fresh")
        assert k.value("[fresh.progress['cached'], len(server.requests)]") == [0, 6]
        assert "str, int, float and bool" in k.value("refused('map items --columns a,n:complex Label {value}')")
        k.run("typed = %unity map items --columns word,n:int Label {value}")
        assert k.value("list(typed.rows.plan.output.model_fields)") == ["word", "n"]
        assert k.value("typed.rows.plan.output.model_fields['n'].annotation.__name__") == "int"
        k.run("await typed.stop('enough')") if not k.value("typed.done()") else None
    finally:
        k.close()


def test_a_batch_paused_at_its_budget_when_its_kernel_died_resumes_with_a_new_cap(tmp_path):
    env = {"UNITY_NB_STORE": str(tmp_path / "state.db")}
    k = Kernel(env=env)
    try:
        k.run(SETUP)
        k.run("h = %unity map items --budget 0.40 --concurrency 1 --name capped Label {value}\n"
              "await h.wait_for('budget_reached', timeout=20)\n"
              "await h.wait_for('row_finished', timeout=20)")
        assert k.value("h.progress['done']") == 1
    finally:
        k.kill()
    k = Kernel(env=env)
    try:
        k.run(SETUP)
        printed = k.run("h = %unity resume capped --budget 10\nawait h")
        assert "kept 1 row(s) finished before; 2 to run" in printed
        assert k.value(
            "[(await h).tolist(), h.spending.budget, h.progress['budget_reached'], len(server.requests)]") == [
            ["label a", "label b", "label c"], 10.0, False, 2]
    finally:
        k.close()


def test_a_batch_paused_at_its_budget_when_its_kernel_died_stays_paused_until_the_cap_is_lifted(tmp_path):
    env = {"UNITY_NB_STORE": str(tmp_path / "state.db")}
    k = Kernel(env=env)
    try:
        k.run(SETUP)
        k.run("h = %unity map items --budget 0.40 --concurrency 1 --name held Label {value}\n"
              "await h.wait_for('budget_reached', timeout=20)\n"
              "await h.wait_for('row_finished', timeout=20)")
        assert k.value("[h.progress['done'], len(server.requests)]") == [1, 1]
    finally:
        k.kill()
    k = Kernel(env=env)
    try:
        k.run(SETUP)
        told = k.value("refused('resume held')")  # its line's cap, and what its dead kernel spent: still reached
        assert told is not None and "paused at its budget: $0.40 spent of $0.40" in told
        assert "%unity resume held --budget DOLLARS" in told and k.value("len(server.requests)") == 0
        printed = k.run("h = %unity resume held --budget 0.80\n"
                        "await h.wait_for('budget_reached', timeout=20)\n"
                        "await h.wait_for('row_finished', lambda e: e.position == 1, timeout=20)")
        assert "$0.40 spent before counts against its budget" in printed
        # one more row: $0.40 before and $0.40 now reach the cap of $0.80
        assert k.value(
            "[h.progress['done'], h.rows.kept, h.spending.reached, round(h.spending.spent, 2), len(server.requests)]"
        ) == [
            2, 1, True, 0.8, 1]
        assert "paused at its budget" in k.value("refused('resume held')")
    finally:
        k.kill()
    k = Kernel(env=env)
    try:
        k.run(SETUP)
        told = k.value("refused('resume held --budget 0.80')")  # both dead runs count
        assert told is not None and "$0.80 spent of $0.80" in told
        k.run("h = %unity resume held --budget 10\nawait h")
        assert k.value("[(await h).tolist(), h.rows.kept, len(server.requests)]") == [
            ["label a", "label b", "label c"], 2, 1]
    finally:
        k.close()
