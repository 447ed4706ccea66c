"""The CodeAct actor: a tool loop whose model writes Python plans that run in the notebook.

The model acts by calling ``execute_code(code, intent)``; the plan runs in the namespace
(the kernel's ``user_ns`` by default), so what it creates is there for the next cell, and
the user's DataFrames are used by name, never pasted into the prompt. Registered tools are
offered beside it as JSON tools that take variables by reference (``<<var:name>>``).
Everything else (steering, nesting, events, the widget) is the loop's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from .. import events as ev
from .._errors import UserError
from .._registry import registered_tools
from .._secrets import secret_names
from ..loop import (
    LoopHandle,
    Tool,
    as_tool,
    gated_function,
)
from ..models import default_model
from ._describe import describe_namespace, user_variables
from ._primitives import Primitives
from ._source import ActorTools

__all__ = ("Actor", "ActorHandle", "act")

Approval = Literal["never", "first", "always"]

SYSTEM = """\
You are a CodeAct agent working inside a live Jupyter kernel, next to a person who is using it.
You act by calling the tool execute_code(code, intent): `code` is Python that runs in the
notebook's own namespace, `intent` says in a few words what it is for (the person sees it).
- Variables persist between plans and are shared with the person's notebook: use existing
  variables by name (never re-create, paste or print large data); what you create is there
  for the next cell. Names the person asks for are the names to use.
