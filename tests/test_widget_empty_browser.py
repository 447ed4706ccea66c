"""A click that needs text, with an empty box (Chromium, the harness page of tests/test_browser.py: the installed
handle.js with a stand-in for anywidget's model, loopback only, clicks at a person's pace, every wait an expectation
with a timeout): it sends nothing, and says so where the person looks, in the box, which takes the keys; once text is
typed, the same click sends it."""

from __future__ import annotations

import asyncio

from conftest import Gate
from test_browser import PRESS, harness, region_asker  # noqa: F401 (the fixture)

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget

TYPING_DELAY = 90  # ms between keys: a person typing steadily (input pacing, never a wait for a result)


async def test_an_empty_answer_is_not_sent_and_the_box_says_to_type_one(harness):  # noqa: F811
    """The Answer button (or Enter) with nothing typed answered the tool's question with an empty text: the tool went
    on with no answer, and nothing could take it back."""
    from playwright.async_api import expect

    h = await region_asker()
    w = HandleWidget(h)
    widget = await harness.show(w)
    box = widget.locator(".unb-clarification .unb-input")
    await widget.locator(".unb-clarification .unb-btn").click(delay=PRESS)
    await expect(box).to_be_focused()
    await expect(box).to_have_attribute("placeholder", "Type your answer first (Enter sends it)")
    await box.press("Enter")  # Enter on the empty box: nothing either
    assert await harness.page.evaluate(f"() => window.sentBy('{w.model_id}')") == []
    await box.press_sequentially("west", delay=TYPING_DELAY)
    await box.press("Enter")
    clicks = await harness.page.evaluate(f"() => window.sentBy('{w.model_id}')")
    assert [(c["action"], c["text"]) for c in clicks] == [("answer", "west")]
    await h.stop()


async def test_a_verb_needing_a_message_clicked_with_an_empty_box_says_to_type_one(harness):  # noqa: F811
    """Interject with an empty box did nothing, and said nothing: the click seemed lost."""
    from playwright.async_api import expect

    gate = Gate(lambda messages, tools: "done")
    h = u.start_loop("work", model=u.ScriptedModel(gate), name="ship")
    await h.wait_for("model_request", timeout=20)
    w = HandleWidget(h)
    widget = await harness.show(w)
    box = widget.locator(".unb-controls .unb-input")
    before = await box.get_attribute("placeholder")
    await widget.locator(".unb-btn.unb-interject").click(delay=PRESS)
    await expect(box).to_be_focused()
    await expect(box).to_have_attribute("placeholder", "Type a message first, then Interject")
    assert await harness.page.evaluate(f"() => window.sentBy('{w.model_id}')") == []
    await box.press_sequentially("look west", delay=TYPING_DELAY)
    await widget.locator(".unb-btn.unb-interject").click(delay=PRESS)
    clicks = await harness.page.evaluate(f"() => window.sentBy('{w.model_id}')")
    assert [(c["action"], c["text"]) for c in clicks] == [("interject", "look west")]
    await expect(box).to_have_value("")
    await expect(box).to_have_attribute("placeholder", before)  # said what it says again
    gate.event.set()
    await asyncio.wait_for(h.result(), 20)
