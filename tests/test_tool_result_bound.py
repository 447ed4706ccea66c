"""A tool's result is bounded (``max_result_chars``), and a cut says so: what the model reads and the transcript."""

import asyncio

import pytest
from conftest import tool_messages

import unity_nb as u


def _script(messages, tools):
    done = tool_messages(messages)
    return "done" if done else u.call_tool("big")


async def test_a_huge_tool_result_is_cut_to_max_result_chars_saying_so(bus):
    def big() -> str:
        """A lot of text."""
        return "a" * 600_000 + "b" * 600_000

    h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[big], max_result_chars=1_000, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == "done"
    [sent] = [m["content"] for m in h.messages if m["role"] == "tool"]
    assert len(sent) < 1_200
    assert sent.startswith("a" * 500) and sent.endswith("b" * 500)
    assert "1,199,000 of the result's 1,200,000 characters cut" in sent and "max_result_chars=1,000" in sent
    [entry] = [m for m in h.transcript if m.kind == "tool_result"]
    assert entry.content == sent


async def test_a_result_within_the_bound_is_whole(bus):
    def big() -> str:
        """Some text."""
        return "x" * 100_000

    h = u.start_loop("go", model=u.ScriptedModel(_script), tools=[big], bus=bus)
    await asyncio.wait_for(h.result(), 10)
    assert [m["content"] for m in h.messages if m["role"] == "tool"] == ["x" * 100_000]


async def test_max_result_chars_is_checked():
    with pytest.raises(u.UserError, match="max_result_chars"):
        u.start_loop("go", model=u.ScriptedModel(lambda m, t: "x"), max_result_chars=0)
