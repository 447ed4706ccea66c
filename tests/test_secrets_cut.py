"""A secret value that a cut leaves only a piece of is still never shown: a DataFrame's cells are cut to 23
characters (as pandas shows them), and what a plan displays to 500 characters in the
model's view of its result. Scrubbing the text after such a cut cannot recognise the piece left."""

from typing import Any

import pandas as pd
import pytest
from conftest import tool_messages

import unity_nb as u
from unity_nb._secrets import scrub_clipped
from unity_nb.actor._describe import describe_value
from unity_nb.actor._executor import PlanResult

VALUE = "sk-live-5f2b9c1e8a7d4b3c9e0f"


@pytest.fixture
def secret():
    u.set_secret("API_TOKEN", VALUE)
    yield
    u.forget_secret("API_TOKEN")


def _pieces(text: str) -> list[str]:
    """Every piece of the value at least 8 characters long that ``text`` holds."""
    return [VALUE[i:j] for i in range(len(VALUE)) for j in range(i + 8, len(VALUE) + 1) if VALUE[i:j] in text]


def test_a_secret_in_a_frames_cell_is_not_shown_cut(secret):
    df = pd.DataFrame({"user": ["a", "b"], "token": [VALUE, "x"]})
    text = describe_value(df)
    assert not _pieces(text), text
    assert "<<secret:API_TOKEN>>" in text
    assert "1     b" in text  # the rest as it was


def test_a_secret_set_after_a_frame_was_described_is_not_shown_cut():
    df = pd.DataFrame({"token": [VALUE, "x"]})
    describe_value(df)  # described (and kept) before the value is a secret
    u.set_secret("API_TOKEN", VALUE)
    try:
        assert not _pieces(describe_value(df))
    finally:
        u.forget_secret("API_TOKEN")


def test_scrub_clipped_leaves_other_text_alone(secret):
    assert scrub_clipped("sk-l... and abc...") == "<<secret:API_TOKEN>>... and abc..."
    assert scrub_clipped("sk-... ok") == "sk-... ok"  # three characters: too few to tell
    assert scrub_clipped("nothing cut") == "nothing cut"


def test_what_a_plan_displayed_is_scrubbed_before_it_is_cut(secret):
    plain = repr("x" * 240 + VALUE + "y" * 400)
    result = PlanResult(success=True, displays=[{"data": {"text/plain": plain}, "metadata": {}}])
    text = result.for_model()
    assert not _pieces(text), text


async def test_a_frame_of_secrets_reaches_no_prompt_cut(secret):
    ns: dict[str, Any] = {"creds": pd.DataFrame({"user": ["a"], "token": [VALUE]})}
    code = "creds2 = creds.copy()\ncreds2['user'] = 'b'\ncreds2"

    def script(messages, tools):
        return u.call_tool("execute_code", code=code, intent="copy") if not tool_messages(messages) else "done"

    model = u.ScriptedModel(script)
    h = u.act("look", model=model, namespace=ns)
    assert await h == "done"
    sent = repr([r.messages for r in model.requests])
    assert "creds2" in sent
    assert not _pieces(sent)
