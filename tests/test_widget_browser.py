"""The widget in JupyterLab, in Chromium, as a person meets it (the server, the page and the rules of
tests/test_browser.py: loopback only, Debian's Chromium, every wait an expectation with a timeout):

- **Themes.** A finished operation's plan (its code, what it printed, its result) is readable in
  JupyterLab Light and JupyterLab Dark: the contrast of each block's text on the background the page
  really paints under it (composited in a canvas in the page) is at least 4.5, WCAG's AA level. The
  pictures go to ``tests/artifacts/`` (``docs/`` with ``UNITY_NB_README_SCREENSHOT=1``). A front end
  without JupyterLab's variables (VS Code, Colab) gets the stylesheet's own palette, dark when the
  browser prefers dark (the harness page of tests/test_browser.py, with Chromium emulating it).
- **Typing.** Keys typed at a person's pace into a running ``%unity map`` widget all land in its box
  while the rows update it, and Enter sends; a question's answer box and a Skip reason keep what is
  typed while the widget updates, and Enter answers or skips.
- **Without a kernel.** A view whose pings go unanswered (a notebook reopened with widget state saved
  mid-run, in JupyterLab; or the harness without a kernel) says its kernel is gone, greys the state as
  saved and disables every control; one whose kernel answers stays live.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re

import nbformat
from test_browser import KERNEL_IDLE, PRESS, REPO, browser, harness, lab, region_asker  # noqa: F401 (fixtures)

import unity_nb as u

PICTURES = REPO / ("docs" if os.environ.get("UNITY_NB_README_SCREENSHOT") else "tests/artifacts")
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}

# the contrast of an element's text on what the page paints beneath it: every background from the
# page down to the element, composited in a 1x1 canvas (so translucent and mixed colours count), then the text
CONTRAST = """el => {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 1;
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const paint = (colour) => {
    ctx.fillStyle = colour;
    ctx.fillRect(0, 0, 1, 1);
    return [...ctx.getImageData(0, 0, 1, 1).data];
  };
  paint("#ffffff");  // the canvas under the page
  const chain = [];
  for (let e = el; e; e = e.parentElement) chain.unshift(e);
  let back;
  for (const e of chain) back = paint(getComputedStyle(e).backgroundColor);
  const fore = paint(getComputedStyle(el).color);
  const lum = (rgb) => rgb.slice(0, 3)
    .map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
    .reduce((sum, c, i) => sum + c * [0.2126, 0.7152, 0.0722][i], 0);
  const [hi, lo] = [lum(back), lum(fore)].sort((a, b) => b - a);
  return { ratio: (hi + 0.05) / (lo + 0.05), background: lum(back) };
}"""


def _notebook(path, cells):
    nbformat.write(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(src) for src in cells], metadata={"kernelspec": KERNELSPEC},
    ), path)


def _open(page, server, workspace, name):
    from playwright.sync_api import expect

    page.goto(f"{server.url}/lab/workspaces/{workspace}/tree/{name}?token={server.token}")
    panel = page.locator(".jp-NotebookPanel")
    expect(panel).to_be_visible()
    expect(page.locator("#jp-main-statusbar").get_by_role("button", name=KERNEL_IDLE)).to_be_visible()
    return panel


def _run_all(page):
    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()


def _theme(page, name):
    """Settings > Theme > ``name``, as a person picks it; JupyterLab restyles the page in place."""
    from playwright.sync_api import expect

    page.locator("#jp-MainMenu").get_by_text("Settings", exact=True).click()
    page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel", has_text=re.compile("^Theme$"))).click()
    page.locator(".lm-Menu-item", has=page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{name}$"))).click()
    expect(page.locator("body")).to_have_attribute("data-jp-theme-name", name)
    expect(page.locator("#jupyterlab-splash")).to_have_count(0)  # the splash shown while the theme loads has gone


def _node(page, name):
    return page.locator(".unb-node").filter(has=page.locator(".unb-name", has_text=re.compile(rf"^{name}$")))


# -- themes ----------------------------------------------------------------------------------------------

THEMED_PLAN = "print('north fell by 12%')\\nworst = ['north', 'west']  # the two that fell most\\nworst"
THEMED_CELLS = [
    "%load_ext unity_nb\nimport unity_nb as u",
    f"""def script(messages, tools):
    if not [m for m in messages if m["role"] == "tool"]:
        return u.call_tool("execute_code", code="{THEMED_PLAN}", intent="find the two regions that fell most")
    return "The regions that fell most: **north** and west."

