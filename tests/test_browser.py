"""End to end, in a real browser: JupyterLab serves notebooks/01_quickstart.ipynb, Debian's
Chromium (driven by Playwright) opens it and runs every cell, and the live widget of the
notebook's last operation (``tour``, a deliberately slow one) is steered by clicks: Pause,
an interjection typed into its text box, Resume, Stop, at a person's pace (about a second
between clicks, so the operation sits idle while paused, as it does for a person). The widget's
badge and transcript must show each step, a model request must follow Resume (the step counter
advances and the model answers the interjection), and Stop must reach "stopped"; this also
proves the anywidget front end loads in JupyterLab. (JupyterLab sends a widget's comm messages
over a kernel subshell by default: the clicks take the same path as a person's.) A second test, on
the same server, writes a small notebook whose actor runs with ``--approval always``: the first
plan is run with the Run button, the second skipped with a reason typed beside Skip, and a cell
run afterwards shows that only the first plan ran (its picture of the waiting plan goes to
``tests/artifacts/approval.png``). A third opens, beside a live widget, a notebook saved by an
older version of the widget (its state in the notebook): the live plan keeps its syntax colours.

The tests after those need no JupyterLab: Chromium loads the installed ``handle.js`` with a
stand-in for anywidget's model, fed the state a real HandleWidget computed in this process (see
"the widget's front end alone" below): the transcript's capped, following scroll box, which
plans are expanded, a retry line, a failure shown once, a fragment cut off by Stop.

Only loopback: the server listens on 127.0.0.1 with a token and fetches nothing (news,
update checks and the extension manager's PyPI look-ups are off), the page may request nothing
but the server (anything else is refused and fails the test), and the browser is Debian's
``/usr/bin/chromium`` (``.ci/run`` installs it), never a download. In the page every wait is
one of Playwright's auto-waiting expectations with a timeout, and no assertion is about how long
anything took. The only fixed waits are a person's pauses between clicks (``HESITATE``): they
are input, never a way to wait for something to appear. On failure a screenshot of the page, the
browser console and the server's log go
to ``tests/artifacts/`` (ignored by git). When the test passes it saves its picture of the
widget to ``tests/artifacts/widget.png``; with ``UNITY_NB_README_SCREENSHOT=1`` it rewrites
``docs/widget.png``, the README's picture. JupyterLab, its kernel and the browser end with the test,
pass or fail.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

import unity_nb as u
from unity_nb import ToolContext

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "01_quickstart.ipynb"
ARTIFACTS = REPO / "tests" / "artifacts"
SCREENSHOT = REPO / ("docs" if os.environ.get("UNITY_NB_README_SCREENSHOT") else "tests/artifacts") / "widget.png"
APPROVAL_SCREENSHOT = REPO / "tests" / "artifacts" / "approval.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]
START_TIMEOUT = 60  # seconds for JupyterLab to start serving
UI_TIMEOUT = 30_000  # milliseconds for one expectation in the page
NOTE = "look at the west first"
# a person holds the button down this long (ms): a widget that re-renders its buttons under the
# pointer while it streams would lose such a click, so the test clicks the same way
PRESS = 150
# a person's pause between clicks (ms): input pacing only, never used to wait for a result
HESITATE = 1000
KERNEL_IDLE = re.compile(r"^Python 3.* \| Idle$")  # the status bar's kernel button, once the kernel is up


def _require_prerequisites() -> None:
    """Skip where Chromium or the test extra is missing; fail instead under CI, which installs both."""
    missing = [] if os.path.exists(CHROMIUM) else [f"{CHROMIUM} (apt-get install chromium)"]
    for module in ("playwright", "jupyterlab"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{module} (pip install -e '.[test]')")
    if missing:
        message = "the browser test needs " + ", ".join(missing)
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(message)
        pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (the kernels a Jupyter server started), from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _end(pid: int, timeout: float) -> None:
    """Wait up to ``timeout`` for a process (not our child) to exit, then kill it by its id."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if not select.select([fd], [], [], timeout)[0]:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            select.select([fd], [], [], 10)
    except ProcessLookupError:
        pass
    finally:
        os.close(fd)


