"""Adding a steering verb is one entry in ``unity_nb.loop.VERBS`` plus its method on the handle (issue 25):
the widget's buttons (its ``verbs`` trait, from which the front end builds them), the widget's clicks,
``%unity VERB NAME MESSAGE``, ``%unity help`` and the store's rebuilt transcript all find it, with no
other file touched. Every wait has a timeout; nothing is timed."""

import asyncio
import re
from pathlib import Path

import pytest
from conftest import Gate, magics

import unity_nb as u
from unity_nb.jupyter._widget import HandleWidget
from unity_nb.loop import VERBS, LoopHandle, Verb, register_verb, unregister_verb

TIMEOUT = 10
HAIL_DOC = "Hail the operation NAME."


async def hail(self, message):
    self.run.require_live("hail")
    self.run.steer("hail", message)


async def wave(self):
    self.run.require_live("wave")
    self.run.steer("wave")


@pytest.fixture
def hail_verb(monkeypatch):
    """The new verb: its method on the handle, and its one entry in the table."""
    monkeypatch.setattr(LoopHandle, "hail", hail, raising=False)
    monkeypatch.setattr(LoopHandle, "wave", wave, raising=False)
    register_verb(Verb("hail", entry=lambda m, _r: f"[hailed: {m}]", message="required", doc=HAIL_DOC))
    register_verb(Verb("wave", entry=lambda _m, _r: "[waved at]", doc="Wave at the operation NAME."))
    yield
    unregister_verb("hail")
    unregister_verb("wave")


def steering(h):
    return [m.content for m in h.transcript if m.kind == "steering"]


async def clicked(w, **content):
    """A click as the front end sends it (``model.send({action, node, text, call_id})``), through the
    widget's message handler; back once the click queue has performed it."""
    w._on_custom(w, content, [])
    async with asyncio.timeout(TIMEOUT):
        await w.clicks.settled()


async def test_the_widget_lists_a_new_verb_and_its_click_steers_the_handle(hail_verb):
    gate = Gate(lambda m, t: "done")
    h = u.start_loop("work", model=u.ScriptedModel(gate), name="ship")
    w = HandleWidget(h)
    await h.wait_for("model_request", timeout=TIMEOUT)
    verbs = {v["name"]: v for v in w.verbs}
    # (a) the widget's table, built from VERBS: the front end makes one button of each
    assert verbs["hail"] == {"name": "hail", "label": "Hail", "message": "required", "doc": HAIL_DOC}
    assert verbs["wave"]["message"] == "none" and verbs["wave"]["label"] == "Wave"
    assert {"interject", "ask", "pause", "stop"} <= set(verbs)
    # (b) its click calls the handle's method, with the text box's content as its message
    await clicked(w, action="hail", node=h.id, text="ahoy", call_id=None)
    assert w.errors == [] and w.notice == ""
    await clicked(w, action="wave", node=h.id, text="", call_id=None)  # a verb without a message: called with none
    assert w.errors == []
    assert steering(h) == ["[hailed: ahoy]", "[waved at]"]
    w.flush()
    assert [e["content"] for e in w.entries[h.id] if e["kind"] == "steering"] == ["[hailed: ahoy]", "[waved at]"]
    gate.event.set()
    assert await h == "done"


async def test_a_verb_registered_after_the_widget_was_made_gets_its_button_and_its_clicks(monkeypatch):
    gate = Gate(lambda m, t: "done")
    h = u.start_loop("work", model=u.ScriptedModel(gate), name="early")
    w = HandleWidget(h)
    assert "hail" not in {v["name"] for v in w.verbs}
    monkeypatch.setattr(LoopHandle, "hail", hail, raising=False)
    register_verb(Verb("hail", entry=lambda m, _r: f"[hailed: {m}]", message="required", doc=HAIL_DOC))
    try:
        w.flush()  # the next update of the widget carries it
        assert "hail" in {v["name"] for v in w.verbs}
        await clicked(w, action="hail", node=h.id, text="late ahoy")
        assert w.errors == []
        assert steering(h) == ["[hailed: late ahoy]"]
    finally:
        unregister_verb("hail")
    w.flush()
    assert "hail" not in {v["name"] for v in w.verbs}
    await clicked(w, action="hail", node=h.id, text="gone")  # no longer a verb: said, not raised
    assert w.notice == "unknown widget action 'hail'"
    gate.event.set()
    assert await h == "done"


async def test_the_magics_and_the_store_take_a_new_verb(hail_verb, stored_shell, capsys):
    ip = stored_shell
    gate = Gate(lambda m, t: "done")
    ip.user_ns["m"] = u.ScriptedModel(gate)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "act --name ship sail on")
    await h.wait_for("model_request", timeout=TIMEOUT)
    # (c) %unity hail NAME MESSAGE, and %unity help lists it with its doc
    ip.run_line_magic("unity", "hail ship ahoy")
    await h.wait_for("steering", lambda e: e.action == "hail", timeout=TIMEOUT)
    assert steering(h) == ["[hailed: ahoy]"]
    capsys.readouterr()
    ip.run_line_magic("unity", "help")
    assert re.search(r"%unity hail NAME MESSAGE\s+" + re.escape(HAIL_DOC), capsys.readouterr().out)
    # the widget the magic showed takes the verb's click too
    widget = magics(ip).widgets["ship"]
    assert "hail" in {v["name"] for v in widget.verbs}
    await clicked(widget, action="hail", node=h.id, text="from the widget")
    assert steering(h) == ["[hailed: ahoy]", "[hailed: from the widget]"]
    gate.event.set()
    assert await h == "done"
    # (d) the store rebuilds the verb's steering events into the transcript's entries
    rebuilt = magics(ip).store.transcript(h.id)
    assert [(m.content, m.kind) for m in rebuilt if m.role == "user" and m.kind == "steering"] == [
        ("[hailed: ahoy]", "steering"), ("[hailed: from the widget]", "steering"),
    ]


def test_the_front_end_names_no_verb_it_builds_them_from_the_table():
    js = (Path(__file__).parent.parent / "widgets" / "handle.js").read_text(encoding="utf-8")
    for name in VERBS:
        assert f'"{name}"' not in js and f"'{name}'" not in js, name
    assert 'model.get("verbs")' in js
