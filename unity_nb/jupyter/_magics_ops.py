"""``%unity filter|extract|topk|join|agg``: the operators built on the map, started like ``%unity map``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ._args import HELP, Command

if TYPE_CHECKING:
    from ..loop import LoopHandle
    from ._magics import UnityMagics

__all__ = ("LABELS", "resume_operator", "spent_before_resume", "start_operator")

LABELS = ("[map:filter] ", "[map:extract] ", "[map:join] ", "[topk] ", "[agg] ")
"""How an operator started by ``%unity`` labels its loop (its line after it): what ``%unity resume`` runs again."""


def _items(magics: UnityMagics, expr: str, sub: str) -> Any:
    try:
        return eval(expr, magics.user_ns)
    except Exception as err:  # noqa: BLE001 - said back as a usage error
        problem = f"cannot evaluate the items {expr!r}: {type(err).__name__}: {err}"
        raise UsageError(f"{problem}\n\n{HELP[sub]}") from None


def start_operator(magics: UnityMagics, cmd: Command, *, done: dict | None = None, resume_from: Any = None,
                   name: str | None = None, notice: str = "") -> LoopHandle:
    """Start the operator ``cmd`` names on the notebook's items, under the magics' model, and show its widget.
    ``done`` (one-map operators) or ``resume_from`` (a store: top-k, agg) keeps what an earlier run finished."""
    from .._registry import registered_tools
    from ..batch import agg, extract, filter_rows, join, topk

    sub, o = cmd.sub, cmd.options
    items = _items(magics, cmd.name or "", sub)
    options: dict[str, Any] = {"concurrency": o.get("concurrency", 8),
                               "tools": [t for t in registered_tools() if not t.ref_only]}
    for key in ("max_steps", "rate", "tool_timeout", "budget"):
        if o.get(key) is not None:
            options[key] = o[key]
    options["cache"] = False if o.get("no_cache") else (magics.store or False)  # as %unity map: the store's cache
    if sub in ("filter", "extract", "join"):  # one map: its line is what a resume re-runs
        options["label"] = f"[map:{sub}] {cmd.line}"
        options["done"] = done
    else:  # several maps, each keeping the rows its earlier run finished
        options["label"] = f"[{sub}] {cmd.line}"
        options["resume_from"] = resume_from
    text = cmd.text

    def launch(key: str) -> LoopHandle:
        model = magics.current_model()
        if sub == "filter":
            return filter_rows(items, text, model=model, name=key, **options)
        if sub == "extract":
            return extract(items, text, columns=o["columns"], model=model, name=key, **options)
        if sub == "topk":
            return topk(items, o["k"], text, candidates=o.get("candidates"),
                          max_comparisons=o.get("max_comparisons", 1000), model=model, name=key, **options)
        if sub == "join":
            right_expr = o["right"]
            right = _items(magics, right_expr, sub)
            names = ((cmd.name, right_expr) if (cmd.name or "").isidentifier() and right_expr.isidentifier()
                     and cmd.name != right_expr else ("left", "right"))
            return join(items, right, text, names=names, blocking=None if o.get("all_pairs") else "words",
                          per_left=o.get("per_left", 5), model=model, name=key, **options)
        return agg(items, text, by=o.get("by"), chunk_chars=o.get("chunk_chars", 12_000),
                     max_depth=o.get("max_depth", 3), model=model, name=key, **options)

    return magics.start(name or o.get("name"), launch, sub=sub, notice=notice)


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
            f"cannot resume {name!r}: it is paused at its budget: ${spent:,.4f} spent of ${budget:,.2f} before its "
            f"kernel died (a resumed run counts what its earlier run spent). Lift the cap: %unity resume {name} "
            f"--budget DOLLARS, more than {spent:,.2f}\n\n{HELP['resume']}"
        )
    return spent


def resume_operator(magics: UnityMagics, row: dict, *, budget: float | None = None) -> LoopHandle:
    """An operator a dead kernel left interrupted runs again from its ``%unity`` line under its name: the rows its
    maps finished are kept where they are asked the same (same position, label, task and model). What its run
    spent counts against its budget (``budget``: ``--budget`` on the resume line, in place of its line's)."""
    from ..batch import finished_rows
    from ._args import parse
    from ._magics_tasks import _missing_names as missing_names

    label, _, line = row["task"].partition("] ")
    sub = label.removeprefix("[").removeprefix("map:")
    first, _, cell = line.partition("\n")
    cmd = parse(f"{sub} {first}", cell or None)
    if budget is not None:
        cmd.options["budget"] = budget
    name = row["name"]
    exprs = " ".join(e for e in (cmd.name, cmd.options.get("right")) if e)
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
              "the same." + (f" ${spent:,.4f} spent before counts against its budget." if spent else ""))
    if sub in ("filter", "extract", "join"):
        handle = start_operator(magics, cmd, done=finished_rows(store, row["uid"]), name=name, notice=notice)
        notice += f" Kept {handle.kept} row(s)."  # type: ignore[attr-defined]
    else:
        handle = start_operator(magics, cmd, resume_from=store, name=name, notice=notice)
    if spent:  # before its first row starts (the operation starts at the event loop's next turn)
        handle.carry_spent(spent, origin=row["uid"])  # type: ignore[attr-defined]
    widget = magics.widgets.get(name)
    if widget is not None:
        widget.notice = notice
    print(notice)
    return handle