themed_model = u.ScriptedModel(script)
%unity model --var themed_model""",
    "h = %unity act --name themed Find the two regions whose sales fell most",
]


def test_the_widget_is_readable_in_jupyterlab_light_and_dark(lab, browser):  # noqa: F811 (the fixtures)
    from playwright.sync_api import expect

    _notebook(lab.root / "themed.ipynb", THEMED_CELLS)
    page = browser.page
    _open(page, lab, "themes", "themed.ipynb")
    _run_all(page)
    themed = _node(page, "themed")
    expect(themed.locator(".unb-badge")).to_have_text("finished", timeout=60_000)
    plan = themed.locator("details.unb-plan")
    plan.locator("summary").click(delay=PRESS)  # a person opens the finished plan to read it
    blocks = {
        "code": plan.locator("pre.unb-python"), "printed": plan.locator("pre.unb-output"),
        "result": plan.locator("pre.unb-result"), "answer": themed.locator(".unb-entry.unb-answer p"),
    }
    for block in blocks.values():
        expect(block).to_be_visible()
    root = page.locator(".unb-root").filter(has=themed)
    try:
        themes = (("JupyterLab Light", False, "widget-light.png"), ("JupyterLab Dark", True, "widget-dark.png"))
        for theme, dark, picture in themes:
            _theme(page, theme)
            for what, block in blocks.items():
                measured = block.evaluate(CONTRAST)
                # the page is the theme asked for (a dark background under the dark theme) ...
                assert (measured["background"] < 0.2) == dark, (theme, what, measured)
                # ... and the block's text reads on it
                assert measured["ratio"] >= 4.5, (theme, what, measured)
            PICTURES.mkdir(parents=True, exist_ok=True)
            (PICTURES / picture).write_bytes(root.screenshot())
    finally:
        _theme(page, "JupyterLab Light")  # the server's other tests see the default theme
    assert browser.outside == [], "the page requested something beyond the local server"


async def test_without_jupyterlabs_variables_a_dark_front_end_gets_the_dark_palette(harness):  # noqa: F811
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    def script(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="print('north')\nworst = 1\nworst", intent="one plan")
        return "done"

    h = u.act("one plan", model=u.ScriptedModel(script), namespace={})
    assert await h == "done"
    page = harness.page
    await page.emulate_media(color_scheme="dark")
    await page.evaluate("document.body.style.background = '#1e1e1e'")  # a dark front end paints its page dark
    widget = await harness.show(HandleWidget(h))
    plan = widget.locator("details.unb-plan")
    await plan.locator("summary").click(delay=PRESS)
    for what in ("pre.unb-python", "pre.unb-output", "pre.unb-result"):
        block = plan.locator(what)
        await expect(block).to_be_visible()
        measured = await block.evaluate(CONTRAST)
        assert measured["background"] < 0.2 and measured["ratio"] >= 4.5, (what, measured)


# -- typing into a running batch's widget --------------------------------------------------------------

# a batch whose rows come and go (each row's loop is a node of the widget while it runs) for longer
# than the test types: the widget updates several times a second under the person's keys
BATCH_CELLS = [
    "%load_ext unity_nb\nimport asyncio\nimport unity_nb as u",
    """async def label(messages, tools):
    await asyncio.sleep(0.2)  # a row takes a moment, as a real model's would
    return "label"

