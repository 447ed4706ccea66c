"""%config UnityMagics.store_path after %load_ext (which opens the store) was ignored without a word: 'off' kept
recording every loop in the file opened at loading, and another path was never used. The store it names records
from then on; 'off' records nothing; an instance %reload_ext unloaded opens none."""

from __future__ import annotations

import pytest
from conftest import magics

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def names(path) -> list[str]:
    store = u.Store(path)
    try:
        return [r["name"] for r in store.loops()]
    finally:
        store.close()


async def test_a_store_path_set_after_loading_is_the_one_recording(ip, tmp_path):
    ip.run_line_magic("reload_ext", "unity_nb")  # the instance unloaded stays where %config reaches it: it records not
    loaded = magics(ip).store.path  # opened by %load_ext: $UNITY_NB_STORE
    try:
        await _recorded_where_said(ip, loaded, tmp_path)
    finally:
        ip.run_line_magic("config", 'UnityMagics.store_path = ""')  # (the shell's config outlives the test)


async def _recorded_where_said(ip, loaded, tmp_path) -> None:
    ip.user_ns["m"] = u.ScriptedModel(lambda messages, tools: "done")
    ip.run_line_magic("unity", "model --var m")

    ip.run_line_magic("config", 'UnityMagics.store_path = "off"')
    assert magics(ip).store is None
    assert await ip.run_line_magic("unity", "act --name private go") == "done"

    other = str(tmp_path / "other.db")
    ip.run_line_magic("config", f"UnityMagics.store_path = {other!r}")
    direct = u.act("go", model=u.ScriptedModel(["done"]), name="direct", namespace={})  # no magic opened it
    assert await direct == "done"
    assert await ip.run_line_magic("unity", "act --name elsewhere go") == "done"
    magics(ip).store.flush()

    assert not {"private", "direct", "elsewhere"} & set(names(loaded))
    assert names(other) == ["direct", "elsewhere"]
