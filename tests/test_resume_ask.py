"""%unity resume NAME of an Ask a dead kernel left interrupted started it again as an act: the read-only question
about another operation became an actor's run in this kernel, with plans on the notebook's variables run under this
kernel's approval (never, by default), and none of the snapshot it answered from. An Ask is not resumed: the error
says so and how to ask again."""


import pytest
from conftest import dead_kernel, kill, magics
from IPython.core.error import UsageError

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


async def test_an_interrupted_ask_is_not_resumed_as_an_act(ip, tmp_path):
    other, bus, silent = dead_kernel(ip)  # another "kernel" on the same file; it dies while its model thinks
    tour = u.start_loop("Walk.", model=u.ScriptedModel(silent), name="tour", bus=bus)
    await tour.wait_for("model_request", timeout=10)
    question = await tour.ask("What are you doing?", name="why", model=u.ScriptedModel(silent))
    await question.wait_for("model_request", timeout=10)
    kill(other)

    ip.user_ns["m"] = u.ScriptedModel(["an act's answer"])
    ip.run_line_magic("unity", "model --var m")
    with pytest.raises(UsageError, match="an Ask") as info:
        ip.run_line_magic("unity", "resume why")
    said = str(info.value)
    assert "%unity ask" in said and "tour" in said
    assert "why" not in magics(ip).handles  # nothing started
    silent.event.set()
    await question.stop()
    await tour.stop()
    other.close()
