"""A batch's spending: dollars so far over its rows' trees, a budget that stops new rows from starting once
spending reaches it (rows in flight finish: a batch is never paused mid-row), and the projection before the start
that says when a batch would clearly exceed its budget.

What a budget counts, and when it refuses:

- every loop under a row, at its model's price (a row's sub-loops too): a row that ended at its tree's cost, and
  under a budget a row still running at the cost of each model call of its tree that ended so far (as the call's
  ``model_response`` says its tokens: added as it comes, so a check walks no rows), so long rows of many steps are
  seen spending before they end;
- a loop under a row whose model has no price cannot be counted: under a budget, the batch pauses as soon as
  a row that used one ends (no new row starts) and says which model to price; its tokens are kept by model, so
  once ``u.set_price`` names a price they are counted and ``resume`` goes on (or ``set_budget(None)`` lifts
  the cap). Never is the budget switched off silently;
- a batch that continues an earlier run (``%unity resume`` after a kernel died) counts what that run spent
  (:meth:`Spending.carry_spent`, from the store: :func:`spent_in_store`), so a resumed batch paused at its
  budget stays paused until the cap is lifted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import events as ev
from .._errors import UserError
from ..models import Usage, batch_price, cost_of, format_dollars, price_of
from ._estimate import at_batch_price, estimate_rows

if TYPE_CHECKING:
    from ._book import Book

__all__ = ("Spending", "as_dollars", "carried", "checked_budget", "spent_in_store")

_SAMPLE = 100
"""Rows whose prompts a budget's projection is taken from before the batch starts."""


