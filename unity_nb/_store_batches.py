"""What the store says of a batch (``u.map``, ``%unity map``): one line for the batch, counting its rows, in
place of one line per row loop (``Store.history``)."""

from __future__ import annotations

import logging
from typing import Any

from ._store_schema import INDEXED, OF_LOOP_KIND, SCAN_OF_LOOP, StoreFile, by_index

__all__ = ("BATCH", "batch_rows", "history_frame", "tree_tokens")

log = logging.getLogger("unity_nb.store")

BATCH = "batch = 1"
"""SQL: the loop is a batch (its children are its rows: a map, or an operator's map)."""


_OBJECT = "json_valid(data) AND json_type(data) = 'object'"  # (json_extract of a row cut short would fail the query)
_COUNTS = (
    f"SELECT CASE WHEN {_OBJECT} THEN IFNULL(json_extract(data, '$.status'), 'failed') END AS status,"
    f" SUM(CASE WHEN {_OBJECT} AND json_extract(data, '$.kept') THEN 1 ELSE 0 END) AS kept, COUNT(*) AS n,"
    " MIN(seq) AS seq FROM ({}) WHERE loop_uid = :uid GROUP BY 1"
)
_INDEXED_COUNTS, _SCAN_COUNTS = _COUNTS.format(OF_LOOP_KIND), _COUNTS.format(SCAN_OF_LOOP.format(" AND kind = :kind"))


def batch_rows(store: StoreFile, loop: dict) -> str:
    """A batch's rows as history says them: ``30 finished (10 kept), 2 failed; 5 running when its kernel died``.
    Counted by SQLite, one row per status: a batch of millions of rows was read whole into memory, each parsed."""
    counts = {"finished": 0, "failed": 0, "stopped": 0, "kept": 0}
    params = {"uid": loop["uid"], "kind": "row_finished"}
    for r in by_index(store, _INDEXED_COUNTS, params, _SCAN_COUNTS):
        if r["status"] in ("finished", "failed", "stopped"):
            counts[r["status"]] += r["n"]
            counts["kept"] += r["kept"] or 0
        else:  # changed by hand, or damaged: those rows, not history
            log.warning("store %r: batch %s: %d of its row events (the first: events row seq=%s) cannot be read: "
                        "not counted", store.path, loop.get("name"), r["n"], r["seq"])
    live = store.query("SELECT COUNT(*) AS n FROM loops WHERE parent_uid = ? AND ended IS NULL", (loop["uid"],))
    running = live[0]["n"] if live else 0
    kept = f" ({counts['kept']} kept from the run it continued)" if counts["kept"] else ""
    text = f"{counts['finished']} finished{kept}, {counts['failed']} failed"
    text += f", {counts['stopped']} stopped" if counts["stopped"] else ""
    if loop["status"] == "interrupted":
        died = f"{running} running when its kernel died" if running else "its kernel died"
        text += f"; {died} (%unity resume {loop['name']} keeps the finished rows and runs the rest)"
    elif running:
        text += f"; {running} running"
    return text


def history_frame(store: StoreFile, rows: list[dict]):
    """``Store.history``'s DataFrame of ``rows`` (``Store.loops`` without row loops): a batch's ``rows`` column
    counts its rows (:func:`batch_rows`), other loops leave it empty."""
    import pandas as pd

    def when(at: Any) -> Any:  # a start changed by hand into no time (text, past any calendar): NaT, not an error
        return pd.to_datetime(at, unit="s", errors="coerce").floor("s")

    return pd.DataFrame(
        [{
            "name": r["name"], "kind": r.get("kind") or "loop", "task": (r["task"] or "")[:80],
            "status": r["status"], "started": when(r["started"]), "steps": r["steps"],
            "rows": batch_rows(store, r) if r.get("batch") else "", "uid": r["uid"],
        } for r in rows],
        columns=["name", "kind", "task", "status", "started", "steps", "rows", "uid"],
    )


_TREE = ("WITH RECURSIVE tree(uid, model) AS (SELECT uid, model FROM loops WHERE parent_uid = :uid"
         " UNION ALL SELECT l.uid, l.model FROM loops l JOIN tree t ON l.parent_uid = t.uid) ")
_TOKENS = ("SELECT model, SUM(MAX(0, IFNULL(CAST(json_extract(data, '$.input_tokens') AS INTEGER), 0))) AS tokens_in,"
           " SUM(MAX(0, IFNULL(CAST(json_extract(data, '$.output_tokens') AS INTEGER), 0))) AS tokens_out FROM ({})"
           " GROUP BY model")
_INDEXED_TREE = _TREE + _TOKENS.format(
    "SELECT t.model AS model, e.data AS data FROM tree t JOIN event_index i ON i.loop_uid = t.uid"
    f" JOIN events e ON e.seq = i.seq AND e.loop_uid = t.uid WHERE i.seq <= {INDEXED} AND e.kind = 'model_response'"
    " UNION ALL SELECT t.model AS model, e.data AS data FROM events e JOIN tree t ON e.loop_uid = t.uid"
    f" WHERE e.seq > {INDEXED} AND e.kind = 'model_response'"
)
_SCAN_TREE = _TREE + _TOKENS.format(
    "SELECT t.model AS model, e.data AS data FROM events e JOIN tree t ON e.loop_uid = t.uid"
    " WHERE e.kind = 'model_response'"
)


def tree_tokens(store: StoreFile, uid: str) -> list[tuple[str, int, int]]:
    """Tokens every loop under the loop ``uid`` spent (its rows, the loops under them), by model:
    ``[(model, tokens in, tokens out)]``, from their committed ``model_response`` events (one query)."""
    store.flush()
    rows = by_index(store, _INDEXED_TREE, {"uid": uid}, _SCAN_TREE)
    return [(r["model"] or "", int(r["tokens_in"] or 0), int(r["tokens_out"] or 0)) for r in rows]