row_model = u.ScriptedModel(label)
%unity model --var row_model
items = [f"item {i}" for i in range(2000)]""",
    "labels = %unity map items --concurrency 3 --name rows Label {value}",
]
TYPED = "answer in lowercase, and keep it short"
TYPING_DELAY = 90  # ms between keys: a person typing steadily (input pacing, never a wait for a result)


def test_typing_into_a_running_batchs_widget_keeps_every_key_and_enter_sends(lab, browser):  # noqa: F811
    from playwright.sync_api import expect

    _notebook(lab.root / "batch.ipynb", BATCH_CELLS)
    page = browser.page
    panel = _open(page, lab, "typing", "batch.ipynb")
    _run_all(page)
    rows = _node(page, "rows")
    badge, bar = rows.locator(".unb-badge"), rows.locator(".unb-bar-text")
    expect(badge).to_have_text("running", timeout=60_000)
    expect(bar).to_contain_text(re.compile(r"^[1-9]\d* done .* of 2000 rows ended"))  # rows finish: the widget updates
    box = rows.locator(".unb-controls .unb-input")
    box.click()
    box.press_sequentially(TYPED, delay=TYPING_DELAY)
    # every key landed in the box, which kept the focus (none reached the notebook's command mode)
    expect(box).to_be_focused()
    expect(box).to_have_value(TYPED)
    expect(panel.locator(".jp-Notebook .jp-Cell")).to_have_count(len(BATCH_CELLS))
    expect(badge).to_have_text("running")  # the rows updated the widget while the person typed
    page.keyboard.press("Enter")  # sends, as the Interject button does
    transcript = rows.locator(".unb-transcript").first
    expect(transcript.locator(".unb-interjection")).to_have_text(f"interjection {TYPED}")
    expect(box).to_have_value("")
    rows.locator(".unb-stop").first.click(delay=PRESS)
    expect(badge).to_have_text("stopped")
    assert browser.outside == [], "the page requested something beyond the local server"


async def test_a_questions_answer_box_keeps_what_is_typed_across_updates_and_enter_answers(harness):  # noqa: F811
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    h = await region_asker()
    w = HandleWidget(h)
    widget = await harness.show(w)
    box = widget.locator(".unb-clarification .unb-input")
    await box.click()
    await box.press_sequentially("we", delay=TYPING_DELAY)
    await h.interject("meanwhile, a note")  # the operation changes: the widget updates under the person's keys
    await harness.show(w)
    await box.press_sequentially("st", delay=TYPING_DELAY)
    await expect(box).to_be_focused()
    await expect(box).to_have_value("west")
    await box.press("Enter")
    clicks = await harness.page.evaluate(f"() => window.sentBy('{w.model_id}')")
    assert [(c["action"], c["text"]) for c in clicks] == [("answer", "west")]
    await h.stop()


# -- a widget without its kernel ----------------------------------------------------------------------


async def test_a_widget_whose_kernel_is_gone_looks_dead_and_one_with_its_kernel_does_not(harness):  # noqa: F811
    """A notebook reopened with its widget state saved mid-run: the view comes back from the saved state,
    with no kernel behind it. It must not look live: its pings go unanswered, so it says so, greys the
    state as saved, and disables every button and box."""
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    gate = asyncio.Event()

    async def slow(messages, tools):
        await gate.wait()
        return "done"

    live_h = u.start_loop("work", model=u.ScriptedModel(slow), name="live")
    saved_h = u.start_loop("work", model=u.ScriptedModel(slow), name="saved")
    await live_h.wait_for("model_request", timeout=20)
    await saved_h.wait_for("model_request", timeout=20)
    live = await harness.show(HandleWidget(live_h))
    saved = await harness.show(HandleWidget(saved_h), kernel=False)
    note = saved.locator(".unb-dead-note")
    await expect(note).to_have_text("This operation's kernel is gone; the state shown is as saved.")
    await expect(saved.locator(".unb-root")).to_have_class(re.compile(r"\bunb-dead\b"))
    await expect(saved.locator(".unb-badge")).to_have_text("running")  # as saved
    for control in await saved.locator("button, input").all():
        await expect(control).to_be_disabled()
    # the live one, shown at the same moment, had its pings answered: it stays live
    await expect(live.locator(".unb-dead-note")).to_be_hidden()
    await expect(live.locator(".unb-root")).not_to_have_class(re.compile(r"\bunb-dead\b"))
    await expect(live.locator(".unb-stop")).to_be_enabled()
    gate.set()
    assert await live_h == "done" and await saved_h == "done"


def _saved_mid_run() -> dict:
    """A notebook saved while its operation ran, with JupyterLab's widget state: the state a real
    HandleWidget of this process had mid-run, in the notebook's metadata, and its view in an output."""
    from unity_nb.jupyter._widget import HandleWidget, render_html

    async def run() -> tuple[dict, dict, str, str, str]:
        gate = asyncio.Event()

        async def slow(messages, tools):
            await gate.wait()
            return "done"

        h = u.start_loop("Summarise the sales by region", model=u.ScriptedModel(slow), name="saved_run")
        await h.wait_for("model_request", timeout=20)
        w = HandleWidget(h)
        state, layout = w.get_state(), w.layout.get_state()
        snapshot, plain = render_html(h), repr(h)
        await h.stop()
        return state, layout, w.model_id, w.layout.model_id, snapshot + "\0" + plain

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # (Playwright's own event loop runs in this thread)
        state, layout, widget_id, layout_id, texts = pool.submit(asyncio.run, run()).result()
    snapshot, plain = texts.split("\0")

    def saved(s):
        return {"model_module": s["_model_module"], "model_module_version": s["_model_module_version"],
                "model_name": s["_model_name"], "state": s}

    view = {"model_id": widget_id, "version_major": 2, "version_minor": 1}
    data = {"application/vnd.jupyter.widget-view+json": view, "text/html": snapshot, "text/plain": plain}
    cell = nbformat.v4.new_code_cell(
        "h = %unity act --name saved_run Summarise the sales by region", execution_count=1,
        outputs=[nbformat.v4.new_output("display_data", data)],
    )
    return nbformat.v4.new_notebook(cells=[cell], metadata={
        "kernelspec": KERNELSPEC,
        "widgets": {"application/vnd.jupyter.widget-state+json": {
            "version_major": 2, "version_minor": 0, "state": {widget_id: saved(state), layout_id: saved(layout)},
        }},
    })


