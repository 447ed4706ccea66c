"""What tokens cost: a price per model, in dollars per million input and output tokens.

Where a price comes from, first found first:

1. ``set_price("my-model", input=0.5, output=1.5)``: the person's, for any model (it wins over the rest).
2. the ``genai-prices`` package (pydantic's, about 2,300 models of every provider, with cached-input and batch
   prices where the provider has them): looked up once per model name (and server) and kept. A bare name
   (``claude-3-5-haiku``, ``deepseek-chat``) is found whatever its provider; a dated snapshot
   (``gpt-4.1-mini-2025-04-14``) and a provider prefix (``openai/gpt-4o``) take the price of the model they
   name. A model object pointed at a known provider's address is looked up at that provider first.
3. ``prices.json`` (shipped with the package, OpenAI's list prices for a few models): only when ``genai-prices``
   cannot be imported.

A model without a price costs *unknown* (``None``), never a made-up 0. ``Price.batch_input`` /
``batch_output`` are the provider's Batch API prices where known (``None`` otherwise), ``cached_input`` the
price of input tokens read from the provider's prompt cache.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import re
import threading
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any

from .._errors import UserError
from ._base import Usage

__all__ = ("Price", "cost_of", "format_dollars", "price_of", "set_price")

_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float
    cached_input: float | None = None
    """Input tokens read from the provider's prompt cache (``None``: not known)."""
    batch_input: float | None = None
    """Input tokens sent through the provider's Batch API (``None``: not known, or no batch price)."""
    batch_output: float | None = None
    """Output tokens of the provider's Batch API (``None``: not known, or no batch price)."""
    source: str = "set_price"
    """Where the price came from: ``set_price``, ``genai-prices`` (with the provider and model it matched,
    e.g. ``genai-prices: anthropic/claude-3-5-haiku-latest``) or ``prices.json``."""

    def cost(self, usage: Usage) -> float:
        # never negative: usage is checked where it enters (models.checked_usage); this is the last guard
        return max(0.0, (usage.input_tokens * self.input + usage.output_tokens * self.output) / _MILLION)


_lock = threading.Lock()
_set: dict[str, Price] = {}
_defaults: dict[str, Price] | None = None
_found: dict[tuple[str, str | None], Price | None] = {}
"""What genai-prices gave for a (name, server address) pair: looked up once each."""
_LIBRARY: list[Any] = []  # [genai_prices module] once imported; [None] when it cannot be