class Lab:
    """A JupyterLab server on 127.0.0.1 with a token and its own root, config, settings and runtime dirs."""

    def __init__(self, base: Path) -> None:
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = base / "root"
        self.root.mkdir()
        # the quickstart as a newcomer would open it, less the widget state saved in its
        # metadata, so that every widget on the page comes from the running kernel
        nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
        nb["metadata"].pop("widgets", None)
        (self.root / NOTEBOOK.name).write_text(json.dumps(nb, indent=1), encoding="utf-8")

        data, settings = base / "data", base / "settings"
        self.data_dir = data
        for plugin, values in {
            # no news, no update check: nothing is fetched and no toast covers the page
            "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
            # every cell attached to the DOM, so locators find outputs outside the viewport
            "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
            "@jupyterlab/extensionmanager-extension/plugin": {"enabled": False},
        }.items():
            path = settings / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ)
        env.update({
            "JUPYTER_CONFIG_DIR": str(base / "config"),
            "JUPYTER_DATA_DIR": str(data),
            "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONUNBUFFERED": "1",
        })
        env.pop("UNITY_NB_MODEL", None)
        self.log_path = base / "jupyterlab.log"
        self.log: list[str] = []
        self.ready = threading.Event()
        self.serving = False
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "jupyterlab",
                "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.extension_manager=readonly",
            ],
            env=env, cwd=self.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read_log, daemon=True)
        self.reader.start()

    def _read_log(self) -> None:
        with open(self.log_path, "w", encoding="utf-8") as f:
            for line in self.proc.stdout:  # ends when the server exits
                self.log.append(line)
                f.write(line)
                f.flush()
                if not self.serving and f"127.0.0.1:{self.port}/" in line and "running at" in "".join(self.log[-3:]):
                    self.serving = True
                    self.ready.set()
        self.ready.set()  # exited: wake the waiter, which then sees the exit code

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        if self.ready.wait(START_TIMEOUT) and self.serving:
            # the server logs its URL just before its event loop's first turn binds the port:
            # probe the port until it accepts (a readiness check, not a wait for the page)
            while self.proc.poll() is None and time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
                    return
                except ConnectionRefusedError:
                    time.sleep(0.05)
        raise RuntimeError(f"JupyterLab did not start; its log:\n{''.join(self.log[-40:])}")

    def shutdown(self) -> None:
        """Shut the server and its kernels down; kill whatever is left, by process id."""
        kernels = _children(self.proc.pid) if self.proc.poll() is None else []
        try:
            request = urllib.request.Request(
                f"{self.url}/api/shutdown", method="POST", headers={"Authorization": f"token {self.token}"}
            )
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=20).close()
        except OSError:
            pass  # not serving (failed start) or already gone: the signals below do it
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in kernels:  # each kernel runs in its own session, so end them one by one
            _end(pid, timeout=10)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything else the server's session started
        except ProcessLookupError:
            pass
        self.reader.join(10)  # the log ends with the server: then its pipe is closed, not left to the collector
        if not self.reader.is_alive() and self.proc.stdout is not None:
            self.proc.stdout.close()


def _steps(stats: str) -> int:
    """The step count of a node's stats line ("12 steps · 11 tool calls · ...")."""
    return int(re.match(r"(\d+) steps", stats)[1])