def test_a_notebook_reopened_with_widget_state_saved_mid_run_shows_a_dead_widget(lab, browser):  # noqa: F811
    from nbformat.sign import NotebookNotary
    from playwright.sync_api import expect

    nb = nbformat.from_dict(_saved_mid_run())
    NotebookNotary(data_dir=str(lab.data_dir)).sign(nb)  # trusted, as its author's own notebook is
    nbformat.write(nb, lab.root / "reopened.ipynb")
    page = browser.page
    _open(page, lab, "reopened", "reopened.ipynb")  # a new kernel: the saved widget has no comm in it
    node = _node(page, "saved_run")
    expect(node.locator(".unb-badge")).to_have_text("running")  # the state as it was saved ...
    root = page.locator(".unb-root").filter(has=node)
    # ... which says its kernel is gone, greyed, with nothing left to click
    expect(root.locator(".unb-dead-note")).to_have_text("This operation's kernel is gone; the state shown is as saved.")
    expect(root).to_have_class(re.compile(r"\bunb-dead\b"))
    for control in root.locator("button, input").all():
        expect(control).to_be_disabled()
    assert browser.outside == [], "the page requested something beyond the local server"


async def test_a_skip_reason_being_typed_survives_another_approval_and_enter_skips(harness):  # noqa: F811
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    def delete_row(row: int) -> str:
        """Delete one row."""
        return f"deleted {row}"

    def script(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.Reply(content="", tool_calls=[u.call_tool("delete_row", row=1), u.call_tool("delete_row", row=2)])
        return "done"

    tool = u.as_tool(delete_row, needs_approval=True)
    h = u.start_loop("tidy", model=u.ScriptedModel(script), tools=[tool], name="tidy")
    w = HandleWidget(h)
    await h.wait_for("approval_requested", lambda e: len(h.inbox.approvals) == 2, timeout=20)
    first, second = (a["call_id"] for a in h.inbox.approvals)
    widget = await harness.show(w)
    box = widget.locator(f'.unb-approval[data-call="{second}"] .unb-input')
    await box.click()
    await box.press_sequentially("not ", delay=TYPING_DELAY)
    await h.inbox.approve(first)  # the other call is approved meanwhile: the widget updates under the person's keys
    await h.wait_for("tool_finished", lambda e: e.call_id == first, timeout=20)
    assert [a["call_id"] for a in h.inbox.approvals] == [second]
    await harness.show(w)
    await expect(widget.locator(".unb-approval")).to_have_count(1)
    await box.press_sequentially("that one", delay=TYPING_DELAY)
    await expect(box).to_be_focused()
    await expect(box).to_have_value("not that one")
    await box.press("Enter")
    clicks = await harness.page.evaluate(f"() => window.sentBy('{w.model_id}')")
    assert [(c["action"], c["text"], c["call_id"]) for c in clicks] == [("skip", "not that one", second)]
    await h.stop()


async def test_on_a_kernel_without_subshells_a_running_cell_says_clicks_wait_for_it(harness):  # noqa: F811
    """VS Code and Colab take a click only between cells: while a cell runs, the widget says so."""
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    gate = asyncio.Event()

    async def slow(messages, tools):
        await gate.wait()
        return "done"

    h = u.start_loop("work", model=u.ScriptedModel(slow), name="queued")
    await h.wait_for("model_request", timeout=20)
    w = HandleWidget(h)
    w.subshells = False
    w.cell_running = True
    shown = await harness.show(w)
    notice = shown.locator(".unb-notice")
    await expect(notice).to_contain_text("a click acts when the cell ends")
    w.cell_running = False
    await harness.show(w)
    await expect(notice).not_to_contain_text("a click acts when the cell ends")
    gate.set()
    await h


# -- a verb registered in the kernel ------------------------------------------------------------------


async def delivered(harness, w):  # noqa: F811 (the fixture)
    """What the page sent, received by the kernel as a click is; back once performed."""
    for click in await harness.page.evaluate(f"() => window.sentBy('{w.model_id}').splice(0)"):
        w._on_custom(w, click, [])
    async with asyncio.timeout(20):
        await w.clicks.settled()
    return await harness.show(w)


async def test_a_verb_registered_in_the_kernel_has_its_button_and_its_click_lands_in_the_transcript(
    harness, monkeypatch,  # noqa: F811
):
    """Issue 25: the steering buttons are made from the kernel's table of verbs, so a verb registered
    there (its entry and its method, nothing else) has its button, which sends the text box."""
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget
    from unity_nb.loop import LoopHandle, Verb, register_verb, unregister_verb

    async def hail(self, message):
        self.run.require_live("hail")
        self.run.steer("hail", message)

    monkeypatch.setattr(LoopHandle, "hail", hail, raising=False)
    register_verb(
        Verb("hail", entry=lambda m, _r: f"[hailed: {m}]", message="required", doc="Hail the operation NAME.")
    )
    gate = asyncio.Event()

    async def slow(messages, tools):
        await gate.wait()
        return "done"

    try:
        h = u.start_loop("work", model=u.ScriptedModel(slow), name="ship")
        await h.wait_for("model_request", timeout=20)
        w = HandleWidget(h)
        widget = await harness.show(w)
        hail_button, box = widget.locator(".unb-btn.unb-hail"), widget.locator(".unb-controls .unb-input")
        await expect(hail_button).to_have_text("Hail")
        await expect(hail_button).to_have_attribute("title", "Hail the operation NAME.")
        await hail_button.click(delay=PRESS)  # the box is empty: a verb needing a message sends nothing
        await box.click()
        await box.press_sequentially("ahoy", delay=TYPING_DELAY)
        await hail_button.click(delay=PRESS)
        await expect(box).to_have_value("")
        await delivered(harness, w)
        await expect(widget.locator(".unb-transcript .unb-steering")).to_have_text(["steering [hailed: ahoy]"])
        assert w.errors == []
        # the built-in pair made from the same table: Pause reads Resume while paused, and resumes
        pause = widget.locator(".unb-btn.unb-pause")
        await pause.click(delay=PRESS)
        await delivered(harness, w)
        await expect(pause).to_have_text("Resume")
        await expect(pause).to_have_attribute("title", "Resume the paused operation NAME.")
        await pause.click(delay=PRESS)
        await delivered(harness, w)
        await expect(pause).to_have_text("Pause")
        await expect(widget.locator(".unb-transcript .unb-steering")).to_have_text([
            "steering [hailed: ahoy]", "steering [paused by the user]", "steering [resumed by the user]",
        ])
        gate.set()
        assert await h == "done"
        await harness.show(w)
        await expect(hail_button).to_be_disabled()  # the operation ended
    finally:
        gate.set()
        unregister_verb("hail")


# -- what the model writes is text, never markup ----------------------------------------------------


async def test_a_link_in_an_answer_cannot_add_attributes_to_its_element(harness):  # noqa: F811
    """An answer is model text (and the model may repeat what a page or a file told it). Its markdown link
    became ``<a href='URL'>`` with the URL escaped for ``&<>"`` only: a ``'`` in the URL closed the attribute
    and the rest became attributes of the link, an event handler among them (script in the notebook's page)."""
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    url = "https://example.com/a' onmouseover='window.unbPwned=1' data-x='y"
    h = u.start_loop("answer", model=u.ScriptedModel(lambda m, t: f"see [the page]({url}) for more"), name="md")
    assert (await h).startswith("see")
    widget = await harness.show(HandleWidget(h))
    link = widget.locator(".unb-answer a")
    await expect(link).to_have_text("the page")
    names = await link.evaluate("a => a.getAttributeNames().sort()")
    assert names == ["href", "target"]
    assert await link.get_attribute("href") == url
    await link.hover()
    assert await harness.page.evaluate("() => window.unbPwned === undefined")


# -- an Ask has a Stop of its own --------------------------------------------------------------------


async def test_a_hanging_ask_is_stopped_by_its_own_button(harness):  # noqa: F811
    """An Ask whose model call never answers: the Ask's own Stop button, clicked at a person's pace, stops it and
    it shows "stopped"; the operation asked about goes on. Before, nothing in the widget could stop an Ask."""
    from playwright.async_api import expect

    from unity_nb.jupyter._widget import HandleWidget

    gate, never = asyncio.Event(), asyncio.Event()

    async def work(messages, tools):
        if messages[0]["content"].startswith("You are inspecting another"):  # the Ask's own call: it hangs
            await never.wait()
        await gate.wait()
        return "done"

    try:
        h = u.start_loop("work", model=u.ScriptedModel(work), name="ship")
        await h.wait_for("model_request", timeout=20)
        w = HandleWidget(h)
        widget = await harness.show(w)
        box = widget.locator(".unb-controls .unb-input")
        await box.click()
        await box.press_sequentially("how far along?", delay=TYPING_DELAY)
        await widget.locator(".unb-btn.unb-ask").click(delay=PRESS)
        await delivered(harness, w)
        entry = widget.locator(".unb-ask-entry")
        await expect(entry.locator(".unb-badge")).to_have_text("running")
        stop = entry.locator(".unb-ask-stop")
        await stop.click(delay=PRESS)
        await delivered(harness, w)
        await expect(entry.locator(".unb-badge")).to_have_text("stopped")
        await expect(stop).to_be_hidden()
        assert not h.done()  # the operation asked about goes on
        assert w.errors == []
        gate.set()
        assert await asyncio.wait_for(h.result(), 20) == "done"
    finally:
        gate.set()
        never.set()
