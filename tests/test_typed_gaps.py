"""Typed columns with a gap (issue 34): a failed row leaves ``<NA>`` in a column of pandas' nullable dtype, and
every other value comes back exact (an ``int`` column with one failed row was float64: 2**53+1 came back as
9007199254740992.0)."""

import asyncio

import pandas as pd
import pydantic

import unity_nb as u

T = 10.0
BIG = 2**53 + 1


def answers(rows):
    """A model that answers row ``value`` with ``rows[value]``'s fields; a row given ``None`` fails."""

    def script(messages, tools):
        if any(m.get("role") == "tool" for m in messages):
            return "done"
        text = next(m["content"] for m in messages if m["role"] == "user")
        fields = rows[text.rsplit(" ", 1)[1]]
        if fields is None:
            raise RuntimeError("this row fails")
        return u.call_tool("submit_answer", **fields)

    return u.ScriptedModel(script)


async def test_typed_columns_are_nullable_and_exact_with_a_failed_row(bus):
    model = answers({"a": {"n": BIG, "x": 0.1, "ok": True, "s": "yes"}, "b": None,
                     "c": {"n": -BIG, "x": 2.5, "ok": False, "s": ""}})
    h = u.map(pd.Series(["a", "b", "c"], index=["r1", "r2", "r3"]), "Row {value}", model=model,
              columns="n:int,x:float,ok:bool,s", bus=bus)
    out = await asyncio.wait_for(h, T)
    assert dict(out.dtypes.astype(str)) == {"n": "Int64", "x": "Float64", "ok": "boolean", "s": "string"}
    assert out.loc["r1", "n"] == BIG and out.loc["r3", "n"] == -BIG  # not 9007199254740992.0
    assert out["n"].tolist()[0] == BIG and isinstance(out["n"].tolist()[0], int)
    assert out["x"].tolist() == [0.1, pd.NA, 2.5] and out["ok"].tolist() == [True, pd.NA, False]
    assert out.loc["r3", "s"] == ""  # an empty answer is not a gap
    assert all(out.loc["r2"].isna()) and "this row fails" in out.attrs["reasons"]["r2"]


async def test_an_output_models_optional_fields_are_nullable_and_other_fields_kept_as_given(bus):
    class Answer(pydantic.BaseModel):
        count: int | None
        flag: bool
        tags: list[str]

    model = answers({"a": {"count": None, "flag": True, "tags": ["x"]}, "b": None,
                     "c": {"count": BIG, "flag": False, "tags": []}})
    out = await asyncio.wait_for(u.map(["a", "b", "c"], "Row {value}", model=model, output=Answer, bus=bus), T)
    assert (str(out["count"].dtype), str(out["flag"].dtype), str(out["tags"].dtype)) == ("Int64", "boolean", "object")
    assert out.loc[2, "count"] == BIG and pd.isna(out.loc[0, "count"]) and out["flag"].tolist() == [True, pd.NA, False]
    assert out["tags"].tolist() == [["x"], None, []]
