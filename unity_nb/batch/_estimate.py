"""What a batch would cost before it runs: rows, tokens in and out, dollars, minutes at the rate limit.

Tokens in are estimated from each row's rendered prompt and what every call of the row sends besides (its system
prompt and tool schemas), at about 4 characters a token; tokens out are an assumption (``DEFAULT_OUTPUT`` a row,
and ``PER_FIELD`` more per typed field), or the person's ``expected_output_tokens``. One model call a row is
assumed (a row that calls tools makes more). A row the batch will not ask (no value for what the task names, or a
task it cannot fill) costs nothing: it is counted apart (``Estimate.unasked``). Nothing is run, and nothing is sent.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .._errors import UserError
from ..models import Price, RateLimit, batch_price, default_model, format_dollars, price_of, rate_limit_of
from ._rows import Row, RowSource, answer_tool, output_model

__all__ = (
    "DEFAULT_OUTPUT", "PER_FIELD", "Estimate", "combine", "estimate_map", "estimate_rows", "overhead_chars",
    "tokens_out",
)

DEFAULT_OUTPUT = 50
"""Tokens out assumed a row (a short answer) when the person says nothing."""
PER_FIELD = 15
"""More tokens out assumed a row for each typed field (``columns=``, ``output=``)."""
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Estimate:
    """A batch's cost before it runs (``u.map(..., estimate=True)``, ``%unity map --estimate``)."""

    rows: int
    """Rows that would be asked (a call each); rows never asked are :attr:`unasked`."""
    input_tokens: int
    """Estimated from the rendered prompts (about 4 characters a token): never counted by a tokenizer."""
    output_tokens: int
    output_per_row: int
    output_assumed: bool
    """True when ``output_per_row`` is this module's assumption, not the person's ``expected_output_tokens``."""
    model: str
    price: Price | None
    dollars: float | None
    """``None`` when the model's price is unknown (``u.set_price`` sets it)."""
    minutes: float | None
    """At the model's rate limit; ``None`` when no limit is known (``rate=`` sets one)."""
    limit: str | None
    prompts: tuple[str, ...]
    """The first rows' prompts, as the model will read them."""
    basis: str = ""
    """How an operator of several phases projected its questions (empty for one map)."""
    batch: str = ""
    """Through the provider's Batch API (``via="batch"``): how its batch price was found (empty: live calls)."""
    budget: float | None = None
    """The budget the run would have (``--budget``): the estimate says whether it fits (``None``: none given)."""
    unasked: int = 0
    """Rows the batch would not ask (no value for what the task names, or a task they cannot fill): no call, no cost,
    not in :attr:`rows`."""

    def __str__(self) -> str:
        out = (f"{self.output_tokens:,} tokens out (assumed: {self.output_per_row} a row; expected_output_tokens= "
               "says otherwise)" if self.output_assumed else
               f"{self.output_tokens:,} tokens out ({self.output_per_row} a row, as you said)")
        if self.price is None:
            dollars = (f"dollars unknown: no price for {self.model!r} "
                       f"(u.set_price({self.model!r}, input=..., output=...) in dollars per million tokens)")
        else:
            which = f"batch price ({self.batch})" if self.batch else "price"
            dollars = (f"{format_dollars(self.dollars or 0.0)} at {self.model}'s {which} (${self.price.input:g} in, "
                       f"${self.price.output:g} out per million tokens)")
        minutes = ("within the provider's 24h batch window, outside its rate limits" if self.batch else
                   f"about {self.minutes:,.1f} minutes at {self.limit}" if self.minutes is not None
                   else "minutes unknown: no rate limit known (--rate 600/min, or rate=, says one)")
        unasked = (f" ({self.unasked:,} rows not asked: no value for what the task names, or a task they cannot "
                   "fill)") if self.unasked else ""
        return (f"Estimate for {self.rows:,} rows of {self.model}{unasked} (nothing was run): "
                f"≈{self.input_tokens:,} tokens in (estimated: about {CHARS_PER_TOKEN} characters a token), {out}; "
                f"{dollars}; {minutes}. "
                "One model call a row is assumed." + (f" {self.basis}" if self.basis else "")
                + (f" {self.budget_verdict()}" if self.budget is not None else ""))

    def budget_verdict(self) -> str:
        """Whether the run would fit its :attr:`budget`, by this estimate, and what to do when it would not."""
        budget = format_dollars(self.budget or 0.0)
        if self.dollars is None:
            return (f"Its budget of {budget} cannot be checked: no price for {self.model!r}, and a budget needs one "
                    f"(run as is, the line is refused): u.set_price({self.model!r}, input=..., output=...) first.")
        if self.dollars <= (self.budget or 0.0):
            return f"Within its budget of {budget} ({format_dollars((self.budget or 0.0) - self.dollars)} to spare)."
        rows = int((self.budget or 0.0) / (self.dollars / self.rows)) if self.rows else 0
        when = (f"after about {rows:,} of its {self.rows:,} rows" if rows else
                "as its first rows end (one row alone is estimated to cost more)")
        return (f"Over its budget of {budget}: run as is, it would pause at its budget {when}, rows in flight "
                f"finishing; a budget above {format_dollars(self.dollars)} covers the whole estimate.")

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


def overhead_chars(options: dict[str, Any]) -> int:
    """Characters every call of a row sends besides its prompt: the system prompt and the tools' schemas."""
    chars = len(str(options.get("system") or ""))
    for tool in options.get("tools") or ():
        params = getattr(tool, "params", None)
        schema = params.model_json_schema() if params is not None and hasattr(params, "model_json_schema") else {}
        chars += len(getattr(tool, "name", "")) + len(getattr(tool, "description", "")) + len(json.dumps(schema))
    return chars


