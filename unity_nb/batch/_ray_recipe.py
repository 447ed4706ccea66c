"""What a map with ``backend="ray"`` sends to its workers, and what it may not: rows whose tools need this kernel
are refused (:func:`needs_kernel`); the rows' recipe is pickled with the person's own modules by value
(:func:`pickled`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..loop import Tool, as_tool
from ._ray_actors import RowRecipe

__all__ = ("needs_kernel", "pickled")


def needs_kernel(tools: Any) -> str | None:
    """Why a row with these tools needs this kernel (the CodeAct actor's tools, variables by reference, a person's
    approval), or ``None``."""
    for given in tools or ():
        tool = given
        if callable(given) and not isinstance(given, Tool):
            try:
                tool = as_tool(given)
            except Exception:  # noqa: BLE001 - not a tool the loop takes: its own error comes at the start
                tool = given
        fn = getattr(tool, "fn", tool)
        owner = getattr(fn, "__self__", None)
        module = type(owner).__module__ if owner is not None else getattr(fn, "__module__", "") or ""
        name = getattr(tool, "name", getattr(tool, "__name__", type(tool).__name__))
        if name == "execute_code" or module.startswith("unity_nb.actor") or type(tool).__module__.startswith(
                "unity_nb.actor"):
            return f"the tool {name!r} is the CodeAct actor's: its plans run in this notebook's namespace"
        if getattr(tool, "ref_only", ()):
            return (f"the tool {name!r} takes {', '.join(tool.ref_only)} by reference (a variable of this notebook, "
                    "which only the CodeAct actor can pass)")
        if getattr(tool, "needs_approval", False):
            return f"the tool {name!r} waits for a person's approval in this notebook"
    return None


def _user_modules(options: Mapping[str, Any]) -> list[Any]:
    """The modules of the rows' functions (tools, hooks, evaluations) that are the person's own files, not installed
    packages: a worker could not import them, so they travel by value (a notebook's own functions always do)."""
    import sys
    import sysconfig

    installed = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    found: dict[str, Any] = {}
    todo: list[Any] = list(options.values())
    while todo:
        value = todo.pop()
        if isinstance(value, list | tuple | set):
            todo.extend(value)
            continue
        fn = getattr(value, "fn", value)
        name = getattr(fn, "__module__", None)
        if not isinstance(name, str) or name in found or name.split(".")[0] == "unity_nb":
            continue
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if module is None or not path:
            continue
        real = os.path.realpath(path)
        if not any(real.startswith(root + os.sep) for root in installed):
            found[name] = module
    return list(found.values())


def pickled(cloudpickle: Any, recipe: RowRecipe) -> bytes:
    """The recipe as the workers load it, with the person's own modules (see :func:`_user_modules`) by value."""
    modules = _user_modules(recipe.options)
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return bytes(cloudpickle.dumps(recipe))
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)
