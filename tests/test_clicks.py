"""The widget's clicks, in process: they may arrive on another thread (a kernel subshell's, which
runs its own event loop), they take effect on the handle's loop in the order they arrived, an
error in any of them reaches the widget's notice, and Stop ends the operation from any state
without waiting for an Ask in progress. Every wait has a timeout; nothing is timed."""

import asyncio
import threading

from conftest import settle, tool_messages

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget

TIMEOUT = 10


def forever(messages, tools):
    """Works one tick per step until told to FINISH; answers an Ask at once."""
    if "You are inspecting" in str(messages[0]["content"]):
        return "it is ticking"
    if "FINISH" in str(messages[-1]["content"]):
        return "finished as asked"
    return u.call_tool("tick", n=len(tool_messages(messages)))


async def tick(n: int) -> int:
    """One step of work."""
    await asyncio.sleep(0.01)
    return n + 1


def start(script=forever, tools=(tick,), name="job", **options):
    model = u.ScriptedModel(script, delay=0.01)
    h = u.start_loop("count", model=model, tools=list(tools), name=name, max_steps=10_000, **options)
    return h, HandleWidget(h)


def click(w, **content):
    """A click handled on the handle's own thread (the kernel's main shell)."""
    w._on_custom(w, content, [])


def click_from_subshell(w, *, later=False, **content):
    """A click handled the way a kernel subshell handles it: on its own thread, in its own event loop.

    With ``later``, the thread clicks a moment from now (a person's pace) while this loop sits
    idle, waiting for the click's effect: only a click that wakes the loop gets through.
    """

    async def handler():
        if later:
            await asyncio.sleep(0.2)
        w._on_custom(w, content, [])

    thread = threading.Thread(target=asyncio.run, args=(handler(),), daemon=True)
    thread.start()
    if not later:
        thread.join()


def steering(h):
    return [(e.action, e.message) for e in h.events if e.kind == "steering"]


async def after(h, kind, seq, pred=lambda e: True):
    return await h.wait_for(kind, lambda e: e.seq > seq and pred(e), timeout=TIMEOUT)


async def test_a_click_from_a_subshell_thread_steers_the_handle_on_its_own_loop():
    h, w = start()
    await h.wait_for("model_request", timeout=TIMEOUT)
    click_from_subshell(w, action="pause", node=h.id)
    paused = await h.wait_for("steering", lambda e: e.action == "pause", timeout=TIMEOUT)
    await after(h, "model_response", paused.seq)  # the call in flight ends ...
    await settle()  # ... and the loop has nothing left to do: only a click can wake it
    assert h.status.value == "paused"
    click_from_subshell(w, later=True, action="interject", node=h.id, text="FINISH now")
    await h.wait_for("steering", lambda e: e.action == "interject", timeout=TIMEOUT)
    click_from_subshell(w, later=True, action="resume", node=h.id)
    resumed = await h.wait_for("steering", lambda e: e.action == "resume", timeout=TIMEOUT)
    request = await after(h, "model_request", resumed.seq)
    assert "FINISH now" in request.last_user
    assert await asyncio.wait_for(h.result(), TIMEOUT) == "finished as asked"
    assert steering(h) == [("pause", None), ("interject", "FINISH now"), ("resume", None)]
    assert w.errors == [] and w.notice == ""


async def test_clicks_take_effect_in_the_order_they_arrived_whichever_thread_brings_them():
    h, w = start()
    await h.wait_for("model_request", timeout=TIMEOUT)
    notes = [f"note {i}" for i in range(8)]
    for i, note in enumerate(notes):
        (click_from_subshell if i % 2 == 0 else click)(w, action="interject", node=h.id, text=note)
    click(w, action="pause", node=h.id)
    click_from_subshell(w, action="stop", node=h.id)
    await h.wait_for("loop_finished", timeout=TIMEOUT)
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert steering(h) == [("interject", n) for n in notes] + [("pause", None), ("stop", "stopped from the widget")]
    assert w.clicks.received == w.clicks.performed == len(notes) + 2
    assert not w.clicks.tasks and w.errors == []


async def test_stop_is_not_held_up_by_an_ask_in_progress():
    gate = asyncio.Event()

    async def slow_to_answer(messages, tools):
        if "You are inspecting" in str(messages[0]["content"]):
            await gate.wait()
        return forever(messages, tools)

    h, w = start(slow_to_answer)
    await h.wait_for("model_request", timeout=TIMEOUT)
    click(w, action="ask", node=h.id, text="how far?")
    click(w, action="stop", node=h.id)
    await h.wait_for("loop_finished", timeout=TIMEOUT)
    assert h.status.value == "stopped"
    (_node, question, ask), = w._ask_handles
    assert question == "how far?" and not ask.done()  # the Ask is still waiting for its answer
    gate.set()
    assert await asyncio.wait_for(ask.result(), TIMEOUT) == "it is ticking"
    await settle()
    assert w.asks[0]["status"] == "finished" and w.asks[0]["answer"] == "it is ticking"


