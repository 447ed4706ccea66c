"""What ``%unity resume NAME`` needs in a new kernel, said all at once.

After a restart an operation the store holds as interrupted needs, beside the extension itself (``%load_ext
unity_nb``, without which ``%unity`` is no command at all), the notebook's variables its line reads, a model, and,
under a budget, that model's price. Each missing piece used to be a resume that failed on its own, one after the
other; here they are looked at before anything starts and said in one error, with what the store remembers of the
run offered (the model's name and server from its loop's start, never a key; its price then)."""

from __future__ import annotations

import os
from typing import Any

from IPython.core.error import UsageError

from ..batch import OPERATORS, spent_in_store
from ..models import price_of
from ._args import parse
from ._host import missing_names

__all__ = ("check_resumable", "stored_line")


def _line(row: dict) -> Any:
    """The ``%unity`` line (a ``Command``) a batch's row in the store ran, else ``None`` (an actor's run)."""
    kind = row.get("kind") or "loop"
    if kind != "map" and kind not in OPERATORS:
        return None
    try:
        return stored_line(row)
    except UsageError:
        return None


def stored_line(row: dict) -> Any:
    """The ``%unity`` line (a ``Command``) that the batch ``row`` of the store ran, read again. A line the store keeps
    changed by hand or damaged is a UsageError saying so (it was an error about a line the person never typed:
    '%unity map needs the items')."""
    kind = row.get("kind") or "map"
    first, _, cell = (row["task"] or "").partition("\n")
    try:
        return parse(f"{kind} {first}", cell or None, stored=True)
    except UsageError as err:
        line = f"%unity {kind} {first}" + (" ..." if cell else "")
        raise UsageError(
            f"{row['name']!r} cannot be resumed: the line it ran, as the store keeps it ({line!r}), cannot be read "
            f"again ({str(err).splitlines()[0]}): it was changed by hand or damaged. Run the operation anew with "
            "its line (a new run: the rows it finished are not kept)"
        ) from None


def _items(kind: str, cmd: Any) -> str:
    """The expressions of the items the line reads (a join's two inputs, ...)."""
    exprs = [cmd.name or ""]
    if kind in OPERATORS:
        exprs += [cmd.options.get(p.name) or "" for p in OPERATORS[kind].params if p.kind == "items"]
    return " ".join(e for e in exprs if e)


def _started(store: Any, uid: str) -> Any:
    events = store.events(uid, kind="loop_started")
    return events[0] if events else None


def _model_line(name: str, base_url: str | None) -> str:
    if base_url:
        return f"%unity model {name} --base-url {base_url}"
    if name in ("scripted", "ScriptedModel") or name.startswith("scripted"):
        return "%unity model --var M (M: the model object it ran with)"
    return f"%unity model {name}"


def check_resumable(magics: Any, row: dict, *, budget: float | None = None) -> None:
    """Raise one UsageError naming everything this kernel lacks to resume ``row`` (an interrupted operation of the
    store): the variables its line reads, a model, and under a budget the prices it needs; nothing if it lacks
    nothing."""
    name, store = row["name"], magics.store
    started = _started(store, row["uid"])
    missing: list[str] = []
    cmd = _line(row)
    if cmd is not None:
        gone = missing_names(_items(row["kind"], cmd), magics.user_ns)
        if gone:
            what = ", ".join(f"`{n}`" for n in gone)
            it = "it" if len(gone) == 1 else "them"
            missing.append(f"this kernel has no {what}: re-create {it} as it was (run the cells that made {it}); its "
                           "line reads the items there, and rows it finished are kept only where asked the same")
    recorded = row.get("model") or ""
    base_url = getattr(started, "base_url", None)
    configured = magics.model is not None or bool(magics.default_model or os.environ.get("UNITY_NB_MODEL"))
    if not configured:
        missing.append(f"no model is configured: {_model_line(recorded, base_url)} (what it ran with)")
    if budget is None and cmd is not None:
        budget = cmd.options.get("budget")
    if budget is not None:
        model = getattr(magics.model, "name", None) or recorded
        unpriced = [model] if model and price_of(model) is None else []
        unpriced += [m for m in spent_in_store(store, row["uid"])[1] if m not in unpriced and price_of(m) is None]
        then = (getattr(started, "price_input", None), getattr(started, "price_output", None))
        for m in unpriced:
            if m == recorded and None not in then:
                missing.append(f"no price for {m!r}, which its budget needs: u.set_price({m!r}, input={then[0]:g}, "
                               f"output={then[1]:g}) (its price when it ran)")
            else:
                missing.append(f"no price for {m!r}, which its budget needs: u.set_price({m!r}, input=..., "
                               "output=...) (dollars per million tokens)")
    if missing:
        lines = "\n".join(f"- {m}" for m in missing)
        raise UsageError(f"cannot resume {name!r} yet:\n{lines}\nthen %unity resume {name} again")
