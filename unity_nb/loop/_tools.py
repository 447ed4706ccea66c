"""Turning plain Python functions into tools a model can call.

The schema comes from the signature (via pydantic), the description from the docstring, a parameter's own
description and bounds from ``Annotated[type, pydantic.Field(description=..., ge=...)]``. A
parameter annotated ``ToolContext`` is not shown to the model: the loop passes a context
through which the tool can ask the person a question or report progress.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import re
import typing
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic

from .._errors import ToolDefinitionError
from ._context import loop_of
from ._face import Loop
from ._gate import gate, gated_function

__all__ = ("Tool", "ToolContext", "ToolFailed", "as_tool")

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolFailed(Exception):
    """Raised by a tool to fail its call with exactly this text as the result the model reads."""


class _Calls(Protocol):
    """What a tool's context reaches of the loop running it: its tool runner (``ToolRunner``)."""

    def printed(self, rec: Any, text: str) -> None: ...
    def finish_with(self, value: Any, text: str | None = None) -> None: ...
    def emit(self, kind: Any, **fields: Any) -> None: ...
    def notify(self, call_id: str | None, text: str, request_id: str | None = None) -> None: ...
    async def clarify(self, call_id: str, question: str, request_id: str | None = None) -> str: ...
    async def wait_for_approval(
        self, call_id: str, *, tool: str, code: str, intent: str | None = None
    ) -> tuple[bool, str | None]: ...


class ToolContext:
    """What a tool receives in a parameter annotated ``unity_nb.ToolContext``.

    ``await ctx.clarify(question)`` asks the person and waits for the answer (the handle's
    status says ``waiting`` meanwhile); ``ctx.notify(text)`` reports progress without waiting;
    ``ctx.handle`` is the loop running the tool. A tool that works with its loop more closely (the
    actor's ``execute_code``) prints to its call (:meth:`print`), ends the loop with a value
    (:meth:`finish`), waits for the person's approval (:meth:`approval`) and publishes events (:meth:`emit`).

    The handle is held weakly: a context kept after its call (by a closure a thread holds) does not keep the loop,
    its tools and its transcript alive; ``ctx.handle`` raises ``ReferenceError`` once the loop was freed.
    """

    __slots__ = ("_calls", "_handle", "call_id", "record", "request_id", "tool_name")

    def __init__(
        self, handle: Loop, call_id: str, tool_name: str, record: Any = None, request_id: str | None = None,
        calls: _Calls | None = None,
    ) -> None:
        self._handle = weakref.ref(handle)
        self.call_id = call_id
        self.tool_name = tool_name
        self.record = record
        """The call's :class:`ToolCallRecord` (what the transcript and the widget show)."""
        self.request_id = request_id
        """In a multi-request loop: the request this call serves (when the model said, or only one is open)."""
        self._calls = calls

    @property
    def handle(self) -> Loop:
        """The loop running the tool."""
        return loop_of(self._handle, self.call_id)

    def _loop(self) -> _Calls:
        if self._calls is None:
            raise RuntimeError("this ToolContext was made outside a running loop's tool call")
        return self._calls

    async def clarify(self, question: str) -> str:
        """Ask the person ``question``; return their answer."""
        return await self._loop().clarify(self.call_id, question, self.request_id)

    def notify(self, text: str) -> None:
        """Report progress to whoever watches the handle (bottom-up, no waiting)."""
        self._loop().notify(self.call_id, text, self.request_id)

    def print(self, text: str) -> None:
        """Text this call printed (streamed to the widget and the transcript as the call's output)."""
        if self.record is not None:
            self._loop().printed(self.record, text)

    def finish(self, value: Any, text: str | None = None) -> None:
        """End the loop with ``value`` as its result once the current tool calls have their results
        (``text``: what the transcript shows)."""
        self._loop().finish_with(value, text)

    def emit(self, kind: Any, **fields: Any) -> None:
        """Publish an event of the loop (``ctx.emit(ev.CodeExecuted, call_id=ctx.call_id, ...)``)."""
        self._loop().emit(kind, **fields)

    async def approval(self, *, code: str, intent: str | None = None) -> tuple[bool, str | None]:
        """Wait until the person approves or skips this call (``code``: what they are shown): ``(run, reason)``."""
        return await self._loop().wait_for_approval(self.call_id, tool=self.tool_name, code=code, intent=intent)


