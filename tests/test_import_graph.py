"""The package's import graph, read with ``ast`` from its files (issue 25).

Every import counts: at module level, under ``TYPE_CHECKING`` and inside functions, because each
one is a dependency a reader must follow. Two measures:

- imports inside ``unity_nb/loop/`` that run back up: an edge ``a -> b`` where ``b`` reaches ``a``
  again (directly or through other modules of loop/), so the two are one knot, not layers;
- the cycle between ``unity_nb.events`` and ``unity_nb._bus``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "unity_nb"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The modules an ``from ... import ...`` names (a name may itself be a submodule)."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [target, *(f"{target}.{a.name}" for a in node.names)]


def _named(targets: list[str], files: dict[str, Path]) -> list[str]:
    """What ``from X import a, b`` depends on: ``X.a`` where ``a`` is a submodule of ``X`` (``from .. import
    events``: the module, not the package that gathers everything), and ``X`` itself for any other name."""
    target, *subs = targets
    modules = [m for m in subs if m in files]
    return modules + ([target] if len(modules) < len(subs) else [])


def _imports(name: str, path: Path, files: dict[str, Path]) -> dict[str, bool]:
    """``{module imported: deferred}``: deferred when every import of it sits under ``TYPE_CHECKING`` or
    inside a function (how a module imports one above it without failing at import time)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: dict[str, bool] = {}

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                names = _named(_resolve(name, is_package, child), files)
            for m in names:
                if m in files and m != name:
                    found[m] = found.get(m, True) and deferred
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            )
            visit(child, inner)

    visit(tree, False)
    return found


def import_graph(*, deferred: bool = False) -> dict[str, set[str]]:
    """``{module: {module it imports, ...}}`` for every module of the package, all imports counted
    (``deferred=True``: only those under ``TYPE_CHECKING`` or inside functions)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        graph[name] = {m for m, late in _imports(name, path, files).items() if late or not deferred}
    return graph


def _reaches(graph: dict[str, set[str]], start: str, goal: str, within: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        if m == goal:
            return True
        if m in seen:
            continue
        seen.add(m)
        todo.extend(n for n in graph.get(m, ()) if n.startswith(within))
    return False


def circle(within: str) -> list[tuple[str, str]]:
    """Imports between modules under ``within`` (not its ``__init__``, which gathers them) that lie on a
    cycle: ``a -> b`` where ``b`` reaches ``a`` again."""
    graph = import_graph()
    mods = {m: deps for m, deps in graph.items() if m.startswith(within + ".")}
    return sorted(
        (a, b) for a, deps in mods.items() for b in deps if b in mods and _reaches(graph, b, a, within + ".")
    )


def back_edges(within: str) -> list[tuple[str, str]]:
    """The imports that run back up: on a cycle, and deferred (under ``TYPE_CHECKING`` or in a function),
    which is how they import a module above them."""
    late = import_graph(deferred=True)
    return [(a, b) for a, b in circle(within) if b in late[a]]


def cycles() -> list[list[str]]:
    """The package's import cycles (strongly connected sets of two or more modules, every import counted),
    each sorted, largest first."""
    graph = import_graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found, key=len, reverse=True)


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "unity_nb.loop._handle" in graph["unity_nb.loop._start"]  # module level
    assert "unity_nb.models" in graph["unity_nb.loop._turn"]  # from .. import


# measured at 2162799 (issue 25): 17 imports running back up, and a circle of 15 files (59 imports)
def test_loop_has_no_import_running_back_up():
    edges = back_edges("unity_nb.loop")
    assert edges == [], f"{len(edges)} imports inside loop/ run back up: {edges}"


def test_loop_has_no_circle():
    edges = circle("unity_nb.loop")
    files = sorted({m for e in edges for m in e})
    assert edges == [], f"{len(files)} files of loop/ import one another in a circle ({len(edges)} imports): {files}"


def test_events_and_bus_do_not_import_each_other():
    graph = import_graph()
    both = "unity_nb._bus" in graph["unity_nb.events"] and "unity_nb.events" in graph["unity_nb._bus"]
    assert not both, "unity_nb.events and unity_nb._bus import each other"


# issue 25's second step: a part converted is given its run and narrow collaborators, not the handle
CONVERTED_PARTS = ("_run", "_turn", "_runner", "_routing", "_engine")


def test_converted_parts_never_name_the_handle():
    for name in CONVERTED_PARTS:
        source = (PACKAGE / "loop" / f"{name}.py").read_text(encoding="utf-8")
        tree = ast.parse(source)
        named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        named |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        named |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert "LoopHandle" not in source, f"loop/{name}.py refers to LoopHandle"
        assert not {"Part", "owner"} & named, f"loop/{name}.py still reaches its loop through Part.owner"
        assert "unity_nb.loop._handle" not in import_graph()[f"unity_nb.loop.{name}"]


# issue 33: four circles were left (store / _store_schema / _store_batches; actor/_actor / _source;
# batch/_map / _map_engine; jupyter/_magics / _magics_ops / _magics_tasks)
def test_no_import_circle_anywhere_in_the_package():
    found = cycles()
    assert found == [], f"{len(found)} import circle(s) in the package: {found}"


def test_the_cycle_finder_finds_a_circle(tmp_path, monkeypatch):
    pkg = tmp_path / "unity_nb"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE", pkg)
    assert cycles() == [["unity_nb.a", "unity_nb.b"]]
