"""Variables by reference in JSON tool calls (after Conatus).

Any tool parameter may receive ``"<<var:name>>"``: the variable ``name`` of the namespace,
passed as the very object (no copy, no JSON). Which variables fit which parameter is decided
by pydantic, in strict mode, with **one** validation model holding every parameter of every
tool (building a model costs far more than running it). The answers are cached per variable
and recomputed only for variables that changed.

Each parameter's schema then offers the compatible variables as an enum alternative; a
parameter whose type has no JSON form (a DataFrame) takes references only, and a tool whose
required parameter has no compatible variable is not offered at all. An optional ``return``
parameter names the variable that receives the result; without it, a result the model reads whole (JSON data
up to 4,000 characters) goes into no variable, and any other result into a fresh one, named in the reply.
"""

from __future__ import annotations

import builtins
import copy
import json
import keyword
import re
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import pydantic

from .._json import loads
from .._output import install as route_output
from .._output import tool_output
from .._secrets import scrub
from ..loop import Tool, in_worker, render_result, resolve_tool_value
from ._describe import HIDDEN_NAMES, describe_value, fingerprint
from ._executor import truncate

__all__ = ("REF", "RefIndex", "RefTool")

REF = re.compile(r"^<<var:([A-Za-z_][A-Za-z0-9_]*)>>$")
_MAX_ENUM = 40
_WHOLE = 4000
"""A result the model reads whole (JSON data up to this many characters) is not kept in a variable unasked."""
_RETURN_DOC = (
    "Optional. The name of a variable to store this call's result in (a new or an existing one). "
    "Without it a result that is not plain JSON (a DataFrame, say) is stored in a fresh variable, named in the "
    "reply; JSON data is only shown."
)


_MODELS: dict[tuple, type[pydantic.BaseModel]] = {}
"""``fields -> model`` (:func:`_references_model`): each actor run's index has one, and building it costs about a
millisecond where reusing it costs nothing. At most :data:`_MODELS_MAX` (emptied when full)."""
_MODELS_MAX = 256


def _references_model(fields: dict[str, Any]) -> type[pydantic.BaseModel]:
    """The one validation model (strict) with a required field of each parameter's type, made once for those
    fields (an actor run with the same tools as an earlier one reuses it)."""
    try:  # a type by its text too: ``int | str`` equals ``str | int``
        key: tuple | None = tuple((k, t, repr(t)) for k, (t, _required) in fields.items())
        model = _MODELS.get(key)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a type that cannot be hashed or shown: made for this index alone
        key = model = None
    if model is None:
        model = pydantic.create_model(
            "unity_nb_references", __config__=pydantic.ConfigDict(arbitrary_types_allowed=True, strict=True), **fields
        )
        if key is not None:
            if len(_MODELS) >= _MODELS_MAX:
                _MODELS.clear()
            _MODELS[key] = model
    return model