def _more_steps_than(n: int) -> re.Pattern:
    """Matches a stats line whose step count is above ``n`` (the tour makes at most 40 steps)."""
    return re.compile(rf"^(?:{'|'.join(str(i) for i in range(n + 1, 100))}) steps")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _require_prerequisites()
    server = Lab(tmp_path_factory.mktemp("jupyterlab"))
    try:
        server.wait_ready()
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def browser(lab, request):
    """A Chromium page on the server's origin; on failure, a screenshot and logs in tests/artifacts/."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=UI_TIMEOUT)
    failed_before = request.session.testsfailed
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = chromium.new_context(viewport={"width": 1100, "height": 900}, device_scale_factor=2)
            context.set_default_timeout(UI_TIMEOUT)
            b = SimpleNamespace(page=context.new_page(), outside=[], console=[])
            # loopback only: a request anywhere else is refused, and recorded for the test to see
            def refuse(route):
                b.outside.append(route.request.url)
                route.abort()

            context.route(lambda url: not url.startswith(lab.url), refuse)
            b.page.on("console", lambda m: m.type in ("error", "warning") and b.console.append(f"{m.type}: {m.text}"))
            b.page.on("pageerror", lambda e: b.console.append(f"pageerror: {e}"))
            yield b
            if request.session.testsfailed > failed_before:
                ARTIFACTS.mkdir(exist_ok=True)
                stem = ARTIFACTS / request.node.name
                b.page.screenshot(path=f"{stem}.png", full_page=True)
                (ARTIFACTS / f"{request.node.name}.console.txt").write_text("\n".join(b.console), encoding="utf-8")
                shutil.copy(lab.log_path, f"{stem}.jupyterlab.log")
                print(f"\nbrowser test failed: see {stem}.png, .console.txt and .jupyterlab.log")
        finally:
            chromium.close()


def test_the_quickstart_widget_is_steered_by_clicks(lab, browser):
    from playwright.sync_api import expect

    page = browser.page
    page.goto(f"{lab.url}/lab/tree/{NOTEBOOK.name}?token={lab.token}")
    expect(page.locator(".jp-NotebookPanel")).to_be_visible()
    # the kernel is up once the status bar names it and says Idle (a Run All before that
    # would ask which kernel to start)
    expect(page.locator("#jp-main-statusbar").get_by_role("button", name=KERNEL_IDLE)).to_be_visible()

    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()

    # the last cell's operation, live in the widget that the anywidget front end renders
    tour = page.locator(".unb-node").filter(has=page.locator(".unb-name", has_text=re.compile(r"^tour$")))
    badge, transcript = tour.locator(".unb-badge"), tour.locator(".unb-transcript")
    pause, stop = tour.locator(".unb-pause"), tour.locator(".unb-stop")
    text_box = tour.locator(".unb-controls .unb-input")
    expect(badge).to_have_text("running", timeout=60_000)
    expect(transcript.locator(".unb-call")).not_to_have_count(0)  # it is working: a tool call is in

    stats = tour.locator(".unb-stats")
    assistant = transcript.locator(".unb-assistant")

    # the quickstart's exercise, at a person's pace: Pause, a second, type, Interject, a second, Resume
    pause.click(delay=PRESS)
    expect(badge).to_have_text("paused")
    expect(pause).to_have_text("Resume")
    expect(transcript).to_contain_text("[paused by the user]")
    page.wait_for_timeout(HESITATE)  # the call in flight ends; then nothing runs in the kernel

    text_box.click()
    text_box.press_sequentially(NOTE, delay=20)
    tour.locator(".unb-interject").click(delay=PRESS)
    expect(transcript.locator(".unb-interjection")).to_have_text(f"interjection {NOTE}")
    expect(text_box).to_have_value("")
    expect(badge).to_have_text("paused")
    page.wait_for_timeout(HESITATE)
    steps = _steps(stats.inner_text())  # no step starts while paused
    replies = assistant.count()

    pause.click(delay=PRESS)  # the same button, now labelled Resume
    expect(badge).to_have_text("running")
    expect(pause).to_have_text("Pause")
    expect(transcript).to_contain_text("[resumed by the user]")
    # a model request follows Resume: the step counter advances (no step starts while paused) ...
    expect(stats).to_have_text(_more_steps_than(steps))
    expect(assistant).not_to_have_count(replies)  # and the transcript grows
    # ... and the scripted model answers the interjection in that step
    expect(assistant.filter(has_text=f"Noted: {NOTE}.")).to_have_count(1)
    picture = page.locator(".unb-root").filter(has=tour).screenshot()
    page.wait_for_timeout(HESITATE)

    stop.click(delay=PRESS)
    expect(badge).to_have_text("stopped")
    expect(transcript).to_contain_text("[stopped by the user: stopped from the widget]")
    for control in (pause, stop, text_box, tour.locator(".unb-interject"), tour.locator(".unb-ask")):
        expect(control).to_be_disabled()
    # each step once, in the order of the clicks
    expect(transcript.locator(".unb-steering, .unb-interjection")).to_have_text([
        "steering [paused by the user]",
        f"interjection {NOTE}",
        "steering [resumed by the user]",
        "steering [stopped by the user: stopped from the widget]",
    ])
    assert browser.outside == [], "the page requested something beyond the local server"

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.write_bytes(picture)  # the README's picture of the widget


# the second test's notebook: two plans, each waiting for a click, then an answer that repeats
# what the model was told about the last one
APPROVAL_NOTEBOOK = "approval.ipynb"
PLANS = ["ran_first = True  # the plan you run", "ran_second = True  # the plan you skip"]
REASON = "not on the production data"
SKIPPED = f"[the person skipped this plan; it did not run]: {REASON}"
APPROVAL_CELLS = [
    "%load_ext unity_nb\nimport unity_nb as u",
    f"""PLANS = {PLANS!r}

def script(messages, tools):
    \"\"\"One plan per step, then an answer repeating the last tool result the model received.\"\"\"
    done = [m for m in messages if m["role"] == "tool"]
    if len(done) < len(PLANS):
        return u.call_tool("execute_code", code=PLANS[len(done)], intent=f"set flag {{len(done) + 1}}")
    return "Told: " + done[-1]["content"]