def tokens_out(output: Any, expected: int | None) -> tuple[int, bool]:
    """Tokens out a row, and whether that is this module's assumption."""
    if expected is not None:
        if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
            raise UserError(f"expected_output_tokens takes a whole number of tokens >= 0, not {expected!r}")
        return expected, False
    fields = len(output.model_fields) if output is not None else 0
    return DEFAULT_OUTPUT + PER_FIELD * fields, True


def estimate_rows(
    rows: Iterable[Row], *, model: Any, options: dict[str, Any], output: Any, expected_output_tokens: int | None,
    rate: Any = None,
) -> Estimate:
    """The estimate over ``rows`` (each made as it is counted: nothing is kept but the first prompts); a row the
    batch will not ask (its ``reason`` set: no value, or a task it cannot fill) is counted in ``unasked`` alone."""
    overhead = overhead_chars(options)
    count, chars, unasked = 0, 0, 0
    prompts: list[str] = []
    for row in rows:
        if row.reason is not None:
            unasked += 1
            continue
        count += 1
        chars += len(row.task) + overhead
        if len(prompts) < 3:
            prompts.append(row.task)
    per_row, assumed = tokens_out(output, expected_output_tokens)
    name = str(getattr(model, "name", type(model).__name__))
    tokens_in = math.ceil(chars / CHARS_PER_TOKEN)
    tokens_out_all = per_row * count
    price = price_of(model)
    dollars = None if price is None else (tokens_in * price.input + tokens_out_all * price.output) / 1_000_000
    minutes, limit = None, None
    rl = RateLimit.parse(rate) if rate is not None else rate_limit_of(model)
    if rl is not None and (rl.requests_per_minute or rl.tokens_per_minute):
        spans = []
        if rl.requests_per_minute:
            spans.append(count / rl.requests_per_minute)
        if rl.tokens_per_minute:
            spans.append((tokens_in + tokens_out_all) / rl.tokens_per_minute)
        minutes = max(spans)
        limit = ", ".join(
            f"{v:g} {what}/min" for v, what in ((rl.requests_per_minute, "requests"), (rl.tokens_per_minute, "tokens"))
            if v
        )
    return Estimate(
        rows=count, input_tokens=tokens_in, output_tokens=tokens_out_all, output_per_row=per_row,
        output_assumed=assumed, model=name, price=price, dollars=dollars, minutes=minutes, limit=limit,
        prompts=tuple(prompts), unasked=unasked,
    )


def estimate_map(
    items: Any, task: str, *, model: Any = None, output: Any = None, columns: Any = None, rate: Any = None,
    expected_output_tokens: int | None = None, **options: Any,
) -> Estimate:
    """What ``u.map(items, task, ...)`` would cost, without running anything: rows, tokens in (estimated from the
    rendered prompts, about 4 characters a token) and out (assumed, or ``expected_output_tokens`` a row), dollars at
    the model's price and minutes at its rate limit. Reads ``items`` once (a generator is used up)."""
    model = model if model is not None else default_model("estimate")
    fields = output_model(output, columns)
    via, budget = options.pop("via", None), options.pop("budget", None)  # the estimate says whether it fits
    for unused in ("batch_poll", "batch_max_requests", "batch_max_bytes", "batch_stop_wait", "batches"):
        options.pop(unused, None)
    for unused in ("concurrency", "name", "bus", "done", "label", "cache", "kind", "parent", "resume_from"):
        options.pop(unused, None)
    tools = list(options.pop("tools", ()) or ())
    if fields is not None:
        tools.append(answer_tool(fields))
    est = estimate_rows(RowSource(items, task), model=model, options={"tools": tools, **options}, output=fields,
                        expected_output_tokens=expected_output_tokens, rate=rate)
    est = dataclasses.replace(est, budget=budget) if budget is not None else est
    return at_batch_price(est, model) if via == "batch" else est


def at_batch_price(est: Estimate, model: Any) -> Estimate:
    """``est`` through the provider's Batch API: at the model's batch price (its batch rate, else half its live
    price, said so), within the provider's window rather than at the rate limit."""
    price, how = batch_price(model)
    dollars = None if price is None else (est.input_tokens * price.input + est.output_tokens * price.output) / 1e6
    return dataclasses.replace(est, price=price, dollars=dollars, minutes=None, limit=None, batch=how)


def combine(parts: list[Estimate], basis: str) -> Estimate:
    """The estimate of an operator whose phases run one after the other: their questions, tokens, dollars and
    minutes added up; ``basis`` says how the phases were projected."""
    first = parts[0]
    rows = sum(p.rows for p in parts)
    out = sum(p.output_tokens for p in parts)
    dollars = None if any(p.dollars is None for p in parts) else sum(p.dollars or 0.0 for p in parts)
    minutes = None if any(p.minutes is None for p in parts) else sum(p.minutes or 0.0 for p in parts)
    return Estimate(
        rows=rows, input_tokens=sum(p.input_tokens for p in parts), output_tokens=out,
        output_per_row=round(out / rows) if rows else 0, output_assumed=any(p.output_assumed for p in parts),
        model=first.model, price=first.price, dollars=dollars, minutes=minutes, limit=first.limit,
        prompts=first.prompts, basis=basis, budget=first.budget, unasked=sum(p.unasked for p in parts),
    )
