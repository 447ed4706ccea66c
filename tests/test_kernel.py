"""In a real kernel started with jupyter_client: %unity act runs in the background and the
widget's buttons, sent as the comm messages a browser sends, steer it."""

import textwrap

import pytest
from _kernel import needs_subshells, running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import unity_nb as u

    def script(messages, tools):
        done = [m for m in messages if m["role"] == "tool"]
        last = messages[-1]["content"] or ""
        if "FINISH" in str(last):
            return "finished as asked"
        return u.Reply(content="thinking " * 10, tool_calls=[u.call_tool("tick", n=len(done))])

    @u.tool
    def tick(n: int) -> int:
        \"\"\"One step of work.\"\"\"
        return n + 1

    slow = u.ScriptedModel(script, chunk=10, delay=0.02)  # streams slowly so a click lands mid-run
    %unity model --var slow
    """
)


@pytest.fixture(scope="module")
def kernel():
    with running(SETUP) as k:
        yield k


def test_buttons_steer_a_background_operation(kernel):
    k = kernel
    k.run("h = %unity act --name job count forever")
    comm_id, node = k.value("[get_ipython().magics_manager.registry['UnityMagics'].widgets['job'].model_id, h.id]")
    k.run("await h.wait_for('model_request', timeout=20)")

    # another cell runs and returns while the loop works
    assert k.run("print(1 + 1)").strip() == "2"
    assert k.value("h.status") == "running"

    k.click(comm_id, action="pause", node=node)
    k.run("await h.wait_for('steering', lambda e: e.action == 'pause', timeout=20)")
    # the call in flight finishes; nothing new starts while paused
    k.run(
        "await h.wait_for('model_response', lambda e: e.seq > [x for x in h.events if x.kind == 'steering'][0].seq,"
        " timeout=20)"
    )
    assert k.value("h.status") == "paused"
    assert k.run("print(sum(range(10)))").strip() == "45"

    k.click(comm_id, action="resume", node=node)
    k.run("await h.wait_for('steering', lambda e: e.action == 'resume', timeout=20)")
    between = k.value(
        "[e.kind for e in h.events if [s.seq for s in h.events if s.kind == 'steering'][0] < e.seq"
        " < [s.seq for s in h.events if s.kind == 'steering'][1]]"
    )
    assert "model_request" not in between and "tool_started" not in between

    k.click(comm_id, action="interject", node=node, text="FINISH now please")
    req = k.value(
        "(await h.wait_for('model_request', lambda e: 'FINISH now please' in (e.last_user or ''), timeout=20))"
        ".last_user"
    )
    assert "FINISH now please" in req
    assert k.value("await h") == "finished as asked"
    assert k.value("h.status") == "finished"


def test_stop_button_ends_the_run_and_disables_steering(kernel):
    k = kernel
    k.run("h2 = %unity act --name job2 count forever")
    comm_id, node = k.value("[get_ipython().magics_manager.registry['UnityMagics'].widgets['job2'].model_id, h2.id]")
    k.run("await h2.wait_for('model_request', timeout=20)")
    k.click(comm_id, action="stop", node=node)
    k.run("await h2.wait_for('loop_finished', timeout=20)")
    assert k.value("[h2.status, h2.state.stop_reason]") == ["stopped", "stopped from the widget"]
    widget = "get_ipython().magics_manager.registry['UnityMagics'].widgets['job2']"
    assert k.value(f"{widget}.nodes[0]['status']") == "stopped"
    # the widget's own message handler reports a click on an ended handle instead of raising
    k.click(comm_id, action="pause", node=node)
    k.run("import asyncio\nfor _ in range(20): await asyncio.sleep(0)")
    assert "stopped" in k.value("get_ipython().magics_manager.registry['UnityMagics'].widgets['job2'].notice")


def test_the_display_has_a_plain_repr_and_a_snapshot(kernel):
    k = kernel
    outputs = []

    def hook(msg):
        if msg["msg_type"] in ("display_data", "update_display_data"):
            outputs.append(msg["content"]["data"])

    k.kc.execute_interactive("h3 = %unity act --name job3 FINISH quickly\nawait h3", timeout=60, output_hook=hook)
    first = outputs[0]
    assert first["text/plain"].startswith("<unity handle 'job3': running")
    assert "application/vnd.jupyter.widget-view+json" in first and "text/html" in first


@needs_subshells
def test_a_cell_awaiting_the_handle_can_be_stopped_by_a_click(kernel):
    k = kernel
    k.run("h4 = %unity act --name job4 count forever")
    comm_id, node = k.value("[get_ipython().magics_manager.registry['UnityMagics'].widgets['job4'].model_id, h4.id]")
    k.run("await h4.wait_for('model_request', timeout=20)")
    # this cell blocks on the handle (its error must not abort the next cells)
    msg_id = k.kc.execute("await h4", stop_on_error=False)
    k.click(comm_id, action="stop", node=node)  # ... and the click still reaches the widget
    reply = k.kc.get_shell_msg(timeout=30)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = k.kc.get_shell_msg(timeout=30)
    assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "Stopped"
    assert k.value("h4.state.stop_reason") == "stopped from the widget"


def test_tool_output_goes_to_the_widget_never_into_a_cell(kernel):
    k = kernel
    k.run(textwrap.dedent('''
        import asyncio
        go = asyncio.Event()

        async def chatty(n: int) -> int:
            """Print while the next cell runs."""
            await go.wait()
            print("PRINTED-BY-TOOL", n)
            return n

        def chatty_script(messages, tools):
            done = [m for m in messages if m["role"] == "tool"]
            return u.call_tool("chatty", n=7) if not done else "chatty done"

        u.register_tool(chatty)
        chatty_model = u.ScriptedModel(chatty_script)
        %unity model --var chatty_model
    '''))
    k.run("h5 = %unity act --name chatty print something")
    streams = []

    def hook(msg):  # every iopub message, whichever cell it names as parent
        if msg["msg_type"] == "stream":
            streams.append(msg["content"]["text"])

    k.kc.execute_interactive("go.set()\nprint('cell output', await h5)", timeout=60, output_hook=hook)
    assert "cell output chatty done" in "".join(streams)
    assert not any("PRINTED-BY-TOOL" in s for s in streams)
    assert k.value("[c.output for m in h5.transcript for c in m.tool_calls]") == ["PRINTED-BY-TOOL 7\n"]
    k.run("u.unregister_tool('chatty')\n%unity model --var slow")


def test_an_unassigned_act_leaves_no_stale_out_text_under_its_widget(kernel):
    k = kernel
    messages = []

    def hook(msg):
        if msg["msg_type"] in ("execute_result", "display_data"):
            messages.append((msg["msg_type"], msg["content"]["data"]))

    k.kc.execute_interactive("%unity act --name stale FINISH quickly", timeout=60, output_hook=hook)
    # the live widget and its snapshot (what a notebook reopened without widget state shows), and no Out[]
    # saying "running"
    assert [t for t, _d in messages] == ["display_data", "display_data"]
    assert "application/vnd.jupyter.widget-view+json" in messages[0][1]
    assert list(messages[1][1]) == ["text/html"] and "unity-nb-snapshot" in messages[1][1]["text/html"]
    assert k.value("await get_ipython().magics_manager.registry['UnityMagics'].handles['stale']") == "finished as asked"
    # shown again in a later cell, a handle is its live widget (never a stale text), and its snapshot after it
    messages.clear()
    k.kc.execute_interactive("get_ipython().magics_manager.registry['UnityMagics'].handles['stale']", output_hook=hook)
    ((kind, data), (beside, snapshot)) = messages
    assert kind == "display_data" and data["text/plain"] == "<unity handle 'stale': finished, 1 steps>"
    assert "application/vnd.jupyter.widget-view+json" in data
    assert beside == "display_data" and list(snapshot) == ["text/html"] and "finished" in snapshot["text/html"]
