"""Options of a ``%unity`` line that were accepted and then did nothing: each now does what it says, or the line is
refused saying what to do."""

import asyncio

import pytest
from conftest import magics
from IPython.core.error import UsageError

import unity_nb as u

T = 10


@pytest.fixture
def ip(stored_shell):
    return stored_shell


async def test_resume_budget_of_an_interrupted_act_from_the_store_is_refused_not_dropped(ip, tmp_path):
    hold = asyncio.Event()

    async def thinking(messages, tools):
        await hold.wait()  # its kernel dies while the model thinks
        return "never"

    other = u.Store(str(tmp_path / "state.db"))  # another kernel on the same file
    bus = u.EventBus()
    other.attach(bus)
    model = u.ScriptedModel(thinking, name="priced-48")
    u.set_price("scripted:priced-48", input=1.0, output=1.0)  # a budget could be counted: only its kind refuses it
    tour = u.act("Compute the answer.", model=model, name="tour", bus=bus, namespace={})
    await tour.wait_for("model_request", timeout=T)
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone
    ip.user_ns["m"] = u.ScriptedModel(lambda messages, tools: "the answer is 42", name="priced-48")
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match=r"--budget is for a batch .*which 'tour' is not.*leave out --budget"):
        ip.run_line_magic("unity", "resume tour --budget 5")
    assert "tour" not in magics(ip).handles  # nothing started
    resumed = ip.run_line_magic("unity", "resume tour")  # without it, it resumes
    assert await asyncio.wait_for(resumed.result(), T) == "the answer is 42"
    hold.set()
    await tour.stop()
    other.close()
