"""%unity show VAR[...]: the variable a handle was assigned to names it (README's `%unity show labels[3]`).

`labels = %unity map ...` without `--name labels` is named h1, so `%unity show labels[1]` failed with
"the store has no loop 'labels[1]'": the variable now leads to the handle, and `labels[1]` is its row 1.
"""

from __future__ import annotations

import asyncio

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

import unity_nb as u


@pytest.fixture
def ip(monkeypatch, tmp_path):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "UNITY_NB_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("UNITY_NB_STORE", str(tmp_path / "state.db"))
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "unity_nb")
    yield shell
    shell.run_line_magic("unload_ext", "unity_nb")


async def test_show_takes_the_variable_a_handle_was_assigned_to(ip):
    ip.user_ns["m"] = u.ScriptedModel(lambda messages, tools: "label of " + messages[-1]["content"].split()[-1])
    ip.run_line_magic("unity", "model --var m")
    ip.user_ns["items"] = ["alpha", "beta", "gamma"]
    labels = ip.user_ns["labels"] = ip.run_line_magic("unity", "map items Label {value}")
    assert labels.name != "labels"
    assert (await asyncio.wait_for(labels, 10)).tolist() == ["label of alpha", "label of beta", "label of gamma"]
    row = ip.run_line_magic("unity", "show labels[1]")
    assert "Label beta" in row["content"].tolist() and "label of beta" in row["content"].tolist()
    whole = ip.run_line_magic("unity", "show labels")
    assert len(whole) >= 1
    with pytest.raises((UsageError, u.UserError)):
        ip.run_line_magic("unity", "show nothing_by_that_name[1]")


async def test_show_of_a_batch_says_which_answers_the_provider_cut(ip):
    """A row whose reply stopped at the max tokens is answered, and its reason says it was cut (as the store's rows
    do), in the batch shown from this kernel."""
    ip.user_ns["m"] = u.ScriptedModel(lambda messages, tools: u.Reply(
        content="an answer that st", finish_reason="length") if messages[-1]["content"].endswith("beta")
        else "whole answer")
    ip.run_line_magic("unity", "model --var m")
    ip.user_ns["items"] = ["alpha", "beta"]
    labels = ip.user_ns["labels"] = ip.run_line_magic("unity", "map items Label {value}")
    await asyncio.wait_for(labels, 10)
    whole = ip.run_line_magic("unity", "show labels")
    assert whole.iloc[:, 0].tolist() == ["whole answer", "an answer that st"]
    assert not isinstance(whole["reason"].iloc[0], str) and "finish_reason 'length'" in whole["reason"].iloc[1]
