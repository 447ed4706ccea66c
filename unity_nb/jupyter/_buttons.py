"""The steering verbs' buttons, as the widget's front end builds them: made from the verbs' table
(``unity_nb.loop.VERBS``), so a verb added there (or with ``register_verb``) has its button, which
calls the handle's method of its name (``_widget._verb``)."""

from __future__ import annotations

from typing import Any

from ..loop import VERBS, Verb

__all__ = ("verb_buttons",)


def _button(v: Verb) -> dict[str, Any]:
    return {"name": v.name, "label": v.name.replace("_", " ").capitalize(), "message": v.message, "doc": v.doc}


def verb_buttons() -> list[dict]:
    """The steering verbs' buttons, in the order of :data:`VERBS`, as the front end builds them (the
    widget's ``verbs``): ``{name, label, message, doc}``, a label made of the name. A verb that
    ``undoes`` another's ``status`` (resume) is no button of its own: the other's button does it, with
    its label, while the loop is in that status (``undo``: the verb, and the ``status``)."""
    undo: dict[str, Verb] = {}  # a verb with a status -> the verb undoing it
    for v in VERBS.values():
        undone = VERBS.get(v.undoes) if v.undoes is not None else None
        if undone is not None and undone.status is not None:
            undo[undone.name] = v
    inside = {v.name for v in undo.values()}
    out = []
    for v in VERBS.values():
        if v.name in inside:
            continue
        button = _button(v)
        u = undo.get(v.name)
        if u is not None:
            button["undo"] = {**_button(u), "status": v.status}
        out.append(button)
    return out
