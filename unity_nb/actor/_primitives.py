"""``primitives.<alias>.<method>``: the functions and managers a plan may call.

Every primitive is awaited in a plan (``await primitives.stats.summarise(df)``), whatever the
function underneath: coroutine functions are awaited, blocking functions registered with
``@unity_nb.primitive`` run in a worker thread (the kernel stays responsive), and methods of
managers run on the event loop (they start loops and return handles at once). A primitive
that returns a handle is awaited for its result; the loop it started is a child of the
calling actor's loop, so steering reaches it and the widget shows it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, overload

from .._errors import UserError
from ..loop import in_worker, resolve_tool_value

__all__ = ("primitive", "registered_primitives", "unregister_primitive", "Primitives", "signature_text")

F = TypeVar("F", bound=Callable[..., Any])
_REGISTRY: dict[str, dict[str, tuple[Callable[..., Any], bool]]] = {}


@overload
def primitive(fn: F, /) -> F: ...
@overload
def primitive(*, alias: str = "user", name: str | None = None, blocking: bool = True) -> Callable[[F], F]: ...
def primitive(fn: Any = None, /, *, alias: str = "user", name: str | None = None, blocking: bool = True) -> Any:
    """Decorator: offer a notebook function to the actor's plans as ``primitives.<alias>.<name>``.

    ``@unity_nb.primitive`` puts ``f`` at ``primitives.user.f``. A plain (non-async) function
    runs in a worker thread unless ``blocking=False`` (use that for a function that starts a
    loop and returns its handle). The function is returned unchanged.
    """

    def register(f: F) -> F:
        if not callable(f):
            raise UserError(f"@primitive needs a function, not {type(f).__name__}")
        for label, value in (("alias", alias), ("name", name or f.__name__)):
            if not isinstance(value, str) or not value.isidentifier() or value.startswith("_"):
                raise UserError(f"primitive {label} {value!r} must be a Python identifier not starting with '_'")
        _REGISTRY.setdefault(alias, {})[name or f.__name__] = (f, blocking)
        return f

    return register if fn is None else register(fn)


def unregister_primitive(name: str, alias: str = "user") -> None:
    """Forget a registered primitive (no error if absent)."""
    _REGISTRY.get(alias, {}).pop(name, None)


def registered_primitives() -> dict[str, dict[str, Callable[..., Any]]]:
    """``{alias: {name: function}}`` of everything registered with ``@primitive``."""
    return {a: {n: f for n, (f, _b) in fns.items()} for a, fns in _REGISTRY.items() if fns}


def signature_text(fn: Callable[..., Any]) -> str:
    """``(question: str) -> LoopHandle``: annotations evaluated, so postponed ones show unquoted."""
    for eval_str in (True, False):
        try:
            return str(inspect.signature(fn, eval_str=eval_str)).replace("unity_nb.loop._handle.", "")
        except (TypeError, ValueError, NameError):
            continue
    return "(...)"


def _public_methods(obj: Any) -> dict[str, Callable[..., Any]]:
    out = {}
    for n in dir(obj):
        if n.startswith("_"):
            continue
        try:
            v = getattr(obj, n)
        except Exception:  # noqa: BLE001
            continue
        if callable(v) and not isinstance(v, type):
            out[n] = v
    return out


async def _invoke(fn: Callable[..., Any], blocking: bool, args: tuple, kwargs: dict) -> Any:
    if inspect.iscoroutinefunction(fn) or not blocking:
        value = fn(*args, **kwargs)
    else:
        value = await in_worker(functools.partial(fn, *args) if args else fn, kwargs)  # a stop interrupts it
    return await resolve_tool_value(value)


class _Group:
    def __init__(self, alias: str, functions: Mapping[str, tuple[Callable[..., Any], bool]]) -> None:
        self._alias = alias
        self._functions = dict(functions)
        for name, (fn, blocking) in self._functions.items():
            setattr(self, name, self._wrap(name, fn, blocking))

    def _wrap(self, name: str, fn: Callable[..., Any], blocking: bool) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await _invoke(fn, blocking, args, kwargs)

        call.__qualname__ = f"primitives.{self._alias}.{name}"
        return call

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"primitives.{self._alias} has no {name!r}; it has: {', '.join(sorted(self._functions)) or 'nothing'}"
        )

    def __dir__(self) -> Iterable[str]:
        return sorted(self._functions)

    def __repr__(self) -> str:
        return f"<primitives.{self._alias}: {', '.join(sorted(self._functions))}>"


class Primitives:
    """The ``primitives`` object a plan sees: one attribute per alias."""

    def __init__(self, groups: Mapping[str, Any] | None = None) -> None:
        merged: dict[str, dict[str, tuple[Callable[..., Any], bool]]] = {
            a: dict(fns) for a, fns in _REGISTRY.items() if fns
        }
        for alias, obj in (groups or {}).items():
            if not isinstance(alias, str) or not alias.isidentifier() or alias.startswith("_"):
                raise UserError(f"primitives alias {alias!r} must be a Python identifier not starting with '_'")
            if isinstance(obj, Mapping):
                fns = {n: (f, True) for n, f in obj.items()}
            elif isinstance(obj, list | tuple):
                fns = {f.__name__: (f, True) for f in obj}
            else:  # a manager: its public methods, run on the event loop
                fns = {n: (f, False) for n, f in _public_methods(obj).items()}
            merged.setdefault(alias, {}).update(fns)
        self._groups = {a: _Group(a, fns) for a, fns in merged.items()}

    def __getattr__(self, alias: str) -> _Group:
        groups = self.__dict__.get("_groups", {})
        if alias in groups:
            return groups[alias]
        raise AttributeError(f"there are no primitives.{alias}; there are: {', '.join(sorted(groups)) or 'none'}")

    def __dir__(self) -> Iterable[str]:
        return sorted(self._groups)

    def __repr__(self) -> str:
        return f"<primitives: {', '.join(sorted(self._groups)) or 'none'}>"

    def __bool__(self) -> bool:
        return bool(self._groups)

    def describe(self, limit: int = 6000) -> str:
        """Every primitive with its signature and docstring, for the actor's prompt."""
        lines: list[str] = []
        for alias in sorted(self._groups):
            for name, (fn, _b) in sorted(self._groups[alias]._functions.items()):
                sig = signature_text(fn)
                doc = (inspect.getdoc(fn) or "").strip()
                doc = doc if len(doc) <= 400 else doc[:400] + "..."
                more = f"\n  {doc}".replace("\n", "\n  ") if doc else ""
                lines.append(f"- await primitives.{alias}.{name}{sig}{more}")
        text = "\n".join(lines)
        return text if len(text) <= limit else text[:limit] + "\n- ... (more primitives; use dir(primitives.<alias>))"