async def test_every_failing_click_reaches_the_notice():
    async def broken_inspector(messages, tools):
        if "You are inspecting" in str(messages[0]["content"]):
            raise RuntimeError("the inspector broke")
        return forever(messages, tools)

    h, w = start(broken_inspector)
    await h.wait_for("model_request", timeout=TIMEOUT)
    click(w, action="dance", node=h.id)
    click_from_subshell(w, action="pause", node="nope")
    click(w, action="interject", node=h.id, text="  ")
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert w.errors == [
        "dance: unknown widget action 'dance'",
        "pause: no operation 'nope' in the widget of 'job'",
        "interject: interject needs a non-empty message",
    ]
    assert w.notice == "interject needs a non-empty message"
    click(w, action="pause", node=h.id)  # a click that works clears the notice
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert w.notice == ""
    click(w, action="ask", node=h.id, text="status?")  # the Ask starts, its answer fails later
    await h.wait_for("steering", lambda e: e.action == "ask", timeout=TIMEOUT)
    ask = w._ask_handles[0][2]
    await asyncio.wait_for(asyncio.wait({asyncio.ensure_future(ask.result())}), TIMEOUT)
    await asyncio.wait_for(asyncio.gather(*w.clicks.tasks), TIMEOUT)
    assert "the inspector broke" in w.notice and "the inspector broke" in w.errors[-1]
    click(w, action="stop", node=h.id)
    click(w, action="resume", node=h.id)  # after Stop: shown, not raised
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert h.status.value == "stopped"
    assert w.notice == "cannot resume 'job': the loop is stopped"


async def test_a_click_that_works_clears_a_failed_clicks_notice_not_another_notice():
    """A click that worked cleared the notice whatever it said: the store's problem (events waiting to be written,
    a full disk) vanished at a Pause while the disk was still full, as did a budget's note or the notice that the
    operation replaced an earlier one."""
    h, w = start()
    await h.wait_for("model_request", timeout=TIMEOUT)
    store_problem = "store: events wait to be written: the disk is full"
    w.notice = store_problem  # as UnityMagics._store_problem sets it
    click(w, action="pause", node=h.id)
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert h.status.value == "paused" and w.notice == store_problem
    click(w, action="interject", node=h.id, text="  ")  # fails: its error is the notice now ...
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert w.notice == "interject needs a non-empty message"
    click(w, action="resume", node=h.id)  # ... and a click that works clears it: the store's problem shows again
    await asyncio.wait_for(w.clicks.settled(), TIMEOUT)
    assert w.notice == store_problem
    await h.stop()


async def test_stop_ends_the_operation_from_every_state():
    never = asyncio.Event()

    async def stuck_model(messages, tools):
        await never.wait()

    async def stuck_tool() -> str:
        """Never returns by itself."""
        await never.wait()
        return "never"

    async def confirm(ctx: u.ToolContext) -> str:
        """Asks the person."""
        return await ctx.clarify("Proceed?")

    def calls(name):
        return lambda m, t: u.call_tool(name) if not tool_messages(m) else "done"

    paused, w_paused = start(name="paused")
    await paused.wait_for("model_request", timeout=TIMEOUT)
    click(w_paused, action="pause", node=paused.id)
    await paused.wait_for("model_response", timeout=TIMEOUT)

    waiting, w_waiting = start(calls("confirm"), tools=[confirm], name="waiting")
    await asyncio.wait_for(waiting.inbox.next_question(), TIMEOUT)

    in_call, w_in_call = start(stuck_model, name="in_call")
    await in_call.wait_for("model_request", timeout=TIMEOUT)

    in_tool, w_in_tool = start(calls("stuck_tool"), tools=[stuck_tool], name="in_tool")
    await in_tool.wait_for("tool_started", timeout=TIMEOUT)

    assert [h.status.value for h in (paused, waiting, in_call, in_tool)] == ["paused", "waiting", "running", "running"]
    for h, w in ((paused, w_paused), (waiting, w_waiting), (in_call, w_in_call), (in_tool, w_in_tool)):
        click_from_subshell(w, action="stop", node=h.id)
        await h.wait_for("loop_finished", timeout=TIMEOUT)
        assert h.status.value == "stopped", h.name
        await settle()
        assert w.nodes[0]["status"] == "stopped" and w.errors == [], h.name