careful_model = u.ScriptedModel(script)
%unity model --var careful_model""",
    "h = %unity act --approval always --name careful Set both flags",
    "print(f\"ran_first={globals().get('ran_first')} ran_second={globals().get('ran_second', 'never set')}\")",
]


def test_plans_wait_for_run_and_skip_clicks(lab, browser):
    import nbformat
    from playwright.sync_api import expect

    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(src) for src in APPROVAL_CELLS],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    )
    nbformat.write(nb, lab.root / APPROVAL_NOTEBOOK)
    page = browser.page
    # a workspace of its own, so the first test's notebook is not restored beside this one
    page.goto(f"{lab.url}/lab/workspaces/approval/tree/{APPROVAL_NOTEBOOK}?token={lab.token}")
    panel = page.locator(".jp-NotebookPanel")
    expect(panel).to_be_visible()
    expect(page.locator("#jp-main-statusbar").get_by_role("button", name=KERNEL_IDLE)).to_be_visible()
    cells = panel.locator(".jp-Notebook .jp-CodeCell")
    expect(cells).to_have_count(len(APPROVAL_CELLS))

    # run every cell but the last (the check), which is run once the operation has ended
    check = cells.nth(len(APPROVAL_CELLS) - 1)
    check.locator(".jp-InputArea-editor").click()
    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Above Selected Cell")).click()

    careful = page.locator(".unb-node").filter(has=page.locator(".unb-name", has_text=re.compile(r"^careful$")))
    badge, transcript = careful.locator(".unb-badge"), careful.locator(".unb-transcript")
    approvals = careful.locator(".unb-approval")
    # the first plan waits: its code, highlighted, with Run and Skip
    expect(badge).to_have_text("waiting for you", timeout=60_000)
    expect(approvals).to_have_count(1)
    expect(approvals.locator("pre.unb-python")).to_have_text(PLANS[0])
    expect(approvals).to_contain_text("set flag 1")
    first = approvals.get_attribute("data-call")
    summary = transcript.locator(f'.unb-call[data-call="{first}"] summary')
    expect(summary).to_have_text("execute_code waiting for approval")
    picture = page.locator(".unb-root").filter(has=careful).screenshot()

    approvals.locator(".unb-run").click(delay=PRESS)
    expect(transcript.locator(".unb-steering")).to_have_text(["steering [plan approved by the user]"])
    expect(transcript.locator(f'.unb-call[data-call="{first}"] summary')).to_have_text("execute_code done")
    expect(transcript.locator(f'.unb-call[data-call="{first}"] .unb-result')).to_contain_text("success: true")
    # then the second plan waits
    expect(approvals.locator("pre.unb-python")).to_have_text(PLANS[1])
    expect(approvals).to_have_count(1)
    expect(badge).to_have_text("waiting for you")
    second = approvals.get_attribute("data-call")
    assert second != first

    approvals.locator(".unb-input").fill(REASON)
    approvals.locator(".unb-skip").click(delay=PRESS)
    expect(badge).to_have_text("finished")
    expect(approvals).to_have_count(0)
    expect(transcript.locator(".unb-steering")).to_have_text([
        "steering [plan approved by the user]", f"steering [plan skipped by the user: {REASON}]",
    ])
    # the answer repeats what the model was told about the skipped plan
    expect(transcript.locator(".unb-entry.unb-answer")).to_have_text(f"Told: {SKIPPED}")
    # and the skipped call, opened like a person would, shows that result
    skipped = transcript.locator(f'.unb-call[data-call="{second}"]')
    skipped.locator("summary").click(delay=PRESS)
    expect(skipped.locator(".unb-result")).to_be_visible()
    expect(skipped.locator(".unb-result")).to_have_text(SKIPPED)

    # in the kernel: the run plan ran, the skipped one never did
    check.locator(".jp-InputArea-editor").click()
    page.keyboard.press("Shift+Enter")
    expect(check.locator(".jp-OutputArea-output")).to_have_text("ran_first=True ran_second=never set")
    assert browser.outside == [], "the page requested something beyond the local server"

    APPROVAL_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    APPROVAL_SCREENSHOT.write_bytes(picture)


# the third test: a live widget, then a notebook saved by an older version of the widget opened
# beside it. anywidget keeps one <style> per _anywidget_id for the whole page, and the saved
# widget brings its own _css: before, that replaced the live widget's stylesheet (plans lost
# their syntax colours while an older notebook was open in another tab)
STYLED_CELLS = [
    "%load_ext unity_nb\nimport unity_nb as u\nx = 1",
    """PLAN = "ready = True if x else None  # set it"
styled_model = u.ScriptedModel(lambda m, t: u.call_tool("execute_code", code=PLAN, intent="set it"))
%unity model --var styled_model""",
    "h = %unity act --approval always --name styled Set it",
]
STALE_ESM = "export default { render({ el }) { el.innerHTML = '<span class=\"unb-stale-view\">older</span>'; } };"
KEYWORD_COLOUR = "rgb(0, 128, 0)"  # .unb-k in widgets/handle.css: JupyterLab Light's --jp-mirror-editor-keyword-color


def _stale_notebook() -> dict:
    """A notebook saved with an older widget: its state (under the id every widget used then, with a
    stylesheet that has no highlight rules) in the notebook's metadata, and a view of it in an output."""
    import nbformat

    sheet = (REPO / "widgets" / "handle.css").read_text(encoding="utf-8")
    older = "\n".join(line for line in sheet.splitlines() if ".unb-k" not in line)
    widget, layout = "0" * 31 + "1", "0" * 31 + "2"
    base = {"_model_module": "@jupyter-widgets/base", "_model_module_version": "2.0.0"}
    any_model = {"model_module": "anywidget", "model_module_version": "~0.11.*", "model_name": "AnyModel"}
    state = {
        layout: {"model_module": "@jupyter-widgets/base", "model_module_version": "2.0.0", "model_name": "LayoutModel",
                 "state": {**base, "_model_name": "LayoutModel"}},
        widget: {**any_model, "state": {
            "_anywidget_id": "unity_nb.jupyter._widget.HandleWidget", "_css": older, "_esm": STALE_ESM,
            "_model_module": "anywidget", "_model_module_version": "~0.11.*", "_model_name": "AnyModel",
            "_view_module": "anywidget", "_view_module_version": "~0.11.*", "_view_name": "AnyView",
            "layout": f"IPY_MODEL_{layout}", "nodes": [], "entries": {}, "asks": [], "notice": "",
        }},
    }
    view = {"model_id": widget, "version_major": 2, "version_minor": 1}
    data = {"application/vnd.jupyter.widget-view+json": view, "text/plain": "older"}
    cell = nbformat.v4.new_code_cell(
        "h = %unity act an older run", execution_count=1, outputs=[nbformat.v4.new_output("display_data", data)]
    )
    return nbformat.v4.new_notebook(cells=[cell], metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "widgets": {
            "application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0, "state": state},
        },
    })


