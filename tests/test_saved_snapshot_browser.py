"""A notebook reopened without its widget state shows what the operation did (JupyterLab, Chromium; the server,
the page and the rules of tests/test_browser.py: loopback only, every wait an expectation with a timeout).

JupyterLab saves no widget state by default: reopened, a ``%unity`` cell's widget output has no model, and
JupyterLab says so ("model not found") instead of showing the ``text/html`` beside it. So ``%unity`` shows,
after the widget, a second output: the operation's snapshot as plain HTML, updated when the operation ends.

- **Reopened without widget state.** A notebook run by nbclient (outputs saved, widget state not) and opened
  in JupyterLab with a new kernel: the snapshot, with the operation's answer, is on the page. Its picture goes
  to ``tests/artifacts/reopened-without-widget-state.png``.
- **Live.** While the live widget is rendered, that output is in the page (updated to the final snapshot)
  but hidden: the person sees the widget once, not twice.
- **Dead.** A notebook reopened with widget state saved mid-run: once the widget says its kernel is gone,
  the snapshot beside it shows again.
- **Dark.** The snapshot follows JupyterLab's theme: in JupyterLab Dark its text (an error's too) reads on the
  dark page (contrast at least 4.5, WCAG's AA level). Its picture goes to ``tests/artifacts/snapshot-dark.png``.
"""

from __future__ import annotations

import re

import nbformat
from nbclient import NotebookClient
from test_browser import lab  # noqa: F401 (the fixture)
from test_widget_browser import (  # noqa: F401
    CONTRAST,
    PICTURES,
    _node,
    _notebook,
    _open,
    _run_all,
    _saved_mid_run,
    _theme,
    browser,
)

ANSWER = "The north sold most (ANSWER-7f3)."
CELLS = [
    "%load_ext unity_nb\nimport unity_nb as u",
    f"answers = u.ScriptedModel(lambda messages, tools: {ANSWER!r})\n%unity model --var answers",
]
SNAPSHOT = ".unity-nb-snapshot"


def _outputs_of(cell) -> list[dict]:
    return [dict(o.get("data", {})) for o in cell.outputs if o.output_type == "display_data"]


def _saved_without_widget_state(lab, tmp_path, name, cells):  # noqa: F811
    """A notebook run as a person's is run and saved (outputs kept, widget state not: JupyterLab's default), trusted
    as its author's own notebook is, in the lab's root."""
    from nbformat.sign import NotebookNotary

    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in cells],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    )
    resources = {"metadata": {"path": str(tmp_path)}}
    NotebookClient(nb, timeout=60, kernel_name="python3", resources=resources, store_widget_state=False).execute()
    assert "widgets" not in nb.metadata
    shown = _outputs_of(nb.cells[-1])
    assert "application/vnd.jupyter.widget-view+json" in shown[0]  # the widget's output, with no state saved
    NotebookNotary(data_dir=str(lab.data_dir)).sign(nb)
    nbformat.write(nb, lab.root / name)


def test_a_notebook_reopened_without_widget_state_shows_the_operations_snapshot(lab, browser, tmp_path, monkeypatch):  # noqa: F811
    from playwright.sync_api import expect

    monkeypatch.setenv("UNITY_NB_STORE", str(tmp_path / "state.db"))
    run = "h = %unity act --name north Which region?\n_ = await h"  # (no Out[]: the answer is the snapshot's)
    _saved_without_widget_state(lab, tmp_path, "no_state.ipynb", [*CELLS, run])

    page = browser.page
    panel = _open(page, lab, "no-state", "no_state.ipynb")  # a new kernel: no model for the widget's view
    cell = panel.locator(".jp-Cell").last
    snapshot = cell.locator(SNAPSHOT)
    expect(snapshot).to_be_visible()
    expect(snapshot).to_contain_text(ANSWER)  # what the operation did, as it ended
    expect(snapshot).to_contain_text("finished")
    # the widget's output has nothing to show (ipywidgets says so) and no widget is rendered
    expect(cell.get_by_text(re.compile("model not found"))).to_be_visible()
    expect(cell.locator(".unb-root")).to_have_count(0)
    PICTURES.mkdir(parents=True, exist_ok=True)
    (PICTURES / "reopened-without-widget-state.png").write_bytes(cell.screenshot())
    assert browser.outside == [], "the page requested something beyond the local server"


def test_while_the_live_widget_shows_its_snapshot_output_is_hidden(lab, browser):  # noqa: F811
    from playwright.sync_api import expect

    _notebook(lab.root / "live.ipynb", [*CELLS, "h = %unity act --name north Which region?"])
    page = browser.page
    panel = _open(page, lab, "live", "live.ipynb")
    _run_all(page)
    node = _node(page, "north")
    expect(node.locator(".unb-badge")).to_have_text("finished")
    cell = panel.locator(".jp-Cell").last
    snapshot = cell.locator(SNAPSHOT)
    expect(snapshot).to_have_count(1)  # the snapshot output is there, updated as the operation ended ...
    expect(snapshot).to_contain_text(ANSWER)
    expect(snapshot).to_be_hidden()  # ... but hidden while the live widget is shown
    expect(cell.locator(".unb-root")).to_be_visible()
    assert browser.outside == [], "the page requested something beyond the local server"


