"""Resuming after a restart says everything missing at once (issue 39, item 15), in real kernels (jupyter_client;
a loopback OpenAI-compatible server; every wait has a timeout).

A batch runs under a budget on a model of a server the notebook configured, at a price it set; its kernel dies.
In a new kernel with only the extension loaded, ``%unity resume`` names in one error everything it lacks: the items
its line reads, the model (its name and server as the store remembers them; never the key) and the model's price
(the one it had). With those given, the same line resumes it. The notebook saved while it ran says how to begin."""

import os
import textwrap

from _kernel import Kernel

SERVER = textwrap.dedent(
    f"""
    import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
    import unity_nb as u
    from fake_openai import FakeOpenAIServer, Reply
    from IPython.core.error import UsageError

    def handler(body):
        text = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        return Reply(content="label " + text.split()[-1], usage=(1_000_000, 0))  # $0.40 a row at 0.40/M

    server = FakeOpenAIServer(handler).start_in_thread()

    def refused(line):
        try:
            get_ipython().run_line_magic("unity", line)
        except UsageError as err:
            return str(err)
        return None
    """
)
FIRST = SERVER + textwrap.dedent(
    """
    %load_ext unity_nb
    u.set_price("house-model", input=0.40, output=0)
    m = u.OpenAIModel("house-model", base_url=server.base_url, api_key="sk-secret-test-key")
    %unity model --var m
    items = ["a", "b", "c"]
    """
)


def test_a_resume_after_a_restart_says_everything_it_lacks_at_once(tmp_path):
    env = {"UNITY_NB_STORE": str(tmp_path / "state.db")}
    k = Kernel(env=env)
    try:
        k.run(FIRST)
        k.run("labels = %unity map items --budget 0.40 --concurrency 1 Label {value}\n"
              "await labels.wait_for('budget_reached', timeout=20)\n"
              "await labels.wait_for('row_finished', timeout=20)")
        base_url = k.value("server.base_url")
        saved = k.value("u.jupyter._snapshot.render_html(labels)")  # what the notebook keeps while it runs
        assert "%load_ext unity_nb</code> then <code>%unity resume labels</code>" in saved
    finally:
        k.kill()
    k = Kernel(env=env)
    try:
        k.run(SERVER + "\n%load_ext unity_nb")
        told = k.value("refused('resume labels --budget 10')")
        assert told is not None and told.startswith("cannot resume 'labels' yet:\n- ")
        assert "this kernel has no `items`: re-create it" in told
        assert f"no model is configured: %unity model house-model --base-url {base_url}" in told
        assert "no price for 'house-model', which its budget needs: u.set_price('house-model', input=0.4, output=0)" \
            in told
        assert told.endswith("then %unity resume labels again") and len(told.splitlines()) == 5  # all, at once
        assert "sk-secret" not in told
        assert k.value("len(server.requests)") == 0  # nothing ran
        # given what it said (a server at a new address: the old one went with its kernel), it resumes
        k.run("items = ['a', 'b', 'c']\nu.set_price('house-model', input=0.40, output=0)\n"
              "m = u.OpenAIModel('house-model', base_url=server.base_url, api_key='sk-test')\n%unity model --var m")
        printed = k.run("h = %unity resume labels --budget 10\nresult = await h")
        assert "kept 1 row(s) finished before; 2 to run" in printed
        assert k.value("result.tolist()") == ["label a", "label b", "label c"]
    finally:
        k.close()
