"""Who steered, for every verb: a pause, a resume, an interjection or a question a tool's code asked for says which
tool (in the transcript, in what the model is told, in the event and in the store's rebuilt transcript), not the
person; the person's own steering, and a person's interjection a parent's model routes to its child, stay the
user's.

Every wait is on an event, with a timeout; nothing is timed."""

import asyncio

from conftest import Gate

import unity_nb as u
from unity_nb.store import Store

T = 10


def _steering(h) -> list[str]:
    return [m.content for m in h.transcript if m.kind in ("steering", "interjection")]


async def test_a_tool_pausing_resuming_and_interjecting_another_loop_is_that_tools_doing(tmp_path):
    bus = u.EventBus()
    store = Store(tmp_path / "s.db")
    store.attach(bus)
    gate = Gate(lambda m, t: "done")
    model = u.ScriptedModel(gate)
    other = u.start_loop("wait", model=model, name="other", bus=bus)
    await other.wait_for("model_request", timeout=T)

    async def hold_other() -> str:
        """Holds the other work, tells it something, and lets it go on."""
        await other.pause()
        await other.interject("use the newer figures")
        await other.resume()
        return "told it"

    script = lambda m, t: "done" if any(x["role"] == "tool" for x in m) else u.call_tool("hold_other")
    boss = u.start_loop("go", model=u.ScriptedModel(script), tools=[hold_other], name="boss", bus=bus)
    assert await asyncio.wait_for(boss.result(), T) == "done"
    by = "the tool hold_other of boss"
    assert _steering(other) == [f"[paused by {by}]", "use the newer figures", f"[resumed by {by}]"]
    steered = [(e.action, e.by) for e in other.events if e.kind == "steering"]
    assert steered == [("pause", by), ("interject", by), ("resume", by)]

    gate.event.set()  # its model answers: its next call is told who steered it, not "the user"
    assert await asyncio.wait_for(other.result(), T) == "done"
    told = "\n".join(str(m["content"]) for m in model.requests[-1].messages if m["role"] == "user")
    assert f"[interjection from {by}] use the newer figures" in told
    assert f"[paused by {by}]" in told and "by the user" not in told
    rebuilt = [m.content for m in store.transcript("other")]
    assert f"[paused by {by}]" in rebuilt and f"[resumed by {by}]" in rebuilt
    store.close()


async def test_a_tools_question_is_that_tools_and_the_persons_the_users(bus):
    held = asyncio.Event()

    async def answers(m, t):  # the loop asked about waits; the question's loop answers from its snapshot at once
        if str(m[0]["content"]).startswith("You are inspecting"):
            return "half way"
        await held.wait()
        return "never"

    other = u.start_loop("wait", model=u.ScriptedModel(answers), name="other", bus=bus)
    await other.wait_for("model_request", timeout=T)

    async def probe() -> str:
        """Asks the other work how far it is."""
        asked = await other.ask("how far are you?")
        return await asked.result()

    script = lambda m, t: "done" if any(x["role"] == "tool" for x in m) else u.call_tool("probe")
    boss = u.start_loop("go", model=u.ScriptedModel(script), tools=[probe], name="boss", bus=bus)
    assert await asyncio.wait_for(boss.result(), T) == "done"
    asked = await asyncio.wait_for(other.ask("and now?"), T)  # the person's
    assert await asyncio.wait_for(asked.result(), T) == "half way"
    assert _steering(other) == ["[asked by the tool probe of boss] how far are you?", "[asked by the user] and now?"]
    await asyncio.wait_for(other.stop(), T)
