"""``output=``: a loop's answer typed by a pydantic model, for start_loop and act (issue 27's typed answers)."""

import asyncio

import pydantic
import pytest

import unity_nb as u


class Verdict(pydantic.BaseModel):
    label: str
    confidence: float


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user" and isinstance(m.get("content"), str)]


async def test_the_answer_is_an_instance_and_the_model_is_told_the_schema(bus):
    model = u.ScriptedModel(lambda m, t: 'Here it is:\n```json\n{"label": "positive", "confidence": 0.9}\n```')
    h = u.start_loop("Label: great product", model=model, output=Verdict, bus=bus)
    result = await asyncio.wait_for(h.result(), 10)
    assert result == Verdict(label="positive", confidence=0.9)
    system = model.requests[0].messages[0]
    assert system["role"] == "system" and '"confidence"' in system["content"] and "Verdict" in system["content"]


async def test_an_answer_that_does_not_validate_is_sent_back_once_saying_what_is_wrong(bus):
    def script(messages, tools):
        if any("not a valid Verdict" in t for t in users(messages)):
            return '{"label": "positive", "confidence": 0.5}'
        return '{"label": "positive", "confidence": "very"}'

    model = u.ScriptedModel(script)
    h = u.start_loop("Label it", model=model, output=Verdict, bus=bus)
    assert await asyncio.wait_for(h.result(), 10) == Verdict(label="positive", confidence=0.5)
    told = [t for t in users(model.requests[1].messages) if "not a valid Verdict" in t]
    assert told and "confidence" in told[0]


async def test_a_second_invalid_answer_fails_the_run_with_the_reason(bus):
    h = u.start_loop("Label it", model=u.ScriptedModel(lambda m, t: "positive, I think"), output=Verdict, bus=bus)
    with pytest.raises(u.UnityError, match="not a Verdict, also when asked again"):
        await asyncio.wait_for(h.result(), 10)


def test_output_that_is_not_a_pydantic_model_is_refused_when_the_loop_starts():
    with pytest.raises(u.UserError, match="output takes a pydantic model class"):
        u.start_loop("x", model=u.ScriptedModel(["y"]), output=dict)


async def test_the_actors_final_answer_value_is_read_as_the_output_type(bus):
    plan = u.call_tool("execute_code", code="final_answer({'label': 'negative', 'confidence': 0.75})", intent="answer")
    model = u.ScriptedModel(lambda m, t: plan if not any(x["role"] == "tool" for x in m) else "done")
    h = u.act("Label it", model=model, namespace={}, output=Verdict, bus=bus)
    assert await asyncio.wait_for(h.result(), 20) == Verdict(label="negative", confidence=0.75)


async def test_an_actor_value_that_is_not_the_output_type_fails_the_run_saying_why(bus):
    plan = u.call_tool("execute_code", code="final_answer({'label': 'negative'})", intent="answer")
    model = u.ScriptedModel(lambda m, t: plan if not any(x["role"] == "tool" for x in m) else "done")
    h = u.act("Label it", model=model, namespace={}, output=Verdict, bus=bus)
    with pytest.raises(u.UnityError, match="not a Verdict: confidence: Field required"):
        await asyncio.wait_for(h.result(), 20)
