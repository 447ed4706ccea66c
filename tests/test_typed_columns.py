"""Typed rows' column names (issue 37, item 16): each column of ``columns=`` comes back exactly as given, or the
batch is refused before it starts with an error naming the column and what to do (in the magics a UsageError).
Names pydantic would drop (``_x``, ``__class__``), names it uses itself (``model_config``, ``model_dump``,
``json``) and a name given twice were silently lost, merged or raw errors."""

import asyncio
import os
import textwrap

import pytest
from _kernel import Kernel
from conftest import tool_messages

import unity_nb as u

T = 10.0


def answering(values):
    """A model that answers each row through submit_answer with ``values``."""
    return u.ScriptedModel(lambda m, t: u.call_tool("submit_answer", **values) if not tool_messages(m) else "done")


@pytest.mark.parametrize(
    ("columns", "named", "instead"),
    [
        ("_x", "'_x'", "'x'"),
        ("a,__class__", "'__class__'", "'class__'"),
        ("model_config", "'model_config'", "'model_config_'"),
        ("n:int,model_dump", "'model_dump'", "'the_model_dump'"),
        ("json", "'json'", "'json_'"),
        (["a", "_b:int"], "'_b'", "'b'"),
    ],
)
async def test_a_column_pydantic_would_drop_or_uses_itself_is_refused_naming_it(bus, columns, named, instead):
    for start in (u.map, u.extract):
        with pytest.raises(u.UserError) as err:
            start(["x"], "Label {value}", model=answering({"a": "1"}), columns=columns, bus=bus)
        said = str(err.value)
        assert f"no column named {named}" in said and f"say {instead}" in said, said
        assert "pydantic" in said


@pytest.mark.parametrize(
    ("columns", "twice"), [("a,a", "a"), ("a:int,a:str", "a"), (["score", "score:float"], "score")]
)
async def test_a_column_named_twice_is_refused_not_merged(bus, columns, twice):
    with pytest.raises(u.UserError) as err:
        u.map(["x"], "Label {value}", model=answering({"a": "1"}), columns=columns, bus=bus)
    assert f"names {twice!r} twice" in str(err.value) and "give each column once" in str(err.value)


async def test_every_column_a_person_may_name_comes_back_exactly_as_given(bus):
    values = {"class": "c", "model_name": "gpt", "größe": 3, "Score_2": 0.5}
    h = u.map(["x", "y"], "Label {value}", model=answering(values),
              columns="class, model_name, größe:int, Score_2:float", bus=bus)
    frame = await asyncio.wait_for(h.result(), T)
    assert list(frame.columns) == list(values)
    assert frame.iloc[0].tolist() == list(values.values()) and not frame.attrs["reasons"]


async def test_a_batch_with_the_columns_of_an_earlier_one_makes_no_pydantic_model_and_a_new_type_is_its_own(
    bus, monkeypatch
):
    import pydantic

    # columns no other test names: what an earlier test made is not what this one counts
    first = await asyncio.wait_for(u.map(["x"], "Label {value}", model=answering({"n_memo": 2, "why_memo": "a"}),
                                         columns="n_memo:int,why_memo", bus=bus).result(), T)
    made: list[str] = []
    real = pydantic.create_model
    monkeypatch.setattr(pydantic, "create_model", lambda name, **kw: made.append(name) or real(name, **kw))
    schemas: list[str] = []
    real_schema = pydantic.BaseModel.model_json_schema.__func__  # type: ignore[attr-defined]

    def schema(cls, *args, **kwargs):
        schemas.append(cls.__name__)
        return real_schema(cls, *args, **kwargs)

    monkeypatch.setattr(pydantic.BaseModel, "model_json_schema", classmethod(schema))
    again = await asyncio.wait_for(u.map(["y", "z"], "Label {value}", model=answering({"n_memo": 5, "why_memo": "b"}),
                                         columns="n_memo:int,why_memo", bus=bus).result(), T)
    # the answer's model, submit_answer's and the cache key's schemas, as the first batch made them
    assert made == [] and schemas == []
    assert first.iloc[0].tolist() == [2, "a"] and again["n_memo"].tolist() == [5, 5]
    assert again["why_memo"].tolist() == ["b"] * 2
    # the same names with another type: a model of its own
    h = u.map(["w"], "Label {value}", model=answering({"n_memo": True, "why_memo": "c"}),
              columns="n_memo:bool,why_memo", bus=bus)
    other = await asyncio.wait_for(h.result(), T)
    assert made == ["Answer", "Answer"] and other.iloc[0].tolist() == [True, "c"]
    assert str(other["n_memo"].dtype) == "boolean"


SETUP = textwrap.dedent(
    f"""
    import sys; sys.path.insert(0, {os.path.dirname(__file__)!r})
    %load_ext unity_nb
    import unity_nb as u
    from IPython.core.error import UsageError
    m = u.ScriptedModel(["unused"])
    %unity model --var m
    items = ["a", "b"]

    def refused(line):
        try:
            get_ipython().run_line_magic("unity", line)
        except UsageError as err:
            return str(err)
        return None
    """
)


def test_the_magics_refuse_a_bad_column_with_a_usage_error_naming_it(tmp_path):
    k = Kernel(env={"UNITY_NB_STORE": str(tmp_path / "state.db")})
    try:
        k.run(SETUP)
        told = k.value("refused('map items --columns word,_n:int Label {value}')")
        assert told is not None and "no column named '_n'" in told and "say 'n'" in told
        told = k.value("refused('extract items --columns model_dump From {value}')")
        assert told is not None and "no column named 'model_dump'" in told
        told = k.value("refused('extract items --columns a:int,a:str From {value}')")
        assert told is not None and "names 'a' twice" in told
        assert k.value("len(m.requests)") == 0  # refused before anything started
    finally:
        k.close()
