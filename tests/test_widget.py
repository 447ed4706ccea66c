"""The live widget's state, in process: its stylesheet is the installed package's (under an id
that names the version), committed notebooks carry no widget state, a retry shows while it is
waited out and clears when the call proceeds, a fragment cut off by Stop is kept as such, the
buttons dispatch through one command table, and the widget reads the loop package only through
its public names. (How the browser renders this state: tests/test_browser.py.) Every wait has a
timeout; nothing is timed."""

import ast
import asyncio
import hashlib
import json
import re
import socket
import warnings
from importlib import resources
from pathlib import Path

from conftest import Gate, HeldRows, settle, tool_messages

import unity_nb as u
from unity_nb.jupyter import _widget
from unity_nb.jupyter._widget import COMMANDS, Command, HandleWidget, verb_buttons
from unity_nb.loop import VERBS
from unity_nb.models import Reply, retry_hook

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 10
WIDGET_STATE = ("application/vnd.jupyter.widget-state+json", "application/vnd.jupyter.widget-view+json")


def installed(name):
    return resources.files("unity_nb._widgets").joinpath(name).read_text(encoding="utf-8")


# -- 1. styles come from the installed package ---------------------------------------------------------


async def test_the_stylesheet_is_the_installed_one_under_an_id_naming_its_version():
    h = u.start_loop("hi", model=u.ScriptedModel(["hello"]), name="styled")
    w = HandleWidget(h)
    js, css = installed("handle.js"), installed("handle.css")
    version = hashlib.sha256((js + "\0" + css).encode()).hexdigest()[:12]
    # anywidget keeps one <style> per _anywidget_id on the page: this one names the installed version,
    # so a notebook saved with another version (its own _css in its saved state) cannot replace it
    assert w._anywidget_id == f"unity_nb.HandleWidget.{version}"
    assert w._esm == js
    scope = f'.unb-root[data-unb-style="{w._anywidget_id}"]'
    # an at-rule's line (the dark palette's @media) stands alone; every other line is one rule
    lines = [line for line in w._css.splitlines() if line.strip()]
    at_rules = [line for line in lines if line.startswith("@") or line == "}"]
    rules = [line for line in lines if line not in at_rules]
    assert [line for line in at_rules if line.startswith("@")] == ["@media (prefers-color-scheme: dark) {"]
    assert len(rules) + len(at_rules) // 2 == css.count("}")  # every rule of the installed sheet
    for rule in rules:
        for selector in rule.split("{")[0].split(","):
            assert selector.strip().startswith(scope), selector  # and each applies only under this version's root
    # the highlight rules of plans are there
    for cls in ("unb-k", "unb-s", "unb-c", "unb-n"):
        assert re.search(rf"{re.escape(scope)} \.{cls} \{{", w._css), cls
    await h


