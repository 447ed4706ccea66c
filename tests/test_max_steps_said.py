"""A loop that reaches max_steps without an answer fails saying how far it got."""

import asyncio

import pytest

import unity_nb as u


async def test_max_steps_hit_without_an_answer_says_what_was_done(bus):
    def f() -> str:
        """A step."""
        return "r"

    h = u.start_loop("go", model=u.ScriptedModel(lambda m, t: u.call_tool("f")), tools=[f], max_steps=3, bus=bus)
    with pytest.raises(u.UnityError, match=r"max_steps=3.*after 2 tool calls in 4 model calls"):
        await asyncio.wait_for(h.result(), 10)
    assert [m.content for m in h.transcript if m.kind == "tool_result"] == ["r", "r"]
