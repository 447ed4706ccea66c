"""In a real kernel (jupyter_client): random sequences of widget clicks (pause, interject, resume,
ask, stop), sent as the comm messages JupyterLab sends, at random spacings from none to about a
second (a person's pace: input, never a way to wait for something).

JupyterLab sends a widget's comm messages over a kernel subshell, and ipykernel runs one on the
subshell's thread (its own event loop) when the widget's last message out had a subshell parent
(issue 14: clicks handled there stalled the operation). So before some clicks the widget sends a
message from a cell run on a subshell, and the click that follows is handled on that thread.

Whatever the order, pace and thread of the clicks:

- each click's effect shows in the handle's events, in the order of the clicks (a Pause, Resume
  or Interject after Stop shows as an error in the widget instead);
- nothing stalls: the widget is watched through the messages it sends, without running a cell
  in the kernel (a cell would wake an event loop that a lost wake-up left asleep). Paused, left
  quiet for a second, then resumed by a click handled on the subshell, the operation makes a
  new model request; a Stop brings the widget's badge to "stopped";
- every Ask gets its answer.

Every wait has a timeout; nothing asserts how long anything took.
"""

import queue
import textwrap
import time

import pytest
from _kernel import needs_subshells, running
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

pytestmark = needs_subshells  # older kernels: clicks act when the kernel is idle (tests/test_clicks_idle.py)

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio
    import unity_nb as u

    def work_forever(messages, tools):
        if "You are inspecting" in str(messages[0]["content"]):  # answering an Ask
            return "it is working"
        done = [m for m in messages if m["role"] == "tool"]
        return u.Reply(content="working " * 8, tool_calls=[u.call_tool("work", n=len(done))])

    async def work(n: int) -> int:
        \"\"\"One step of work (slow enough that a click lands mid-tool as often as mid-call).\"\"\"
        await asyncio.sleep(0.2)
        return n + 1

    u.register_tool(work)
    worker = u.ScriptedModel(work_forever, chunk=6, delay=0.03)  # a step streams for about 0.4 s
    %unity model --var worker
    WIDGETS = get_ipython().magics_manager.registry["UnityMagics"].widgets

    async def until(pred, timeout=30):
        async with asyncio.timeout(timeout):
            while not pred():
                await asyncio.sleep(0.02)

    def steering(h):
        return [[e.action, e.message] for e in h.events if e.kind == "steering"]
    """
)

STOP_REASON = "stopped from the widget"
TIMEOUT = 20  # seconds for one thing to show
HESITATE = 1.0  # a person's pause before Resume: the call in flight ends and the kernel goes quiet
CLICKS = st.lists(
    st.tuples(
        st.sampled_from(["pause", "interject", "resume", "ask", "stop"]),
        st.floats(min_value=0, max_value=1.0),  # the pause before the click, in seconds
        st.booleans(),  # handled on the subshell's thread
    ),
    min_size=1,
    max_size=6,
)


@pytest.fixture(scope="module")
def kernel():
    with running(SETUP) as k:
        k.sub = k.subshell()
        k.runs = 0
        yield k


class Widget:
    """The widget as a browser sees it: the state it sends, and clicks sent to it."""

    def __init__(self, k, comm_id, node):
        self.k, self.comm_id, self.node_id = k, comm_id, node
        self.node = None  # the latest state of the operation's node, as last sent
        self.clicks = []

    def click(self, action, on_subshell=False):
        if on_subshell:  # the widget sends something from a cell on the subshell: the next click is handled there
            self.k.run_in_subshell(self.k.sub, "w.send({'from': 'a subshell'})")
        i = len(self.clicks)
        self.clicks.append(action)
        text = {"interject": f"note {i}", "ask": f"question {i}?"}.get(action)
        extra = {"text": text} if text else {}
        self.k.click(self.comm_id, subshell=self.k.sub, action=action, node=self.node_id, **extra)

    def shows(self, pred, what):
        """Read what the widget sends until its node satisfies ``pred`` (no cell runs meanwhile)."""
        deadline = time.monotonic() + TIMEOUT
        while self.node is None or not pred(self.node):
            left = deadline - time.monotonic()
            assert left > 0, f"the widget never showed {what}; it last showed {self.node}"
            try:
                msg = self.k.kc.get_iopub_msg(timeout=left)
            except queue.Empty:
                continue
            content = msg["content"]
            if msg["msg_type"] == "comm_msg" and content.get("comm_id") == self.comm_id:
                nodes = content["data"].get("state", {}).get("nodes")
                if nodes:
                    self.node = nodes[0]
        return self.node


def expect(clicks):
    """What the clicks do, in order: the steering events, the failing clicks, the notes, the asks.

    After Stop, an Ask still works (an ended operation can be asked about) and another Stop does
    nothing (stop is idempotent); Pause, Resume and Interject fail, and the widget says so."""
    steering, failing, notes, asks = [], [], [], []
    paused = stopped = False
    for i, action in enumerate(clicks):
        if stopped and action in ("pause", "resume", "interject"):
            failing.append(i)
        elif stopped and action == "stop":
            pass
        elif action == "pause":
            if not paused:
                steering.append(["pause", None])
            paused = True
        elif action == "resume":
            if paused:
                steering.append(["resume", None])
            paused = False
        elif action == "interject":
            notes.append(f"note {i}")
            steering.append(["interject", notes[-1]])
        elif action == "ask":
            asks.append(f"question {i}?")
            steering.append(["ask", asks[-1]])
        else:
            steering.append(["stop", STOP_REASON])
            stopped = True
    return steering, failing, notes, asks, paused, stopped


@settings(
    max_examples=10, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(clicks=CLICKS)
@example(clicks=[("pause", 0.0, False), ("interject", 1.0, True), ("resume", 1.0, True)])  # the quickstart's exercise
def test_random_clicks_at_a_persons_pace_never_stall(kernel, clicks):
    k = kernel
    k.runs += 1
    name = f"run{k.runs}"
    k.run(f"h = %unity act --name {name} --max-steps 10000 work until stopped\nw = WIDGETS[{name!r}]")
    w = Widget(k, *k.value("[w.model_id, h.id]"))
    shown = k.value("w.notice")  # (the first act of a kernel says that its plans run unasked)
    k.run("await h.wait_for('model_request', timeout=20)")

    for action, gap, on_subshell in clicks:
        time.sleep(gap)  # a person's pace (input, not synchronisation)
        w.click(action, on_subshell)
    *_, paused, stopped = expect(w.clicks)

    # no stall. The widget is watched through what it sends, with no cell run in the kernel
    # from the click to what it shows: a Stop among the clicks brings the badge to "stopped"
    if stopped:
        w.shows(lambda n: n["status"] == "stopped", "the badge 'stopped'")
    else:  # paused, left quiet, then resumed by a click on the subshell: a model request follows
        if not paused:
            w.click("pause")
        k.run(f"await until(lambda: w.clicks.performed >= {len(w.clicks)} and h.status == 'paused')")
        steps = k.value("h.steps")  # no step starts while paused
        time.sleep(HESITATE)
        w.click("resume", on_subshell=True)
        w.shows(
            lambda n: n["status"] == "running" and n["steps"] > steps,
            f"a model request after Resume (more than {steps} steps)",
        )
        time.sleep(0.3)
        w.click("stop", on_subshell=True)
        w.shows(lambda n: n["status"] == "stopped", "the badge 'stopped'")

    # every click was performed, in order, and each one's effect is in the events
    steering, failing, notes, asks, _paused, _stopped = expect(w.clicks)
    k.run(f"await until(lambda: w.clicks.performed >= {len(w.clicks)})")
    assert k.value("steering(h)") == steering
    assert k.value("[h.status, h.state.stop_reason]") == ["stopped", STOP_REASON]
    expected = [f"{w.clicks[i]}: cannot {w.clicks[i]} {name!r}: the loop is stopped" for i in failing]
    assert k.value("w.errors") == expected
    # the notice shows what went wrong, until a later click works: then what it said before
    last_failed = bool(failing) and failing[-1] == len(w.clicks) - 1
    assert k.value("w.notice") == (f"cannot {w.clicks[-1]} {name!r}: the loop is stopped" if last_failed else shown)
    # every note reached the model (unless Stop came first), every Ask got its answer
    for note in notes if not stopped else ():
        k.run(f"await h.wait_for('model_request', lambda e: {note!r} in (e.last_user or ''), timeout=20)")
    k.run(f"await until(lambda: [a['status'] for a in w.asks] == ['finished'] * {len(asks)}, timeout=20)")
    assert k.value("[[a['question'], a['answer']] for a in w.asks]") == [[q, "it is working"] for q in asks]
    assert k.value("[len(w.clicks.tasks), w.clicks.received, w.clicks.performed]") == [0, len(w.clicks), len(w.clicks)]
