"""A batch's spending: dollars so far over its rows' trees, a budget that stops new rows from starting once
spending reaches it (rows in flight finish: a batch is never paused mid-row), and the projection before the start
that says when a batch would clearly exceed its budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import events as ev
from .._errors import UserError
from ..models import Usage, price_of
from ._estimate import estimate_rows

if TYPE_CHECKING:
    from ._book import Book

__all__ = ("Spending", "as_dollars")

_SAMPLE = 100
"""Rows whose prompts a budget's projection is taken from before the batch starts."""


class Spending:
    """A batch's money (``h.spending``): ``budget`` (dollars, ``None`` for no cap), ``reached`` (no row starts
    until the cap is lifted), ``note`` (said before the start when the estimate exceeds the budget); the dollars
    and tokens of every row of this run and every loop under a row (:meth:`cost`, :meth:`usage`)."""

    def __init__(self, book: Book, model: Any, model_name: str, budget: Any) -> None:
        self._book = book
        self._model = model
        self._model_name = model_name
        self._run: Any = None
        self.budget: float | None = None
        """The cap on dollars spent (``budget=``, ``h.set_budget``); ``None`` for none."""
        self.reached = False
        """True once spending reached the budget: no row starts until the cap is lifted."""
        self.note: str | None = None
        """Said before the batch starts when its estimate exceeds the budget (and where it will stop)."""
        if budget is not None:
            if price_of(model) is None:
                raise UserError(
                    f"budget= needs the price of {model_name!r}, which is unknown: set it first with "
                    f"u.set_price({model_name!r}, input=..., output=...) (dollars per million tokens)"
                )
            self.budget = as_dollars(budget)

    def bind(self, run: Any) -> None:
        """The batch's run: its running rows, its gate, its events."""
        self._run = run

    def usage(self) -> Usage:
        """Tokens of every row and every loop under a row, of this run."""
        done = self._book.tree_usage
        out = Usage(done.input_tokens, done.output_tokens, done.estimated)
        for c in self._run.live_children():
            out += c.tree.usage
        return out

    def cost(self) -> float | None:
        """Dollars spent by this run's rows (and the loops under them), at their models' prices; ``None`` when a
        price is unknown. Rows kept or answered from the cache cost nothing."""
        if self._book.cost_unknown:
            return None
        total = self._book.cost
        for c in self._run.live_children():
            part = c.tree.cost
            if part is None:
                return None
            total += part
        return total

    def check(self) -> bool:
        """True when spending has reached the budget (the first time: the batch pauses, and says so)."""
        if self.budget is None:
            return False
        if self.reached:
            return True
        # what the rows that ended spent (a call's tokens are known once it ends): cheap at every row's start
        spent = None if self._book.cost_unknown else self._book.cost
        if spent is None or spent < self.budget:
            return False
        self.reached = True
        self._run.gate.close()  # no new row starts; rows in flight finish (never paused mid-row)
        self._run.emit(ev.BudgetReached, budget=self.budget, spent=round(spent, 6), message=self.message())
        return True

    def message(self) -> str:
        """What a batch paused at its budget says, and how to lift the cap."""
        spent = self.cost() or 0.0
        name = self._run.name if self._run is not None else "NAME"
        return (
            f"paused at its budget: ${spent:,.4f} spent of ${self.budget or 0:,.2f} (rows in flight finished; no new "
            f"row started). Lift the cap: h.set_budget(DOLLARS) then h.resume(), or %unity resume {name} "
            "--budget DOLLARS"
        )

    def refusal(self, done: bool) -> str | None:
        """Why a resume is refused now: spending is at the budget (``None``: it is not)."""
        if self.reached and self.budget is not None and not done:
            return f"it {self.message()}"
        return None

    def set(self, dollars: float | None) -> None:
        """Change the cap on dollars spent (``None`` lifts it). A batch paused at its budget stays paused until
        it is resumed, which a cap above what was spent allows."""
        if dollars is not None:
            if price_of(self._model) is None:
                raise UserError(f"a budget needs the price of {self._model_name!r}: u.set_price(...) first")
            dollars = as_dollars(dollars)
        self.budget = dollars
        spent = self.cost() or 0.0
        if dollars is None or spent < dollars:
            self.reached = False

    def project(self, source: Any, kept: int, options: dict, output: Any, expected_output_tokens: int | None) -> None:
        """Before the start: from the first rows' prompts, what the whole batch would cost against the budget."""
        if self.budget is None:
            return
        sample = source.peek(_SAMPLE)
        est = estimate_rows(sample, model=self._model, options=options, output=output,
                            expected_output_tokens=expected_output_tokens)
        total = source.total
        if total is None or est.dollars is None or not est.rows:
            return
        projected = est.dollars / est.rows * (total - kept)
        if projected > self.budget:
            rows = int(self.budget / (est.dollars / est.rows)) if est.dollars else total
            self.note = (
                f"The estimate for this batch (${projected:,.2f} for {total - kept:,} rows, tokens estimated "
                f"from the first {est.rows} prompts) exceeds its budget of ${self.budget:,.2f}: it will pause after "
                f"about {rows:,} rows. h.set_budget(DOLLARS) or --budget on %unity resume lifts the cap."
            )

    def __repr__(self) -> str:
        cost = self.cost() if self._run is not None else None
        spent = "unknown" if cost is None else f"${cost:,.4f}"
        cap = "no budget" if self.budget is None else f"budget ${self.budget:,.2f}"
        return f"<spending: {spent} spent, {cap}{', reached' if self.reached else ''}>"


def as_dollars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value >= 0) or value == float("inf"):
        raise UserError(f"a budget takes dollars (a number >= 0, e.g. 5.00), not {value!r}")
    return float(value)


