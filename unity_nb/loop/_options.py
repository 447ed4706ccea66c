"""What a loop is started with: :class:`LoopOptions`, one frozen dataclass that checks itself.

Its fields are the keyword arguments of :func:`start_loop`; a bad value is refused when the
loop is started (never once it runs) with a :class:`UserError` naming the argument and what it
takes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .. import events as ev
from .._errors import UserError
from ..models import Model
from ._face import Loop
from ._policy import DynamicTools, ForcedFirstTools, LoopPolicy, TimeAwareness, ToolPolicyFunction
from ._tools import Tool
from ._typed import check_output

__all__ = ("LoopOptions", "ParentContext", "ToolPolicy")

ParentContext = Literal["always", "never", "model"]
ToolPolicy = Callable[..., "tuple[str, Sequence[Tool | str]]"]
"""``policy(step, tools) -> (mode, tools)``, or ``policy(step, tools, loop)``."""


_FIELDS: set[str] = set()
_SLOTS: dict[type, tuple[str, ...]] = {}
"""Each options class's field names, for :meth:`LoopOptions.named` (``copy.copy`` of a slotted frozen dataclass
calls ``dataclasses.fields`` twice: a twentieth of a batch row's CPU)."""


def _whole(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{name} takes a whole number of at least {least}, not {value!r} (it must be finite)")
        raise UserError(f"{name} takes a whole number of at least {least}, not {value!r}")
    if value < least:
        raise UserError(f"{name} must be at least {least}, not {value}")


def _functions(name: str, value: Any, what: str) -> tuple[Callable[..., Any], ...]:
    if callable(value) or isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise UserError(f"{name} must be {what} in a list, not a {type(value).__name__} (write {name}=[fn])")
    out = tuple(value)
    for fn in out:
        if not callable(fn):
            raise UserError(f"{name} must be {what}, not {fn!r}")
    return out


def _check_model(model: Any) -> None:
    complete = getattr(model, "complete", None)
    if model is None or not callable(complete):
        raise UserError(
            "start_loop needs model=...: an OpenAIModel('gpt-4.1-mini'), a ScriptedModel(fn), "
            "or anything with `async def complete(request, on_delta)`"
        )
    plain = inspect.isfunction(complete) or inspect.ismethod(complete)
    if plain and not inspect.iscoroutinefunction(complete):
        raise UserError(
            f"model=: {type(model).__name__}.complete must be a coroutine function "
            "(`async def complete(request, on_delta)`); the loop awaits it"
        )


@dataclass(frozen=True, slots=True)
class LoopOptions:
    """Everything a loop is started with (``start_loop(task, **options)``), checked when made."""

    model: Model
    """What answers: an ``OpenAIModel``, a ``ScriptedModel``, or anything with ``async def complete``."""
    tools: Sequence[Callable[..., Any] | Tool] = ()
    """Plain functions (sync ones run in a worker thread) with type hints and a docstring, or Tools."""
    system: str | None = None
    """The system prompt."""
    name: str | None = None
    """What the widget and the magics call the loop (default ``loop-<4 hex digits>``)."""
    max_steps: int = 30
    """Model calls at most; the last one offers no tools, so an answer always comes."""
    max_parallel_tools: int = 8
    """Tool calls of one step that run at once."""
    interrupt_on_interject: bool = True
    """An interjection cancels a model call in flight and re-issues it with the message."""
    first_step_tools: Sequence[str] = ()
    """Tools the first step must call, each of them (forced one after another)."""
    tool_policy: ToolPolicy | None = None
    """``policy(step, tools[, loop]) -> (mode, tools)``: which tools each step offers."""
    parent_context: ParentContext = "never"
    """Whether children of this loop see its conversation: ``always``, ``never``, or ``model`` (per call)."""
    bus: ev.EventBus | None = None
    """Where events are published (a child publishes where its parent does; default: the process bus)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Provider options sent with every request (``temperature``, ``seed``, ...)."""
    multi: bool = False
    """Serve several requests in one context (``h.requests.submit(text)``)."""
    persist: bool = False
    """A multi-request loop that waits for more requests until stopped."""
    context_window: int | None = None
    """The model's window in tokens: turns compression on."""
    compress_at: float = 0.8
    """Compress when the next request would exceed this fraction of the window."""
    keep_last: int = 8
    """Messages kept verbatim when compressing."""
    count_tokens: Callable[[list[dict]], int] | None = None
    """How to count a request's tokens (default: about four characters a token)."""
    dynamic_tools: Callable[[Loop], Iterable[Callable[..., Any] | Tool]] | None = None
    """``fn(loop)``: extra tools computed from state at each step."""
    time_awareness: bool = False
    """Note the wall-clock time after each batch of tool results."""
    prompt_cache: bool | Literal["openai", "anthropic"] = False
    """Caching hints: ``True``/``"openai"`` a ``prompt_cache_key``, ``"anthropic"`` ``cache_control`` marks."""
    evaluations: Sequence[Callable[..., Any]] = ()
    """``fn(answer, loop)`` judging the final answer; a failure sends the model back."""
    max_corrections: int = 1
    """Times evaluations may send the model back, per answer."""
    postprocessors: Sequence[Callable[..., Any]] = ()
    """``fn(answer, loop) -> str`` transforming the final answer."""
    output: Any = None
    """A pydantic model class: the model is told its JSON schema, and ``result()`` gives the answer as an instance
    of it. An answer that does not validate is sent back once, saying what is wrong; a second fails the run."""
    history: Sequence[dict[str, Any]] = ()
    """Messages (OpenAI wire format) the conversation continues from, placed before the task: a
    conversation resumed from a store, say. Every assistant tool call needs its result."""
    tool_timeout: float | None = None
    """Seconds a tool call may run before it fails with an error the model sees (a tool's own
    ``timeout`` wins); ``None``: no limit."""
    max_result_chars: int = 100_000
    """Characters of one tool call's result kept (what the model reads, the transcript and the events): past it,
    the first and the last half of it, with a line saying how many characters were cut and by this bound."""
    policies: Sequence[LoopPolicy] = ()
    """A person's own :class:`LoopPolicy` objects, outermost first (they wrap the flags' policies)."""
    chain: tuple[LoopPolicy, ...] = field(init=False, repr=False, compare=False, default=())
    """Every policy the loop asks, outermost first: ``policies``, then those the flags make
    (``dynamic_tools``, ``first_step_tools``, ``tool_policy``, ``time_awareness``)."""

    def __post_init__(self) -> None:
        _check_model(self.model)
        check_output(self.output)
        tools = self.tools
        if callable(tools) or isinstance(tools, str | bytes | Tool) or not isinstance(tools, Iterable):
            raise UserError(f"tools takes a list of functions, not {type(tools).__name__} (write tools=[fn])")
        object.__setattr__(self, "tools", tuple(tools))
        for label, text in (("system", self.system), ("name", self.name)):
            if text is not None and not isinstance(text, str):
                raise UserError(f"{label} takes a string, not {type(text).__name__}")
        if self.name is not None and not self.name.strip():
            raise UserError("name must not be empty")
        _whole("max_steps", self.max_steps, 1)
        _whole("max_parallel_tools", self.max_parallel_tools, 1)
        _whole("keep_last", self.keep_last, 1)
        _whole("max_corrections", self.max_corrections, 0)
        _whole("max_result_chars", self.max_result_chars, 100)
        first = self.first_step_tools if self.first_step_tools is not None else ()
        if isinstance(first, str) or not isinstance(first, Iterable):
            raise UserError(f"first_step_tools takes a list of tool names, not {first!r}")
        object.__setattr__(self, "first_step_tools", tuple(first or ()))
        if any(not isinstance(n, str) for n in self.first_step_tools):
            raise UserError(f"first_step_tools takes tool names (strings), not {list(self.first_step_tools)!r}")
        if self.tool_policy is not None and not callable(self.tool_policy):
            raise UserError(
                f"tool_policy takes a function policy(step, tools) -> (mode, tools), not {self.tool_policy!r}"
            )
        if self.parent_context not in ("always", "never", "model"):
            raise UserError(f"parent_context must be 'always', 'never' or 'model', not {self.parent_context!r}")
        if self.bus is not None and not isinstance(self.bus, ev.EventBus):
            raise UserError(f"bus takes an EventBus (unity_nb.EventBus()), not {self.bus!r}")
        if self.options is None:
            object.__setattr__(self, "options", {})
        elif not isinstance(self.options, dict):
            raise UserError(
                f"options takes a dict of provider options (e.g. {{'temperature': 0}}), not {self.options!r}"
            )
        else:
            object.__setattr__(self, "options", dict(self.options))
        for flag in ("interrupt_on_interject", "multi", "persist", "time_awareness"):
            if not isinstance(getattr(self, flag), bool):
                raise UserError(f"{flag} takes True or False, not {getattr(self, flag)!r}")
        if self.persist and not self.multi:
            raise UserError("persist=True needs multi=True: only a multi-request loop waits for more requests")
        window = self.context_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 64):
            raise UserError(f"context_window is the model's window in tokens (at least 64), not {window!r}")
        at = self.compress_at
        if isinstance(at, bool) or not isinstance(at, int | float) or not 0.1 <= at <= 1.0:
            raise UserError(f"compress_at is a fraction of the context window between 0.1 and 1, not {at!r}")
        if self.prompt_cache not in (False, True, "openai", "anthropic"):
            raise UserError(f"prompt_cache must be False, True ('openai') or 'anthropic', not {self.prompt_cache!r}")
        object.__setattr__(
            self, "evaluations", _functions("evaluations", self.evaluations, "functions fn(answer, loop)")
        )
        object.__setattr__(
            self, "postprocessors", _functions("postprocessors", self.postprocessors, "functions fn(answer, loop)")
        )
        for label, fn in (("count_tokens", self.count_tokens), ("dynamic_tools", self.dynamic_tools)):
            if fn is not None and not callable(fn):
                raise UserError(f"{label} takes a function, not {fn!r}")
        history = self.history if self.history is not None else ()
        if isinstance(history, str | bytes | dict) or not isinstance(history, Iterable):
            raise UserError(f"history takes a list of messages ({{'role': ..., 'content': ...}}), not {history!r}")
        object.__setattr__(self, "history", tuple(history))
        roles = ("system", "user", "assistant", "tool")
        for m in self.history:
            if not isinstance(m, dict) or m.get("role") not in roles:
                raise UserError(f"history takes messages with a role among {roles}, not {m!r}")
        object.__setattr__(self, "chain", self._chain())
        timeout = self.tool_timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise UserError(f"tool_timeout takes a number of seconds above 0 (or None), not {timeout!r}")

    def _chain(self) -> tuple[LoopPolicy, ...]:
        own = self.policies if self.policies is not None else ()
        if isinstance(own, LoopPolicy) or not isinstance(own, Iterable):
            raise UserError(f"policies takes a list of LoopPolicy objects, not {own!r} (write policies=[p])")
        own = tuple(own)
        object.__setattr__(self, "policies", own)
        for p in own:
            if not isinstance(p, LoopPolicy):
                raise UserError(f"policies takes LoopPolicy objects (subclass unity_nb.LoopPolicy), not {p!r}")
        made: list[LoopPolicy] = []
        if self.dynamic_tools is not None:
            made.append(DynamicTools(self.dynamic_tools))
        if self.first_step_tools:
            made.append(ForcedFirstTools(*self.first_step_tools))
        if self.tool_policy is not None:
            made.append(ToolPolicyFunction(self.tool_policy))
        if self.time_awareness:
            made.append(TimeAwareness())
        return (*own, *made)

    def named(self, name: str) -> LoopOptions:
        """These options under another ``name`` (checked options stay checked: many loops, one check)."""
        if not isinstance(name, str) or not name.strip():
            raise UserError(f"name takes a non-empty string, not {name!r}")
        cls = type(self)
        names = _SLOTS.get(cls)
        if names is None:
            names = _SLOTS[cls] = tuple(f.name for f in fields(cls))
        other = object.__new__(cls)
        put = object.__setattr__
        for key in names:
            put(other, key, getattr(self, key))
        put(other, "name", name)
        return other

    @classmethod
    def make(cls, **options: Any) -> LoopOptions:
        """``LoopOptions(**options)``, refusing an unknown option with the list of known ones."""
        if not _FIELDS:
            _FIELDS.update(f.name for f in fields(cls) if f.init)
        known = _FIELDS
        unknown = sorted(set(options) - known)
        if unknown:
            raise UserError(
                f"start_loop got unknown option(s) {', '.join(unknown)}; it takes: {', '.join(sorted(known))}"
            )
        if "model" not in options:
            _check_model(None)
        return cls(**options)
