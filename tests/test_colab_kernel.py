"""Colab renders a third-party widget only when its output names Colab's custom widget manager in the output's
metadata (anywidget adds it to the bundle it returns; anywidget#63, google/bigframes#2319). In a real kernel
(jupyter_client) made to look like Colab's (a ``google.colab.output`` module with the manager's URL, as Colab's
kernel has once custom widgets are on), every output of the live widget carries that metadata: the one
``%unity act`` shows, its update when the operation ends, and a handle shown as a cell's value."""

import queue
import textwrap
import time

from _kernel import running

MANAGER = "https://ssl.gstatic.com/colaboratory-static/widgets/colab-cdn-widget-manager/test/manager.min.js"
SETUP = textwrap.dedent(
    f"""
    import sys, types
    google, colab, output = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab.output"))
    output._widgets = types.SimpleNamespace(_installed_url={MANAGER!r})
    output.enable_custom_widget_manager = lambda: None  # Colab's own switch (anywidget calls it)
    google.colab, colab.output = colab, output
    sys.modules.update({{"google": google, "google.colab": colab, "google.colab.output": output}})

    %load_ext unity_nb
    import asyncio
    import unity_nb as u

    go = asyncio.Event()

    async def script(messages, tools):
        await go.wait()
        return "north"

    gated = u.ScriptedModel(script)
    %unity model --var gated
    """
)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TIMEOUT = 30


def _displays(k, until):
    messages: list[tuple[str, dict]] = []
    deadline = time.monotonic() + TIMEOUT
    while not until(messages):
        left = deadline - time.monotonic()
        assert left > 0, f"the kernel never sent what was expected; it sent {messages}"
        try:
            msg = k.kc.get_iopub_msg(timeout=left)
        except queue.Empty:
            continue
        if msg["msg_type"] in ("display_data", "update_display_data", "execute_result"):
            messages.append((msg["msg_type"], msg["content"]))
    return messages


def _widget_outputs(messages):
    return [(kind, c) for kind, c in messages if WIDGET_VIEW in c["data"]]


def test_every_output_of_the_live_widget_names_colabs_widget_manager():
    with running(SETUP) as k:
        k.kc.execute("h = %unity act --name north Which region?")
        shown = _widget_outputs(_displays(k, lambda ms: len(_widget_outputs(ms)) >= 1))
        (_kind, first), = shown
        assert first["metadata"][WIDGET_VIEW] == {"colab": {"custom_widget_manager": {"url": MANAGER}}}

        k.kc.execute("go.set()")  # the operation ends: the widget's output is updated in place
        updated = _widget_outputs(_displays(k, lambda ms: any(kind == "update_display_data"
                                                                 for kind, _c in _widget_outputs(ms))))
        (_kind, update), = [x for x in updated if x[0] == "update_display_data"]
        assert update["metadata"][WIDGET_VIEW]["colab"]["custom_widget_manager"]["url"] == MANAGER

        k.kc.execute("await h\nh")  # a handle as the cell's value: its live widget, the metadata too
        value = _widget_outputs(_displays(k, lambda ms: len(_widget_outputs(ms)) >= 1))
        assert value[0][1]["metadata"][WIDGET_VIEW]["colab"]["custom_widget_manager"]["url"] == MANAGER
