"""A JSON tool's result goes into a variable only when the model names one, or when it is not JSON data.

A notebook had `region_sales_result_9` ... `_24`: every call of a JSON tool left a global behind,
although the model had read the whole result. Now JSON data the model reads whole (up to 4,000
characters) is only shown; `return` still names a variable, and a result without a JSON form (a
DataFrame) is still kept under a fresh name so it can be passed on by reference.
"""

from __future__ import annotations

import asyncio

import pandas as pd
from conftest import tool_messages

import unity_nb as u


def region_sales(region: str) -> dict:
    """Sales of a region."""
    return {"region": region, "sales": len(region) * 100}


def region_frame(region: str) -> pd.DataFrame:
    """Sales of a region, by month."""
    return pd.DataFrame({"month": [1, 2], "sales": [len(region), 2 * len(region)]})


def _script(calls):
    def script(messages, tools):
        done = tool_messages(messages)
        return calls[len(done)] if len(done) < len(calls) else "done"

    return script


async def _run(calls, ns):
    model = u.ScriptedModel(_script(calls))
    await asyncio.wait_for(u.act("sales", model=model, namespace=ns, tools=[region_sales, region_frame],
                                 bus=u.EventBus()), 20)
    return [m["content"] for m in tool_messages(model.requests[-1].messages)]


async def test_json_results_the_model_read_whole_leave_no_variable_behind_unless_named():
    ns: dict = {}
    replies = await _run([u.call_tool("region_sales", region=r) for r in ("north", "south", "east", "west")], ns)
    assert replies[0] == '{"region": "north", "sales": 500}'
    assert not any("stored in variable" in r for r in replies)
    assert not [n for n in ns if n.startswith("region_sales")]
    # a `return` still names a variable, and a result without a JSON form is kept under a fresh name to pass on
    replies = await _run(
        [u.call_tool("region_sales", region="north", **{"return": "north"}), u.call_tool("region_frame", region="ab")],
        ns,
    )
    assert ns["north"] == {"region": "north", "sales": 500}
    assert "[stored in variable `north`" in replies[0]
    assert isinstance(ns["region_frame_result"], pd.DataFrame)
    assert "[stored in variable `region_frame_result`; pass it on as <<var:region_frame_result>>]" in replies[1]