class RefIndex:
    """Which namespace variables are compatible with which parameter of which tool."""

    def __init__(self, tools: list[Tool]) -> None:
        self.tools = {t.name: t for t in tools}
        self._keys: dict[str, tuple[str, str]] = {}
        fields: dict[str, Any] = {}
        for t in tools:
            for pname, finfo in t.params.model_fields.items():
                key = f"f{len(self._keys)}"
                self._keys[key] = (t.name, pname)
                fields[key] = (finfo.annotation, ...)
        self._by_param = {v: k for k, v in self._keys.items()}
        self._model = _references_model(fields)
        self._cache: dict[str, tuple[tuple, frozenset[str]]] = {}
        self._seen: Mapping[str, tuple] | None = None  # the snapshot the last answer is for
        self._out: dict[tuple[str, str], list[str]] | None = None

    def _fits(self, value: Any) -> frozenset[str]:
        """The field keys ``value`` validates against (strict: no coercion)."""
        if not self._keys:
            return frozenset()
        try:
            self._model.model_validate(dict.fromkeys(self._keys, value))
            return frozenset(self._keys)
        except pydantic.ValidationError as err:
            bad = {e["loc"][0] for e in err.errors() if e["loc"]}
            return frozenset(k for k in self._keys if k not in bad)
        except Exception:
            return frozenset()

    def refresh(
        self, fingerprints: Mapping[str, tuple], namespace: Mapping[str, Any]
    ) -> dict[tuple[str, str], list[str]]:
        """``{(tool, param): [compatible variable names]}`` for the user variables a snapshot fingerprints (the
        step's own: no second pass over the namespace), recomputed for changed variables only. The same
        snapshot object as last time gives the same answer object, at once."""
        if fingerprints is self._seen and self._out is not None:
            return self._out
        changed = False  # whether any variable's compatibility changed (a counter's new value changes nothing)
        cache = self._cache
        for name, fp in fingerprints.items():
            cached = cache.get(name)
            if cached is None or (cached[0] is not fp and cached[0] != fp):
                fits = self._fits(namespace[name])
                changed = changed or fits != (cached[1] if cached is not None else frozenset())
                cache[name] = (fp, fits)
        if len(cache) > len(fingerprints):  # it holds every name of the snapshot now: the rest are gone
            for name in [n for n in cache if n not in fingerprints]:
                changed = bool(cache.pop(name)[1]) or changed
        self._seen = fingerprints
        if not changed and self._out is not None:
            return self._out
        out: dict[tuple[str, str], list[str]] = {p: [] for p in self._by_param}
        for name in sorted(self._cache):
            for key in self._cache[name][1]:
                out[self._keys[key]].append(name)
        self._out = out
        return out

    def fits(self, tool: str, param: str, value: Any) -> bool:
        key = self._by_param.get((tool, param))
        return key is None or key in self._fits(value)


def _type_name(tool: Tool, param: str) -> str:
    ann = tool.params.model_fields[param].annotation
    return getattr(ann, "__name__", None) or str(ann).replace("typing.", "")


