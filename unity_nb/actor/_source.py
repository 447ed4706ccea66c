"""What the actor adds to a loop: a tool source (:class:`ActorTools`).

The loop offers ``execute_code`` (a plan runs in the notebook's namespace) and the registered JSON tools,
which take variables by reference; before each model call the source tells the model what the person
changed in the namespace since it last looked; a plan waits for the person's approval when the actor's
``approval`` says so. The source works with the loop's run (its events, conversation and counters) and with
each call's :class:`ToolContext`: it never holds the loop's handle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .. import events as ev
from .._errors import UserError
from .._secrets import get_secret, scrub, scrub_bundle, watch_environment
from ..loop import ToolCallRecord, ToolContext, ToolFailed, ToolSource, as_tool, current_call, skipped_result
from ._describe import describe_value
from ._executor import Executor, final_answer
from ._refs import RefIndex, RefTool

if TYPE_CHECKING:
    from ..loop import Run, Tool


class ActorSettings(Protocol):
    """What the actor's tool source reads of its :class:`Actor` (so this module never imports the actor)."""

    namespace: dict[str, Any]
    references: bool
    primitives: Any
    hidden: Any
    code_timeout: float | None
    shell: Any
    recorded: dict[str, Any]

    @property
    def tools(self) -> list[Any]: ...

    @property
    def approval(self) -> str: ...

__all__ = ("ActorTools",)


def _no_plan_final_answer(value: Any = None) -> None:
    """In a multi-request run a plan cannot end the run: the final_answer tool completes a request."""
    raise RuntimeError(
        "this run serves several requests: complete one with the tool final_answer(request_id, answer), not in a plan"
    )


async def _execute_code(code: str, intent: str, ctx: ToolContext) -> str:
    """Run Python in the notebook's namespace (top-level await allowed). Returns success,
    stdout, stderr, the value of the last expression, and the variables created, changed
    and deleted."""
    raise RuntimeError("execute_code describes the actor's tool; each run calls its own")  # pragma: no cover