@dataclass(slots=True)
class Tool:
    """A function the model may call, with its wire schema."""

    name: str
    description: str
    fn: Callable[..., Any]
    params: type[pydantic.BaseModel]
    ctx_param: str | None
    is_async: bool
    ref_only: tuple[str, ...] = ()
    """Parameters whose type has no JSON form (a DataFrame, say): only a variable reference
    can fill them, so only the actor can offer this tool."""
    json_params: type[pydantic.BaseModel] | None = None
    """``params`` without the ``ref_only`` fields (what the JSON schema describes)."""
    timeout: float | None = None
    """Seconds a call may run before it fails with an error the model reads (``None``: the loop's ``tool_timeout``)."""
    needs_approval: bool = False
    """Each call waits for a person's approval (``h.inbox.approve()`` / ``h.inbox.skip(reason=...)``, the widget's
    Run / Skip, ``%unity approve``) before it runs; a skip's reason is the result the model reads. ``fn`` is then
    the function's gate: called by any other path inside an operation (a plan), it waits too (``loop._gate``)."""
    secrets: bool | None = None
    """Whether ``"<<secret:NAME>>"`` in the call's arguments is replaced by the value before the tool
    runs. ``None``: only for a tool a person wrote (its function is defined outside unity_nb); the
    loop's own tools (answers, steering, managers) get the reference as text, so a model cannot
    make a secret's value land in an answer, a store or a reply."""
    _params_schema: dict | None = None

    @property
    def gated(self) -> Callable[..., Any] | None:
        """The marked function a call of this tool runs (``fn``'s, when ``fn`` is a gate): a call the loop
        approved lets it run once without asking again."""
        return gated_function(self.fn)

    @property
    def takes_secrets(self) -> bool:
        """Secret references in this tool's arguments are resolved to their values (see ``secrets``)."""
        if self.secrets is not None:
            return self.secrets
        return not _defined_in_unity_nb(self.fn)

    @property
    def parameters_schema(self) -> dict:
        if self._params_schema is None:  # this tool's own copy: a person may change it (a description, say)
            self._params_schema = copy.deepcopy(_parameters(self.json_params or self.params))
        return self._params_schema

    def schema(self, *, extra_properties: dict | None = None) -> dict:
        """The tool in the OpenAI wire format."""
        params = self.parameters_schema
        if extra_properties:
            params = {**params, "properties": {**params.get("properties", {}), **extra_properties}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def parse(self, arguments: str) -> dict[str, Any]:
        """Validate JSON arguments; raise ``ValueError`` with a message the model can act on."""
        try:
            model = self.params.model_validate_json(arguments or "{}")
        except pydantic.ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in err.errors()
            )
            raise ValueError(f"invalid arguments for {self.name}: {problems}") from None
        return {k: getattr(model, k) for k in type(model).model_fields}


_CACHE: weakref.WeakKeyDictionary[Callable[..., Any], dict[str | None, Tool]] = weakref.WeakKeyDictionary()
"""``function -> {name: its tool, without the function}``: a tool holding its function would keep its key alive,
and so every closure made a tool (a parent's steering tools per child hold the child) for good."""


def _unset(*_args: Any, **_kwargs: Any) -> Any:  # pragma: no cover - never called: replaced on every use
    raise RuntimeError("a cached tool's function is given back with it")


def _defined_in_unity_nb(fn: Callable[..., Any]) -> bool:
    fn = inspect.unwrap(fn) if callable(fn) else fn
    module = getattr(fn, "__module__", None) if inspect.isroutine(fn) else type(fn).__module__
    return isinstance(module, str) and (module == "unity_nb" or module.startswith("unity_nb."))