class Spending:
    """A batch's money (``h.spending``): ``budget`` (dollars, ``None`` for no cap), ``reached`` (no row starts
    until the cap is lifted or the price set), ``note`` (said before the start when the estimate exceeds the
    budget), ``spent`` (what the budget counts); the dollars and tokens of every row of this run and every loop
    under a row (:meth:`cost`, :meth:`usage`)."""

    def __init__(self, book: Book, model: Any, model_name: str, budget: Any) -> None:
        self._book = book
        self._model = model
        self._model_name = model_name
        self._run: Any = None
        self._reached = False
        self.unpriced: dict[str, Usage] = {}
        """Tokens of loops under rows that ended whose model has no price, by the model's name (counted once
        priced)."""
        self.spent_before = 0.0
        """Dollars the runs this batch continues spent (:meth:`carry`), counted against its budget."""
        self.budget: float | None = checked_budget(budget, model, model_name)
        """The cap on dollars spent (``budget=``, ``h.set_budget``); ``None`` for none."""
        self.note: str | None = None
        """Said before the batch starts when its estimate exceeds the budget (and where it will stop)."""
        self.expected_output_tokens: int | None = None
        """Tokens out a row, as the person said (``expected_output_tokens=``); ``None``: the estimate's assumption."""
        self.running = 0.0
        """Dollars of the model calls that ended in rows still running (under a budget, at known prices): what
        :attr:`spent` counts of them before they end."""
        self._live: dict[str, float] = {}  # a running row (the last of its lineage) -> dollars of it in ``running``
        self._depth = 0
        self._unlisten: Any = None

    def bind(self, run: Any) -> None:
        """The batch's run: its running rows, its gate, its events."""
        self._run = run
        self._depth = len(run.lineage)
        if self.budget is not None:
            self._listen()

    def _listen(self) -> None:
        """Count the model calls of the running rows as they end (under a budget: what :meth:`check` reads)."""
        if self._unlisten is None and self._run is not None and not self._run.ended.is_set():
            self._unlisten = self._run.add_listener(self._step)

    def _step(self, source: Any, event: Any) -> None:
        """A listener of the batch's run: a model call of a loop under a running row ended. At a known price its
        dollars count in :attr:`running` until the row ends (a model without a price is counted as its row ends)."""
        if event.kind != "model_response" or len(event.lineage) <= self._depth or source is None:
            return
        cost = cost_of(Usage(event.input_tokens, event.output_tokens, event.estimated), source.model)
        if cost:
            row = event.lineage[self._depth]
            self._live[row] = self._live.get(row, 0.0) + cost
            self.running += cost

    def ended(self) -> None:
        """The batch ended: its rows' calls are no longer listened to."""
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None

    # -- what was spent --------------------------------------------------------------------------------

    def count(self, child: Any) -> None:
        """Count what a row's tree spent as the row ends: its tokens, dollars at known prices, and the tokens of
        any loop of it whose model has no price, by model (under a budget, :meth:`check` holds the batch for them).
        What its calls had counted while it ran (:attr:`running`) is taken out: its whole tree counts now."""
        if self._live:
            self.running -= self._live.pop(child.run.lineage[-1], 0.0)
            if not self._live:
                self.running = 0.0  # no sum of floats left behind
        if not child.children and not isinstance(getattr(child, "spending", None), Spending):
            # the usual row: its own loop alone, its tokens at its model's price (as ``tree`` and ``_split`` count)
            self.count_usage(child.usage, child.model)
            return
        tree = child.tree
        self._book.tree_usage += tree.usage
        cost = tree.cost
        self._book.cost += cost if cost is not None else _split(child, self.unpriced)

    def count_usage(self, usage: Usage, model: Any) -> None:
        """Count tokens a row spent (a row run elsewhere: its tree's, as its Ray worker reports them) at ``model``'s
        price; without a price they are kept by model, as :meth:`count` keeps them (the cost is unknown, not $0)."""
        self._book.tree_usage += usage
        cost = cost_of(usage, model)
        if cost is None:
            _add(self.unpriced, str(getattr(model, "name", type(model).__name__)), usage)
        self._book.cost += cost or 0.0

    def unpriced_models(self) -> list[str]:
        """Models under rows that ended which spent tokens and still have no price."""
        return [m for m in self.unpriced if price_of(m) is None]

    def ended_cost(self) -> float:
        """Dollars of the rows that ended, at known prices (a model priced since its rows ended counts now)."""
        return self._book.cost + sum(c for m, u in self.unpriced.items() if (c := cost_of(u, m)) is not None)

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
        if self.unpriced_models():
            return None
        total = self.ended_cost()
        for c in self._run.live_children():
            part = c.tree.cost
            if part is None:
                return None
            total += part
        return total

    @property
    def spent(self) -> float:
        """Dollars the budget counts: what the rows that ended spent at known prices, what the rows running spent
        in the model calls of theirs that ended (:attr:`running`), plus what the runs this one continues spent (a
        model without a price is not counted: see :attr:`reached`)."""
        return self.spent_before + self.ended_cost() + self.running

    # -- the budget ------------------------------------------------------------------------------------------

    @property
    def reached(self) -> bool:
        """True while the batch is held at its budget: spending reached it, or a model without a price spent under
        it. No row starts until the cap is lifted (``set_budget``) or the price is set (``u.set_price``)."""
        if not self._reached or self.budget is None:
            return False
        return bool(self.unpriced_models()) or self.spent >= self.budget

    def check(self) -> bool:
        """True when the batch must not start a row: spending has reached the budget, or a model without a price
        spent under it (the first time: the batch pauses, and says so)."""
        if self.budget is None:
            return False
        if self._reached and self.reached:
            return True
        # what the rows that ended spent, and the calls of running rows that ended (a call's tokens are known once
        # it ends, and are added up as they come): cheap at every row's start
        unpriced = self.unpriced_models()
        spent = self.spent
        if not unpriced and spent < self.budget:
            self._reached = False
            return False
        self._reached = True
        self._run.gate.close()  # no new row starts; rows in flight finish (never paused mid-row)
        self._run.emit(ev.BudgetReached, budget=self.budget, spent=round(spent, 6), message=self.message())
        return True

    def message(self) -> str:
        """What a batch held at its budget says, and how to go on."""
        name = self._run.name if self._run is not None else "NAME"
        unpriced = self.unpriced_models()
        if unpriced:
            names = ", ".join(repr(m) for m in unpriced)
            first = unpriced[0]
            return (
                f"paused under its budget of {format_dollars(self.budget or 0)}: its rows called {names}, whose "
                f"price is unknown, so the budget cannot count what {'it' if len(unpriced) == 1 else 'they'} spent "
                f"(no new row started). Set the price: u.set_price({first!r}, input=..., output=...) (dollars per "
                f"million tokens), then h.resume(); or lift the cap: h.set_budget(None) then h.resume()"
            )
        before = f" ({format_dollars(self.spent_before)} of it by the run it continues)" if self.spent_before else ""
        return (
            f"paused at its budget: {format_dollars(self.spent)} spent{before} of {format_dollars(self.budget or 0)} "
            "(rows in flight "
            f"finished; no new row started). Lift the cap: h.set_budget(DOLLARS) then h.resume(), or %unity resume "
            f"{name} --budget DOLLARS"
        )

    def refusal(self, done: bool) -> str | None:
        """Why a resume is refused now: the batch is held at its budget (``None``: it is not)."""
        if not done and self.reached:
            return f"it {self.message()}"
        return None

    def set(self, dollars: float | None) -> None:
        """Change the cap on dollars spent (``None`` lifts it). A batch paused at its budget stays paused until
        it is resumed, which a cap above what was spent allows."""
        self.budget = checked_budget(dollars, self._model, self._model_name)
        if self.budget is not None:
            self._listen()
        if self.budget is None or (not self.unpriced_models() and self.spent < self.budget):
            self._reached = False

    def carry(self, dollars: float, *, origin: str | None = None) -> None:
        """Count ``dollars`` the runs this batch continues spent against its budget (before its first row
        starts): a budget already reached holds the batch at once. Recorded as a ``spending_carried`` event."""
        self.spent_before = carried(self._run, dollars, origin)
        self.check()

    def project(self, source: Any, kept: int, options: dict, output: Any, expected_output_tokens: int | None,
                *, batch: bool = False) -> None:
        """Before the start: from the first rows' prompts, what the whole batch would cost against the budget
        (``batch``: through the provider's Batch API, at its batch price, as its estimate says)."""
        self.expected_output_tokens = expected_output_tokens
        if self.budget is None:
            return
        sample = source.peek(_SAMPLE)
        est = estimate_rows(sample, model=self._model, options=options, output=output,
                            expected_output_tokens=expected_output_tokens)
        if batch:
            est = at_batch_price(est, self._model)
        total = source.total
        if total is None or est.dollars is None or not est.rows:
            return
        # a row of the sample not asked (no value, a task it cannot fill) costs nothing: the rest are like the sample
        per_row = est.dollars / (est.rows + est.unasked)
        projected = per_row * (total - kept)
        if projected > self.budget:
            rows = int(self.budget / per_row) if est.dollars else total
            unasked = f", {est.unasked} of which are not asked" if est.unasked else ""
            self.note = (
                f"The estimate for this batch ({format_dollars(projected)} for {total - kept:,} rows, tokens "
                f"estimated from the first {est.rows + est.unasked} rows{unasked}) exceeds its budget of "
                f"{format_dollars(self.budget)}: it will pause after about {rows:,} rows. h.set_budget(DOLLARS) or "
                "--budget on %unity resume lifts the cap."
            )

    def __repr__(self) -> str:
        cost = self.cost() if self._run is not None else None
        spent = "unknown" if cost is None else format_dollars(cost)
        cap = "no budget" if self.budget is None else f"budget {format_dollars(self.budget)}"
        return f"<spending: {spent} spent, {cap}{', reached' if self.reached else ''}>"


