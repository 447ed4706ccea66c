"""A batch's spending: dollars so far over its rows' trees, a budget that stops new rows from starting once
spending reaches it (rows in flight finish: a batch is never paused mid-row), and the projection before the start
that says when a batch would clearly exceed its budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import events as ev
from .._errors import UserError
from ..loop import Tree
from ..models import Usage, price_of
from ._estimate import estimate_rows

__all__ = ("Spending", "as_dollars")

_SAMPLE = 100
"""Rows whose prompts a budget's projection is taken from before the batch starts."""


class Spending:
    """What :class:`MapHandle` knows of money (a mixin: its state is set in ``MapHandle.__init__``)."""

    budget: float | None
    budget_reached: bool
    budget_note: str | None
    _done_tree: Usage
    _done_cost: float
    _cost_unknown: bool
    model: Any
    run: Any
    model_name: str
    name: str
    source: Any
    kept: int
    row_options: dict
    output: Any
    gate: Any

    if TYPE_CHECKING:  # LoopHandle's (MapHandle's other base): declared for the checker only

        def live_children(self) -> list:
            raise NotImplementedError

        def emit(self, kind: type, **fields: Any) -> None:
            raise NotImplementedError

        def done(self) -> bool:
            raise NotImplementedError

    @property
    def tree(self) -> Tree:
        """The batch and its running rows (iterate it; rows that ended are released); ``usage`` and ``cost``
        count every row of this run and every loop under a row, ended or running."""
        return Tree(self, lambda: (self._tree_usage(), self._tree_cost()))  # type: ignore[arg-type]

    def _tree_usage(self) -> Usage:
        """Tokens of every row and every loop under a row, of this run."""
        done = self._done_tree
        out = Usage(done.input_tokens, done.output_tokens, done.estimated)
        for c in self.run.live_children():
            out += c.tree.usage
        return out

    def _tree_cost(self) -> float | None:
        """Dollars spent by this run's rows (and the loops under them), at their models' prices; ``None`` when a
        price is unknown. Rows kept or answered from the cache cost nothing."""
        if self._cost_unknown:
            return None
        total = self._done_cost
        for c in self.run.live_children():
            part = c.tree.cost
            if part is None:
                return None
            total += part
        return total

    @property
    def cost(self) -> float | None:
        """Dollars spent so far (a batch's own usage is its rows'): ``tree.cost``."""
        return self._tree_cost()

    def check_budget(self) -> bool:
        """True when spending has reached the budget (the first time: the batch pauses, and says so)."""
        if self.budget is None:
            return False
        if self.budget_reached:
            return True
        # what the rows that ended spent (a call's tokens are known once it ends): cheap at every row's start
        spent = None if self._cost_unknown else self._done_cost
        if spent is None or spent < self.budget:
            return False
        self.budget_reached = True
        self.run.gate.close()  # no new row starts; rows in flight finish (never paused mid-row)
        self.run.emit(ev.BudgetReached, budget=self.budget, spent=round(spent, 6), message=self.budget_message())
        return True

    def budget_message(self) -> str:
        """What a batch paused at its budget says, and how to lift the cap."""
        spent = self._tree_cost() or 0.0
        return (
            f"paused at its budget: ${spent:,.4f} spent of ${self.budget or 0:,.2f} (rows in flight finished; no new "
            f"row started). Lift the cap: h.set_budget(DOLLARS) then h.resume(), or %unity resume {self.name} "
            "--budget DOLLARS"
        )

    def set_budget(self, dollars: float | None) -> None:
        """Change the cap on dollars spent (``None`` lifts it). A batch paused at its budget stays paused until
        :meth:`resume`, which a cap above what was spent allows."""
        if dollars is not None:
            if price_of(self.model) is None:
                raise UserError(f"a budget needs the price of {self.model_name!r}: u.set_price(...) first")
            dollars = as_dollars(dollars)
        self.budget = dollars
        spent = self._tree_cost() or 0.0
        if dollars is None or spent < dollars:
            self.budget_reached = False

    def _project(self, expected_output_tokens: int | None) -> None:
        """Before the start: from the first rows' prompts, what the whole batch would cost against the budget."""
        sample = self.source.peek(_SAMPLE)
        est = estimate_rows(sample, model=self.model, options=self.row_options, output=self.output,
                            expected_output_tokens=expected_output_tokens)
        total = self.source.total
        if total is None or est.dollars is None or not est.rows or self.budget is None:
            return
        projected = est.dollars / est.rows * (total - self.kept)
        if projected > self.budget:
            rows = int(self.budget / (est.dollars / est.rows)) if est.dollars else total
            self.budget_note = (
                f"The estimate for this batch (${projected:,.2f} for {total - self.kept:,} rows, tokens estimated "
                f"from the first {est.rows} prompts) exceeds its budget of ${self.budget:,.2f}: it will pause after "
                f"about {rows:,} rows. h.set_budget(DOLLARS) or --budget on %unity resume lifts the cap."
            )



def as_dollars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value >= 0) or value == float("inf"):
        raise UserError(f"a budget takes dollars (a number >= 0, e.g. 5.00), not {value!r}")
    return float(value)