def as_tool(
    obj: Callable[..., Any] | Tool,
    *,
    name: str | None = None,
    timeout: float | None = None,
    needs_approval: bool | None = None,
) -> Tool:
    """Make a :class:`Tool` of a function (sync or async, with type hints and a docstring).

    ``timeout`` (seconds) bounds each call: past it the call fails with an error the model reads
    (a sync tool's thread is interrupted). ``needs_approval=True``: each call waits for a person's
    approval before it runs (see :attr:`Tool.needs_approval`), and the tool's ``fn`` is the function's gate,
    which waits wherever an operation calls it. A gate (what ``@unity_nb.tool(needs_approval=True)`` returns)
    stays marked: ``needs_approval=False`` does not unmark it. The result is cached per function:
    building a schema with pydantic costs milliseconds.
    """
    if needs_approval is not None:
        if not isinstance(needs_approval, bool):
            raise ToolDefinitionError(f"needs_approval is True or False, not {needs_approval!r}")
        base = as_tool(obj, name=name, timeout=timeout)
        if not needs_approval or base.needs_approval:
            return base
        return dataclasses.replace(base, needs_approval=True, fn=gate(base.fn))
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
            raise ToolDefinitionError(f"a tool's timeout is a number of seconds above 0, not {timeout!r}")
        return dataclasses.replace(as_tool(obj, name=name), timeout=float(timeout))
    if isinstance(obj, Tool):
        return obj
    try:
        cached = _CACHE.get(obj, {}).get(name)
    except TypeError:  # not weak-referenceable or hashable
        cached = None
    if cached is not None:
        return dataclasses.replace(cached, fn=obj)
    tool = _build(obj, name)
    try:
        _CACHE.setdefault(obj, {})[name] = dataclasses.replace(tool, fn=_unset)
    except TypeError:
        pass
    return tool


def _build(obj: Callable[..., Any], name: str | None) -> Tool:
    if not callable(obj):
        raise ToolDefinitionError(f"a tool must be a function, not {type(obj).__name__}")
    raw = gated_function(obj)
    if raw is not None:  # a marked function: described from the function, called through its gate
        return dataclasses.replace(_build(raw, name or getattr(obj, "__name__", None)), fn=obj, needs_approval=True)
    fn = obj
    tool_name = name or getattr(fn, "__name__", None) or type(fn).__name__
    if not _NAME.match(tool_name):
        raise ToolDefinitionError(f"tool name {tool_name!r} is not allowed: use 1-64 letters, digits, '_' or '-'")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)  # Annotated[..., Field(...)] kept: its words, bounds
    except Exception as err:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read its type hints ({err})") from None
    fields: dict[str, Any] = {}
    ctx_param = None
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: *{pname} / **{pname} cannot be described to a model; name each parameter"
            )
        if pname not in hints:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {pname!r} has no type hint; the model needs one to call it "
                f"(for example `{pname}: str`)"
            )
        if hints[pname] is ToolContext:
            ctx_param = pname
            continue
        default = ... if param.default is param.empty else param.default
        fields[pname] = (hints[pname], default)
    params, json_params, ref_only = _validation(tool_name, fields)
    doc = inspect.getdoc(fn) or ""
    tool = Tool(
        name=tool_name,
        description=doc or f"Call {tool_name}.",
        fn=fn,
        params=params,
        ctx_param=ctx_param,
        is_async=inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)),  # noqa: B004
        ref_only=ref_only,
        json_params=json_params,
    )
    tool.parameters_schema  # noqa: B018 - this function's own copy, which the tools as_tool gives for it share
    return tool


_SCHEMAS: weakref.WeakKeyDictionary[type, dict] = weakref.WeakKeyDictionary()
_PARAMETERS: weakref.WeakKeyDictionary[type, dict] = weakref.WeakKeyDictionary()


