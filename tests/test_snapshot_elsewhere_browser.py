"""The snapshot output beside a live widget, in a front end that is not JupyterLab (Chromium, the harness page of
tests/test_browser.py: the installed handle.js with a stand-in for anywidget's model, loopback only, every wait an
expectation with a timeout).

VS Code's notebook webview and a Colab cell's output frame put a cell's outputs in one page, in wrappers of their
own (not JupyterLab's ``.jp-OutputArea-child`` nor the classic ``.output_area``). There too, while the widget of an
operation is live, its snapshot output (arriving after the widget, and replaced when the operation ends) is hidden
with the wrapper holding it, so the person sees the operation once; once the widget says its kernel is gone, the
snapshot shows again.
"""

from __future__ import annotations

import asyncio

from test_browser import harness  # noqa: F401 (the fixture)

import unity_nb as u
from unity_nb.jupyter._snapshot import render_html
from unity_nb.jupyter._widget import HandleWidget

# a cell's outputs as a front end other than JupyterLab wraps them: one wrapper an output, in one page
PAGE = """([key, snapshot]) => {
  const cell = Object.assign(document.createElement("section"), { className: "cell-outputs" });
  const wrap = (child) => {
    const outer = Object.assign(document.createElement("div"), { className: "output-wrapper" });
    const inner = Object.assign(document.createElement("div"), { className: "output-body" });
    inner.append(child);
    outer.append(inner);
    cell.append(outer);
    return outer;
  };
  wrap(document.querySelector(`.widget[data-key="${key}"]`));  // the widget's output, rendered first
  document.body.append(cell);
  const later = document.createElement("div");
  later.innerHTML = snapshot;
  const outer = wrap(later.firstElementChild);  // the snapshot output, arriving after it
  outer.dataset.key = key;
}"""


async def _shown_in_another_front_end(harness, handle, *, kernel):  # noqa: F811
    widget = await harness.show(HandleWidget(handle), kernel=kernel)
    key = await widget.get_attribute("data-key")
    await harness.page.evaluate(PAGE, [key, render_html(handle)])
    return harness.page.locator(f'.output-wrapper[data-key="{key}"]'), key


async def test_a_live_widget_hides_its_snapshot_in_a_front_end_the_rule_does_not_name(harness):  # noqa: F811
    from playwright.async_api import expect

    go = asyncio.Event()

    async def script(messages, tools):
        await go.wait()
        return "The north sold most (ANSWER-7f3)."

    h = u.start_loop("Which region?", model=u.ScriptedModel(script), name="north")
    wrapper, key = await _shown_in_another_front_end(harness, h, kernel=True)
    await expect(wrapper.locator(".unity-nb-snapshot")).to_have_count(1)
    await expect(wrapper).to_be_hidden()  # its whole output, not an empty box under the widget

    go.set()
    assert await h == "The north sold most (ANSWER-7f3)."
    # the operation ended: the front end replaces the snapshot output with the final one, still hidden
    await harness.page.evaluate(
        """([key, snapshot]) => {
          document.querySelector(`.output-wrapper[data-key="${key}"] .output-body`).innerHTML = snapshot;
        }""", [key, render_html(h)])
    await expect(wrapper.locator(".unity-nb-snapshot")).to_contain_text("ANSWER-7f3")
    await expect(wrapper).to_be_hidden()
    await expect(harness.page.locator(f'.widget[data-key="{key}"] .unb-root')).to_be_visible()


async def test_a_dead_widget_lets_its_snapshot_show_in_that_front_end(harness):  # noqa: F811
    from playwright.async_api import expect

    h = u.start_loop("Which region?", model=u.ScriptedModel(["west"]), name="saved_run")
    assert await h == "west"
    # a notebook reopened with its widget state, its kernel gone: the view's pings go unanswered
    wrapper, key = await _shown_in_another_front_end(harness, h, kernel=False)
    await expect(harness.page.locator(f'.widget[data-key="{key}"] .unb-root.unb-dead')).to_have_count(1)
    await expect(wrapper).to_be_visible()
    await expect(wrapper.locator(".unity-nb-snapshot")).to_contain_text("west")