class ActorTools(ToolSource):
    """The actor's tool source: ``execute_code`` and the JSON tools by reference, over ``actor``'s namespace."""

    def __init__(self, actor: ActorSettings, *, multi: bool, label: str) -> None:
        self.actor = actor
        self.namespace = actor.namespace
        self.plans = 0
        """Plans run (or skipped) so far."""
        self.approved = 0
        """Plans the person approved so far (``approval="first"`` asks until one is: a skip is no approval)."""
        self.displayed = 0
        """Rich outputs plans displayed so far."""
        self.json_tools = actor.tools
        if not actor.references:
            for t in self.json_tools:
                if t.ref_only:
                    raise UserError(
                        f"tool {t.name!r} takes {', '.join(t.ref_only)} by reference only, and references=False"
                    )
        self._ref_tools: dict[str, RefTool] = {}
        self._index: RefIndex | None = None
        self._index_for: tuple[str, ...] = ()
        self.executor = Executor(
            actor.namespace,
            protected={
                "primitives": actor.primitives, "get_secret": get_secret,
                "final_answer": _no_plan_final_answer if multi else final_answer,
            },
            hidden=actor.hidden,
            code_timeout=actor.code_timeout,
            label=label,
            shell=actor.shell,
            carry=True,  # the first step's look learns from the last run's over this namespace
        )
        # the tool described once per process (pydantic builds its schema in about a millisecond), called through
        # this source's own function
        self.exec_tool = dataclasses.replace(as_tool(_execute_code, name="execute_code"), fn=self._make_execute())
        self._known: dict[str, tuple] | None = None
        """The namespace as the model last saw it (the first step's look takes it: the system prompt, made at once,
        reads the user variables without fingerprints, and the cell that started the run may bind more)."""

    def bind(self, run: Run) -> None:
        super().bind(run)
        run.on_end.append(lambda _handle, _status, _error: self.executor.carry())  # for the next run's first look

    # -- what the model sees -------------------------------------------------------------

    def available(self) -> list[Tool]:
        tools: list[Tool] = [self.exec_tool]
        if not self.json_tools:
            return tools
        if not self.actor.references:
            return tools + [t for t in self.json_tools if t.name != "execute_code"]
        self._refresh_refs()
        return tools + [t for t in self._ref_tools.values() if t.available]

    def _refresh_refs(self) -> None:
        names = tuple(t.name for t in self.json_tools)
        if self._index is None or names != self._index_for:
            self._index = RefIndex(self.json_tools)
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
            for t in self.json_tools
            if t.name != "execute_code"
        }

    def named(self, name: str) -> Tool | None:
        if name == "execute_code":
            return self.exec_tool
        if self.actor.references:
            if name not in self._ref_tools and any(t.name == name for t in self.json_tools):
                self._refresh_refs()
            return self._ref_tools.get(name)
        return next((t for t in self.json_tools if t.name == name), None)

    def before_step(self) -> None:
        """Tell the model about variables the person changed in cells since it last looked."""
        run = self.run
        assert run is not None  # bound when the loop was made
        if run.state.steps == 0:  # what the cell that started the run bound meanwhile (``h = %unity act``) is not news
            self._known = self.executor.snapshot(hint=self._known)
            return
        if self._known is None:  # no look yet (none is taken before the first step)
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
            run.conversation.note("\n".join(lines))
            run.emit(
                ev.VariablesChanged, call_id=None, created=tuple(outside.created),
                changed=tuple(outside.changed), deleted=tuple(outside.deleted),
            )

    def _stored(self, name: str, _value: Any) -> None:
        """A JSON tool's result stored as a variable (by reference)."""
        run = self.run
        assert run is not None
        c = current_call()
        call = c.call_id if c is not None and c.loop.run is run else None
        self._known = self.executor.snapshot()
        run.emit(ev.VariablesChanged, call_id=call, created=(name,))

    # -- plans ----------------------------------------------------------------------------

    def _make_execute(self) -> Callable[..., Any]:
        source = self

        async def execute_code(code: str, intent: str, ctx: ToolContext) -> str:
            return await source._run_plan(code, intent, ctx)

        return execute_code

    def _plan_needs_approval(self) -> bool:
        mode = self.actor.approval
        return mode == "always" or (mode == "first" and not self.approved)

    async def _run_plan(self, code: str, intent: str, ctx: ToolContext) -> str:
        rec: ToolCallRecord | None = ctx.record
        watch_environment()  # a key in the environment a plan prints (os.environ) shows as its reference
        before: dict | None = self._known  # taken before this step: only identities are checked again
        if self._plan_needs_approval():
            before = None  # the person may have run cells while the plan waited: look again
            run, reason = await ctx.approval(code=code, intent=intent)
            if not run:
                self.plans += 1
                return skipped_result("execute_code", reason)
            self.approved += 1
        self.plans += 1

        def on_output(text: str, _stream: str) -> None:
            if rec is not None:
                ctx.print(text)

        def on_display(bundle: dict) -> None:
            bundle = scrub_bundle(bundle)
            self.displayed += 1
            if rec is not None:
                rec.add_display(bundle)
            ctx.emit(ev.ToolDisplay, call_id=ctx.call_id, mime_types=tuple(bundle.get("data", {})))

        result = await self.executor.run(code, on_output=on_output, on_display=on_display, before=before)
        watch_environment()  # and one the plan set itself
        # what the person's cells changed meanwhile is told at the next step as theirs (``result.seen``)
        self._known = result.seen if result.seen is not None else self.executor.last
        ctx.emit(
            ev.CodeExecuted, call_id=ctx.call_id, intent=intent, code=scrub(code),
            success=result.success, error=scrub(result.error),
            stdout_chars=max(result.stdout_chars, len(result.stdout)),
            stderr_chars=max(result.stderr_chars, len(result.stderr)), final=result.final,
            threads=tuple(result.threads),
        )
        if result.created or result.changed or result.deleted:
            ctx.emit(
                ev.VariablesChanged, call_id=ctx.call_id, created=tuple(result.created),
                changed=tuple(result.changed), deleted=tuple(result.deleted),
            )
        # scrubbed whole before the model's view cuts them to a head and a tail, so no cut splits a value
        result.stdout, result.stderr, result.error = scrub(result.stdout), scrub(result.stderr), scrub(result.error)
        text = result.for_model()
        if result.final:
            value = result.final_value
            ctx.finish(value, value if isinstance(value, str) else describe_value(value, 2000))
        if not result.success:
            raise ToolFailed(text)
        return text

    # -- approval -------------------------------------------------------------------------

    @property
    def approval(self) -> str:  # type: ignore[override]
        """The actor's approval of plans (recorded with the loop's start, so a resume keeps it)."""
        return self.actor.approval

    @property
    def settings(self) -> dict[str, Any]:  # type: ignore[override]
        """The actor's code timeout, and what its maker records of it (``Actor.recorded``: ``%unity act``'s
        ``managers``), recorded with an operation's start, so a resume keeps them."""
        return {**self.actor.recorded, "code_timeout": self.actor.code_timeout}

    def needs_approval(self, tool: Tool) -> bool:
        """A JSON tool waits when it is marked, or on every call with ``approval="always"`` (a plan's
        approval is asked inside ``execute_code``, where ``"first"`` counts plans)."""
        return tool.needs_approval or (self.actor.approval == "always" and tool.name != "execute_code")
