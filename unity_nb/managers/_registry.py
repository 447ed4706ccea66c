"""The registry: one spec per manager, from which the actor's surface is generated.

A :class:`ManagerSpec` says which methods a manager exposes (or excludes), under which alias,
with what description, usage hints and dependencies. From the specs one :class:`Registry`
builds the ``primitives.<alias>.<method>`` namespace plans call, the JSON tool schemas of the
same methods (``<alias>_<method>``), and the prompt section describing them, all from the
managers' docstrings: the model-facing contract is written once.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import UserError
from ..actor import signature_text
from ..loop import Tool, as_tool

__all__ = ("ManagerSpec", "Registry")


@dataclass
class ManagerSpec:
    """How one manager is exposed to the actor."""

    manager: Any
    alias: str = ""
    """Defaults to the manager's own ``alias``."""
    expose: Sequence[str] | None = None
    """The methods offered (default: every public method)."""
    exclude: Sequence[str] = ()
    description: str = ""
    """Defaults to the first paragraph of the manager's class docstring."""
    usage_hints: str = ""
    depends_on: Sequence[str] = field(default_factory=tuple)


def _public(obj: Any) -> list[str]:
    names = []
    for name, value in inspect.getmembers(type(obj)):
        if name.startswith("_") or not callable(value) or isinstance(value, (staticmethod, classmethod, type)):
            continue
        if name == "caller":
            continue
        names.append(name)
    return names


def _first_paragraph(text: str) -> str:
    return (text or "").strip().split("\n\n", 1)[0].replace("\n", " ")


class _Facade:
    """What a plan sees as ``primitives.<alias>``: only the exposed methods."""

    def __init__(self, alias: str, methods: dict[str, Callable[..., Any]]) -> None:
        self._alias = alias
        for name, fn in methods.items():
            setattr(self, name, fn)


class Registry:
    """The managers an actor works with, and everything generated from their specs."""

    def __init__(self, specs: Iterable[ManagerSpec | Any] = ()) -> None:
        self._specs: dict[str, ManagerSpec] = {}
        for spec in specs:
            self.add(spec)

    def add(self, spec: ManagerSpec | Any) -> ManagerSpec:
        """Register a spec (or a manager, exposed whole under its own alias)."""
        if not isinstance(spec, ManagerSpec):
            spec = ManagerSpec(spec)
        alias = spec.alias or getattr(spec.manager, "alias", "")
        if not alias or not alias.isidentifier() or alias.startswith("_"):
            raise UserError(f"a manager needs an alias that is a Python identifier, not {alias!r}")
        if alias in self._specs:
            raise UserError(f"two managers are registered as {alias!r}")
        public = _public(spec.manager)
        for name in [*(spec.expose or ()), *spec.exclude, *(getattr(spec.manager, "exposed", None) or ())]:
            if name not in public:
                raise UserError(f"{alias}: no public method {name!r} to expose or exclude; it has {public}")
        spec.alias = alias
        spec.description = spec.description or _first_paragraph(inspect.getdoc(type(spec.manager)) or "")
        self._specs[alias] = spec
        if getattr(spec.manager, "registry", "absent") is None:
            spec.manager.registry = self
        return spec

    def check(self) -> None:
        """Every dependency is registered."""
        for spec in self._specs.values():
            missing = [d for d in spec.depends_on if d not in self._specs]
            if missing:
                raise UserError(
                    f"{spec.alias} depends on {missing}, which are not registered; registered: {sorted(self._specs)}")

    @property
    def aliases(self) -> list[str]:
        return list(self._specs)

    def __contains__(self, alias: object) -> bool:
        return alias in self._specs

    def manager(self, alias: str) -> Any:
        spec = self._specs.get(alias)
        if spec is None:
            raise UserError(f"no manager registered as {alias!r}; registered: {sorted(self._specs)}")
        return spec.manager

    def methods(self, alias: str) -> dict[str, Callable[..., Any]]:
        """The exposed bound methods of one manager."""
        spec = self._specs[alias]
        default = getattr(spec.manager, "exposed", None) or _public(spec.manager)
        names = list(spec.expose) if spec.expose is not None else list(default)
        return {n: getattr(spec.manager, n) for n in names if n not in spec.exclude}

    def primitives(self) -> dict[str, Any]:
        """``{alias: object}`` for ``Actor(primitives=...)``: plans call ``await primitives.<alias>.<method>(...)``."""
        self.check()
        return {alias: _Facade(alias, self.methods(alias)) for alias in self._specs}

    def tools(self) -> list[Tool]:
        """Every exposed method as a JSON tool named ``<alias>_<method>`` (its handle is awaited)."""
        self.check()
        out = []
        for alias in self._specs:
            for name, method in self.methods(alias).items():
                out.append(_method_tool(alias, name, method))
        return out

    def prompt(self) -> str:
        """The prompt section describing every manager and its methods, from their docstrings."""
        lines = ["Managers (call them in plans as `await primitives.<alias>.<method>(...)`):"]
        for alias, spec in self._specs.items():
            lines.append(f"\n## {alias}: {spec.description}")
            if spec.usage_hints:
                lines.append(f"Usage: {spec.usage_hints}")
            if spec.depends_on:
                lines.append(f"Uses: {', '.join(spec.depends_on)}")
            for name, method in self.methods(alias).items():
                sig = signature_text(method)  # annotations evaluated: no quotes
                lines.append(f"- {alias}.{name}{sig}: {_first_paragraph(inspect.getdoc(method) or '')}")
        return "\n".join(lines)

    def actor(self, model: Any = None, *, discovery_first: bool = False, **options: Any) -> Any:
        """An :class:`~unity_nb.Actor` whose plans reach every manager; with ``discovery_first``
        only ``functions_search`` and ``guidance_search`` are offered until both were called."""
        from ..actor import Actor
        from ..loop import discovery_first as policy

        actor = Actor(model, primitives=self.primitives(), instructions=self.prompt(), **options)
        if discovery_first:
            needed = [f"{a}_search" for a in ("functions", "guidance") if a in self._specs]
            if len(needed) < 2:
                raise UserError("discovery_first needs the functions and guidance managers registered")
            tools = [t for t in self.tools() if t.name in needed]
            actor.extra_tools = tools
            actor.loop_options["tool_policy"] = policy(*needed)
        return actor


def _method_tool(alias: str, name: str, method: Callable[..., Any]) -> Tool:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        from ..loop import LoopHandle

        value = method(*args, **kwargs)
        if inspect.isawaitable(value) and not isinstance(value, LoopHandle):
            value = await value
        return value  # a handle: the loop adopts it as a child and awaits its result

    call.__signature__ = inspect.signature(method)  # type: ignore[attr-defined]
    call.__name__ = f"{alias}_{name}"
    return as_tool(call, name=f"{alias}_{name}")