def _load_defaults() -> dict[str, Price]:
    global _defaults
    if _defaults is None:
        raw = json.loads(resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8"))
        _defaults = {k: Price(float(v[0]), float(v[1]), source="prices.json")
                     for k, v in raw.items() if not k.startswith("_")}
    return _defaults


def _name(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


def _server(model: Any) -> str | None:
    """The base URL a model object sends to (``None`` for a name, or a model without one)."""
    if isinstance(model, str):
        return None
    base = getattr(model, "base_url", None) or getattr(getattr(model, "client", None), "base_url", None)
    return None if base is None else str(base)


@functools.lru_cache(maxsize=256)
def _remote(base: str) -> bool:
    """A server not on this machine (``localhost``, ``127.0.0.1``)."""
    host = urllib.parse.urlsplit(base).hostname or ""
    try:
        return not (host == "localhost" or host.endswith(".localhost") or ipaddress.ip_address(host).is_loopback)
    except ValueError:
        return True


def set_price(model: Any, *, input: float, output: float) -> None:
    """Set what ``model`` (a name, or a model object) costs, in dollars per million input and output tokens."""
    name = _name(model)
    if not name:
        raise UserError(f"set_price takes a model's name (or a model), not {model!r}")
    for what, value in (("input", input), ("output", output)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise UserError(f"set_price's {what}= takes dollars per million tokens (a number >= 0), not {value!r}")
    with _lock:
        _set[name] = Price(float(input), float(output))


@functools.lru_cache(maxsize=1024)
def _candidates(name: str) -> tuple[str, ...]:
    bare = name.rpartition("/")[2]
    return tuple(dict.fromkeys((name, _DATED.sub("", name), bare, _DATED.sub("", bare))))


def price_of(model: Any) -> Price | None:
    """The price of ``model`` (a name or a model object): one set with :func:`set_price`, else the ``genai-prices``
    package's (looked up once per model), else ``None`` (unknown)."""
    name = _name(model)
    if not name:
        return None
    candidates = _candidates(name)
    for candidate in candidates:
        found = _set.get(candidate)
        if found is not None:
            return found
    server = _server(model)
    key = (name, server)
    try:
        return _found[key]
    except KeyError:
        pass
    price = _look_up(candidates, server)
    with _lock:
        _found[key] = price
    return price


def _library() -> Any:
    if not _LIBRARY:
        library: Any
        try:
            import genai_prices as library
        except ImportError:  # (a dependency: only a broken install lacks it)
            library = None
        _LIBRARY[:] = [library]
    return _LIBRARY[0]


def prefetch(model: Any) -> None:
    """Import ``genai-prices`` in a thread of its own (once), so the first price asked for (on the event loop,
    say) does not wait for it: called as a model for a server not on this machine sends a request."""
    global _prefetching
    if _LIBRARY or _prefetching:
        return
    base = _server(model)
    if base is None or not _remote(base):
        return
    with _lock:
        if _LIBRARY or _prefetching:
            return
        _prefetching = True
    threading.Thread(target=_library, name="unity_nb-prices", daemon=True).start()


_prefetching = False
_UNIT = 1000  # tokens a side a price is read at: below every tier's threshold (a tiered price's first tier)
_LIBRARY_ERRORS = (LookupError, ValueError, TypeError, ArithmeticError)


def _look_up(candidates: tuple[str, ...], server: str | None) -> Price | None:
    library = _library()
    if library is None:
        defaults = _load_defaults()
        return next((defaults[c] for c in candidates if c in defaults), None)
    unit = library.Usage(input_tokens=_UNIT, output_tokens=_UNIT)
    for candidate in candidates:
        for where in ({"provider_api_url": server}, {}) if server else ({},):
            try:
                standard = library.calc_price(unit, candidate, **where)
                return _price(library, unit, candidate, where, standard)
            except _LIBRARY_ERRORS:  # not found there (or a price it cannot compute): the next place
                continue
    return None


def _per_million(value: Any) -> float:
    return float(Decimal(value) * (_MILLION // _UNIT))


def _price(library: Any, unit: Any, name: str, where: dict, standard: Any) -> Price:
    batch_input = batch_output = None
    variants = getattr(standard.model, "price_variants", None) or ()
    if any(getattr(v, "when", None) == {"processing": "batch"} for v in variants):
        batch = library.calc_price(unit, name, price_context={"processing": "batch"}, **where)
        batch_input, batch_output = _per_million(batch.input_price), _per_million(batch.output_price)
    cached = getattr(standard.model_price, "cache_read_mtok", None)
    return Price(
        _per_million(standard.input_price), _per_million(standard.output_price),
        cached_input=float(cached) if isinstance(cached, Decimal | int | float) else None,
        batch_input=batch_input, batch_output=batch_output,
        source=f"genai-prices: {standard.provider.id}/{standard.model.id}",
    )


def cost_of(usage: Usage, model: Any) -> float | None:
    """Dollars ``usage`` cost at ``model``'s price; ``None`` when the price is unknown (0 for no tokens)."""
    if not usage.input_tokens and not usage.output_tokens:
        return 0.0
    price = price_of(model)
    return None if price is None else price.cost(usage)


def format_dollars(amount: float) -> str:
    """Dollars as a person reads them, to at least two significant digits: ``$0.0026`` (never ``$0.00`` for an
    amount above zero), ``$0.50``, ``$12.35``, ``$1,234.50``; ``$0.00`` only for nothing. Every message that
    shows money uses it (a budget, what was spent, a projection, an estimate)."""
    if not math.isfinite(amount):
        return f"${amount}"
    sign, amount = ("-", -amount) if amount < 0 else ("", amount)
    rounded = float(f"{amount:.2g}")  # two significant digits decide how many decimals
    if rounded == 0 or rounded >= 1:
        return f"{sign}${amount:,.2f}"
    decimals = max(2, 1 - math.floor(math.log10(rounded)))
    return f"{sign}${amount:,.{decimals}f}"
