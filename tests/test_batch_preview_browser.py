"""A finished batch's widget shows its answers (Chromium, the harness page of tests/test_browser.py: the installed
handle.js with a stand-in for anywidget's model, loopback only, every wait an expectation with a timeout): under its
progress bar, the first rows of its result, each row's key and answer, and where the rest are (``await NAME``,
``%unity show NAME``). A typed batch (``columns=``) shows its fields as columns."""

from __future__ import annotations

import json

from test_browser import harness  # noqa: F401 (the fixture)

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget


def _label(messages, tools):
    return "label of " + messages[-1]["content"].split()[-1]


async def test_a_finished_maps_widget_shows_the_first_rows_of_its_result(harness):  # noqa: F811
    from playwright.async_api import expect

    h = u.map([f"paper{i}" for i in range(12)], "Label {value}", model=u.ScriptedModel(_label), name="labels")
    w = HandleWidget(h)
    result = await h
    widget = await harness.show(w)
    preview = widget.locator(".unb-preview")
    await expect(preview).to_contain_text("first rows of 12 answered")
    await expect(preview).to_contain_text("%unity show labels")
    rows = preview.locator("tr")
    await expect(rows).to_have_count(1 + 5)  # the header, then five rows
    for i in range(5):
        await expect(rows.nth(1 + i)).to_have_text(f"{i}{result[i]}")


async def test_a_typed_batch_shows_its_fields_as_columns(harness):  # noqa: F811
    from playwright.async_api import expect

    def fields(messages, tools):
        return json.dumps({"method": "survey", "n": 12})

    h = u.map(["a", "b"], "Label {value}", model=u.ScriptedModel(fields), columns=["method", "n:int"], name="fields")
    w = HandleWidget(h)
    await h
    widget = await harness.show(w)
    header = widget.locator(".unb-preview tr").first
    await expect(header).to_have_text("methodn")
    await expect(widget.locator(".unb-preview tr").nth(1)).to_have_text("0survey12")
