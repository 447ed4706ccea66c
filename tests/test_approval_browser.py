"""Approvals in the widget's front end (Chromium, the harness page of tests/test_browser.py: the installed handle.js
with a stand-in for anywidget's model, loopback only, every wait an expectation with a timeout):

- a tool's call waiting for approval has "Always allow TOOL" beside Run and Skip, and clicking it sends ``allow``
  for that call; a plan waiting has no such button (each plan is read on its own);
- the reason box's placeholder ("Why skip? (optional; Enter skips)") fits in the box, not cut off;
- a call the person skipped reads "skipped" in the transcript, not "done".
"""

from __future__ import annotations

from conftest import tool_messages
from test_browser import PRESS, harness  # noqa: F401 (the fixture)

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget

# the width the placeholder's text takes in the box's font, and the room the box gives it
FITS = """el => {
  const style = getComputedStyle(el);
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = style.font;
  const room = el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return { text: ctx.measureText(el.placeholder).width, room };
}"""


def delete_rows(table: str) -> str:
    """Delete every row of a table (irreversible)."""
    return f"deleted {table}"


async def test_a_tool_call_waiting_offers_always_allow_and_its_reason_box_shows_its_placeholder(harness):  # noqa: F811
    from playwright.async_api import expect

    gated = u.as_tool(delete_rows, needs_approval=True)
    model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table="t1") if not tool_messages(m) else "ok")
    h = u.start_loop("clean up", model=model, tools=[gated])
    asked = await h.wait_for("approval_requested", timeout=10)
    widget = await harness.show(HandleWidget(h))
    row = widget.locator(".unb-approval")
    allow = row.locator("button.unb-allow")
    await expect(allow).to_have_text("Always allow delete_rows")
    await expect(row.locator("button.unb-run")).to_be_visible()
    reason = row.locator("input.unb-input")
    await expect(reason).to_have_attribute("placeholder", "Why skip? (optional; Enter skips)")
    fits = await reason.evaluate(FITS)
    assert fits["text"] <= fits["room"], fits  # the whole placeholder shows
    await allow.click(delay=PRESS)
    key = await widget.get_attribute("data-key")
    sent = await harness.page.evaluate("(key) => window.sentBy(key)", key)
    assert [(m["action"], m["call_id"]) for m in sent] == [("allow", asked.call_id)]
    await h.stop("done looking")


async def test_a_plan_waiting_has_no_always_allow(harness):  # noqa: F811
    from playwright.async_api import expect

    def script(messages, tools):
        return u.call_tool("execute_code", code="x = 1", intent="set x") if not tool_messages(messages) else "done"

    h = u.act("set x", model=u.ScriptedModel(script), namespace={}, approval="always")
    await h.wait_for("approval_requested", timeout=10)
    widget = await harness.show(HandleWidget(h))
    row = widget.locator(".unb-approval")
    await expect(row.locator("button.unb-run")).to_be_visible()
    await expect(row.locator("button.unb-allow")).to_have_count(0)
    await h.stop("done looking")


async def test_a_skipped_call_reads_skipped(harness):  # noqa: F811
    from playwright.async_api import expect

    gated = u.as_tool(delete_rows, needs_approval=True)
    model = u.ScriptedModel(lambda m, t: u.call_tool("delete_rows", table="t1") if not tool_messages(m) else "ok")
    h = u.start_loop("clean up", model=model, tools=[gated])
    asked = await h.wait_for("approval_requested", timeout=10)
    await h.inbox.skip(asked.call_id, reason="not that table")
    assert await h == "ok"
    widget = await harness.show(HandleWidget(h))
    summary = widget.locator(f'details.unb-call[data-call="{asked.call_id}"] > summary')
    await expect(summary).to_have_text("delete_rows skipped")
