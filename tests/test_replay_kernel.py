"""A `%unity act` recorded with ``CachedModel(..., mode='record')`` replays in a fresh, identical kernel with
``mode='replay'``, calling no model (issue 39 item 10): the actor's prompt describes the namespace, which holds
the model itself, and a model's repr differs between the two kernels (its mode, a local server's port)."""

from __future__ import annotations

from _kernel import Kernel

_SETUP = """
%load_ext unity_nb
import unity_nb as u
calls = []
def script(messages, tools):
    calls.append(len(messages))
    return "The answer is 42."
m = u.CachedModel(u.ScriptedModel(script), {path!r}, mode={mode!r})
%unity model --var m
"""
_ACT = "h = %unity act --max-steps 2 What is six times seven?"
_WAIT = "import asyncio\nprint(await asyncio.wait_for(h, 60))"


def _session(path: str, mode: str, tmp_path) -> tuple[str, int, int]:
    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / f"{mode}.db")})
    try:
        k.run(_SETUP.format(path=path, mode=mode), timeout=60)
        k.run(_ACT, timeout=60)
        answer = k.run(_WAIT, timeout=90).strip()
        return answer, k.value("len(calls)"), k.value("m.hits")
    finally:
        k.close()


def test_an_act_recorded_in_one_kernel_replays_in_a_fresh_one_with_no_model_call(tmp_path):
    path = str(tmp_path / "recording.jsonl")
    answer, calls, _ = _session(path, "record", tmp_path)
    assert answer == "The answer is 42." and calls >= 1
    replayed, calls, hits = _session(path, "replay", tmp_path)  # a CacheMiss here fails the cell
    assert replayed == answer
    assert calls == 0 and hits >= 1  # answered from the recording: the model was never called
