"""What a plan cannot do is said to the model: ``input()`` (a plan cannot read from the person: it raised Python's
own EOFError, which told the model nothing it could act on), and threads it leaves running when it ends (said
nowhere)."""

import asyncio
import builtins
import threading

from conftest import tool_messages

import unity_nb as u
from unity_nb.events import CodeExecuted


def plans(*codes, answer="done"):
    """A script that runs each plan in turn, then answers."""

    def script(messages, tools):
        done = tool_messages(messages)
        if len(done) < len(codes):
            return u.call_tool("execute_code", code=codes[len(done)], intent=f"step {len(done) + 1}")
        return answer

    return script


def results(model):
    return [m["content"] for m in tool_messages(model.requests[-1].messages)]


async def test_input_in_a_plan_tells_the_model_it_cannot_read_from_the_person(bus, monkeypatch):
    monkeypatch.setattr(builtins, "input", lambda prompt="": "typed by the person")  # the console's input
    ns: dict = {}
    model = u.ScriptedModel(plans(
        "name = input('Your name? ')",
        "try:\n    name = input()\nexcept EOFError:\n    name = 'nobody'",  # caught: still said
        "import threading\n"
        "def read():\n    try:\n        input()\n    except EOFError as err:\n        out.append(str(err))\n"
        "out = []\nt = threading.Thread(target=read)\nt.start()\nt.join()\nout[0]",  # a thread the plan started
    ))
    h = u.act("Greet the person by name.", model=model, namespace=ns, bus=bus)
    assert await h == "done"
    failed, caught, threaded = results(model)
    assert failed.startswith("success: false") and "PlanInputUnavailable" in failed
    assert "input() cannot read from the person in a plan" in failed and "reply with your question" in failed
    assert "_plan_guard" not in failed.replace("unity_nb.actor._plan_guard.PlanInputUnavailable", "")  # its line only
    assert ns["name"] == "nobody"  # the second plan's
    assert caught.startswith("success: true") and "note: the plan called input() 1 time(s)" in caught
    assert "input() cannot read from the person in a plan" in threaded
    executed = [e for e in h.events if isinstance(e, CodeExecuted)]
    assert not executed[0].success and "cannot read from the person" in executed[0].error
    # outside a plan (a cell), input is the console's, as it was (a fake one here: it returns at once)
    assert builtins.input("Name? ") == "typed by the person"  # noqa: ASYNC250


async def test_threads_a_plan_leaves_running_are_said_to_the_model_and_in_its_event(bus):
    gate = threading.Event()
    ns: dict = {"gate": gate}
    model = u.ScriptedModel(plans(
        "import threading\n"
        "poller = threading.Thread(target=gate.wait, name='poller', daemon=True)\npoller.start()\n"
        "done = threading.Thread(target=print, args=('quick',), name='quick')\n"
        "done.start()\ndone.join()",  # waited for: not said
        "x = 1",  # starts none
    ))
    h = u.act("Poll in the background.", model=model, namespace=ns, bus=bus)
    assert await h == "done"  # the plan's end did not wait for its thread
    left, none = results(model)
    assert left.startswith("success: true")
    assert "note: 1 thread(s) the plan started still run after it ended (not waited for): poller." in left
    assert "quick" not in left.partition("note:")[2] and "thread" not in none
    first, second = [e for e in h.events if isinstance(e, CodeExecuted)]
    assert first.threads == ("poller",) and second.threads == ()
    gate.set()
    ns["poller"].join(10)


async def test_the_watchdogs_own_timers_are_not_taken_for_threads_the_plan_left(bus):
    """Off the main thread the watchdog times each synchronous stretch of a plan with a timer thread of its own: not
    the plan's, never said to be."""
    plan = "import asyncio\nfor _ in range(20):\n    await asyncio.sleep(0)\nx = 1"

    async def run():
        model = u.ScriptedModel([u.call_tool("execute_code", code=plan, intent="wait")] * 3 + ["done"])
        h = u.act("Wait a little.", model=model, namespace={}, code_timeout=30)
        assert await asyncio.wait_for(h, 10) == "done"
        return [e.threads for e in h.events if isinstance(e, CodeExecuted)], results(model)

    threads, told = await asyncio.to_thread(asyncio.run, run())  # an event loop off the main thread
    assert threads == [(), (), ()] and not any("thread" in r for r in told)
