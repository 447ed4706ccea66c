"""The widget in a real kernel (jupyter_client), watched through the messages it sends, as a browser
receives them: it opens with the installed stylesheet under an id naming the version, a retry
shows while it is waited out and clears when the call proceeds, and a fragment cut off by Stop is
sent as such, and an interrupt of a cell awaiting an operation ends that cell (the operation goes on,
and the widget says so). Every wait has a timeout; nothing asserts how long anything took."""

import queue
import textwrap
import time

import pytest
from _kernel import running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio
    import unity_nb as u
    from unity_nb.models import Reply, retry_hook
    from unity_nb.jupyter._widget import style

    class Flaky:
        \"\"\"Fails once (announced as a retry), then waits for ``proceed``.\"\"\"
        name = "flaky"
        max_retries = 4

        def __init__(self):
            self.proceed = asyncio.Event()

        async def complete(self, request, on_delta=None):
            if not self.proceed.is_set():
                retry_hook.get()(1, "ConnectionRefusedError: connection refused", 2.0)
            await self.proceed.wait()
            return Reply(content="all good")

    flaky = Flaky()
    talker = u.ScriptedModel(["word " * 5000], chunk=2, delay=0.01)  # streams far longer than the test
    """
)
TIMEOUT = 20
PAUSE = 1.0  # seconds: a person's pause between two actions (input pacing only)


@pytest.fixture(scope="module")
def kernel():
    with running(SETUP) as k:
        yield k


def start(k, model, name):
    """Run ``name = %unity act ...`` with ``model`` (not waiting for its reply); return the widget's comm_open state."""
    k.run(f"%unity model --var {model}")
    k.kc.execute(f"{name} = %unity act --name {name} go")
    deadline = time.monotonic() + TIMEOUT
    while True:
        msg = k.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        content = msg["content"]
        if msg["msg_type"] == "comm_open" and content.get("target_name") == "jupyter.widget":
            state = content["data"]["state"]
            if state.get("_model_name") == "AnyModel":  # the first widget the cell opens (its nodes follow)
                return content["comm_id"], state


def watch(k, comm_id, pred, what):
    """Read what the widget sends (whatever cell it names as parent) until its first node satisfies ``pred``."""
    deadline = time.monotonic() + TIMEOUT
    node = None
    while node is None or not pred(node):
        left = deadline - time.monotonic()
        assert left > 0, f"the widget never sent {what}; it last sent {node}"
        try:
            msg = k.kc.get_iopub_msg(timeout=left)
        except queue.Empty:
            continue
        content = msg["content"]
        if msg["msg_type"] == "comm_msg" and content.get("comm_id") == comm_id:
            nodes = content["data"].get("state", {}).get("nodes")
            if nodes:
                node = nodes[0]
    return node


def test_the_widget_opens_with_the_installed_stylesheet_and_shows_a_retry_until_the_call_proceeds(kernel):
    k = kernel
    comm_id, state = start(k, "flaky", "flaky_run")
    # the id naming the version is in the state the widget opens with: a view rendered from it
    # finds the stylesheet's rules (they all name that id)
    assert [state["_anywidget_id"], state["_css"]] == k.value("list(style())")
    assert state["_anywidget_id"].startswith("unity_nb.HandleWidget.")
    watch(k, comm_id, lambda n: n["retry"] == "connection refused, retrying in 2 s, attempt 2 of 5", "the retry")
    k.kc.execute("flaky.proceed.set()")  # the retry goes through (read below, with the widget's messages)
    node = watch(k, comm_id, lambda n: n["status"] == "finished", "the end of the operation")
    assert node["retry"] == ""
    assert node["answer"] == "all good"


def test_a_fragment_cut_off_by_stop_is_sent_as_such(kernel):
    k = kernel
    comm_id, _ = start(k, "talker", "talk_run")
    k.run("await talk_run.wait_for('model_delta', lambda e: len(talk_run.state.streaming_text) > 40, timeout=20)")
    k.kc.execute("await talk_run.stop('enough')")
    node = watch(k, comm_id, lambda n: n["status"] == "stopped", "the badge 'stopped'")
    streamed = k.value("''.join(e.text for e in talk_run.events if e.kind == 'model_delta')")
    assert len(streamed) > 40 and node["cut_off"] == streamed
    assert node["streaming"] == ""


# a kernel with nothing else scheduled on its event loop (no extension, no store): only the wait is there
BARE = textwrap.dedent(
    """
    import asyncio
    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    async def never(messages, tools):
        await asyncio.Event().wait()  # a model that never answers
    """
)


def test_an_interrupt_ends_a_cell_awaiting_an_operation_at_once_and_the_widget_says_it_goes_on():
    """ipykernel#881: the SIGINT of an interrupt, taken by another thread of the kernel, left the main thread
    asleep in select while ``await h`` waited for a silent model: the cell ended 18 s later, or never."""
    with running(BARE) as k:
        k.kc.execute("quiet_run = u.start_loop('hi', model=u.ScriptedModel(never), name='quiet_run')\n"
                     "HandleWidget(quiet_run)")
        comm_id = None
        while comm_id is None:
            msg = k.kc.get_iopub_msg(timeout=TIMEOUT)
            content = msg["content"]
            if msg["msg_type"] == "comm_open" and content["data"].get("state", {}).get("_model_name") == "AnyModel":
                comm_id = content["comm_id"]
        # the cell says when it awaits (a cell's code runs once ipykernel watches for its interrupt)
        # (stop_on_error=False: the interrupted cell's error does not abort the cells sent after it)
        cell = k.kc.execute("print('awaiting', flush=True)\nawait quiet_run", stop_on_error=False)
        while True:  # the cell waits: then the person interrupts the kernel
            msg = k.kc.get_iopub_msg(timeout=TIMEOUT)
            if msg["parent_header"].get("msg_id") == cell and msg["msg_type"] == "stream":
                break
        # a person's pause before pressing interrupt (input pacing, not a wait for a result): the kernel's
        # main thread falls asleep in select, where the bug left it
        time.sleep(PAUSE)
        k.km.interrupt_kernel()
        # the cell's reply comes (the model never answers): an error, as ipykernel reports an async cell's interrupt
        reply = k.kc.get_shell_msg(timeout=TIMEOUT)
        while reply["parent_header"].get("msg_id") != cell:
            reply = k.kc.get_shell_msg(timeout=TIMEOUT)
        assert reply["content"]["status"] == "error", reply["content"]
        assert reply["content"]["ename"] in ("CancelledError", "KeyboardInterrupt"), reply["content"]["ename"]
        # the operation goes on, the handle counts the interrupted wait, and the widget says so
        notice = ""
        while "interrupted" not in notice:
            msg = k.kc.get_iopub_msg(timeout=TIMEOUT)
            content = msg["content"]
            if msg["msg_type"] == "comm_msg" and content.get("comm_id") == comm_id:
                notice = content["data"].get("state", {}).get("notice", notice)
        assert notice == (
            "The cell awaiting 'quiet_run' was interrupted; the operation goes on: "
            "stop it with the Stop button (or %unity stop quiet_run)."
        )
        assert k.value("[quiet_run.status.value, quiet_run.state.cancelled_waits]") == ["running", 1]
        k.run("await quiet_run.stop('done')")
