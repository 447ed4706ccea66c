"""Loop policies: small objects a loop asks at two points of each step, composed like middleware.

A policy decides which tools a step offers (:meth:`LoopPolicy.offer`, given the policies inside
it as ``inner``, the way pydantic-ai's toolsets wrap one another) and what the model is told after
a batch of tool results (:meth:`LoopPolicy.after_tools`). The ``LoopOptions`` flags are
constructors of the built-in ones:

- ``dynamic_tools=fn`` -> :class:`DynamicTools` (outermost: its tools are there for the others);
- ``first_step_tools=[...]`` -> :class:`ForcedFirstTools`;
- ``tool_policy=fn`` -> :class:`ToolPolicyFunction` (:func:`discovery_first` makes a :class:`DiscoveryFirst`);
- ``time_awareness=True`` -> :class:`TimeAwareness`;

and ``policies=[...]`` adds a person's own, outermost first::

    class OnlyReadTools(u.LoopPolicy):
        def offer(self, step, inner):
            return [([t for t in tools if t.name.startswith("read_")], mode) for tools, mode in inner(step)]

One policy object may serve many loops (a batch's rows share one): keep what belongs to one loop
on ``step.loop``, not on the policy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import UserError
from ._answers import accepts_positional
from ._tools import Tool, as_tool

__all__ = (
    "DiscoveryFirst",
    "DynamicTools",
    "ForcedFirstTools",
    "LoopPolicy",
    "Offer",
    "Step",
    "TimeAwareness",
    "ToolPolicyFunction",
    "discovery_first",
    "offer_through",
)

Offer = tuple[list[Tool], "str | dict"]
"""``(tools, tool_choice)`` of one model request; a step makes one request per offer."""


@dataclass(slots=True, eq=False)
class Step:
    """What a policy sees of the step being prepared."""

    number: int
    """Model turns completed before this one (0: the first step)."""
    tools: list[Tool]
    """Every tool this step may offer (a policy may add some: :class:`DynamicTools` does)."""
    called_tools: set[str]
    """Names of the tools called successfully so far."""
    started_at: float
    """When the loop started (``time.time()``)."""
    loop: Any = None
    """The loop's handle, for a person's functions that take it (``tool_policy(step, tools, loop)``)."""
    dynamic: dict[str, Tool] = field(default_factory=dict)
    """Tools made for this step alone (the loop finds a call's tool among them)."""

    def named(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


class LoopPolicy:
    """A loop policy: override :meth:`offer`, :meth:`after_tools`, or both. The base changes nothing."""

    def offer(self, step: Step, inner: Callable[[Step], list[Offer]]) -> list[Offer]:
        """The requests this step makes: ``inner(step)`` is what the policies inside this one offer."""
        return inner(step)

    def after_tools(self, step: Step) -> str | None:
        """A note the model sees after this step's tool results (``None``: nothing)."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _all_tools(step: Step) -> list[Offer]:
    return [(step.tools, "auto")]


def offer_through(policies: Sequence[LoopPolicy], step: Step) -> list[Offer]:
    """What ``policies`` offer at ``step``, the first outermost (no policy: every tool, ``auto``)."""

    def at(i: int) -> Callable[[Step], list[Offer]]:
        if i == len(policies):
            return _all_tools
        policy, inner = policies[i], at(i + 1)
        return lambda s: policy.offer(s, inner)

    return at(0)(step)


class DynamicTools(LoopPolicy):
    """``fn(loop)`` makes extra tools at each step (``dynamic_tools=fn``)."""

    def __init__(self, fn: Callable[[Any], Iterable[Callable[..., Any] | Tool]]) -> None:
        if not callable(fn):
            raise UserError(f"dynamic_tools takes a function, not {fn!r}")
        self.fn = fn

    def offer(self, step: Step, inner: Callable[[Step], list[Offer]]) -> list[Offer]:
        for obj in self.fn(step.loop) or ():
            t = as_tool(obj)
            if step.named(t.name) is not None:
                raise UserError(f"dynamic_tools made a tool named {t.name!r}, which the loop already has")
            step.dynamic[t.name] = t
            step.tools.append(t)
        return inner(step)


class ForcedFirstTools(LoopPolicy):
    """The first step calls each of ``names``: one request per tool, each required (``first_step_tools=``)."""

    def __init__(self, *names: str) -> None:
        if not names or any(not isinstance(n, str) for n in names):
            raise UserError(f"first_step_tools takes tool names (strings), not {list(names)!r}")
        self.names = names

    def offer(self, step: Step, inner: Callable[[Step], list[Offer]]) -> list[Offer]:
        if step.number != 0:
            return inner(step)
        by_name = {t.name: t for t in step.tools}
        return [([by_name[n]], "required") for n in self.names if n in by_name]


class ToolPolicyFunction(LoopPolicy):
    """``fn(step, tools[, loop]) -> (mode, tools)`` narrows the one request a step makes (``tool_policy=fn``)."""

    def __init__(self, fn: Callable[..., tuple[str, Sequence[Tool | str]]]) -> None:
        if not callable(fn):
            raise UserError(f"tool_policy takes a function policy(step, tools) -> (mode, tools), not {fn!r}")
        self.fn = fn
        self.takes_loop = accepts_positional(fn, 3, unknown=False)

    def offer(self, step: Step, inner: Callable[[Step], list[Offer]]) -> list[Offer]:
        tools = step.tools
        by_name = {t.name: t for t in tools}
        mode, chosen = self.fn(step.number, tools, step.loop) if self.takes_loop else self.fn(step.number, tools)
        return [([by_name[t] if isinstance(t, str) else t for t in chosen], mode)]


class DiscoveryFirst(LoopPolicy):
    """Offer only the discovery tools ``names`` until each has been called once (successfully), then
    every tool; with ``required`` the model must call one meanwhile. Also a ``tool_policy`` function."""

    def __init__(self, *names: str, required: bool = True) -> None:
        if not names:
            raise UserError("discovery_first needs the names of the discovery tools")
        self.names, self.required = names, required
        self.__name__ = f"discovery_first({', '.join(names)})"

    def choose(self, tools: Sequence[Tool], called: set[str]) -> tuple[str, Sequence[Tool]]:
        if all(n in called for n in self.names):
            return "auto", tools
        offered = [t for t in tools if t.name in self.names]
        if not offered:
            return "auto", tools
        return ("required" if self.required else "auto"), offered

    def offer(self, step: Step, inner: Callable[[Step], list[Offer]]) -> list[Offer]:
        out = []
        for tools, mode in inner(step):
            chosen_mode, chosen = self.choose(tools, step.called_tools)
            out.append((list(chosen), mode if chosen is tools else chosen_mode))
        return out

    def __call__(self, step: int, tools: Sequence[Tool], loop: Any) -> tuple[str, Sequence[Tool]]:
        return self.choose(tools, loop.state.called_tools)

    def __repr__(self) -> str:
        return self.__name__


def discovery_first(*names: str, required: bool = True) -> DiscoveryFirst:
    """A tool policy: offer only the discovery tools ``names`` until each has been called once
    (successfully), then every tool. With ``required`` the model must call one meanwhile.
    Give it as ``tool_policy=`` (a function of the step) or in ``policies=[...]``."""
    return DiscoveryFirst(*names, required=required)


class TimeAwareness(LoopPolicy):
    """The wall-clock time, and the seconds since the task began, after each batch of tool results
    (``time_awareness=True``)."""

    def after_tools(self, step: Step) -> str | None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
        return f"[time now: {stamp}; {now - step.started_at:.1f} s since this task began]"
