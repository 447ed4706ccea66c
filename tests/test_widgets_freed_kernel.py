"""A kernel keeps no operation a person moved on from (a real kernel, jupyter_client).

ipywidgets keeps every widget until it is closed, and a widget holds its handle with its transcript: every
``h = %unity act ...`` run again, and every display of ``h``, kept one more for the life of the kernel. Now the
widget a same-named operation replaces (its operation done: a live one's name is never taken) is closed, its cell
keeping the snapshot beside it; a handle displayed again shows its open widget; unloading the extension closes each
widget once its operation ends. Every wait has a timeout; nothing asserts on time."""

import textwrap

import pytest
from _kernel import running

SETUP = textwrap.dedent(
    """
    %load_ext unity_nb
    import asyncio, gc
    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget
    from unity_nb.models import Reply

    def plan(messages, tools):
        if not any(m["role"] == "tool" for m in messages):
            return u.call_tool("execute_code", code="print('x' * 100_000)", intent="print a lot")
        return "done"

    class Gated:
        \"\"\"Answers once ``proceed`` is set.\"\"\"
        name = "gated"

        def __init__(self):
            self.proceed = asyncio.Event()

        async def complete(self, request, on_delta=None):
            await self.proceed.wait()
            return Reply(content="done")

    scripted, gated = u.ScriptedModel(plan), Gated()
    magics = get_ipython().magics_manager.registry["UnityMagics"]

    async def until(check, what, timeout=20):
        for _ in range(int(timeout / 0.05)):
            if check():
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"never {what}")

    def live():
        gc.collect()
        objs = gc.get_objects()
        return {
            "handles": sum(isinstance(o, u.LoopHandle) for o in objs),
            "open widgets": sum(isinstance(o, HandleWidget) and o.comm is not None for o in objs),
        }
    """
)
RUNS = 8


@pytest.fixture(scope="module")
def kernel():
    with running(SETUP) as k:
        k.run("%config UnityMagics.approval = 'never'")
        yield k


def test_an_operation_run_again_under_its_name_leaves_one_handle_and_one_open_widget(kernel):
    kernel.run("%unity model --var scripted")
    for _ in range(RUNS):
        kernel.run("h = %unity act print a lot")
        kernel.run("await h")
    kernel.run("await until(lambda: live()['handles'] <= 2, 'freed the replaced operations')")
    counts = kernel.value("live()")
    assert counts["open widgets"] == 1 and counts["handles"] <= 2  # the last one (and a closed one, not yet freed)
    for _ in range(RUNS):  # displayed again: the same widget, another view of it
        kernel.run("h")
    assert kernel.value("live()")["open widgets"] == 1
    assert kernel.value("magics.widgets['h'].handle is h")


def test_widgets_left_when_the_extension_is_unloaded_close_once_their_operations_end(kernel):
    kernel.run("%unity model --var gated")
    kernel.run("g = %unity act wait\nwidget = magics.widgets['g']")
    kernel.run("%unload_ext unity_nb")
    assert kernel.value("widget.comm is not None and not g.done()")  # still running: it may still be steered
    kernel.run("gated.proceed.set()\nawait g")
    kernel.run("await until(lambda: widget.comm is None, 'closed the widget of the ended operation')")
    kernel.run("%load_ext unity_nb")
