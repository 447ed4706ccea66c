"""A JSON tool call that waits for the person's approval gets the variables it names by reference as they are
bound when it runs: the person approves ``<<var:df>>`` by name, and may have run cells (rebinding or deleting
``df``) while it waited. It used to run on the object the name was bound to when the model asked."""

from __future__ import annotations

import asyncio

import pandas as pd
from conftest import tool_messages

import unity_nb as u

GOT: list = []


def count_rows(df: pd.DataFrame) -> int:
    """Count the rows of a frame."""
    GOT.append(df)
    return len(df)


def _script(messages, tools):
    done = tool_messages(messages)
    return u.call_tool("count_rows", df="<<var:df>>") if not done else "rows: " + done[-1]["content"]


async def _waiting(ns):
    tool = u.as_tool(count_rows, needs_approval=True)
    h = u.act("count", model=u.ScriptedModel(_script), namespace=ns, tools=[tool], bus=u.EventBus())
    for _ in range(500):
        if h.inbox.approvals:
            return h
        await asyncio.sleep(0.01)
    raise AssertionError("the call never waited")


async def test_a_variable_rebound_while_the_call_waited_is_passed_as_bound_now():
    GOT.clear()
    old, new = pd.DataFrame({"a": [1, 2]}), pd.DataFrame({"a": range(10)})
    ns = {"df": old}
    h = await _waiting(ns)
    ns["df"] = new  # a cell the person ran while the call waited
    await h.inbox.approve()
    assert await asyncio.wait_for(h, 20) == "rows: 10"
    assert GOT == [new] and GOT[0] is new


async def test_a_variable_deleted_while_the_call_waited_is_an_error_the_model_reads():
    GOT.clear()
    ns = {"df": pd.DataFrame({"a": [1, 2]})}
    h = await _waiting(ns)
    del ns["df"]
    await h.inbox.approve()
    answer = await asyncio.wait_for(h, 20)
    assert GOT == []
    assert "'df'" in answer and "deleted" in answer


async def test_a_variable_rebound_to_an_incompatible_value_is_an_error_the_model_reads():
    GOT.clear()
    ns = {"df": pd.DataFrame({"a": [1, 2]})}
    h = await _waiting(ns)
    ns["df"] = "not a frame"
    await h.inbox.approve()
    answer = await asyncio.wait_for(h, 20)
    assert GOT == []
    assert "not compatible" in answer
