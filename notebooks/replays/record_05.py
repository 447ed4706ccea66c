"""Record ``05_demo.json``, the replay that ``notebooks/05_reproducible_runs.ipynb`` runs offline.

    .venv/bin/python notebooks/replays/record_05.py           # against the stand-in server (as committed)
    .venv/bin/python notebooks/replays/record_05.py --real    # against gpt-4.1-mini (needs OPENAI_API_KEY)

This project's CI has no network and no key, so the committed file was recorded against a
stand-in: the OpenAI-compatible test server of ``tests/fake_openai.py``, on 127.0.0.1, whose
replies come from ``stand_in`` below. The requests still went through ``u.OpenAIModel`` over
HTTP, streamed, as they would to a real server; only who answered differs, and each recorded
reply names it (``"model"``). With ``--real`` the same run is recorded against the real model;
re-execute the notebook afterwards, since its answers will differ.

The task and the tool must stay identical to the notebook's: a replay finds a reply by the exact
request (messages, tool schemas, options, model name), so any difference is a ``CacheMiss``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import unity_nb as u

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from fake_openai import FakeOpenAIServer, Reply  # noqa: E402  (the test server, standard library only)

TASK = "Should I pack an umbrella for Paris or Rome tomorrow?"
FORECASTS = {"Paris": "light rain, 14°C", "Rome": "sunny, 24°C"}


def forecast(city: str) -> str:
    """Tomorrow's weather forecast for a city."""
    return FORECASTS[city]


def stand_in(body: dict) -> Reply:
    """The stand-in model behind the test server: ask for both forecasts, then answer from them."""
    results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    who = "scripted stand-in (tests/fake_openai.py)"
    if not results:
        calls = [{"name": "forecast", "arguments": json.dumps({"city": c})} for c in ("Paris", "Rome")]
        return Reply(tool_calls=calls, model=who)
    paris, rome = results
    return Reply(
        content=f"Pack it for Paris ({paris}); Rome looks dry ({rome}).",
        model=who,
    )


class StandIn(u.OpenAIModel):
    """gpt-4.1-mini as the notebook replays it (at OpenAI's server, with no options of its own), answered by the
    stand-in: a recording's key holds the model's server, and the notebook's replay asks OpenAI's."""

    cache_server = "https://api.openai.com/v1"


async def record(real: bool, path: Path) -> None:
    if path.exists():
        path.unlink()  # start afresh: only this run's replies
    if real:
        inner = u.OpenAIModel("gpt-4.1-mini")
        server = None
    else:
        server = await FakeOpenAIServer(stand_in).start()
        inner = StandIn("gpt-4.1-mini", base_url=server.base_url, api_key="stand-in")
    try:
        model = u.CachedModel(inner, path, mode="record")
        answer = await u.start_loop(TASK, model=model, tools=[forecast])
        print(f"recorded {model.misses} replies to {path}\nanswer: {answer}")
    finally:
        if server is not None:
            await server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--real", action="store_true", help="record against gpt-4.1-mini (OPENAI_API_KEY)")
    ap.add_argument("--out", type=Path, default=HERE / "05_demo.json")
    args = ap.parse_args()
    asyncio.run(record(args.real, args.out))


if __name__ == "__main__":
    main()
