"""A batch's rows in its widget's view (Chromium, the harness page of tests/test_browser.py: the installed handle.js
with a stand-in for anywidget's model, loopback only, every wait an expectation or an event with a timeout): a row
shown while it runs is taken out of the page once it has ended, and the view lets go of it (its elements are
collected), as a map of many rows would otherwise keep every row it ever showed for as long as the page lives."""

from __future__ import annotations

import asyncio

from conftest import HeldRows
from test_browser import harness  # noqa: F401 (the fixture)

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget

TIMEOUT = 10


async def test_a_batchs_ended_rows_are_let_go_of_by_its_view(harness):  # noqa: F811
    from playwright.async_api import expect

    held = HeldRows(3)
    h = u.map([f"item {i}" for i in range(6)], "Echo", model=u.ScriptedModel(held), concurrency=3,
              bus=u.EventBus(), name="echoes")
    w = HandleWidget(h)
    await asyncio.wait_for(held.started.wait(), TIMEOUT)  # three rows run, each waiting for its answer
    widget = await harness.show(w)
    rows = [n["id"] for n in w.nodes[1:]]
    assert len(rows) == 3
    await expect(widget.locator(".unb-node")).to_have_count(4)
    page = harness.page
    # a weak reference to each row's box: what the page keeps of it once it has left the view
    await page.evaluate("""ids => { window.rowBoxes = ids.map(id =>
        new WeakRef(document.querySelector(`.unb-node[data-node="${id}"]`))); }""", rows)
    held.release.set()
    await asyncio.wait_for(h.result(), TIMEOUT)
    await harness.show(w)
    await expect(widget.locator(".unb-node")).to_have_count(1)  # the batch alone: its rows have ended
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("HeapProfiler.collectGarbage")
    kept = await page.evaluate("() => window.rowBoxes.filter(r => r.deref() !== undefined).length")
    assert kept == 0  # the view holds none of the rows it showed
