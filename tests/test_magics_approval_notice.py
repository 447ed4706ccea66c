"""The first %unity act of a kernel that runs plans unasked says so, and names the safer setting (issue 28)."""

from __future__ import annotations

import asyncio

import pytest

import unity_nb as u


@pytest.fixture
def ip(stored_shell, monkeypatch):
    magics = type(stored_shell.magics_manager.registry["UnityMagics"])
    monkeypatch.setattr(magics, "_told_approval", False)  # a fresh kernel
    stored_shell.user_ns["m"] = u.ScriptedModel(lambda messages, tools: "done")
    stored_shell.run_line_magic("unity", "model --var m")
    return stored_shell


def widgets(ip):
    return ip.magics_manager.registry["UnityMagics"].widgets


async def test_the_first_act_that_runs_plans_unasked_says_so_once(ip):
    first = ip.run_line_magic("unity", "act --name one Say done")
    second = ip.run_line_magic("unity", "act --name two Say done")
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    notice = widgets(ip)["one"].notice
    assert "without asking (--approval never)" in notice
    assert "--approval first" in notice and '%config UnityMagics.approval = "first"' in notice
    assert "--approval" not in widgets(ip)["two"].notice  # once per kernel


async def test_an_act_that_asks_first_gets_no_notice(ip):
    h = ip.run_line_magic("unity", "act --name careful --approval first Say done")
    await asyncio.wait_for(h, 10)
    assert "--approval" not in widgets(ip)["careful"].notice


async def test_without_widgets_the_notice_is_printed(ip, capsys):
    ip.run_line_magic("config", "UnityMagics.show_widgets = False")
    try:
        h = ip.run_line_magic("unity", "act --name plain Say done")
        await asyncio.wait_for(h, 10)
    finally:
        ip.run_line_magic("config", "UnityMagics.show_widgets = True")
    assert "--approval first" in capsys.readouterr().out


async def test_an_act_refused_at_its_line_does_not_use_up_the_notice(ip):
    """The notice was marked as said before the act started: a first act refused at its line (its --name taken by a
    live operation) used it up, and the next act ran plans unasked without a word."""
    from IPython.core.error import UsageError

    go = asyncio.Event()

    async def slow(messages, tools):
        await go.wait()
        return "done"

    ip.user_ns["slow"] = u.ScriptedModel(slow)
    ip.run_line_magic("unity", "model --var slow")
    ip.user_ns["xs"] = ["a"]
    busy = ip.run_line_magic("unity", "map xs --name busy Say {value}")
    with pytest.raises(UsageError, match="busy is still running"):
        ip.run_line_magic("unity", "act --name busy Say done")
    go.set()
    h = ip.run_line_magic("unity", "act --name next Say done")
    await asyncio.wait_for(asyncio.gather(busy, h), 10)
    assert "without asking (--approval never)" in widgets(ip)["next"].notice
