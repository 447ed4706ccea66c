"""What tokens cost: a price per model, in dollars per million input and output tokens.

The defaults are data (``prices.json``, shipped with the package): OpenAI's list prices for a few common
models. ``set_price("my-model", input=0.5, output=1.5)`` adds or overrides one. A model without a price
costs *unknown* (``None``), never a made-up 0. A dated snapshot (``gpt-4.1-mini-2025-04-14``) and a
provider prefix (``openai/gpt-4o``) take the price of the model they name.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .._errors import UserError
from ._base import Usage

__all__ = ("Price", "cost_of", "format_dollars", "price_of", "set_price")

_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True)
class Price:
    """Dollars per million tokens."""

    input: float
    output: float

    def cost(self, usage: Usage) -> float:
        # never negative: usage is checked where it enters (models.checked_usage); this is the last guard
        return max(0.0, (usage.input_tokens * self.input + usage.output_tokens * self.output) / 1_000_000)


_lock = threading.Lock()
_set: dict[str, Price] = {}
_defaults: dict[str, Price] | None = None


def _load_defaults() -> dict[str, Price]:
    global _defaults
    if _defaults is None:
        raw = json.loads(resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8"))
        _defaults = {k: Price(float(v[0]), float(v[1])) for k, v in raw.items() if not k.startswith("_")}
    return _defaults


def _name(model: Any) -> str | None:
    if model is None:
        return None
    if isinstance(model, str):
        return model
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else None


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


def price_of(model: Any) -> Price | None:
    """The price of ``model`` (a name or a model object): one set with :func:`set_price`, else a default; ``None``
    when unknown."""
    name = _name(model)
    if not name:
        return None
    defaults = _load_defaults()
    for candidate in (name, _DATED.sub("", name), name.rpartition("/")[2], _DATED.sub("", name.rpartition("/")[2])):
        found = _set.get(candidate) or defaults.get(candidate)
        if found is not None:
            return found
    return None


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
