"""An operation's Asks (``%unity ask NAME ...``, the widget's Ask button) are operations of the magics like the
others: ``%unity list`` lists each with its state, and ``%unity stop`` reaches it by name, one whose model call
hangs too (it ends saying it was stopped; the operation asked about goes on)."""

import asyncio

import pytest
from conftest import magics, settle

import unity_nb as u

T = 10


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def _script(work: asyncio.Event, never: asyncio.Event):
    """The operation's calls wait for ``work``; an Ask's (its question starts "how far") hang on ``never``."""

    async def script(messages, tools):
        if messages[-1]["content"].startswith("how far"):
            await never.wait()  # the test never sets it: this model call hangs
            return "never answered"
        await work.wait()
        return "the job is done"

    return script


async def _asked(ip, job, work, never):
    """An Ask from the line and one from the operation's widget, each hanging in its model call."""
    ip.user_ns["m"] = u.ScriptedModel(_script(work, never))
    ip.run_line_magic("unity", "model --var m")
    by_line = ip.run_line_magic("unity", f"ask {job} how far along are you?")
    await by_line.wait_for("model_request", timeout=T)
    widget = magics(ip).widgets[job]
    handle = widget.handle
    widget._on_custom(widget, {"action": "ask", "node": handle.id, "text": "how far, asked in the widget?"}, [])
    await handle.wait_for("steering", lambda e: e.action == "ask" and "widget" in (e.message or ""), timeout=T)
    await settle()
    return by_line, widget


async def test_asks_are_listed_with_their_state_like_every_operation(ip):
    work, never = asyncio.Event(), asyncio.Event()
    ip.user_ns["m"] = u.ScriptedModel(_script(work, never))
    ip.run_line_magic("unity", "model --var m")
    job = ip.run_line_magic("unity", "act --name job do the job")
    await job.wait_for("model_request", timeout=T)
    by_line, _widget = await _asked(ip, "job", work, never)
    table = ip.run_line_magic("unity", "list")
    assert list(table["name"]) == ["job", "ask-job", "ask-job-2"]  # the second, asked while the first runs
    assert list(table["status"]) == ["running"] * 3
    assert list(table["task"])[1:] == ["how far along are you?", "how far, asked in the widget?"]
    assert by_line.name == "ask-job"
    work.set()
    assert await asyncio.wait_for(job.result(), T) == "the job is done"
    for name in ("ask-job", "ask-job-2"):
        ip.run_line_magic("unity", f"stop {name}")
    await asyncio.wait_for(by_line.wait_for("loop_finished", timeout=T), T)
    await magics(ip).handles["ask-job-2"].wait_for("loop_finished", timeout=T)
    table = ip.run_line_magic("unity", "list")
    assert list(table["status"]) == ["finished", "stopped", "stopped"]


async def test_a_hanging_ask_is_stopped_by_name_and_ends_saying_so(ip):
    work, never = asyncio.Event(), asyncio.Event()
    ip.user_ns["m"] = u.ScriptedModel(_script(work, never))
    ip.run_line_magic("unity", "model --var m")
    job = ip.run_line_magic("unity", "act --name job do the job")
    await job.wait_for("model_request", timeout=T)
    by_line, widget = await _asked(ip, "job", work, never)
    from_widget = magics(ip).handles["ask-job-2"]
    await from_widget.wait_for("model_request", timeout=T)
    ip.run_line_magic("unity", "stop ask-job")
    with pytest.raises(u.Stopped, match="stopped with %unity stop"):
        await asyncio.wait_for(by_line.result(), T)
    assert by_line.status == "stopped" and not from_widget.done() and not job.done()
    ip.run_line_magic("unity", "stop ask-job-2 not needed any more")
    with pytest.raises(u.Stopped, match="not needed any more"):
        await asyncio.wait_for(from_widget.result(), T)
    widget.flush()
    assert [a["status"] for a in widget.asks] == ["stopped"]  # the widget's Ask says it was stopped
    assert not job.done()  # the operation asked about goes on
    work.set()
    assert await asyncio.wait_for(job.result(), T) == "the job is done"
