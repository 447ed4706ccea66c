"""In a real kernel: what the widget says about clicks while a cell runs, with and without kernel subshells.

JupyterLab sends clicks over kernel subshells (ipykernel 7 and later), so they act while a cell blocks on
``await h``. Without subshells (older ipykernels, as Colab pins; VS Code's front end) a click waits in the
kernel's queue until the running cell ends. The widget's state says which (``subshells``), and where there
are none, whether a cell runs now (``cell_running``), so the widget can say a click will act when it ends.
The CI job for the oldest supported ipykernel runs this file on such a kernel.
"""

import queue
import textwrap

from _kernel import SUBSHELLS, running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio
    import unity_nb as u

    def script(messages, tools):
        done = [m for m in messages if m["role"] == "tool"]
        return u.Reply(content="working", tool_calls=[u.call_tool("tick", n=len(done))])

    @u.tool
    def tick(n: int) -> int:
        \"\"\"One step of work.\"\"\"
        return n + 1

    slow = u.ScriptedModel(script, chunk=4, delay=0.05)
    %unity model --var slow
    WIDGETS = get_ipython().magics_manager.registry["UnityMagics"].widgets
    """
)


def _cell_running(k, comm_id, msg_id, timeout=30):
    """The widget's ``cell_running`` values sent while the cell ``msg_id`` ran (its start and end), in order."""
    seen = []
    while False not in seen:
        try:
            msg = k.kc.get_iopub_msg(timeout=timeout)
        except queue.Empty:
            break
        c = msg["content"]
        ours = msg["msg_type"] == "comm_msg" and c.get("comm_id") == comm_id
        if ours and msg["parent_header"].get("msg_id") == msg_id:
            if "cell_running" in c["data"].get("state", {}):
                seen.append(c["data"]["state"]["cell_running"])
    return seen


def test_the_widget_says_whether_clicks_act_while_a_cell_runs_and_a_click_acts_once_the_kernel_is_idle():
    with running(SETUP) as k:
        k.run("h = %unity act --name job --max-steps 400 count")
        comm_id, node = k.value("[WIDGETS['job'].model_id, h.id]")
        assert k.value("WIDGETS['job'].subshells") is SUBSHELLS
        # a cell that blocks while the operation takes 20 steps (of its 400), or until it ends
        busy = "while h.steps < 20 and not h.done():\n    await asyncio.sleep(0.02)"
        msg_id = k.kc.execute(busy, stop_on_error=False)
        k.click(comm_id, action="stop", node=node)
        reply = k.kc.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = k.kc.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "ok"  # the cell ran to its end, whatever the click did
        # without subshells the widget was told a cell runs (a click then acts when it ends), and then that it
        # ended; with them, it is told nothing
        assert _cell_running(k, comm_id, msg_id, timeout=30 if not SUBSHELLS else 2) == (
            [] if SUBSHELLS else [True, False]
        )
        k.run("try:\n    await asyncio.wait_for(h.result(), 30)\nexcept u.Stopped:\n    pass")
        stopped = k.value("[h.status == 'stopped', h.state.stop_reason, h.steps < 400]")
        assert stopped == [True, "stopped from the widget", True]