def json_schema(model: type[pydantic.BaseModel]) -> dict:
    """``model.model_json_schema()``, made by pydantic once per model class (a few hundred microseconds, and a
    typed batch or operator call asked for the same schemas three times); a copy of it for each caller."""
    schema = _SCHEMAS.get(model)
    if schema is None:
        schema = _SCHEMAS[model] = model.model_json_schema()
    return copy.deepcopy(schema)


def _parameters(model: type[pydantic.BaseModel]) -> dict:
    """A tool's parameters as the wire shows them: :func:`json_schema` without pydantic's titles (one dict per
    model class: each tool copies it, see :attr:`Tool.parameters_schema`)."""
    schema = _PARAMETERS.get(model)
    if schema is None:
        schema = model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        _PARAMETERS[model] = schema
    return schema


_MADE: dict[tuple, tuple] = {}
"""``(tool name, its fields) -> (params, json_params, ref_only)``: what pydantic made for a tool (about a
millisecond a tool), for every function of that name and those parameters (each closure a run, a child or a manager
makes of one ``def``: the actor's ``execute_code``, a parent's steering tools per child). Only for parameters whose
defaults are plain values (None, booleans, numbers, text): the models hold the defaults, and a table entry would keep
any other one (a DataFrame) alive after its tool. At most :data:`_MADE_MAX` (emptied when full)."""
_MADE_MAX = 1024


def _validation(
    tool_name: str, fields: dict[str, Any]
) -> tuple[type[pydantic.BaseModel], type[pydantic.BaseModel] | None, tuple[str, ...]]:
    """The pydantic models and the parameters only a reference can fill of a tool named ``tool_name`` with
    ``fields`` (``{name: (type, default)}``), made once for each such name and fields (its schema checked)."""
    try:
        key: tuple | None = (tool_name, *(_field_key(k, t, d) for k, (t, d) in fields.items()))
        made = _MADE.get(key)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a type or default that cannot be hashed or shown: made for this one alone
        key = made = None
    if made is not None:
        return made[:3]
    config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    try:
        params = pydantic.create_model(f"{tool_name}_args", __config__=config, **fields)
    except Exception as err:
        raise ToolDefinitionError(f"tool {tool_name!r}: its parameters cannot be validated ({err})") from None
    ref_only = []
    for pname, (hint, _default) in fields.items():
        try:
            pydantic.TypeAdapter(hint, config=config).json_schema()
        except Exception:  # noqa: BLE001 - no JSON form: a variable reference only
            ref_only.append(pname)
    json_params = None
    if ref_only:
        json_params = pydantic.create_model(
            f"{tool_name}_json_args", __config__=config, **{k: v for k, v in fields.items() if k not in ref_only}
        )
    try:  # fail now, not at the first model call
        _parameters(json_params or params)
    except Exception as err:
        raise ToolDefinitionError(f"tool {tool_name!r}: its parameters have no JSON schema ({err})") from None
    if key is not None and all(type(d) in _PLAIN for _t, d in fields.values()):  # (a default kept would outlive it)
        if len(_MADE) >= _MADE_MAX:
            _MADE.clear()
        _MADE[key] = (params, json_params, tuple(ref_only))
    return params, json_params, tuple(ref_only)


_PLAIN = frozenset({type(None), bool, int, float, str, bytes, type(...)})


def _field_key(name: str, hint: Any, default: Any) -> tuple:
    """What a parameter's model and schema are made from. A type by its text too (``int | str`` equals ``str | int``,
    and its schema lists them in order); a default of a plain type by its text (``1``, ``1.0`` and ``True`` are
    equal, ``0.0`` and ``-0.0`` too), any other by identity (two equal datetimes in other time zones, or ``(1, 0)``
    and ``(True, False)``, are not the same default)."""
    shown = (type(default), repr(default)) if type(default) in _PLAIN else (type(default), id(default))
    return (name, hint, repr(hint), *shown)


def render_result(value: Any) -> str:
    """A tool's return value as the text the model reads."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        return repr(value)