def carried(run: Any, dollars: float, origin: str | None) -> float:
    """``dollars`` checked, and recorded on the ``run`` as a ``spending_carried`` event (what the store sums up)."""
    dollars = as_dollars(dollars)
    run.emit(ev.SpendingCarried, dollars=dollars, origin=origin)
    return dollars


def _split(loop: Any, unpriced: dict[str, Usage]) -> float:
    """Dollars of ``loop``'s tree at known prices; the tokens of its loops whose model has no price are added to
    ``unpriced`` by model name."""
    whole = loop.tree.cost
    if whole is not None:
        return whole
    spending = getattr(loop, "spending", None)
    if isinstance(spending, Spending):  # a batch under a row: its ended rows are counted in it, not in its children
        for name, usage in spending.unpriced.items():
            _add(unpriced, name, usage)
        return spending.ended_cost() + sum(_split(c, unpriced) for c in loop.run.live_children())
    own = loop.run.state.usage
    total = 0.0
    price = cost_of(own, loop.model)
    if price is None:
        _add(unpriced, str(getattr(loop.model, "name", type(loop.model).__name__)), own)
    else:
        total += price
    return total + sum(_split(c, unpriced) for c in loop.children)


def _add(unpriced: dict[str, Usage], name: str, usage: Usage) -> None:
    held = unpriced.get(name)
    if held is None:  # (not setdefault: a Usage made for every row of a model without a price)
        held = unpriced[name] = Usage()
    held += usage