def test_a_widget_whose_name_a_new_operation_took_is_closed_and_its_cell_shows_the_snapshot(lab, browser):  # noqa: F811
    """ipywidgets keeps every open widget (and it, its handle): the one a same-named operation replaces is closed,
    and its cell shows the operation's snapshot instead, as it ended."""
    from playwright.sync_api import expect

    _notebook(lab.root / "again.ipynb", [
        *CELLS, "h = %unity act --name north Which region?\n_ = await h", "h = %unity act --name north Again?",
    ])
    page = browser.page
    panel = _open(page, lab, "again", "again.ipynb")
    _run_all(page)
    first, second = panel.locator(".jp-Cell").nth(2), panel.locator(".jp-Cell").nth(3)
    expect(second.locator(".unb-root")).to_be_visible()  # the new operation's live widget ...
    expect(second.locator(SNAPSHOT)).to_be_hidden()
    expect(first.locator(".unb-root")).to_have_count(0)  # ... and the one it replaced, closed
    expect(first.locator(SNAPSHOT)).to_be_visible()  # its cell shows what the operation did
    expect(first.locator(SNAPSHOT)).to_contain_text(ANSWER)
    assert browser.outside == [], "the page requested something beyond the local server"


def test_a_cell_that_displays_a_handle_run_again_leaves_one_open_widget(lab, browser):  # noqa: F811
    """JupyterLab sends each cell's id with its execution and clears the cell's outputs as it runs it again: the
    widget only that cell showed is closed then (ipywidgets would keep it, and it its handle, for the kernel's
    life). The count comes from the kernel, printed by the last cell after each Run All."""
    from playwright.sync_api import expect

    probe = (
        "import gc\nfrom unity_nb.jupyter._widget import HandleWidget\n"
        "print('open widgets:', sum(isinstance(o, HandleWidget) and o.comm is not None for o in gc.get_objects()))"
    )
    _notebook(lab.root / "display_again.ipynb", [
        *CELLS, "d = u.act('Which region?', model=answers)\n_ = await d\ndisplay(d)", probe,
    ])
    page = browser.page
    panel = _open(page, lab, "display_again", "display_again.ipynb")
    shown, last = panel.locator(".jp-Cell").nth(2), panel.locator(".jp-Cell").nth(3)
    prompt = last.locator(".jp-InputArea-prompt")
    for _ in range(3):
        before = prompt.inner_text()
        _run_all(page)
        expect(prompt).not_to_have_text(re.compile(rf"\*|^{re.escape(before)}$"))  # the last cell ran again
        expect(last.locator(".jp-OutputArea")).to_contain_text("open widgets: 1")
        expect(shown.locator(".unb-root")).to_be_visible()
    assert browser.outside == [], "the page requested something beyond the local server"


def test_a_dead_widget_lets_its_snapshot_show(lab, browser):  # noqa: F811
    from nbformat.sign import NotebookNotary
    from playwright.sync_api import expect

    nb = nbformat.from_dict(_saved_mid_run())
    (cell,) = nb.cells
    (widget,) = cell.outputs
    # the snapshot output %unity shows after the widget, as it was when the notebook was saved mid-run
    cell.outputs.append(nbformat.v4.new_output("display_data", {"text/html": widget.data["text/html"]}))
    NotebookNotary(data_dir=str(lab.data_dir)).sign(nb)  # trusted: its widget state loads
    nbformat.write(nb, lab.root / "dead.ipynb")
    page = browser.page
    panel = _open(page, lab, "dead", "dead.ipynb")  # a new kernel: the saved widget has no comm in it
    root = panel.locator(".unb-root")
    expect(root).to_have_class(re.compile(r"\bunb-dead\b"))  # the widget says its kernel is gone ...
    snapshot = panel.locator(SNAPSHOT)
    expect(snapshot).to_be_visible()  # ... and the snapshot beside it shows
    expect(snapshot).to_contain_text("saved_run")
    assert browser.outside == [], "the page requested something beyond the local server"


def test_the_snapshot_reads_in_jupyterlab_dark(lab, browser, tmp_path, monkeypatch):  # noqa: F811
    from playwright.sync_api import expect

    monkeypatch.setenv("UNITY_NB_STORE", str(tmp_path / "state.db"))
    cells = [
        CELLS[0],
        f"""def script(messages, tools):
    if not [m for m in messages if m["role"] == "tool"]:
        return u.call_tool("execute_code", code="1/0", intent="fail once")  # an error entry, red in the snapshot
    return {ANSWER!r}

answers = u.ScriptedModel(script)
%unity model --var answers""",
        "h = %unity act --name north Which region?\n_ = await h",
    ]
    _saved_without_widget_state(lab, tmp_path, "dark.ipynb", cells)
    page = browser.page
    panel = _open(page, lab, "dark", "dark.ipynb")
    snapshot = panel.locator(".jp-Cell").last.locator(SNAPSHOT)
    expect(snapshot).to_contain_text(ANSWER)
    try:
        _theme(page, "JupyterLab Dark")
        entries = snapshot.locator("div[style*='color']")
        expect(entries.first).to_be_visible()
        assert entries.count() >= 5  # the caption, the task, the call, its error, the answer
        errors = 0
        for i in range(entries.count()):
            measured = entries.nth(i).evaluate(CONTRAST)
            assert measured["background"] < 0.2, (i, measured)  # the dark theme's page ...
            assert measured["ratio"] >= 4.5, (entries.nth(i).inner_text(), measured)  # ... and the text reads on it
            errors += "ZeroDivisionError" in entries.nth(i).inner_text()
        assert errors, "the failed call's entry was measured"
        PICTURES.mkdir(parents=True, exist_ok=True)
        (PICTURES / "snapshot-dark.png").write_bytes(snapshot.screenshot())
    finally:
        _theme(page, "JupyterLab Light")  # the server's other tests see the default theme
    assert browser.outside == [], "the page requested something beyond the local server"
