"""``%unity OPERATOR``: any operator of the registry (``unity_nb.batch.OPERATORS``: filter, extract, topk, join,
agg, and those registered later), started like ``%unity map``, estimated with ``--estimate``, and resumed after a
dead kernel from the ``kind`` the store recorded (never from the label's text)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from ..batch import OPERATORS
from ._args import HELP, Command, parse

if TYPE_CHECKING:
    from ..loop import LoopHandle
    from ._host import Host as UnityMagics

__all__ = ("resume_operator", "start_operator")

_MAP_OPTIONS = ("max_steps", "rate", "tool_timeout", "budget")


def _items(magics: UnityMagics, expr: str, sub: str) -> Any:
    try:
        return eval(expr, magics.user_ns)
    except Exception as err:  # noqa: BLE001 - said back as a usage error
        problem = f"cannot evaluate the items {expr!r}: {type(err).__name__}: {err}"
        raise UsageError(f"{problem}\n\n{HELP[sub]}") from None


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
    for key in _MAP_OPTIONS:
        if o.get(key) is not None:
            options[key] = o[key]
    if o.get("estimate"):  # runs nothing: what it would cost, printed
        options.pop("budget", None)
        if o.get("expected_output_tokens") is not None:
            options["expected_output_tokens"] = o["expected_output_tokens"]
        print(op.start(items, cmd.text, model=magics.current_model(), estimate=True, **given, **options))
        return None
    options["cache"] = False if o.get("no_cache") else (magics.store or False)  # as %unity map: the store's cache
    options["label"] = cmd.line  # what a resume runs again (the store keeps the operator's kind beside it)
    if op.phased:  # several maps, each keeping the rows its earlier run finished
        options["resume_from"] = resume_from
    else:  # one map: the rows its run finished
        options["done"] = done

    def launch(key: str) -> LoopHandle:
        return op.start(items, cmd.text, model=magics.current_model(), name=key, **given, **options)

    return magics.start(name or o.get("name"), launch, sub=cmd.sub, notice=notice)


def resume_operator(magics: UnityMagics, row: dict) -> LoopHandle:
    """An operator a dead kernel left interrupted runs again from its ``%unity`` line under its name: the rows its
    maps finished are kept where they are asked the same (same position, label, task and model)."""
    from ..batch import finished_rows
    from ._host import missing_names

    sub = row["kind"]
    op = OPERATORS[sub]
    first, _, cell = (row["task"] or "").partition("\n")
    cmd = parse(f"{sub} {first}", cell or None)
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
    notice = (f"resumed from the store: {name!r} ({sub}) runs again; rows its kernel finished are kept where asked "
              "the same.")
    if op.phased:
        handle = start_operator(magics, cmd, resume_from=store, name=name, notice=notice)
    else:
        handle = start_operator(magics, cmd, done=finished_rows(store, row["uid"]), name=name, notice=notice)
        rows = getattr(handle, "rows", None)
        notice += f" Kept {getattr(rows, 'kept', 0)} row(s)."
    assert handle is not None
    widget = magics.widgets.get(name)
    if widget is not None:
        widget.notice = notice
    print(notice)
    return handle