def as_dollars(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (value >= 0) or value == float("inf"):
        raise UserError(f"a budget takes dollars (a number >= 0, e.g. 5.00), not {value!r}")
    return float(value)


def checked_budget(budget: Any, model: Any, model_name: str | None = None) -> float | None:
    """``budget`` as dollars (``None``: no cap), refused up front when it is not a number >= 0 or when ``model``
    has no price (a budget could not count its tokens)."""
    if budget is None:
        return None
    dollars = as_dollars(budget)
    if price_of(model) is None:
        name = model_name or str(getattr(model, "name", type(model).__name__))
        raise UserError(
            f"a budget needs the price of {name!r}, which is unknown: set it first with "
            f"u.set_price({name!r}, input=..., output=...) (dollars per million tokens)"
        )
    return dollars


def spent_in_store(store: Any, uid: str) -> tuple[float, list[str]]:
    """What the run ``uid`` of a batch spent, from ``store``: dollars over every loop under it at known prices
    (plus what it carried from the runs it continued), and the models under it that spent tokens without a
    price. A row that was running when its kernel died counts the calls the store committed."""
    total = 0.0
    unpriced: list[str] = []
    for model, tokens_in, tokens_out in store.tree_tokens(uid):  # each event's counts taken as >= 0
        cost = cost_of(Usage(tokens_in, tokens_out), model)
        if cost is None:
            unpriced.append(model)
        else:
            total += cost
    for model, tokens_in, tokens_out in provider_batch_tokens(store, uid):
        price, _how = batch_price(model)
        if price is None:
            unpriced.append(model)
        else:
            total += price.cost(Usage(tokens_in, tokens_out))
    for event in store.events(uid, kind="spending_carried"):
        total += event.dollars
    return total, unpriced


def provider_batch_tokens(store: Any, uid: str) -> list[tuple[str, int, int]]:
    """Tokens of the rows the batch ``uid`` (or a batch under it) ran through the provider's Batch API, by model:
    such a row has no loop of its own (no ``model_response`` event), only its ``row_finished`` event; and of the
    results no row took (on its ``provider_batch`` events)."""
    tree = store.query(
        "WITH RECURSIVE tree(uid) AS (SELECT :uid UNION ALL SELECT l.uid FROM loops l JOIN tree t ON l.parent_uid ="
        " t.uid) SELECT l.uid AS uid, l.model AS model FROM loops l JOIN tree t ON l.uid = t.uid WHERE l.batch = 1",
        {"uid": uid})
    out = []
    for loop in tree:
        batches = store.events(loop["uid"], kind="provider_batch")
        if not batches:
            continue
        tokens_in = tokens_out = 0
        for e in store.events(loop["uid"], kind="row_finished"):
            if e.child_id is None:  # a row of a live batch is counted in its loop's model_response
                tokens_in += _whole(e.input_tokens)
                tokens_out += _whole(e.output_tokens)
        for e in batches:  # the results no row took, charged all the same
            tokens_in += _whole(getattr(e, "input_tokens", 0))
            tokens_out += _whole(getattr(e, "output_tokens", 0))
        if tokens_in or tokens_out:
            out.append((loop["model"] or "", tokens_in, tokens_out))
    return out


def _whole(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
