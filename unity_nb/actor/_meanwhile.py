"""Which variables a plan made, when the person ran cells while it ran.

A plan that awaits (a model, a primitive, ``asyncio.sleep``) leaves the kernel free: the person may run cells
meanwhile, and what they bind lands in the same namespace the plan's before-and-after diff looks at. A name that
changed during the plan is the person's when a cell that ran meanwhile binds it and the plan's own code does not
(read from the sources: the plan's, and the cells' in the shell's input history); the plan is told it did not make
it, and the next step tells the model the person did. Without a shell, or when no cell ran, every change is the
plan's, as before.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

__all__ = ("Cells", "bound_names", "theirs")


def _targets(node: ast.AST, out: set[str]) -> None:
    """The names an assignment target binds (``a``, ``a, (b, *c)``; not ``a.x`` nor ``a[0]``)."""
    if isinstance(node, ast.Name):
        out.add(node.id)
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            _targets(element, out)
    elif isinstance(node, ast.Starred):
        _targets(node.value, out)


def _globals_declared(node: ast.AST, out: set[str]) -> None:
    """Names a function (at any depth) declares ``global``: what its calls may bind in the namespace."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Global):
            out.update(inner.names)


def bound_names(tree: ast.AST) -> set[str]:
    """The names code binds or deletes in its module's namespace: assignments, loops' and ``with``'s targets,
    imports, definitions, ``:=``, ``del``, ``except ... as``, ``match`` captures, and what its functions declare
    ``global``. (Not what it binds through ``globals()`` or ``exec``, nor what the functions it calls bind.)"""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
            _globals_declared(node, out)
            return  # its body is a scope of its own
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _targets(target, out)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            _targets(node.target, out)
        elif isinstance(node, ast.NamedExpr):
            _targets(node.target, out)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            _targets(node.optional_vars, out)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                _targets(target, out)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _bound_by_source(source: str) -> set[str]:
    try:
        return bound_names(ast.parse(source))
    except (SyntaxError, ValueError):
        return set()


class Cells:
    """The person's cells, as a shell's input history holds them (IPython stores a cell before it runs it)."""

    def __init__(self, shell: Any) -> None:
        history = getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None)
        self._history: list[str] | None = history if isinstance(history, list) else None

    def mark(self) -> int | None:
        """Where the history stands now (``None``: no history to read)."""
        return len(self._history) if self._history is not None else None

    def bound_since(self, mark: int | None) -> set[str]:
        """The names the cells started since ``mark`` bind."""
        if mark is None or self._history is None:
            return set()
        return set().union(*map(_bound_by_source, self._history[mark:]))


def theirs(changed: Iterable[str], plan: set[str], cells: set[str]) -> list[str]:
    """Of the names that ``changed``, those the cells bind and the plan does not: the person's."""
    return [n for n in changed if n in cells and n not in plan]
