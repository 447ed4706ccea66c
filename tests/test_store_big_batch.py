"""Store.history (%unity history) counted a batch's rows by reading every row event into memory and parsing each:
a map of millions of rows took gigabytes to list (300,000 rows: 280 MB at the peak), and a kernel could die of it.
SQLite counts them: the memory history takes does not grow with the rows."""

from __future__ import annotations

import json
import tracemalloc

import pandas  # noqa: F401 - imported before the measure (history's DataFrame)

from unity_nb.store import Store

ROWS = 100_000


def test_history_of_a_batch_of_many_rows_does_not_read_them_into_memory(tmp_path):
    store = Store(tmp_path / "s.db")
    store.execute("INSERT INTO loops (uid, session, loop_id, name, task, status, started, ended, steps, lineage, kind,"
                  " batch) VALUES ('s-1', ?, '1', 'labels', 'x', 'finished', 1, 2, 0, '[]', 'map', 1)",
                  (store.session,))
    row = {"kind": "row_finished", "loop_id": "1", "lineage": ["labels(1)"], "row": "0", "status": "finished",
           "answer": json.dumps("an answer " * 20), "asked": "0123456789abcdef", "kept": False}
    with store.transaction() as db:
        db.executemany("INSERT INTO events (loop_uid, kind, ts, data) VALUES ('s-1', 'row_finished', 1, ?)",
                       ((json.dumps({**row, "position": i, "kept": i < 10}),) for i in range(ROWS)))
    store.history()  # once before the measure: what a first call imports and caches is not the rows
    tracemalloc.start()
    try:
        frame = store.history()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert frame["rows"][0].startswith(f"{ROWS} finished (10 kept from the run it continued), 0 failed")
    assert peak < 10 * 2**20, f"{peak / 2**20:.0f} MB to list one batch of {ROWS} rows"
    store.close()
