"""What a person reads of a batch's answers: the first rows of its result in its widget once it has ended, and
``%unity show NAME`` for a batch (one in memory: its result with each missing row's reason; one a dead kernel left
in the store: the rows it recorded)."""

from __future__ import annotations

import json
import weakref
from typing import Any

from ..loop import LoopHandle

__all__ = ("PREVIEW_ROWS", "batch_table", "preview")

PREVIEW_ROWS = 5
"""Rows of a result the widget shows."""
_BIG = 100_000
"""Past this many rows, the preview reads the batch's first answers without building its whole result."""
_SCAN = 10_000
"""Positions looked at for them (a batch whose first rows all failed shows fewer)."""

_PREVIEWS: weakref.WeakKeyDictionary[LoopHandle, dict | None] = weakref.WeakKeyDictionary()
"""Each ended batch's preview, made once (its result no longer changes)."""


def _cell(value: Any, limit: int = 200) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def _table(columns: list[str], rows: list[list[Any]], total: int) -> dict:
    return {"columns": columns, "rows": [[_cell(c) for c in r] for r in rows], "answered": total}


def _from_result(result: Any) -> dict | None:
    import pandas as pd

    if isinstance(result, pd.Series):
        frame = result.dropna().to_frame(name=str(result.name) if result.name is not None else "answer")
    elif isinstance(result, pd.DataFrame):
        frame = result.dropna(how="all")
    else:
        return None
    head = frame.head(PREVIEW_ROWS)
    return _table([str(c) for c in frame.columns], [[k, *row] for k, row in zip(head.index, head.to_numpy().tolist())],
                  len(frame))


def _from_book(rows: Any) -> dict:
    """The first answered rows of a big batch, read from its book of rows (no whole result built)."""
    answers = rows.answers
    found = [p for p in range(min(_SCAN, rows.total or 0)) if p in answers][:PREVIEW_ROWS]
    return _table(["answer"], [[rows.key(p), answers[p]] for p in found], len(answers))


def preview(h: LoopHandle) -> dict | None:
    """The first rows of an ended batch's result (what ``await h`` gives), for its widget: ``{"columns", "rows",
    "answered"}`` (each row its key, then its cells, clipped), ``None`` for one still running or without answers."""
    results = getattr(h, "results", None)
    if not callable(results) or not h.done():
        return None
    if h in _PREVIEWS:
        return _PREVIEWS[h]
    rows = getattr(h, "rows", None)
    made: dict | None
    try:
        if rows is not None and hasattr(rows, "answers") and (rows.total or 0) > _BIG:
            made = _from_book(rows)
        else:
            made = _from_result(results())
    except Exception:  # noqa: BLE001 - a preview, never an error of the widget's
        made = None
    if made is not None and not made["rows"]:
        made = None
    _PREVIEWS[h] = made
    return made


def _with_reasons(result: Any) -> Any:
    import pandas as pd

    frame = result.to_frame(name=result.name if result.name is not None else "answer") if isinstance(
        result, pd.Series) else result.copy()
    reasons, cut = result.attrs.get("reasons", {}), result.attrs.get("cut", {})  # cut: a row answered, said cut
    frame["reason"] = [reasons.get(k) or cut.get(k) for k in frame.index]
    return frame


def _root(magics: Any, name: str) -> LoopHandle | None:
    """The batch in this kernel that ``name`` names (an operation's name, or a variable holding its handle)."""
    found = magics.handles.get(name)
    if found is None and magics.shell is not None:
        value = magics.shell.user_ns.get(name)
        found = value if isinstance(value, LoopHandle) else None
    return found if found is not None and callable(getattr(found, "results", None)) else None


def batch_table(magics: Any, name: str) -> Any:
    """``%unity show NAME`` for a batch: in this kernel, its result so far with a ``reason`` column (why a row has no
    answer, or what cut its answer); from the store, the rows its run recorded (``row``, ``status``, ``answer``,
    ``reason``). ``None`` when ``name`` is no batch (a loop's transcript is shown instead)."""
    import pandas as pd

    h = _root(magics, name)
    if h is not None:
        return _with_reasons(h.results())  # type: ignore[attr-defined]  # (a batch: _root checked)
    store = magics.store
    if store is None or "[" in name:
        return None
    try:
        row = store.find(name)
    except Exception:  # noqa: BLE001 - not in the store: the transcript path says what is known
        return None
    if not row.get("batch"):
        return None
    ended = sorted(store.events(row["uid"], kind="row_finished"), key=lambda e: e.position)
    index = pd.Index([e.position for e in ended], name="position")
    column = {"dtype": object, "index": index}  # a missing answer stays None, a typed one a dict
    return pd.DataFrame({
        "row": pd.Series([json.loads(e.row) for e in ended], **column),
        "status": pd.Series([e.status for e in ended], **column),
        "answer": pd.Series([json.loads(e.answer) if e.answer is not None else None for e in ended], **column),
        "reason": pd.Series([e.reason for e in ended], **column),
    })