def test_a_notebook_saved_by_an_older_version_does_not_restyle_the_live_widget(lab, browser):
    import nbformat
    from nbformat.sign import NotebookNotary
    from playwright.sync_api import expect

    nbformat.write(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(src) for src in STYLED_CELLS],
        metadata={"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    ), lab.root / "styled.ipynb")
    stale = nbformat.from_dict(_stale_notebook())
    # signed as its author's notebook would be (trusted: JupyterLab renders its saved widget)
    NotebookNotary(data_dir=str(lab.data_dir)).sign(stale)
    nbformat.write(stale, lab.root / "stale.ipynb")
    page = browser.page
    page.goto(f"{lab.url}/lab/workspaces/styles/tree/styled.ipynb?token={lab.token}")
    expect(page.locator(".jp-NotebookPanel")).to_be_visible()
    expect(page.locator("#jp-main-statusbar").get_by_role("button", name=KERNEL_IDLE)).to_be_visible()
    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()

    styled = page.locator(".unb-node").filter(has=page.locator(".unb-name", has_text=re.compile(r"^styled$")))
    keyword = styled.locator(".unb-approval pre.unb-python .unb-k").first
    expect(keyword).to_have_text("True", timeout=60_000)
    expect(keyword).to_have_css("color", KEYWORD_COLOUR)

    # the older notebook opens in another tab: its saved widget comes back, with its own stylesheet
    page.locator(".jp-DirListing-item", has_text="stale.ipynb").dblclick()
    expect(page.locator(".unb-stale-view")).to_have_text("older", timeout=60_000)
    page.locator(".lm-TabBar-tab", has_text="styled.ipynb").click()
    expect(keyword).to_be_visible()
    expect(keyword).to_have_css("color", KEYWORD_COLOUR)  # the plan keeps its colours
    assert browser.outside == [], "the page requested something beyond the local server"


# -- the widget's front end alone ----------------------------------------------------------------------
#
# The tests below need no JupyterLab: Chromium loads the installed handle.js from a page served by
# Playwright itself (nothing reaches the network), with a stand-in for anywidget's model that holds
# the state a real HandleWidget computed in this process, from a real operation. The stylesheet is
# put on the page the way anywidget does it (one <style> per _anywidget_id, replaced in place when
# another widget brings the same id). Each update is pushed when the test says so, so nothing is
# timed; what a person does (scrolling, a click) is input, and every wait has a timeout.

HARNESS = "http://unity-nb.test"
HARNESS_PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<script type="module">
import widget from "/handle.js";
const models = {};
// anywidget's loadCssText: one <style> per id, replaced in place by the next widget with that id
window.loadCss = (css, id) => {
  const prev = document.querySelector(`style[id='${id}']`);
  if (prev) { prev.textContent = css; return; }
  const style = Object.assign(document.createElement("style"), { id, type: "text/css" });
  style.appendChild(document.createTextNode(css));
  document.head.appendChild(style);
};
// a live kernel answers the view's pings; one started with kernel=false (a notebook reopened with its
// widget state, its kernel gone) answers nothing
window.start = (key, state, kernel = true) => {
  const handlers = {}, sent = [];
  const pong = () => { for (const cb of handlers["msg:custom"] || []) cb({ pong: true }); };
  const send = (m) => { if (m.action !== "ping") sent.push(m); else if (kernel) setTimeout(pong); };
  models[key] = { state, handlers, sent, get: (k) => state[k], send,
                  on: (ev, cb) => { (handlers[ev] ||= []).push(cb); } };
  window.loadCss(state._css, state._anywidget_id);
  const el = Object.assign(document.createElement("div"), { className: "widget" });
  el.dataset.key = key;
  document.body.append(el);
  widget.render({ model: models[key], el });
};
window.setState = (key, changes) => {
  const m = models[key];
  Object.assign(m.state, changes);
  for (const k of Object.keys(changes)) for (const cb of m.handlers[`change:${k}`] || []) cb();
};
window.sentBy = (key) => models[key].sent;  // what the widget sent (its clicks), oldest first
window.harnessReady = true;
</script></body></html>"""


class Harness:
    """A Chromium page showing HandleWidgets of this process: ``await show(w)`` sends its current state."""

    def __init__(self, page, outside):
        self.page, self.outside, self.shown = page, outside, set()

    async def show(self, w, kernel=True):
        w.flush()
        state = {"nodes": w.nodes, "entries": w.entries, "asks": w.asks, "notice": w.notice,
                 "subshells": w.subshells, "cell_running": w.cell_running, "verbs": w.verbs}
        key = w.model_id
        if key not in self.shown:
            self.shown.add(key)
            state.update(_css=w._css, _anywidget_id=w._anywidget_id)
            await self.page.evaluate("([key, state, kernel]) => window.start(key, state, kernel)", [key, state, kernel])
        else:
            await self.page.evaluate("([key, state]) => window.setState(key, state)", [key, state])
        return self.page.locator(f'.widget[data-key="{key}"]')


@pytest.fixture
async def harness(request):
    _require_prerequisites()
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=UI_TIMEOUT)
    failed_before = request.session.testsfailed
    js = (REPO / "widgets" / "handle.js").read_text(encoding="utf-8")
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = await chromium.new_context(viewport={"width": 1000, "height": 800})
            context.set_default_timeout(UI_TIMEOUT)
            outside: list[str] = []

            async def serve(route):
                url = route.request.url
                if url == f"{HARNESS}/":
                    await route.fulfill(status=200, content_type="text/html", body=HARNESS_PAGE)
                elif url == f"{HARNESS}/handle.js":
                    await route.fulfill(status=200, content_type="text/javascript", body=js)
                else:
                    outside.append(url)
                    await route.abort()

            await context.route("**/*", serve)
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            await page.goto(f"{HARNESS}/")
            await page.wait_for_function("window.harnessReady === true")
            yield Harness(page, outside)
            assert errors == [], errors
            assert outside == [], outside
            if request.session.testsfailed > failed_before:
                ARTIFACTS.mkdir(exist_ok=True)
                await page.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
        finally:
            await chromium.close()


async def region_asker():
    """A loop whose tool asks the person "Which region?", once the question is asked (then it answers with the
    region it is told)."""
    async def where(ctx: ToolContext) -> str:
        """Ask the person which region to look at."""
        return await ctx.clarify("Which region?")

    def script(messages, tools):
        done = [m for m in messages if m["role"] == "tool"]
        return u.call_tool("where") if not done else f"Looking at {done[-1]['content']}."

    h = u.start_loop("pick a region", model=u.ScriptedModel(script), tools=[where], name="asker")
    await h.wait_for("clarification_requested", timeout=20)
    return h


def _tools_so_far(messages):
    return [m for m in messages if m.get("role") == "tool"]


async def test_a_saved_notebooks_stylesheet_does_not_restyle_the_live_widget(harness):
    """Issue: with an older notebook open in another tab, plans lost their syntax colours: the saved
    ``_css`` of that notebook's widget (no highlight rules) replaced the only stylesheet on the page."""
    from playwright.async_api import expect

    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    plan = "ready = True if x else None  # set it"

    def script(m, t):
        return u.call_tool("execute_code", code=plan, intent="set it") if not _tools_so_far(m) else "ok"

    h = u.act("set it", model=u.ScriptedModel(script), namespace={"x": 1}, approval="always")
    w = HandleWidget(h)
    await h.wait_for("approval_requested", timeout=20)
    widget = await harness.show(w)
    keyword = widget.locator(".unb-approval pre.unb-python .unb-k").first
    await expect(keyword).to_have_text("True")
    await expect(keyword).to_have_css("color", "rgb(124, 58, 237)")
    # its code shows once, in the approval box: its call in the transcript stays collapsed
    await expect(widget.locator("pre.unb-python")).to_have_count(2)
    await expect(widget.locator("pre.unb-python").filter(visible=True)).to_have_count(1)
    # then a notebook saved with an older version opens: anywidget loads its saved _css under its saved id
    sheet = (REPO / "widgets" / "handle.css").read_text(encoding="utf-8")
    older = "\n".join(line for line in sheet.splitlines() if ".unb-k" not in line)
    await harness.page.evaluate("css => window.loadCss(css, 'unity_nb.jupyter._widget.HandleWidget')", older)
    await expect(keyword).to_have_css("color", "rgb(124, 58, 237)")  # the installed sheet still applies ...
    # ... beside the older one, under its own id (the page's other <style> is the rule hiding a live widget's
    # snapshot output: tests/test_saved_snapshot_browser.py)
    await expect(harness.page.locator("style:not(#unity-nb-snapshot-beside)")).to_have_count(2)
    await h.stop()


async def test_the_newest_plan_is_expanded_earlier_ones_collapse_and_code_stands_apart_from_its_result(harness):
    import asyncio

    from playwright.async_api import expect

    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    plans = ["print('one')\n1 + 1", "two = 2\ntwo", "await gate.wait()\n'three'"]
    ns = {"gate": asyncio.Event()}

    def script(m, t):
        done = _tools_so_far(m)
        if len(done) == len(plans):
            return "done"
        return u.call_tool("execute_code", code=plans[len(done)], intent=f"plan {len(done) + 1}")

    h = u.act("three plans", model=u.ScriptedModel(script), namespace=ns)
    w = HandleWidget(h)
    await h.wait_for("tool_started", lambda e: sum(1 for x in h.events if x.kind == "tool_started") == 3, timeout=20)
    widget = await harness.show(w)
    calls = widget.locator("details.unb-plan")
    await expect(calls).to_have_count(3)
    # the plan running now is expanded, the earlier ones are collapsed
    assert [await c.evaluate("d => d.open") for c in await calls.all()] == [False, False, True]
    await expect(calls.nth(2).locator("pre.unb-python")).to_be_visible()
    await expect(calls.nth(0).locator("pre.unb-python")).to_be_hidden()
    # a person expands an earlier one: its code, what it printed and its result, each labelled and set apart
    first = calls.nth(0)
    await first.locator("summary").click(delay=PRESS)
    code, result = first.locator("pre.unb-python"), first.locator("pre.unb-result")
    await expect(result).to_be_visible()
    await expect(first.locator(".unb-label")).to_have_text(["printed", "result"])
    backgrounds = [await x.evaluate("e => getComputedStyle(e).backgroundColor") for x in (code, result)]
    assert backgrounds[0] != backgrounds[1], backgrounds
    edges = [await x.evaluate("e => getComputedStyle(e).borderLeftColor") for x in (code, result)]
    assert edges[0] != edges[1], edges
    # the person collapses the running plan: a later update leaves it collapsed
    await calls.nth(2).locator("summary").click(delay=PRESS)
    await harness.show(w)
    assert [await c.evaluate("d => d.open") for c in await calls.all()] == [True, False, False]
    # the operation ends: the newest plan collapses too, and the one the person opened stays open
    ns["gate"].set()
    assert await asyncio.wait_for(h, 20) == "done"
    await harness.show(w)
    assert [await c.evaluate("d => d.open") for c in await calls.all()] == [True, False, False]


class Steps:
    """A model that makes one step (a long-ish line of text and a tool call) each time it is let go."""

    def __init__(self):
        import asyncio

        self.go = asyncio.Semaphore(0)

    async def __call__(self, messages, tools):
        import unity_nb as u

        await self.go.acquire()
        n = len(_tools_so_far(messages))
        return u.Reply(content=f"step {n}: " + "checking the next region " * 6, tool_calls=[u.call_tool("tick", n=n)])


async def tick(n: int) -> int:
    """One step of work."""
    return n + 1


async def test_the_transcript_is_capped_and_follows_the_newest_entry_unless_scrolled_up(harness):
    from playwright.async_api import expect

    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    steps = Steps()
    h = u.start_loop("work", model=u.ScriptedModel(steps), tools=[tick], name="long", max_steps=10_000)
    w = HandleWidget(h)
    page = harness.page

    async def step(n):
        """Let the model make ``n`` more replies; return once the call after them waits."""
        target = sum(1 for e in h.events if e.kind == "model_response") + n + 1
        for _ in range(n):
            steps.go.release()
        await h.wait_for("model_request", lambda e: e.step == target, timeout=20)

    async def scroll_state(box):
        return await box.evaluate("e => [e.scrollTop, e.scrollHeight - e.clientHeight]")

    await step(20)
    widget = await harness.show(w)
    box, entries = widget.locator(".unb-scroll"), widget.locator(".unb-transcript .unb-assistant")
    await expect(entries).to_have_count(20)
    top, bottom = await scroll_state(box)
    assert bottom > 0, "20 steps overflow the capped box"
    assert await box.evaluate("e => e.clientHeight <= 32 * parseFloat(getComputedStyle(e).fontSize) + 1")
    assert top == bottom  # it follows the newest entry
    await expect(entries.last).to_be_in_viewport()

    # the person scrolls up to read: new entries come in, the box stays where they left it
    bb = await box.bounding_box()
    await page.mouse.move(bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2)
    await page.mouse.wheel(0, -300)
    handle = await box.element_handle()
    await page.wait_for_function("e => e.scrollTop < e.scrollHeight - e.clientHeight - 100", arg=handle)
    await page.wait_for_timeout(HESITATE)  # a person reads (input pacing; the scroll has landed)
    read_at, _ = await scroll_state(box)
    await step(3)
    await harness.show(w)
    await expect(entries).to_have_count(23)
    at, bottom = await scroll_state(box)
    assert at == read_at and at < bottom
    await expect(entries.last).not_to_be_in_viewport()

    # back at the bottom, it follows again
    await page.mouse.wheel(0, 100_000)
    await page.wait_for_function("e => e.scrollHeight - e.clientHeight - e.scrollTop < 2", arg=handle)
    await step(3)
    await harness.show(w)
    await expect(entries).to_have_count(26)
    at, bottom = await scroll_state(box)
    assert at == bottom
    await expect(entries.last).to_be_in_viewport()

    # the person opens the newest call to read it: the next entries do not scroll it away
    newest = await widget.locator(".unb-transcript details.unb-call").last.get_attribute("data-call")
    call = widget.locator(f'.unb-transcript details.unb-call[data-call="{newest}"]')
    await call.locator("summary").click(delay=PRESS)
    await expect(call.locator(".unb-result")).to_be_visible()
    reading_at, _ = await scroll_state(box)
    await step(2)
    await harness.show(w)
    await expect(entries).to_have_count(28)
    at, _ = await scroll_state(box)
    assert at == reading_at
    await expect(call).to_have_js_property("open", True)
    await expect(call.locator("summary")).to_be_in_viewport()
    await h.stop()


class Flaky:
    """A model whose call fails once (announced as the loop's retry), then waits for ``proceed``."""

    name = "flaky"
    max_retries = 4

    def __init__(self):
        import asyncio

        self.proceed = asyncio.Event()

    async def complete(self, request, on_delta=None):
        from unity_nb.models import Reply, retry_hook

        if not self.proceed.is_set():
            retry_hook.get()(1, "ConnectionRefusedError: connection refused", 2.0)
        await self.proceed.wait()
        on_delta("all good")
        return Reply(content="all good")


async def test_a_retry_shows_while_it_waits_and_a_failure_shows_once(harness):
    from playwright.async_api import expect

    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    model = Flaky()
    h = u.start_loop("hi", model=model, name="flaky")
    w = HandleWidget(h)
    await h.wait_for("model_retry", timeout=20)
    widget = await harness.show(w)
    retry = widget.locator(".unb-retry")
    await expect(retry).to_have_text("connection refused, retrying in 2 s, attempt 2 of 5")
    await expect(retry).to_be_visible()
    model.proceed.set()  # the retry goes through
    await h.wait_for("model_delta", timeout=20)
    await harness.show(w)
    await expect(retry).to_be_hidden()
    await h

    def broken(messages, tools):
        raise RuntimeError("the model is down")

    f = u.start_loop("hi", model=u.ScriptedModel(broken), name="broken")
    wf = HandleWidget(f)
    await f.wait_for("loop_failed", timeout=20)
    failed = await harness.show(wf)
    await expect(failed.locator(".unb-badge")).to_have_text("failed")
    assert (await failed.inner_text()).count("the model is down") == 1


async def test_a_fragment_cut_off_by_stop_is_marked(harness):
    from playwright.async_api import expect

    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    h = u.start_loop("talk", model=u.ScriptedModel(["word " * 2000], chunk=2, delay=0.01), name="talker")
    w = HandleWidget(h)
    await h.wait_for("model_delta", lambda e: len(h.state.streaming_text) > 40, timeout=20)
    widget = await harness.show(w)
    await expect(widget.locator(".unb-streaming")).to_contain_text("word")  # streaming in
    await h.stop("enough")
    await harness.show(w)
    cut = widget.locator(".unb-cutoff")
    await expect(cut).to_have_count(1)
    await expect(cut).to_contain_text("word word")
    await expect(cut).to_contain_text("… [cut off by stop]")
    # in the order it happened: the fragment, then the stop
    transcript = widget.locator(".unb-transcript > .unb-entry")
    await expect(transcript.last).to_have_text("steering [stopped by the user: enough]")
    await expect(transcript.nth(-2)).to_have_class(re.compile("unb-cutoff"))
    await expect(widget.locator(".unb-streaming")).to_have_text("")


async def test_a_batch_shows_its_progress_bar_and_its_failures(harness):
    """u.map: the widget shows done, running, queued and failed rows (the batch's progress text: one source), and
    lists the failures."""
    import asyncio

    from playwright.async_api import expect

    import unity_nb as u
    from unity_nb.jupyter._widget import HandleWidget

    gate = asyncio.Event()

    async def script(messages, tools):
        text = messages[-1]["content"]
        if text.endswith("bad"):
            raise RuntimeError("no label for this one")
        if text.endswith("slow"):
            await gate.wait()
        return "label"

    h = u.map(["a", "bad", "b", "slow", "c"], "Label", model=u.ScriptedModel(script), concurrency=2)
    w = HandleWidget(h)
    await h.wait_for("row_finished", lambda e: e.status == "failed", timeout=20)
    await h.wait_for("row_finished", lambda e: e.row == "4", timeout=20)  # "c", started once "b" was done
    widget = await harness.show(w)
    text = widget.locator(".unb-bar-text").first
    await expect(text).to_contain_text("3 done · 1 running · 0 queued · 1 failed — 4 of 5 rows ended (80%)")
    await expect(widget.locator(".unb-failures summary")).to_have_text("1 row(s) failed or stopped")
    await widget.locator(".unb-failures summary").click()
    await expect(widget.locator(".unb-failure")).to_contain_text("1 failed: RuntimeError: no label for this one")
    gate.set()
    await asyncio.wait_for(h.result(), 20)
    await harness.show(w)
    await expect(text).to_contain_text("4 done · 1 failed — 5 of 5 rows ended (100%)")
    await expect(widget.locator(".unb-badge").first).to_have_text("finished with failures")
