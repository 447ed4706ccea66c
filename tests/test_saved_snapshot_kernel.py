"""In a real kernel (jupyter_client): ``%unity act`` shows its live widget and, right after it, a second
output, the operation's snapshot as plain ``text/html`` (what a notebook reopened without widget state
shows: JupyterLab cannot render the widget's view there). When the operation ends, that output is updated
under its own display id to the final snapshot, which holds the answer. Every wait has a timeout."""

import queue
import textwrap
import time

from _kernel import running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio
    import unity_nb as u

    go = asyncio.Event()

    async def script(messages, tools):
        await go.wait()  # answers once the test says so: the cell has ended by then
        return "The north sold most (ANSWER-7f3)."

    gated = u.ScriptedModel(script)
    %unity model --var gated
    """
)
TIMEOUT = 30
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _outputs(k, until):
    """The display messages (display_data, update_display_data) the kernel sends, whichever cell they name,
    until ``until(messages)`` holds."""
    messages: list[tuple[str, dict]] = []
    deadline = time.monotonic() + TIMEOUT
    while not until(messages):
        left = deadline - time.monotonic()
        assert left > 0, f"the kernel never sent what was expected; it sent {messages}"
        try:
            msg = k.kc.get_iopub_msg(timeout=left)
        except queue.Empty:
            continue
        if msg["msg_type"] in ("display_data", "update_display_data"):
            messages.append((msg["msg_type"], msg["content"]))
    return messages


def test_act_shows_its_snapshot_after_the_widget_and_updates_it_when_the_operation_ends():
    with running(SETUP) as k:
        k.kc.execute("h = %unity act --name north Which region sold most?")
        shown = _outputs(k, lambda ms: len(ms) >= 2)
        (kind1, widget), (kind2, snapshot) = shown
        assert kind1 == kind2 == "display_data"
        assert WIDGET_VIEW in widget["data"]  # the live widget first ...
        # ... then its snapshot: plain HTML, no widget, a display id of its own
        assert set(snapshot["data"]) == {"text/html"}
        html = snapshot["data"]["text/html"]
        assert 'class="unity-nb-snapshot"' in html and "<b>north</b>" in html and "running" in html
        assert "ANSWER-7f3" not in html
        display_id = snapshot["transient"]["display_id"]
        assert display_id and display_id != widget["transient"]["display_id"]

        k.kc.execute("go.set()")  # the operation ends (read below, with what the kernel sends)

        def final(ms):
            return any(t == "update_display_data" and c["transient"]["display_id"] == display_id for t, c in ms)

        updates = _outputs(k, final)
        (update,) = [c for t, c in updates if t == "update_display_data" and c["transient"]["display_id"] == display_id]
        html = update["data"]["text/html"]
        assert set(update["data"]) == {"text/html"}
        assert "ANSWER-7f3" in html and "finished" in html  # the final snapshot: what the operation did
        assert "a snapshot of this operation" in html
