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
from .._secrets import get_secret, scrub, scrub_bundle, secret_names
from ..loop import (
    LoopHandle,
    Tool,
    ToolCallRecord,
    ToolContext,
    ToolFailed,
    as_tool,
    current_call,
    skipped_result,
)
from ..models import default_model
from ._describe import describe_namespace, describe_value, user_variables
from ._executor import Executor, final_answer
from ._primitives import Primitives
from ._refs import RefIndex, RefTool

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


def _no_plan_final_answer(value: Any = None) -> None:
    """In a multi-request run a plan cannot end the run: the final_answer tool completes a request."""
    raise RuntimeError(
        "this run serves several requests: complete one with the tool final_answer(request_id, answer), not in a plan"
    )

_PRIMITIVES_HINT = "\n- Primitives (call them with await):\n{listing}"
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
    Run on the first plan of each run, ``"always"`` on every plan. ``code_timeout`` bounds
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
    """The handle of an actor run: a :class:`LoopHandle` plus plans, approval and the namespace.

    ``await h`` gives the final answer, or the value a plan passed to ``final_answer``.
    ``h.pending_approvals`` lists plans waiting for the person; :meth:`approve` runs one and
    :meth:`skip` tells the model it was skipped.
    """

    kind = "actor"

    def __init__(self, task: str, *, actor: Actor, model: Any, **options: Any) -> None:
        self.actor = actor
        self.namespace = actor.namespace
        self.plans = 0
        """Plans run (or skipped) so far."""
        self.displayed = 0
        """Rich outputs plans displayed so far."""
        self._ref_tools: dict[str, RefTool] = {}
        self._index: RefIndex | None = None
        self._index_for: tuple[str, ...] = ()
        self._json_tools = actor.tools
        if not actor.references:
            for t in self._json_tools:
                if t.ref_only:
                    raise UserError(
                        f"tool {t.name!r} takes {', '.join(t.ref_only)} by reference only, and references=False"
                    )
        self.executor = Executor(
            actor.namespace,
            protected={
                "primitives": actor.primitives, "get_secret": get_secret,
                "final_answer": _no_plan_final_answer if options.get("multi") else final_answer,
            },
            hidden=actor.hidden,
            code_timeout=actor.code_timeout,
            label=f"plan {options.get('name') or 'actor'}",
            shell=actor.shell,
        )
        self._multi_run = bool(options.get("multi"))
        exec_tool = as_tool(self._make_execute(), name="execute_code")
        self._exec_tool = exec_tool
        system = options.pop("system", None) or actor.system or self._system_prompt()
        super().__init__(task, model=model, tools=[exec_tool], system=system, **options)
        self._known = self.executor.snapshot()

    # -- what the model sees -------------------------------------------------------------

    def _system_prompt(self) -> str:
        prims = self.actor.primitives
        prompt = SYSTEM.format(
            primitives_hint=_PRIMITIVES_HINT.format(listing=prims.describe()) if prims else "",
            tools_hint=_TOOLS_HINT if self._json_tools and self.actor.references else "",
            done_hint=_DONE_MULTI if self._multi_run else _DONE,
        )
        variables = user_variables(self.namespace, self.actor.hidden)
        extra = f"\n{self.actor.instructions}\n" if self.actor.instructions else ""
        names = secret_names()
        if names:
            listing = ", ".join(f"{n} ({d})" if d else n for n, d in names.items())
            extra += (
                f"\nSecrets (you never see their values): {listing}. In a plan, get_secret('NAME') gives one; "
                "in a JSON tool argument write '<<secret:NAME>>'. Never print, return or store a secret's value.\n"
            )
        return prompt + extra + "\nVariables in the namespace now:\n" + describe_namespace(variables)

    def available_tools(self) -> list[Tool]:
        tools: list[Tool] = [self._exec_tool]
        if not self._json_tools:
            return tools
        if not self.actor.references:
            return tools + [t for t in self._json_tools if t.name != "execute_code"]
        self._refresh_refs()
        return tools + [t for t in self._ref_tools.values() if t.available]

    def _refresh_refs(self) -> None:
        names = tuple(t.name for t in self._json_tools)
        if self._index is None or names != self._index_for:
            self._index = RefIndex(self._json_tools)
            self._index_for = names
            self._ref_tools = {}
        # the snapshot this step took (before_step runs before the tools are offered); a first one if none yet
        compatible = self._index.refresh(self.executor.last or self.executor.snapshot(), self.namespace)
        if self._ref_tools and all(t.compatible is compatible for t in self._ref_tools.values()):
            return  # nothing a schema shows has changed: the tools offered last step stand
        self._ref_tools = {
            t.name: RefTool(
                t, namespace=self.namespace, index=self._index, compatible=compatible,
                protected=frozenset(self.executor.protected), on_stored=self._stored, hidden=self.actor.hidden,
            )
            for t in self._json_tools
            if t.name != "execute_code"
        }

    def tool_named(self, name: str) -> Tool | None:
        if name == "execute_code":
            return self._exec_tool
        if self.actor.references:
            if name not in self._ref_tools and any(t.name == name for t in self._json_tools):
                self._refresh_refs()
            return self._ref_tools.get(name)
        return next((t for t in self._json_tools if t.name == name), None)

    def before_step(self) -> None:
        """Tell the model about variables the person changed in cells since it last looked."""
        if self.steps == 0:  # what the cell that started the run bound meanwhile (``h = %unity act``) is not news
            self._known = self.executor.snapshot()
            return
        outside = self.executor.diff(self._known)
        self._known = self.executor.last
        if outside.created or outside.changed or outside.deleted:
            lines = ["[the namespace changed outside your plans (the person ran cells)]"]
            lines += [f"created {k}: {v}" for k, v in outside.created.items()]
            lines += [f"changed {k}: {v}" for k, v in outside.changed.items()]
            if outside.deleted:
                lines.append("deleted: " + ", ".join(outside.deleted))
            self.conversation.note("\n".join(lines))
            self.run.emit(
                ev.VariablesChanged, call_id=None, created=tuple(outside.created),
                changed=tuple(outside.changed), deleted=tuple(outside.deleted),
            )

    def _stored(self, name: str, _value: Any) -> None:
        call = self._current_call()
        self._known = self.executor.snapshot()
        self.run.emit(ev.VariablesChanged, call_id=call, created=(name,))

    def _current_call(self) -> str | None:
        c = current_call()
        return c.call_id if c is not None and c.loop is self else None

    # -- plans ----------------------------------------------------------------------------

    def _make_execute(self) -> Callable[..., Any]:
        handle = self

        async def execute_code(code: str, intent: str, ctx: ToolContext) -> str:
            """Run Python in the notebook's namespace (top-level await allowed). Returns success,
            stdout, stderr, the value of the last expression, and the variables created, changed
            and deleted."""
            return await handle._run_plan(code, intent, ctx)

        return execute_code

    def _needs_approval(self) -> bool:
        mode = self.actor.approval
        return mode == "always" or (mode == "first" and self.plans == 0)

    async def _run_plan(self, code: str, intent: str, ctx: ToolContext) -> str:
        rec: ToolCallRecord | None = ctx.record
        before: dict | None = self._known  # taken before this step: only identities are checked again
        if self._needs_approval():
            before = None  # the person may have run cells while the plan waited: look again
            run, reason = await self.wait_for_approval(ctx.call_id, tool="execute_code", code=code, intent=intent)
            if not run:
                self.plans += 1
                return skipped_result("execute_code", reason)
        self.plans += 1

        def on_output(text: str, _stream: str) -> None:
            if rec is not None:
                self.runner.printed(rec, text)

        def on_display(bundle: dict) -> None:
            bundle = scrub_bundle(bundle)
            self.displayed += 1
            if rec is not None:
                rec.add_display(bundle)
            self.run.emit(ev.ToolDisplay, call_id=ctx.call_id, mime_types=tuple(bundle.get("data", {})))

        result = await self.executor.run(code, on_output=on_output, on_display=on_display, before=before)
        self._known = self.executor.last
        self.run.emit(
            ev.CodeExecuted, call_id=ctx.call_id, intent=intent, code=scrub(code),
            success=result.success, error=scrub(result.error), stdout_chars=len(result.stdout),
            stderr_chars=len(result.stderr), final=result.final,
        )
        if result.created or result.changed or result.deleted:
            self.run.emit(
                ev.VariablesChanged, call_id=ctx.call_id, created=tuple(result.created),
                changed=tuple(result.changed), deleted=tuple(result.deleted),
            )
        # scrubbed whole before the model's view cuts them to a head and a tail, so no cut splits a value
        result.stdout, result.stderr, result.error = scrub(result.stdout), scrub(result.stderr), scrub(result.error)
        text = result.for_model()
        if result.final:
            value = result.final_value
            self.finish_with(value, value if isinstance(value, str) else describe_value(value, 2000))
        if not result.success:
            raise ToolFailed(text)
        return text

    # -- approval (the loop's: unity_nb.loop._approval) ----------------------------------

    def needs_approval(self, tool: Tool) -> bool:
        """A JSON tool waits when it is marked, or on every call with ``approval="always"`` (a plan's
        approval is asked inside ``execute_code``, where ``"first"`` counts plans)."""
        return tool.needs_approval or (self.actor.approval == "always" and tool.name != "execute_code")

    def __repr__(self) -> str:
        extra = f", {len(self._approvals)} call(s) waiting for approval" if self._approvals else ""
        return f"<unity handle {self.name!r}: {self.status.value}, {self.steps} steps{extra}>"
