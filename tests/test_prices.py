"""Prices for every model the genai-prices package knows (issue 39 item 9): a bare name found whatever its
provider, looked up once per model, batch and cached-input prices kept where known, ``u.set_price`` winning."""

from __future__ import annotations

import json
from importlib import resources

import genai_prices
import pytest

import unity_nb as u


def test_a_bare_name_is_priced_whatever_its_provider():
    haiku = u.price_of("claude-3-5-haiku")
    deepseek = u.price_of("deepseek-chat")
    assert haiku is not None and (haiku.input, haiku.output) == (0.80, 4.00)
    assert haiku.source.startswith("genai-prices: anthropic/")
    assert deepseek is not None and deepseek.source.startswith("genai-prices: deepseek/")
    assert u.models.cost_of(u.Usage(1_000_000, 1_000_000), "claude-3-5-haiku") == pytest.approx(4.80)
    assert u.price_of("local") is None and u.price_of("my-model-39") is None  # unknown: None, never a made-up 0


def test_the_batch_and_cached_input_rates_are_kept_where_the_provider_has_them():
    mini = u.price_of("gpt-4.1-mini")
    assert (mini.input, mini.output) == (0.40, 1.60)
    assert (mini.batch_input, mini.batch_output) == (0.20, 0.80)  # OpenAI's Batch API: half
    assert mini.cached_input == 0.10
    haiku = u.price_of("claude-3-5-haiku")
    assert haiku.batch_input is None and haiku.batch_output is None  # not known: None, not the standard price


def test_the_package_agrees_with_the_prices_the_project_shipped():
    shipped = json.loads(resources.files("unity_nb.models").joinpath("prices.json").read_text())
    for name, (given_in, given_out) in ((k, v) for k, v in shipped.items() if not k.startswith("_")):
        price = u.price_of(name)
        assert (price.input, price.output) == (given_in, given_out), name


def test_each_model_is_looked_up_once(monkeypatch):
    calls: list[str] = []
    real = genai_prices.calc_price

    def counted(usage, model_ref, **kwargs):
        calls.append(model_ref)
        return real(usage, model_ref, **kwargs)

    monkeypatch.setattr(genai_prices, "calc_price", counted)
    first = u.price_of("gpt-4.1-nano-2025-04-14")
    looked = len(calls)
    assert first is not None and looked >= 1
    for _ in range(100):
        assert u.price_of("gpt-4.1-nano-2025-04-14") is first
    assert u.price_of("unknown-model-39") is None and u.price_of("unknown-model-39") is None
    assert calls.count("unknown-model-39") == 1  # a model no one prices is not looked up again either
    assert len(calls) == looked + 1


def test_a_price_set_by_the_person_wins_over_the_package():
    assert u.price_of("deepseek-reasoner").source.startswith("genai-prices")
    u.set_price("deepseek-reasoner", input=0.01, output=0.02)
    price = u.price_of("deepseek-reasoner")
    assert (price.input, price.output, price.source) == (0.01, 0.02, "set_price")
    assert u.models.cost_of(u.Usage(1_000_000, 0), "deepseek-reasoner") == pytest.approx(0.01)
