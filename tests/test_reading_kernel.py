"""What a person reads in a notebook, in real kernels (jupyter_client; every wait has a timeout):

- ``await h`` on a failed operation shows the one line of its error and a hint, not its traceback through
  unity_nb's frames; ``%tb`` shows that traceback. A usage error is its one line and where the subcommand's help
  is (``%unity help SUB``), not the whole usage under it. Other errors are IPython's as ever, and unloading the
  extension puts back what was there.
- ``%unity show NAME`` for a batch gives its rows and answers: in the kernel that ran it, its result with each
  missing row's reason; in a later kernel, the rows the store recorded. The snapshot saved beside the widget holds
  the first rows too.
"""

from __future__ import annotations

import re
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


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cell(k, code, timeout=60):
    """Run a cell as a front end does: its reply's status, the error tracebacks it showed (lines, colours
    removed), and what it wrote to stderr."""
    errors: list[list[str]] = []
    stderr: list[str] = []

    def hook(msg):
        t, c = msg["msg_type"], msg["content"]
        if t == "error":
            errors.append([line for tb in c["traceback"] for line in ANSI.sub("", tb).splitlines()])
        elif t == "stream" and c["name"] == "stderr":
            stderr.append(c["text"])

    reply = k.kc.execute_interactive(code, timeout=timeout, output_hook=hook)
    return reply["content"]["status"], errors, "".join(stderr)


FAILING = textwrap.dedent(
    """
    %load_ext unity_nb
    import unity_nb as u

    def down(messages, tools):
        raise u.ModelError("the server answered 401: the API key was refused", status=401)

    m = u.ScriptedModel(down)
    %unity model --var m
    """
)


def test_a_failed_operation_is_one_line_in_the_cell_and_its_traceback_is_on_request():
    with running(FAILING) as k:
        k.run("h = %unity act --name north Which region?")
        status, errors, _ = _cell(k, "await h")
        assert status == "error"
        (shown,) = errors
        assert shown == [
            "ModelError: the server answered 401: the API key was refused", "(%tb shows where it was raised)",
        ]
        status, errors, _ = _cell(k, "%tb")  # asked for: every frame
        (whole,) = errors
        assert len(whole) > 10 and any("unity_nb" in line for line in whole)
        assert whole[-1].startswith("ModelError: the server answered 401")
        # an error of another kind keeps IPython's traceback
        status, errors, _ = _cell(k, "def f():\n    raise ValueError('mine')\nf()")
        assert any("raise ValueError('mine')" in line for line in errors[0])
        # unloading the extension puts back the shell's own handling
        k.run("%unload_ext unity_nb")
        status, errors, _ = _cell(k, "await h")
        assert len(errors[0]) > 10


def test_a_usage_error_is_its_line_and_where_the_help_is():
    with running(FAILING) as k:
        status, _errors, stderr = _cell(k, "%unity stop nosuch")
        assert status == "error"
        assert stderr.strip().splitlines() == [
            "UsageError: no operation named 'nosuch' (known: none yet)", "(%unity help stop shows its usage)",
        ]
        _status, _errors, stderr = _cell(k, "%unity map items --concurrency many Label {value}")
        assert stderr.strip().splitlines() == [
            "UsageError: option --concurrency takes a whole number of at least 1, not 'many'",
            "(%unity help map shows its usage)",
        ]


NAMED = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio
    import unity_nb as u

    go = asyncio.Event()

    async def wait(messages, tools):
        await go.wait()
        return "done"

    m = u.ScriptedModel(wait)
    %unity model --var m
    items = ["alpha", "beta"]
    """
)


def test_an_operation_is_named_after_the_variable_it_is_assigned_to():
    with running(NAMED) as k:
        k.run("labels = %unity map items Label {value}")
        assert k.value("labels.name") == "labels"
        k.run("first = %unity act One?\nsecond = %unity act Two?")
        assert k.value("[first.name, second.name]") == ["first", "second"]
        k.run("%unity act Three?")  # assigned to nothing: the next hN
        k.run("plain = %unity act --name chosen Four?")  # --name wins
        assert k.value("plain.name") == "chosen"
        k.run("labels = %unity map items Label {value}")  # labels runs still: a free name beside it
        assert k.value("labels.name") == "labels-2"
        k.run("for i in range(2):\n    looped = %unity act Five?")
        assert k.value("looped.name") == "looped-2"  # (the first looped still runs)
        names = k.value("list(get_ipython().magics_manager.registry['UnityMagics'].handles)")
        assert names == ["labels", "first", "second", "h1", "chosen", "labels-2", "looped", "looped-2"]
        k.run("go.set()\n_ = [await h for h in (labels, first, second, plain, looped)]")
        k.run("labels = %unity map items Label {value}")  # the one named labels has finished: its name is reused
        assert k.value("labels.name") == "labels"
        k.run("go.set()")
