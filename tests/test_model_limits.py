"""What one response header can do to a model's rate limit is bounded, and a long wait is shown (issue 24.4);
usage mistakes in ``ScriptedModel`` and ``rate=`` are UserErrors that say what is accepted (issue 24.9).

The headers come over real HTTP from ``tests/fake_openai.py``. Nothing waits the pause out: a test waits
for the ``model_wait`` event the loop publishes before the wait, reads the wait it announces, and stops.
"""

import asyncio
import math

import pytest
from fake_openai import FakeOpenAIServer
from fake_openai import Reply as R

import unity_nb as u
from unity_nb.events import ModelWait
from unity_nb.models import rate_limit_of, set_rate_limit

KEY = "sk-test-123456789"
T = 10.0


def lookup(key: str) -> str:
    """Return the stored value for key."""
    return "1"


CALL = {"name": "lookup", "arguments": '{"key": "a"}'}


@pytest.mark.parametrize(
    "headers, calls, said",
    [
        ({"Retry-After": "86400"}, 1, "Retry-After: 86400"),
        ({"Retry-After": "inf"}, 1, "Retry-After: inf"),
        # the first request is not counted (there was no limit yet): the third is the one spaced out
        ({"x-ratelimit-limit-requests": "0.01"}, 2, "x-ratelimit-limit"),
    ],
    ids=["retry_after_a_day", "retry_after_inf", "one_request_in_100_minutes"],
)
async def test_a_header_on_a_success_pauses_at_most_a_minute_and_the_wait_is_announced(headers, calls, said):
    async with FakeOpenAIServer() as srv:
        first = R(tool_calls=[CALL], headers=headers)
        srv.script([first] + [R(tool_calls=[CALL])] * (calls - 1) + [R(content="done")])
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY) as m:
            h = u.start_loop("go", model=m, tools=[lookup])
            wait = await h.wait_for("model_wait", timeout=T)
            assert isinstance(wait, ModelWait)
            assert 3 < wait.seconds <= 60.0 and said in wait.reason
            assert len(srv.requests) == calls  # the next request waits; nothing was sent during the wait
            limit = rate_limit_of(m)
            assert limit is not None and (limit.requests_per_minute or math.inf) >= 1.0
            await h.stop("seen the wait")
            with pytest.raises(u.Stopped):
                await asyncio.wait_for(h.result(), T)
        assert [e.kind for e in h.events].count("model_wait") == 1


async def test_a_short_wait_is_not_announced():
    async with FakeOpenAIServer() as srv:
        srv.script([R(tool_calls=[CALL], headers={"Retry-After": "0.01"}), R(content="done")])
        async with u.OpenAIModel("m", base_url=srv.base_url, api_key=KEY) as m:
            h = u.start_loop("go", model=m, tools=[lookup])
            assert await asyncio.wait_for(h.result(), T) == "done"
        assert not [e for e in h.events if e.kind == "model_wait"]


def test_learned_limits_have_a_floor_and_pauses_a_cap():
    limit = u.RateLimit()
    limit.learn({"x-ratelimit-limit-requests": "0.01", "x-ratelimit-limit-tokens": "0.5", "retry-after": "nan"})
    assert limit.learned and limit.requests_per_minute == 1.0 and limit.tokens_per_minute == 1000.0
    assert limit.cooldowns == 0  # nan is no pause
    limit.learn({"retry-after": "1e308"})
    assert limit.cooldowns == 1


@pytest.mark.parametrize("script", [42, None, "hello", 3.5])
def test_a_scripted_model_given_something_else_says_what_it_takes(script):
    with pytest.raises(u.UserError, match="ScriptedModel takes a function script\\(messages, tools\\)"):
        u.ScriptedModel(script)


@pytest.mark.parametrize("rate", [{"bogus": 1}, {"requests_per_minute": 10, "rpm": 5}])
def test_a_rate_dict_with_unknown_keys_says_the_accepted_forms(rate):
    with pytest.raises(u.UserError, match="requests_per_minute, tokens_per_minute") as err:
        set_rate_limit(u.ScriptedModel(["x"]), rate)
    assert "'600/min'" in str(err.value)


async def test_a_map_with_a_bogus_rate_is_a_user_error():
    with pytest.raises(u.UserError, match="requests_per_minute"):
        h = u.map(["a"], "{value}", model=u.ScriptedModel(["x"]), rate={"bogus": 1})
        await asyncio.wait_for(h, T)