- Top-level `await` works.{primitives_hint}
- Each plan's result tells you its stdout and stderr, the value of its last expression, and
  the variables it created, changed or deleted. Look at data with small, bounded outputs
  (`.head()`, `.shape`, aggregates), never whole tables.
{done_hint}
- Do not rebind `primitives` or `final_answer`.{tools_hint}
"""
_DONE = """\
- When you are done, reply with your answer without calling any tool, or call
  `final_answer(value)` inside a plan to return a value (a DataFrame, say) as the result."""
_DONE_MULTI = """\
- You serve several requests, each shown as '[request <id>] ...'. Complete each one with the
  tool final_answer(request_id, answer) as soon as it is done (not in a plan); what a plan
  creates stays in the namespace for the person."""


_PRIMITIVES_HINT = "\n- Primitives (call them with await):\n{listing}"
_MARKED_HINT = (
    "\n- {names} wait for the person's approval at each call (marked needs_approval): in a plan write "
    "`await {first}(...)`; a call the person skips raises unity_nb.NotApproved where it was made."
)
_TOOLS_HINT = (
    "\n- Other tools are JSON tools. Any parameter may receive a variable by reference as the "
    "string '<<var:name>>'; the optional `return` parameter names the variable that receives "
    "the result."
)


def _ipython() -> Any:
    if "IPython" not in sys.modules:
        return None
    from IPython import get_ipython

    return get_ipython()


class Actor:
    """A CodeAct actor bound to a namespace. ``actor.act(task)`` starts a steerable run.

    ``namespace=None`` is the kernel's ``get_ipython().user_ns`` (a fresh dict outside
    IPython). ``primitives`` maps an alias to an object (its public methods), a dict of
    functions or a list of functions, beside those registered with ``@unity_nb.primitive``.
    ``tools`` defaults to the tools registered with ``@unity_nb.tool``, taken at each
    ``act``. ``approval``: ``"never"`` runs plans at once, ``"first"`` waits for the person's
    Run on each plan of a run until one is approved (a skipped plan is no approved one), ``"always"``
    on every plan. ``code_timeout`` bounds
    a stretch of computation that does not await (``None``: no bound). ``references=False``
    turns variables by reference off (JSON tools then look like plain tools).
    """

    def __init__(
        self,
        model: Any = None,
        *,
        namespace: dict | None = None,
        primitives: Mapping[str, Any] | None = None,
        tools: Iterable[Callable[..., Any] | Tool] | None = None,
        approval: Approval = "never",
        code_timeout: float | None = 60.0,
        references: bool = True,
        system: str | None = None,
        instructions: str | None = None,
        bus: ev.EventBus | None = None,
    ) -> None:
        if approval not in ("never", "first", "always"):
            raise UserError(f"approval must be 'never', 'first' or 'always', not {approval!r}")
        if code_timeout is not None and not (isinstance(code_timeout, int | float) and code_timeout > 0):
            raise UserError(f"code_timeout must be a positive number of seconds or None, not {code_timeout!r}")
        if namespace is not None and not isinstance(namespace, dict):
            raise UserError(f"namespace must be a dict (or None for the kernel's), not {type(namespace).__name__}")
        self.model = model
        self.shell = _ipython()
        if namespace is None:
            namespace = self.shell.user_ns if self.shell is not None else {}
        self.namespace = namespace
        in_shell = self.shell is not None and namespace is self.shell.user_ns
        self.hidden = getattr(self.shell, "user_ns_hidden", None) if in_shell else None
        self.primitives = Primitives(primitives)
        self._tools = None if tools is None else [as_tool(t) for t in tools]
        self.approval = approval
        self.code_timeout = code_timeout
        self.references = references
        self.system = system
        self.instructions = instructions
        """Appended to the system prompt (a registry's description of its managers, say)."""
        self.extra_tools: list[Tool] = []
        """JSON tools offered beside the registered ones."""
        self.loop_options: dict[str, Any] = {}
        """Options for every run's loop (``tool_policy``, ``evaluations``, ...); ``act`` options win."""
        self.recorded: dict[str, Any] = {}
        """How it was made, as whoever made it needs to make it again: recorded with each run's start beside its
        ``code_timeout`` (``LoopStarted.settings``), so that ``%unity resume`` does (``%unity act``'s ``managers``)."""
        self.bus = bus

    @property
    def tools(self) -> list[Tool]:
        base = list(self._tools) if self._tools is not None else registered_tools()
        return base + [t for t in self.extra_tools if all(t.name != b.name for b in base)]

    def act(self, task: str, *, name: str | None = None, model: Any = None, **options: Any) -> ActorHandle:
        """Start working on ``task`` in the background; return the steerable handle at once."""
        model = model or self.model or default_model("the actor")
        options = {**self.loop_options, **options}
        return ActorHandle(task, actor=self, model=model, name=name, bus=options.pop("bus", self.bus), **options)


def act(task: str, **options: Any) -> ActorHandle:
    """``unity_nb.act(task, model=..., ...)``: an :class:`Actor` with ``options``, started on ``task``."""
    actor_keys = {
        "namespace", "primitives", "tools", "approval", "code_timeout", "references", "system", "instructions",
    }
    actor_opts = {k: options.pop(k) for k in list(options) if k in actor_keys}
    return Actor(options.pop("model", None), **actor_opts).act(task, **options)


class ActorHandle(LoopHandle):
    """The handle of an actor run: a loop given the actor's :class:`ActorTools` as its tool source.

    ``await h`` gives the final answer, or the value a plan passed to ``final_answer``.
    ``h.inbox.approvals`` lists plans waiting for the person; ``h.inbox.approve()`` runs one and
    ``h.inbox.skip()`` tells the model it was skipped. ``h.plans`` counts plans, ``h.namespace`` is where they run.
    """

    kind = "actor"

    def __init__(self, task: str, *, actor: Actor, model: Any, **options: Any) -> None:
        multi = bool(options.get("multi"))
        self.tools = tools = ActorTools(actor, multi=multi, label=f"plan {options.get('name') or 'actor'}")
        """What the actor adds to the loop: its plans, namespace and JSON tools by reference."""
        system = (
            options.pop("system", None) or actor.system
            # the user variables by name only: the first step's look fingerprints them all (one pass a run fewer);
            # as the last run's look named them, when every name is bound as it was then
            or system_prompt(actor, tools.json_tools, multi, names=tools.executor.watch.variables())
        )
        super().__init__(task, model=model, tools=[tools.exec_tool], system=system, tool_source=tools, **options)
        self.run.tags["actor"] = actor

    @property
    def namespace(self) -> dict:
        """Where plans run (the notebook's namespace by default)."""
        return self.tools.namespace

    @property
    def plans(self) -> int:
        """Plans run (or skipped) so far."""
        return self.tools.plans

    @property
    def displayed(self) -> int:
        """Rich outputs plans displayed so far."""
        return self.tools.displayed

    def __repr__(self) -> str:
        waiting = len(self.run.approvals)
        extra = f", {waiting} call(s) waiting for approval" if waiting else ""
        return f"<unity handle {self.name!r}: {self.status.value}, {self.steps} steps{extra}>"


def system_prompt(actor: Actor, json_tools: list[Tool], multi: bool, names: Iterable[str] | None = None) -> str:
    """The actor's system prompt: how to act, its primitives and tools, secrets by name, the namespace now.
    ``names``: the user variables' names, when a snapshot of the namespace just named them (in its order)."""
    prims = actor.primitives
    prompt = SYSTEM.format(
        primitives_hint=_PRIMITIVES_HINT.format(listing=prims.describe()) if prims else "",
        tools_hint=_TOOLS_HINT if json_tools and actor.references else "",
        done_hint=_DONE_MULTI if multi else _DONE,
    )
    ns = actor.namespace
    if names is not None:
        variables = {n: ns[n] for n in names if n in ns}
    else:
        variables = user_variables(ns, actor.hidden)
    marked = [n for n, v in variables.items() if callable(v) and gated_function(v) is not None]
    if marked:
        prompt = prompt.rstrip("\n") + _MARKED_HINT.format(names=", ".join(marked[:20]), first=marked[0]) + "\n"
    extra = f"\n{actor.instructions}\n" if actor.instructions else ""
    secrets = secret_names()
    if secrets:
        listing = ", ".join(f"{n} ({d})" if d else n for n, d in secrets.items())
        extra += (
            f"\nSecrets (you never see their values): {listing}. In a plan, get_secret('NAME') gives one; "
            "in a JSON tool argument write '<<secret:NAME>>'. Never print, return or store a secret's value.\n"
        )
    return prompt + extra + "\nVariables in the namespace now:\n" + describe_namespace(variables)
