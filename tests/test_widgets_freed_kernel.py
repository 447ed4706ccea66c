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


def test_a_handle_displayed_in_a_cell_run_again_leaves_one_open_widget(kernel):
    """JupyterLab sends each cell's id with its execution and clears the cell's outputs as it runs it again: the
    widgets only that cell showed are seen nowhere now, and close once their operations end."""
    kernel.run("%unity model --var scripted")
    for _ in range(RUNS):
        kernel.run_cell("d = u.act('print a lot', model=scripted)\nawait d\ndisplay(d)", cell="cell-d")
    kernel.run("await until(lambda: live()['open widgets'] <= 2, 'closed the widgets no cell shows')")
    kernel.run("await until(lambda: live()['handles'] <= 3, 'freed the operations no cell shows')")
    counts = kernel.value("live()")
    assert counts["open widgets"] <= 2 and counts["handles"] <= 3  # d's, and magics.widgets['h'] of the first test


def test_a_widget_another_cell_still_shows_stays_open_until_that_cell_runs_again_or_is_deleted(kernel):
    kernel.run("%unity model --var scripted")
    kernel.run_cell("e = u.act('print a lot', model=scripted)\nawait e\ndisplay(e)", cell="cell-e")
    kernel.run_cell("display(e)", cell="cell-e2")  # another view of the same widget, in another cell
    kernel.run("widget = next(w for w in gc.get_objects() if isinstance(w, HandleWidget) and w.handle is e)")
    kernel.run_cell("e = None", cell="cell-e")  # the first cell runs again: its view is cleared, the other stays
    assert kernel.value("widget.comm is not None")
    kernel.run_cell("1", cell="cell-other", deleted=["cell-e2"])  # the other cell deleted: no view of it left
    kernel.run("await until(lambda: widget.comm is None, 'closed the widget no cell shows')")


def test_a_live_operation_s_widget_no_cell_shows_closes_once_it_ends(kernel):
    kernel.run("%unity model --var gated")
    kernel.run("gated.proceed.clear()")
    kernel.run_cell("f = u.act('wait', model=gated)\ndisplay(f)", cell="cell-f")
    kernel.run("widget = next(w for w in gc.get_objects() if isinstance(w, HandleWidget) and w.handle is f)")
    kernel.run_cell("2", cell="cell-f")  # run again while f runs: closed once f ends, not before
    assert kernel.value("widget.comm is not None and not f.done()")
    kernel.run_cell("display(f)", cell="cell-f2")  # displayed again meanwhile: a new widget, which stays open
    kernel.run("gated.proceed.set()\nawait f")
    kernel.run("await until(lambda: widget.comm is None, 'closed the retired widget')")
    opened = "[w for w in gc.get_objects() if isinstance(w, HandleWidget) and w.handle is f and w.comm is not None]"
    assert kernel.value(f"len({opened})") == 1


def test_a_widget_whose_name_an_operation_in_another_cell_took_is_closed_though_its_cell_still_shows_it(kernel):
    """Its cell keeps the snapshot shown beside it (the browser test checks what JupyterLab shows)."""
    kernel.run("%unity model --var scripted")
    shown = "get_ipython().magics_manager.registry['UnityMagics'].widgets"  # the extension was loaded again
    kernel.run_cell(f"n = %unity act --name north print a lot\n_ = await n\nfirst = {shown}['north']", cell="n1")
    kernel.run_cell("n = %unity act --name north print a lot\n_ = await n", cell="n2")
    kernel.run("await until(lambda: first.comm is None, 'closed the replaced widget')")
