"""``%unity OPERATOR``: any operator of the registry (``unity_nb.batch.OPERATORS``: filter, extract, topk, join,
agg, and those registered later), started like ``%unity map``, estimated with ``--estimate``, and resumed after a
dead kernel from the ``kind`` the store recorded (never from the label's text)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..batch import OPERATORS
from ..models import format_dollars
from ._args import HELP, Command

if TYPE_CHECKING:
    from ..loop import LoopHandle
    from ._host import Host as UnityMagics

__all__ = ("carry_spent", "estimated", "resume_operator", "spent_before_resume", "start_operator")

_MAP_OPTIONS = ("max_steps", "rate", "tool_timeout", "budget", "expected_output_tokens")


def _items(magics: UnityMagics, expr: str, sub: str) -> Any:
    try:
        return eval(expr, magics.user_ns)
    except Exception as err:  # noqa: BLE001 - said back as a usage error
        problem = f"cannot evaluate the items {expr!r}: {type(err).__name__}: {err}"
        raise UsageError(f"{problem}\n\n{HELP[sub]}") from None


def estimated(est: Any, budget: float | None) -> Any:
    """An estimate as ``--estimate`` prints it: with the line's ``--budget``, saying whether the run would fit it
    (the budget is the line's as much as its rows are: never left out without a word)."""
    from dataclasses import replace

    from ..batch import Estimate

    return replace(est, budget=budget) if budget is not None and isinstance(est, Estimate) else est


def start_operator(magics: UnityMagics, cmd: Command, *, done: dict | None = None, resume_from: Any = None,
                   name: str | None = None, notice: str = "") -> LoopHandle | None:
    """Start the operator ``cmd`` names on the notebook's items, under the magics' model, and show its widget
    (with ``--estimate``: print what it would cost, run nothing). ``done`` (one-map operators) or ``resume_from``
    (a store: phased ones) keeps what an earlier run finished."""
    from .._registry import registered_tools

    op = OPERATORS[cmd.sub]
    o = cmd.options
    exprs = {"items": cmd.name or ""}
    items = _items(magics, exprs["items"], cmd.sub)
    given: dict[str, Any] = {}
    for param in op.params:
        if param.name not in o:
            continue
        if param.kind == "items":
            exprs[param.name] = o[param.name]
            given[param.name] = _items(magics, o[param.name], cmd.sub)
        else:
            given[param.name] = o[param.name]
    if op.line_options is not None:
        given = op.line_options(given, exprs)
    options: dict[str, Any] = {"concurrency": o.get("concurrency", 8),
                               "tools": [t for t in registered_tools() if not t.ref_only]}
    if o.get("via") == "batch":  # each phase through the provider's Batch API: one request a row, no tools
        options.update(via="batch", tools=[], batch_poll=o.get("batch_poll"))
    for key in _MAP_OPTIONS:  # (--expected-output-tokens too: what a budget projects and reserves counts it)
        if o.get(key) is not None:
            options[key] = o[key]
    if o.get("estimate"):  # runs nothing: what it would cost (against its --budget), printed
        budget = options.pop("budget", None)
        print(estimated(op.start(items, cmd.text, model=magics.current_model(), estimate=True, **given, **options),
                        budget))
        return None
    options["cache"] = False if o.get("no_cache") else (magics.store or False)  # as %unity map: the store's cache
    if o.get("backend") == "ray":  # every map of it on a Ray cluster
        options.update(backend="ray", ray_address=o.get("ray_address"), ray_workers=o.get("ray_workers"))
    options["label"] = cmd.line  # what a resume runs again (the store keeps the operator's kind beside it)
    if op.phased:  # several maps, each keeping the rows its earlier run finished
        options["resume_from"] = resume_from
    else:  # one map: the rows its run finished
        options["done"] = done

    def launch(key: str) -> LoopHandle:
        return op.start(items, cmd.text, model=magics.current_model(), name=key, **given, **options)

    return magics.start(name or o.get("name"), launch, sub=cmd.sub, notice=notice)


def spent_before_resume(store: Any, row: dict, budget: float | None) -> float:
    """What the run a dead kernel left spent (from the store: every loop under it, and what it carried from the run
    before it), refusing a resume that its budget does not cover: resumed, it would run on with a fresh cap."""
    from ..batch import spent_in_store

    name = row["name"]
    spent, unpriced = spent_in_store(store, row["uid"])
    if budget is None:
        return spent
    if unpriced:
        models = ", ".join(repr(m) for m in unpriced)
        raise UsageError(
            f"cannot resume {name!r} under a budget: its rows called {models}, whose price is unknown, so what it "
            f"spent cannot be counted. Set the price first: u.set_price({unpriced[0]!r}, input=..., output=...) "
            f"(dollars per million tokens), then %unity resume {name} again\n\n{HELP['resume']}"
        )
    if spent >= budget:
        raise UsageError(
            f"cannot resume {name!r}: it is paused at its budget: {format_dollars(spent)} spent of "
            f"{format_dollars(budget)} before its "
            f"kernel died (a resumed run counts what its earlier run spent). Lift the cap: %unity resume {name} "
            f"--budget DOLLARS, more than {format_dollars(spent).lstrip('$')}\n\n{HELP['resume']}"
        )
    return spent


def carry_spent(handle: Any, dollars: float, origin: str) -> None:
    """Count what the run ``handle`` continues spent against its budget, before its first row starts (a batch
    through its ``spending``, an operator of several maps itself)."""
    spending = getattr(handle, "spending", None)
    if spending is not None:
        spending.carry(dollars, origin=origin)
    else:
        handle.carry_spent(dollars, origin=origin)


def resume_operator(magics: UnityMagics, row: dict, *, budget: float | None = None) -> LoopHandle:
    """An operator a dead kernel left interrupted runs again from its ``%unity`` line under its name: the rows its
    maps finished are kept where they are asked the same (same position, label, task and model). What its run
    spent counts against its budget (``budget``: ``--budget`` on the resume line, in place of its line's)."""
    from ..batch import finished_rows
    from ._host import missing_names

    sub = row["kind"]
    op = OPERATORS[sub]
    from ._resume_needs import stored_line

    cmd = stored_line(row)
    if budget is not None:
        cmd.options["budget"] = budget
    name = row["name"]
    exprs = " ".join(e for e in (cmd.name, *(cmd.options.get(p.name) for p in op.params if p.kind == "items")) if e)
    missing = missing_names(exprs, magics.user_ns)
    if missing:
        raise UsageError(
            f"{name!r} ran over `{exprs}`, and this kernel has no {', '.join(f'`{n}`' for n in missing)}: re-create "
            f"{'it' if len(missing) == 1 else 'them'} as it was (run the cells that made it), then %unity resume "
            f"{name} again.\n\n{HELP['resume']}"
        )
    store = magics.store
    spent = spent_before_resume(store, row, cmd.options.get("budget"))
    notice = (f"resumed from the store: {name!r} ({sub}) runs again; rows its kernel finished are kept where asked "
              "the same." + (f" {format_dollars(spent)} spent before counts against its budget." if spent else ""))
    if op.phased:
        handle = start_operator(magics, cmd, resume_from=store, name=name, notice=notice)
    else:
        handle = start_operator(magics, cmd, done=finished_rows(store, row["uid"]), name=name, notice=notice)
        rows = getattr(handle, "rows", None)
        notice += f" Kept {getattr(rows, 'kept', 0)} row(s)."
    assert handle is not None
    if spent:  # before its first row starts (the operation starts at the event loop's next turn)
        carry_spent(handle, spent, row["uid"])
    widget = magics.widgets.get(name)
    if widget is not None:
        widget.notice = notice
    print(notice)
    return handle
