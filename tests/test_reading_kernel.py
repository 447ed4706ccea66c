"""What a person reads in a notebook, in real kernels (jupyter_client; every wait has a timeout):

- ``%unity show NAME`` for a batch gives its rows and answers: in the kernel that ran it, its result with each
  missing row's reason; in a later kernel, the rows the store recorded. The snapshot saved beside the widget holds
  the first rows too.
"""

from __future__ import annotations

import textwrap

from _kernel import Kernel, running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import unity_nb as u

    def label(messages, tools):
        word = messages[-1]["content"].split()[-1]
        if word == "gamma":
            raise ValueError("no label for gamma")
        return "label of " + word

    m = u.ScriptedModel(label)
    %unity model --var m
    items = ["alpha", "beta", "gamma", "delta"]
    """
)


def test_show_gives_a_batchs_rows_and_answers_here_and_in_a_later_kernel(tmp_path):
    env = {"UNITY_NB_STORE": str(tmp_path / "state.db")}
    with running(SETUP, env=env) as k:
        k.run("labels = %unity map items --name labels Label {value}\n_ = await labels", timeout=60)
        k.run("t = %unity show labels")
        assert k.value("t['answer'].tolist()") == ["label of alpha", "label of beta", None, "label of delta"]
        assert "no label for gamma" in k.value("t['reason'][2]")
        snapshot = k.value("u.jupyter._snapshot.render_html(labels)")  # the output saved beside the widget
        assert "first rows" in snapshot and "label of delta" in snapshot
    later = Kernel(env=env)
    try:
        later.run("%load_ext unity_nb")
        later.run("t = %unity show labels")
        assert later.value("t['answer'].tolist()") == ["label of alpha", "label of beta", None, "label of delta"]
        assert later.value("t['status'].tolist()") == ["finished", "finished", "failed", "finished"]
    finally:
        later.close()