def ref_schema(tool: Tool, compatible: Mapping[tuple[str, str], list[str]]) -> dict | None:
    """The tool's wire schema with references offered, or ``None`` when it cannot be called yet."""
    params = copy.deepcopy(tool.parameters_schema)
    props = params.setdefault("properties", {})
    required = list(params.get("required", []))
    fields = tool.params.model_fields
    for pname, finfo in fields.items():
        names = compatible.get((tool.name, pname), [])[:_MAX_ENUM]
        refs = {
            "type": "string",
            "enum": [f"<<var:{n}>>" for n in names],
            "description": f"a variable passed by reference, compatible with type {_type_name(tool, pname)}",
        }
        if pname in tool.ref_only:
            if not names:
                if finfo.is_required():
                    return None
                continue
            props[pname] = {**refs, "description": (
                f"(type: {_type_name(tool, pname)}) Pass a variable by reference: '<<var:name>>' "
                f"with one of {names}."
            )}
            if finfo.is_required():
                required.append(pname)
        elif names and pname in props:
            original = props[pname]
            desc = original.pop("description", None)
            props[pname] = {"anyOf": [original, refs]}
            if desc:
                props[pname]["description"] = desc
    props["return"] = {
        "anyOf": [{"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}, {"type": "null"}],
        "description": _RETURN_DOC,
    }
    if required:
        params["required"] = required
    return {"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": params}}


class RefTool(Tool):
    """A tool as the actor offers it: references resolved, the result stored in a variable."""

    def __init__(
        self,
        inner: Tool,
        *,
        namespace: MutableMapping[str, Any],
        index: RefIndex,
        compatible: Mapping[tuple[str, str], list[str]],
        protected: frozenset[str],
        on_stored: Callable[[str, Any], None] | None = None,
        hidden: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            name=inner.name, description=inner.description, fn=self._call, params=inner.params,
            ctx_param=inner.ctx_param, is_async=True, ref_only=inner.ref_only, json_params=inner.json_params,
            timeout=inner.timeout, needs_approval=inner.needs_approval, secrets=inner.takes_secrets,
        )
        self.inner = inner
        self.namespace = namespace
        self.index = index
        self.compatible = compatible
        self.protected = protected
        self.on_stored = on_stored
        self.hidden = hidden
        self._wire = ref_schema(inner, compatible)

    @property
    def available(self) -> bool:
        return self._wire is not None

    @property
    def gated(self) -> Callable[..., Any] | None:
        return self.inner.gated

    def schema(self, *, extra_properties: dict | None = None) -> dict:
        wire = self._wire or ref_schema(self.inner, {})
        if wire is None:  # only reached when called while unavailable; never offered
            return Tool.schema(self.inner)
        if extra_properties:
            wire = copy.deepcopy(wire)
            wire["function"]["parameters"]["properties"].update(extra_properties)
        return wire

    def parse(self, arguments: str) -> dict[str, Any]:
        try:
            raw = loads(arguments or "{}")
        except json.JSONDecodeError as err:
            raise ValueError(f"invalid arguments for {self.name}: not JSON ({err.msg})") from None
        if not isinstance(raw, dict):
            raise ValueError(f"invalid arguments for {self.name}: expected a JSON object")
        target = raw.pop("return", None)
        if target is not None:
            if not isinstance(target, str) or not target.isidentifier() or keyword.iskeyword(target):
                raise ValueError(f"`return` must be a Python variable name, not {target!r}")
            if target in self.protected or target in HIDDEN_NAMES or target.startswith("__"):
                raise ValueError(f"`return` may not name {target!r}: that name is reserved; choose another")
            if hasattr(builtins, target):
                raise ValueError(
                    f"`return` may not name {target!r}: that is a Python builtin, which plans use; "
                    f"choose another name (say {target + '_result'!r})"
                )
        fields = self.params.model_fields
        unknown = [k for k in raw if k not in fields]
        if unknown:
            raise ValueError(
                f"invalid arguments for {self.name}: unknown parameters {unknown}; it takes {list(fields)}"
            )
        resolved: dict[str, Any] = {}
        refs: dict[str, str] = {}
        for key, value in list(raw.items()):
            m = REF.match(value) if isinstance(value, str) else None
            if m is None:
                if key in self.ref_only:
                    raise ValueError(self._needs_ref(key))
                continue
            name = m[1]
            if name not in self.namespace:
                raise ValueError(f"there is no variable named {name!r} for {key}; {self._choices(key)}")
            obj = self.namespace[name]
            if not self.index.fits(self.name, key, obj):
                raise ValueError(
                    f"variable {name!r} ({describe_value(obj, 80)}) is not compatible with parameter {key} "
                    f"(type {_type_name(self, key)}); {self._choices(key)}"
                )
            resolved[key] = obj
            refs[key] = name
            del raw[key]
        for key in self.ref_only:
            if key not in resolved and fields[key].is_required():
                raise ValueError(self._needs_ref(key))
        try:
            checked = self.params.model_validate({**raw, **resolved})
        except pydantic.ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in err.errors()
            )
            raise ValueError(f"invalid arguments for {self.name}: {problems}") from None
        kwargs = {k: getattr(checked, k) for k in fields if k in raw or k not in resolved}
        kwargs.update(resolved)  # the very objects, not validated copies
        return {"_unity_args": kwargs, "_unity_return": target, "_unity_refs": refs}

    def _choices(self, key: str) -> str:
        names = self.compatible.get((self.name, key), [])
        return f"compatible variables: {names}" if names else "no variable is compatible yet"

    def _needs_ref(self, key: str) -> str:
        return (
            f"parameter {key} of {self.name} (type {_type_name(self, key)}) takes a variable by reference, "
            f"'<<var:name>>'; {self._choices(key)}"
        )

    async def _call(
        self, _unity_args: dict, _unity_return: str | None, _unity_refs: dict[str, str] | None = None, **ctx: Any
    ) -> str:
        """Call the tool; report, as a plan's result does, what it printed and which variables passed by
        reference it changed in place (seed 001: stdout, stderr and modified variables)."""
        inner = self.inner
        kwargs = {**_unity_args, **ctx}
        for key, name in (_unity_refs or {}).items():
            # resolved again as the call runs: a call that waited for the person's approval gets what the name is
            # bound to now (a cell run meanwhile may have rebound or deleted it), as the approval showed it by name
            if name not in self.namespace:
                raise ValueError(f"variable {name!r} for {key} was deleted before the call ran; {self._choices(key)}")
            obj = self.namespace[name]
            if obj is not kwargs[key]:
                if not self.index.fits(self.name, key, obj):
                    raise ValueError(
                        f"variable {name!r} was rebound before the call ran, to {describe_value(obj, 80)}, which is "
                        f"not compatible with parameter {key} (type {_type_name(self, key)})"
                    )
                kwargs[key] = obj
        passed = sorted(set((_unity_refs or {}).values()))
        before = {n: fingerprint(self.namespace[n]) for n in passed}
        printed: list[tuple[str, str]] = []
        outer = tool_output.get()

        def capture(text: str, stream: str = "stdout") -> None:
            printed.append((stream, text))
            if outer is not None:
                outer(text, stream)

        route_output()  # sys.stdout and sys.stderr reach the hook of the call they are written in
        token = tool_output.set(capture)
        closed = False
        try:
            if inner.is_async:
                value = await inner.fn(**kwargs)
            else:
                value = await in_worker(inner.fn, kwargs)  # a stop or a timeout interrupts it there
            value = await resolve_tool_value(value)
        except GeneratorExit:  # its event loop was closed under it: closed by the collector, not in its context
            closed = True
            raise
        finally:
            if not closed:
                tool_output.reset(token)
        report = _report(printed, [n for n in passed if n in self.namespace
                                   and fingerprint(self.namespace[n]) != before[n]], self.namespace)
        if value is None and _unity_return is None:
            return "null" + report
        if _unity_return is None:
            whole = _whole_json(value)
            if whole is not None:  # the model read all of it: no variable unless it names one (`return`)
                return whole + report
        name = _unity_return or self._fresh_name()
        self.namespace[name] = value
        if self.on_stored is not None:
            self.on_stored(name, value)
        if isinstance(value, str | int | float | bool) or value is None:
            shown = render_result(value)
            shown = shown if len(shown) <= 4000 else shown[:4000] + f"... [{len(shown) - 4000:,} more characters]"
        else:
            shown = describe_value(value)
        return f"{shown}\n[stored in variable `{name}`; pass it on as <<var:{name}>>]{report}"

    def _fresh_name(self) -> str:
        base = f"{self.name}_result".replace("-", "_")
        if not base.isidentifier():
            base = "result"
        taken = set(self.namespace)
        if base not in taken:
            return base
        n = 2
        while f"{base}_{n}" in taken:
            n += 1
        return f"{base}_{n}"


def _whole_json(value: Any) -> str | None:
    """``value`` as the JSON the model reads, if that is all of it (JSON data up to 4,000 characters), else None."""
    if not isinstance(value, str | int | float | bool | list | dict):
        return None
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # not JSON data (an object inside, a NaN): kept in a variable
        return None
    return text if len(text) <= _WHOLE else None


def _report(printed: list[tuple[str, str]], changed: list[str], namespace: Mapping[str, Any]) -> str:
    """What a tool printed (each stream cut to a head and a tail) and the variables it changed in place."""
    lines = []
    for stream in ("stdout", "stderr"):
        text = scrub("".join(t for s, t in printed if s == stream))
        if text:
            lines.append(f"{stream}:\n{truncate(text)}")
    if changed:
        lines.append("changed in place: " + "; ".join(f"{n}: {describe_value(namespace[n], 160)}" for n in changed))
    return "".join(f"\n{line}" for line in lines)
