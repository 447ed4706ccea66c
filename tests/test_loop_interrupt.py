"""An interjection that interrupts the model call in flight: the call runs in the loop's own task, which the
interruption cancels once and takes back; a second interjection, or a stop, arriving before the loop has seen
the first must neither stop the loop nor be lost."""

from __future__ import annotations

import asyncio

import pytest

import unity_nb as u


class Held:
    """A scripted model whose every reply waits for the test to release it."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.model = u.ScriptedModel(self._reply)

    async def _reply(self, messages: list, tools: list) -> str:
        await self.gate.wait()
        return "final: " + messages[-1]["content"]


async def test_two_interjections_during_one_call_reissue_it_once_with_both(bus):
    held = Held()
    h = u.start_loop("answer", model=held.model, bus=bus)
    await h.wait_for("model_request")
    await h.interject("first")
    await h.interject("second")  # before the loop has run again: its call is already being interrupted
    second = await h.wait_for("model_request", lambda e: e.step == 2)
    held.gate.set()
    answer = await asyncio.wait_for(h.result(), 10)
    assert "first" in answer and "second" in answer and "second" in second.last_user  # both heard, in one call
    assert [e.interrupted for e in h.events if e.kind == "model_response"] == [True, False]
    assert h.status == "finished" and h.steps == 2


async def test_a_stop_with_an_interjection_during_one_call_stops_the_loop(bus):
    held = Held()
    h = u.start_loop("answer", model=held.model, bus=bus)
    await h.wait_for("model_request")
    await h.interject("also this")
    await h.stop("enough")
    with pytest.raises(u.Stopped, match="enough"):
        await asyncio.wait_for(h.result(), 10)
    assert [e.kind for e in h.events].count("model_request") == 1
    assert h.events[-1].kind == "loop_finished" and h.events[-1].status == "stopped"