def test_no_committed_notebook_carries_widget_state():
    notebooks = sorted((REPO / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert "widgets" not in nb["metadata"], f"{path.name}: saved widget state in its metadata"
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                saved = [m for m in out.get("data", {}) if m in WIDGET_STATE]
                assert not saved, f"{path.name}: a cell output refers to saved widget state ({saved})"


# -- 4. retries and failures ---------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed: a connection is refused


async def test_a_retry_shows_while_it_is_waited_out():
    # a real client, a refused connection: the first retry waits 15 to 30 s (backoff 30), long enough to look
    port = _closed_port()
    model = u.OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", backoff=30, max_retries=4)
    h = u.start_loop("hi", model=model, name="flaky")
    w = HandleWidget(h)
    retry = await h.wait_for("model_retry", timeout=TIMEOUT)
    w.flush()
    line = w.nodes[0]["retry"]
    assert line.startswith(f"cannot connect to 127.0.0.1:{port}"), line  # what failed, then what happens next
    assert line.endswith(f", retrying in {retry.delay:.3g} s, attempt 2 of 5"), line
    assert 15 <= retry.delay <= 30
    await h.stop("enough")
    w.flush()
    assert w.nodes[0]["retry"] == ""  # the operation ended: nothing is waited out any more


class Flaky:
    """A model whose first call fails once (announced as a retry), then waits for ``proceed``."""

    name = "flaky"
    max_retries = 2

    def __init__(self):
        self.proceed = asyncio.Event()

    async def complete(self, request, on_delta=None):
        hook = retry_hook.get()
        if hook is not None and not self.proceed.is_set():
            hook(1, "ConnectionRefusedError: connection refused", 2.0)
        await self.proceed.wait()
        if on_delta is not None:
            on_delta("all good")
        return Reply(content="all good")


async def test_a_retry_clears_when_the_call_proceeds():
    model = Flaky()
    h = u.start_loop("hi", model=model, name="flaky")
    w = HandleWidget(h)
    await h.wait_for("model_retry", timeout=TIMEOUT)
    w.flush()
    assert w.nodes[0]["retry"] == "connection refused, retrying in 2 s, attempt 2 of 3"
    model.proceed.set()
    await h.wait_for("model_delta", timeout=TIMEOUT)
    w.flush()
    assert w.nodes[0]["retry"] == ""
    assert await h == "all good"


async def test_a_wait_for_the_rate_limit_shows_like_a_retry_until_the_call_proceeds():
    # one request a minute, shared by the loops of one model: the second loop's call waits out the rest of it
    model = u.ScriptedModel(["first", "second"])
    u.set_rate_limit(model, "1/min")
    assert await u.start_loop("one", model=model, name="first") == "first"
    h = u.start_loop("two", model=model, name="second")
    w = HandleWidget(h)
    wait = await h.wait_for("model_wait", timeout=TIMEOUT)
    assert wait.seconds > 3
    w.flush()
    line = w.nodes[0]["retry"]
    assert line == f"waiting {wait.seconds:.3g} s before calling the model: {wait.reason}", line
    assert "rate limit set for this model" in line  # why it waits
    await h.stop("enough")
    w.flush()
    assert w.nodes[0]["retry"] == ""  # nothing is waited out any more


# -- 5. a fragment cut off by Stop ---------------------------------------------------------------------


async def test_a_fragment_cut_off_by_stop_is_kept_as_such():
    # streams "word word ..." two characters at a time, a chunk every 10 ms: far longer than the test
    h = u.start_loop("talk", model=u.ScriptedModel(["word " * 2000], chunk=2, delay=0.01), name="talker")
    w = HandleWidget(h)
    await h.wait_for("model_delta", lambda e: len(h.state.streaming_text) > 40, timeout=TIMEOUT)
    await h.stop("enough")
    w.flush()
    streamed = "".join(e.text for e in h.events if e.kind == "model_delta")
    node = w.nodes[0]
    assert node["status"] == "stopped"
    assert streamed and node["cut_off"] == streamed  # what streamed before the stop, nothing after
    assert node["streaming"] == ""  # no longer shown as streaming


async def test_a_whole_reply_is_not_a_cut_off_fragment():
    h = u.start_loop("talk", model=u.ScriptedModel(["done", "never"], chunk=2), name="talker")
    w = HandleWidget(h)
    await h
    w.flush()
    assert w.nodes[0]["cut_off"] == ""


# -- 6. the buttons dispatch through a command table -----------------------------------------------------


def test_every_button_of_the_front_end_is_an_entry_of_the_command_table():
    js = installed("handle.js")
    sent = set(re.findall(r'send\("(\w+)"', js))  # the buttons the front end names (not the steering verbs')
    assert sent == {"answer", "approve", "skip", "allow", "stop_ask"} and sent <= set(COMMANDS)
    # the steering verbs' buttons are made from the widget's table of them, the Pause button "resume" when paused
    buttons = verb_buttons()
    steering = {b["name"] for b in buttons} | {b["undo"]["name"] for b in buttons if "undo" in b}
    assert steering == set(VERBS) and steering <= set(COMMANDS)
    assert next(b for b in buttons if b["name"] == "pause")["undo"] == {
        "name": "resume", "label": "Resume", "message": "none", "doc": VERBS["resume"].doc, "status": "paused",
    }
    assert all(isinstance(c, Command) for c in COMMANDS.values())


async def test_a_new_action_is_one_entry():
    gate = Gate(lambda m, t: "done")
    h = u.start_loop("work", model=u.ScriptedModel(gate), name="table")
    w = HandleWidget(h)
    calls = []

    async def note(widget, handle, click):
        calls.append((handle.name, click["text"]))
        await handle.interject(f"note: {click['text']}")

    w.commands["note"] = Command(note, "an interjection prefixed with 'note:'")
    w._on_custom(w, {"action": "note", "node": h.id, "text": "hello"}, [])
    await h.wait_for("steering", lambda e: e.action == "interject" and e.message == "note: hello", timeout=TIMEOUT)
    assert calls == [("table", "hello")]
    # an action with no entry: said in the widget, never raised
    w._on_custom(w, {"action": "dance", "node": h.id}, [])
    async with asyncio.timeout(TIMEOUT):
        await w.clicks.settled()
    assert w.notice == "unknown widget action 'dance'"
    assert w.errors[-1] == "dance: unknown widget action 'dance'"
    gate.event.set()
    await h


# -- 7. only public names of the loop package ------------------------------------------------------------


def test_the_widget_uses_only_public_names_of_the_loop_package():
    tree = ast.parse(Path(_widget.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "loop" in node.module:
            assert node.module in ("loop", "unity_nb.loop") and node.level in (0, 2), ast.unparse(node)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            if owner in ("self", "w", "widget", "super()") or node.attr in ("_repr_mimebundle_", "_anywidget_id"):
                continue  # the widget's own state
            # the one exception: the handle's event loop has no public name yet
            assert (owner, node.attr) == ("handle", "_loop"), ast.unparse(node)


async def test_clarifications_and_approvals_show_on_the_node_they_belong_to():
    async def confirm(ctx: u.ToolContext) -> str:
        """Confirm with the person."""
        return await ctx.clarify("Proceed?")

    def kid_script(m, t):
        return u.call_tool("confirm") if not tool_messages(m) else "kid: " + tool_messages(m)[0]["content"]

    async def sub(x: int) -> u.LoopHandle:
        """Start a sub-operation."""
        return u.start_loop("check", model=u.ScriptedModel(kid_script), tools=[confirm], name="kid")

    def boss_script(m, t):
        return u.call_tool("sub", x=1) if not tool_messages(m) else tool_messages(m)[0]["content"]

    parent = u.start_loop("go", model=u.ScriptedModel(boss_script), tools=[sub], name="boss")
    w = HandleWidget(parent)
    q = await asyncio.wait_for(parent.inbox.next_question(), TIMEOUT)
    w.flush()
    assert [n["clarifications"] for n in w.nodes] == [[], [{"call_id": q["call_id"], "question": "Proceed?"}]]
    assert [n["approvals"] for n in w.nodes] == [[], []]
    w._on_custom(w, {"action": "answer", "node": parent.children[0].id, "text": "yes", "call_id": q["call_id"]}, [])
    assert await asyncio.wait_for(parent, TIMEOUT) == "kid: yes"


async def test_a_plan_waiting_for_approval_shows_and_runs_from_the_table():
    ns: dict = {}
    plan = "x = 41 + 1"

    def script(m, t):
        return u.call_tool("execute_code", code=plan, intent="add") if not tool_messages(m) else "ok"

    h = u.act("compute", model=u.ScriptedModel(script), namespace=ns, approval="always")
    w = HandleWidget(h)
    await h.wait_for("approval_requested", timeout=TIMEOUT)
    await settle()
    w.flush()
    [waiting] = w.nodes[0]["approvals"]
    assert waiting["code"] == plan and waiting["intent"] == "add"
    w._on_custom(w, {"action": "approve", "node": h.id, "call_id": waiting["call_id"]}, [])
    assert await asyncio.wait_for(h, TIMEOUT) == "ok"
    assert ns["x"] == 42


async def test_a_ping_from_the_view_is_answered_at_once_and_is_not_a_click():
    # the view asks whether a kernel is behind it (widget state saved in a notebook brings a view back without one)
    h = u.start_loop("hi", model=u.ScriptedModel(Gate(lambda m, t: "done")), name="pinged")
    w = HandleWidget(h)
    sent = []
    w.send = lambda content, buffers=None: sent.append(content)
    w._on_custom(w, {"action": "ping"}, [])
    assert sent == [{"pong": True}]
    assert w.errors == [] and w.notice == ""
    await h.stop()


async def test_the_saved_snapshot_says_it_is_a_snapshot_not_a_live_view():
    """Where the widget cannot load (GitHub, VS Code or Colab offline, a kernel gone), the HTML snapshot shows:
    it must say it is the operation as it was when the output was made, not a live "running"."""
    from unity_nb.jupyter._widget import render_html

    h = u.start_loop("talk", model=u.ScriptedModel(["done"]), name="snap")
    html_now = render_html(h)
    assert "a snapshot of this operation" in html_now and "not updated since" in html_now
    assert html_now.index("a snapshot of this operation") < html_now.index("<b>snap</b>")  # said first
    bundle, _metadata = HandleWidget(h)._repr_mimebundle_()
    assert "a snapshot of this operation" in bundle["text/html"]
    await h


async def test_an_answer_and_an_asks_answer_are_bounded_in_the_widgets_state():
    """Every text of the widget's state is clipped (``_snapshot.LIMIT``) but a node's ``answer`` and an Ask's: a
    long answer went whole into the state, twice (its transcript entry is clipped), and so into a notebook saved
    with widget state."""
    from unity_nb.jupyter._snapshot import LIMIT

    long = "word " * 40_000

    def script(messages, tools):
        return long

    h = u.start_loop("write at length", model=u.ScriptedModel(script), name="long")
    assert await asyncio.wait_for(h.result(), TIMEOUT) == long  # the handle keeps all of it
    w = HandleWidget(h)
    await asyncio.wait_for(w.act("ask", h.id, "and now?"), TIMEOUT)
    w.flush()
    answer, asked = w.nodes[0]["answer"], w.asks[0]["answer"]
    for text in (answer, asked):
        assert len(text) < LIMIT + 100 and text.startswith("word word") and "more characters]" in text
    state = json.dumps({"nodes": w.nodes, "entries": w.entries, "asks": w.asks})
    assert len(state) < 4 * LIMIT


async def test_a_long_runs_transcript_is_bounded_in_the_widget_and_its_snapshot_saying_what_is_left_out():
    """Every entry of every loop went into the widget's state and into the snapshot, however long the run (a
    ``--multi`` operation serving requests all day): a notebook saved with them held all of it. A view shows the
    transcript's start and its newest entries, and says how many between are left out and where they are."""
    ENTRIES = 200  # (_snapshot.ENTRIES)

    @u.tool
    def tick(n: int) -> int:
        """One step of work."""
        return n + 1

    def script(messages, tools):
        done = tool_messages(messages)
        return u.call_tool("tick", n=len(done)) if len(done) < 300 else "counted"

    h = u.start_loop("count to 300", model=u.ScriptedModel(script), tools=[tick], max_steps=1000, name="counter")
    assert await asyncio.wait_for(h.result(), TIMEOUT) == "counted"
    assert len(h.transcript) > 3 * ENTRIES  # the handle keeps every entry
    w = HandleWidget(h)
    shown = w.entries[h.id]
    assert len(shown) <= ENTRIES + 1
    assert shown[0]["kind"] == "task" and shown[0]["content"] == "count to 300"
    assert shown[-1]["kind"] == "answer" and shown[-1]["content"] == "counted"
    left_out = len(h.transcript) - (len(shown) - 1)
    note = f"... {left_out:,} earlier entries not shown here (%unity show counter shows every one)"
    assert [e["content"] for e in shown if e["kind"] == "omitted"] == [note]
    snapshot = _widget.render_html(h)
    assert note in snapshot and "count to 300" in snapshot and "counted" in snapshot
    assert snapshot.count("tick(") <= ENTRIES


async def test_a_batchs_ended_rows_leave_the_widgets_state():
    """A batch's rows are its children while they run; a row that ended is no node of the widget any more, but its
    transcript stayed in the widget's ``entries`` (sent whole at every change, and saved with the notebook): a map
    of many rows grew the state by every row ever shown. The state holds the transcripts of the nodes shown."""
    held = HeldRows(3)
    h = u.map([f"item {i}" for i in range(12)], "Echo", model=u.ScriptedModel(held), concurrency=3,
              bus=u.EventBus(), name="echoes")
    w = HandleWidget(h)
    await asyncio.wait_for(held.started.wait(), TIMEOUT)  # three rows run, each waiting for its answer
    w.flush()
    rows = [n["id"] for n in w.nodes[1:]]
    assert len(rows) == 3 and set(w.entries) == {h.id, *rows}
    held.release.set()
    await asyncio.wait_for(h.result(), TIMEOUT)
    w.flush()
    assert [n["id"] for n in w.nodes] == [h.id]  # every row ended: the batch alone is shown
    assert set(w.entries) == {h.id}  # and its rows' transcripts are no longer in the state


async def test_the_snapshot_of_a_batch_whose_rows_failed_says_finished_with_failures():
    """The live widget's badge says "finished with failures" for a batch that finished with rows failed; its
    snapshot (what a notebook shows without its kernel) said "finished", in the colour of a success: it read the
    outcome from an attribute no handle has. The snapshot's badge is the batch's outcome, as its progress says."""
    from html.parser import HTMLParser

    def some_fail(messages, tools):
        if messages[-1]["content"].endswith("bad"):
            raise RuntimeError("no label for this one")
        return "ok"

    h = u.map(["good", "bad"], "Do", model=u.ScriptedModel(some_fail), bus=u.EventBus(), name="mixed")
    await asyncio.wait_for(h.result(), TIMEOUT)
    assert h.progress["outcome"] == "finished with failures"

    class Badges(HTMLParser):  # the text of each <span> with a background: the nodes' badges, root first
        def __init__(self):
            super().__init__()
            self.badges, self._in = [], False

        def handle_starttag(self, tag, attrs):
            self._in = tag == "span" and "background:" in (dict(attrs).get("style") or "")

        def handle_data(self, data):
            if self._in:
                self.badges.append(data)
                self._in = False

    for snapshot in (_widget.render_html(h), HandleWidget(h)._repr_mimebundle_()[0]["text/html"]):
        parser = Badges()
        parser.feed(snapshot)
        assert parser.badges[0] == "finished with failures", parser.badges


async def test_a_second_stop_with_another_reason_is_said_in_the_notice_not_the_kernels_log():
    h = u.start_loop("wait", model=u.ScriptedModel(Gate(lambda m, t: "never")), name="waiter")
    w = HandleWidget(h)
    await h.wait_for("model_request", timeout=TIMEOUT)
    w._on_custom(w, {"action": "stop", "node": h.id, "text": "wrong data"}, [])
    async with asyncio.timeout(TIMEOUT):
        await w.clicks.settled()
    assert h.status == "stopped" and h.state.stop_reason == "wrong data" and w.notice == ""
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        w._on_custom(w, {"action": "stop", "node": h.id, "text": "out of time"}, [])
        async with asyncio.timeout(TIMEOUT):
            await w.clicks.settled()
        assert w.notice == ("'waiter' was stopped already, with the reason 'wrong data': yours ('out of time') was "
                            "not taken")
        w._on_custom(w, {"action": "stop", "node": h.id}, [])  # no reason typed: nothing dropped, nothing to say
        async with asyncio.timeout(TIMEOUT):
            await w.clicks.settled()
    assert w.notice == ""
    assert h.state.stop_reason == "wrong data"
    assert [str(x.message) for x in warned] == []  # said in the widget, not as a warning in the kernel's log
