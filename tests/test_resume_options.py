"""%unity resume after a dead kernel starts an act with the options its line gave (--max-steps, --multi,
--code-timeout, ...), not this kernel's defaults: the store keeps them with the operation's start."""

import asyncio

import pytest
from conftest import magics

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def _kernel_restarts(ip) -> u.Store:
    """The kernel dies and a new one loads the extension (a new instance, the dead session's process marked gone);
    returns a store of its own on the file, to be closed."""
    store = magics(ip).store
    store.flush()
    session = store.session
    ip.run_line_magic("unload_ext", "unity_nb")
    other = u.Store(store.path)
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (session,))
    ip.run_line_magic("load_ext", "unity_nb")
    return other


async def test_a_resumed_act_runs_with_the_options_it_was_started_with(ip):
    hold = asyncio.Event()

    async def first(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="x = 1", intent="start")
        await hold.wait()  # the kernel dies while the model thinks
        return "never"

    ip.user_ns["m"] = u.ScriptedModel(first)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name tour --max-steps 2 --code-timeout 7 --time-awareness Count.")
    await h.wait_for("model_request", lambda e: e.step >= 2, timeout=10)

    other = _kernel_restarts(ip)

    calls = []

    def second(messages, tools):  # a plan at every step it may: only --max-steps ends it
        calls.append(messages)
        return u.call_tool("execute_code", code="y = 2", intent="more") if tools else "done"

    ip.user_ns["m"] = u.ScriptedModel(second, name="another")
    ip.run_line_magic("unity", "model --var m")
    h2 = ip.run_line_magic("unity", "resume tour")
    notice = magics(ip).widgets["tour"].notice
    assert "options as it was started" in notice
    assert "ran with the model 'scripted' and continues with this kernel's, 'scripted:another'" in notice  # not silent
    assert await asyncio.wait_for(h2, 10) == "done"
    assert len(calls) == 2  # --max-steps 2, not the kernel's 30
    assert h2.tools.actor.code_timeout == 7
    resumed = other.events(kind="loop_started")[-1]  # the resumed run's start: as the first's, for a next resume
    assert resumed.name == "tour" and resumed.settings["max_steps"] == 2 and resumed.settings["time_awareness"] is True
    other.close()
    hold.set()
    await h.stop()


async def test_a_resumed_acts_notice_is_printed_without_widgets(ip, capsys):
    """With %config UnityMagics.show_widgets = False, what a resume said (messages rebuilt, plans, options) went to
    no widget and was never printed: a resumed act said nothing."""
    hold = asyncio.Event()

    async def first(messages, tools):
        await hold.wait()  # the kernel dies while the model thinks
        return "never"

    ip.user_ns["m"] = u.ScriptedModel(first)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name quiet Count.")
    await h.wait_for("model_request", timeout=10)
    _kernel_restarts(ip).close()
    magics(ip).show_widgets = False
    ip.user_ns["m"] = u.ScriptedModel(["done"])
    ip.run_line_magic("unity", "model --var m")
    capsys.readouterr()
    h2 = ip.run_line_magic("unity", "resume quiet")
    assert "resumed from the store: its interrupted run rebuilt" in capsys.readouterr().out
    assert await asyncio.wait_for(h2, 10) == "done"
    hold.set()
    await h.stop()


async def test_a_resumed_act_started_with_managers_reaches_them_again(ip):
    """``%unity act --managers``: resumed, its plans reach the managers still (``primitives.knowledge``, ...), though
    this kernel's default is without them."""
    hold = asyncio.Event()

    async def first(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="k = primitives.knowledge", intent="look")
        await hold.wait()  # the kernel dies while the model thinks
        return "never"

    ip.user_ns["m"] = u.ScriptedModel(first)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name keeper --managers Note the sales.")
    await h.wait_for("model_request", lambda e: e.step >= 2, timeout=10)
    assert "success: true" in h.transcript[-1].content  # its plans reach the managers

    other = _kernel_restarts(ip)
    assert magics(ip).managers is False  # this kernel's default: no managers

    def second(messages, tools):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if len(results) < 2:  # the first plan's result is in the rebuilt conversation
            return u.call_tool("execute_code", code="k2 = primitives.knowledge", intent="again")
        return results[-1]

    ip.user_ns["m"] = u.ScriptedModel(second)
    ip.run_line_magic("unity", "model --var m")
    h2 = ip.run_line_magic("unity", "resume keeper")
    answer = await asyncio.wait_for(h2, 10)
    assert answer.startswith("success: true"), answer
    assert "primitives.knowledge" in ip.user_ns["m"].requests[0].messages[0]["content"]  # told of them too
    resumed = other.events(kind="loop_started")[-1]  # recorded again, for a next resume
    assert resumed.name == "keeper" and resumed.settings["managers"] is True
    other.close()
    hold.set()
    await h.stop()
