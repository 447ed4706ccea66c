"""%unity resume after a dead kernel gives the model the earlier conversation as messages (history=), not as
text in the system prompt, so it sees its own calls and their results and does not redo them; an operation
resumed, cut short again and resumed again keeps the whole conversation."""

import asyncio

import pytest
from conftest import magics

import unity_nb as u


@pytest.fixture
def ip(stored_shell):
    return stored_shell


def _tour_script(hold):
    async def script(messages, tools):
        if not [m for m in messages if m["role"] == "tool"]:
            return u.call_tool("execute_code", code="answer = 6 * 7\nprint('computed', answer)", intent="compute")
        await hold.wait()  # the kernel dies while the model thinks
        return "never"

    return script


async def test_a_resumed_operation_gets_its_conversation_as_messages_and_keeps_it_when_resumed_again(ip, tmp_path):
    hold = asyncio.Event()
    other = u.Store(str(tmp_path / "state.db"))  # another "kernel" on the same file
    bus = u.EventBus()
    other.attach(bus)
    tour = u.act("Compute the answer.", model=u.ScriptedModel(_tour_script(hold)), name="tour", bus=bus,
                 namespace={})
    await tour.wait_for("model_request", lambda e: e.step >= 2, timeout=10)
    other.flush()
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (other.session,))  # that kernel's process is gone

    again = asyncio.Event()
    seen = []

    async def second(messages, tools):
        seen.append(messages)
        await again.wait()  # this kernel dies too, before the answer
        return "the answer is 42"

    ip.user_ns["m"] = u.ScriptedModel(second)
    ip.run_line_magic("unity", "model --var m")
    h = ip.run_line_magic("unity", "resume tour")
    assert h.task == "Compute the answer."
    await h.wait_for("model_request", timeout=10)
    first = seen[0]
    assert first[0]["role"] == "system" and "<earlier-conversation>" not in first[0]["content"]
    assert "[resumed from run " in first[0]["content"] and "Continue where it left off" in first[0]["content"]
    roles = [m["role"] for m in first[1:]]
    assert roles == ["user", "assistant", "tool", "user"]
    assert first[1]["content"] == first[-1]["content"] == "Compute the answer."
    assert "answer = 6 * 7" in first[2]["tool_calls"][0]["function"]["arguments"]
    assert "computed 42" in first[3]["content"] and first[3]["tool_call_id"] == first[2]["tool_calls"][0]["id"]

    # this kernel dies as well: a new extension instance, this session's process marked gone
    store = magics(ip).store
    store.flush()
    session = store.session
    ip.run_line_magic("unload_ext", "unity_nb")
    other.execute("UPDATE sessions SET pid = 0 WHERE id = ?", (session,))  # (the same file)
    ip.run_line_magic("load_ext", "unity_nb")
    seen.clear()
    again.set()
    ip.user_ns["m"] = u.ScriptedModel(lambda messages, tools: seen.append(messages) or "the answer is 42")
    ip.run_line_magic("unity", "model --var m")
    h2 = ip.run_line_magic("unity", "resume tour")
    assert await asyncio.wait_for(h2, 10) == "the answer is 42"
    wire = seen[0]
    assert "computed 42" in " ".join(str(m.get("content")) for m in wire)  # the first run's result, still there
    assert sum(1 for m in wire if m["role"] == "tool") == 1 and wire[-1] == {"role": "user",
                                                                              "content": "Compute the answer."}
    hold.set()
    await tour.stop()
    await h.stop()
    other.close()
