"""The data manager: what is in the kernel's namespace, described and examined with pandas."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

from .. import events as ev
from ..actor import Executor, describe_namespace, describe_value, fingerprint, user_variables
from ..loop import LoopHandle
from ._base import Manager
from ._util import clip, fail

__all__ = ("DataManager",)

_DETAIL = 4000


def _frame_detail(df: Any) -> str:
    """More than describe_value: every column with its dtype and nulls, a numeric summary."""
    rows, cols = df.shape
    lines = [f"pd.DataFrame, shape ({rows:,}, {cols})", "columns (dtype, non-null count):"]
    counts = df.count()
    for i, c in enumerate(df.columns[:100]):
        lines.append(f"- {c!s}: {df.dtypes.iloc[i]}, {int(counts.iloc[i]):,} non-null")
    if cols > 100:
        lines.append(f"- ... ({cols - 100} more columns)")
    try:
        lines.append("first 5 rows:\n" + df.head(5).iloc[:, :20].to_string(max_colwidth=30))
    except Exception:
        pass
    try:
        numeric = df.select_dtypes("number").iloc[:, :12]
        if numeric.shape[1]:
            lines.append("numeric summary:\n" + numeric.describe().round(4).to_string())
    except Exception:
        pass
    return clip("\n".join(lines), _DETAIL)


def _copy_on_write(pd: Any) -> bool:
    """pandas gives a shallow copy's changes to the copy alone (Copy-on-Write: always from pandas 3)."""
    try:
        if int(str(pd.__version__).split(".")[0]) >= 3:
            return True
        return pd.options.mode.copy_on_write is True
    except Exception:  # noqa: BLE001 - an unknown pandas: its objects are shared as they are
        return False


_COPIED_ITEMS = 100_000
"""Items of one of the person's values looked at (its lists', dicts', sets' and tuples', nested ones too) when its
scratch copy is made: what lies past them is shared with the person's value (and watched)."""
_COPIED_DEPTH = 50
"""Containers within containers copied (deeper ones are shared, and watched)."""
_ATOMS = frozenset({str, int, float, bool, bytes, complex, type(None)})


def _guarded(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """What the scratch copy holds for one of the person's values: a list, dict or set as a copy of it, and of the
    lists, dicts, sets and tuples within it (so ``items.append(3)`` or ``config["k"]["x"] = 1`` changes the copy
    alone; the same object met twice is copied once: ``memo``, by id, shared by the values of one refresh); a
    DataFrame or a Series as a shallow copy of it (under Copy-on-Write a change the code makes in place,
    ``df.loc[0, "x"] = 1``, is the copy's alone), a numpy array as a read-only view (a write raises, so the code
    learns it may not); anything else as it is (a change to it in place is reported as a warning when it shows)."""
    return _copied(value, {} if memo is None else memo, [_COPIED_ITEMS], 0)


def _copied(value: Any, memo: dict[int, Any], left: list[int], depth: int) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, list | dict | set | tuple):
        if depth > _COPIED_DEPTH or left[0] <= 0:
            return value  # shared, and watched
        return _container(value, memo, left, depth)
    pd, np = sys.modules.get("pandas"), sys.modules.get("numpy")
    try:
        if pd is not None and isinstance(value, pd.DataFrame | pd.Series) and _copy_on_write(pd):
            return value.copy(deep=False)
        if np is not None and isinstance(value, np.ndarray):
            view = value.view()
            view.flags.writeable = False
            return view
    except Exception:  # noqa: BLE001, S110 - a value that cannot be copied or viewed: shared, and watched
        pass
    return value


def _container(value: Any, memo: dict[int, Any], left: list[int], depth: int) -> Any:
    """A copy of a list, dict, set or tuple (its subclass kept: ``defaultdict``, ``Counter``, a namedtuple) and of
    what it holds, within ``left`` items; the value itself when it cannot be copied (shared, and watched)."""
    if isinstance(value, tuple):  # immutable itself: made anew only when something in it was copied
        items = []
        for item in value:
            left[0] -= 1
            items.append(_copied(item, memo, left, depth + 1) if left[0] > 0 else item)
        if all(a is b for a, b in zip(items, value)):
            return value
        try:
            new = type(value)(items) if type(value) is tuple else type(value)._make(items)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - a tuple of its own kind: shared, and watched
            return value
        memo[id(value)] = new
        return new
    try:
        new = copy.copy(value)
    except Exception:  # noqa: BLE001 - it cannot be copied: shared, and watched
        return value
    memo[id(value)] = new  # before what it holds: a container holding itself is copied once
    if isinstance(new, set):  # its items are hashable (immutable, as a rule): shared
        left[0] -= len(new)
        return new
    try:
        pairs = enumerate(new) if isinstance(new, list) else new.items()
        for key, item in pairs:
            left[0] -= 1
            if left[0] <= 0:
                break
            if type(item) not in _ATOMS:
                new[key] = _copied(item, memo, left, depth + 1)
    except Exception:  # noqa: BLE001, S110 - a subclass that takes no item (or changes as it is read): the rest shared
        pass
    return new


class DataManager(Manager):
    """The data in the notebook's namespace (DataFrames, Series, arrays, other variables):
    what there is, what it holds, and answers computed from it with pandas, without changing
    the person's variables.

    Values are described compactly (type, shape, dtypes, a few rows), never dumped. Code its
    loops run sees the namespace through a scratch copy, so names it assigns never reach the
    notebook; its lists, dicts and sets are copies (with the lists, dicts, sets and tuples they
    hold), its DataFrames and Series shallow copies (Copy-on-Write keeps a change made in place
    to the copy) and its arrays read-only views; a change made in place to another shared object
    is reported as a warning.
    """

    alias = "data"
    caller_description = "examining the data in the person's notebook namespace"
    exposed = ("describe", "find", "ask")

    def __init__(
        self,
        namespace: dict | None = None,
        *,
        model: Any = None,
        bus: ev.EventBus | None = None,
        registry: Any = None,
        code_timeout: float | None = 30.0,
    ) -> None:
        super().__init__(model=model, bus=bus, registry=registry)
        self._namespace = namespace
        self._fallback: dict | None = None
        self.code_timeout = code_timeout

    def _ns(self) -> tuple[dict, Any]:
        """The namespace and IPython's hidden names (``None`` outside IPython)."""
        if self._namespace is not None:
            return self._namespace, None
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:
            shell = None
        if shell is not None:
            return shell.user_ns, getattr(shell, "user_ns_hidden", None)
        if self._fallback is None:
            self._fallback = {}
        return self._fallback, None

    # -- the loops' tools -----------------------------------------------------------------------

    def _tools(self) -> list[Callable[..., Any]]:
        manager = self
        scratch: dict[str, Any] = {}
        own: set[str] = set()  # names this loop's code created in its scratch copy
        origins: dict[str, Any] = {}  # name -> the person's value its scratch copy was made from

        def list_variables(type_contains: str = "") -> str:
            """The person's variables, each described in one or a few lines (type, shape,
            columns); with ``type_contains`` (say "DataFrame") only those whose type name
            contains it."""
            ns, hidden = manager._ns()
            variables = user_variables(ns, hidden)
            if type_contains:
                wanted = type_contains.lower()
                variables = {k: v for k, v in variables.items() if wanted in type(v).__name__.lower()}
            return describe_namespace(variables, budget=6000)

        def describe_variable(name: str) -> str:
            """One variable in detail: for a DataFrame every column's dtype and non-null count,
            the first rows and a numeric summary; otherwise a longer description."""
            ns, hidden = manager._ns()
            variables = user_variables(ns, hidden)
            if name not in variables:
                raise fail(f"there is no variable {name!r}; the variables are: {sorted(variables)[:80]}")
            value = variables[name]
            if type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas"):
                return _frame_detail(value)
            return describe_value(value, 2000)

        async def run_code(code: str) -> str:
            """Run Python (pandas is ``pd``, numpy ``np``) over the namespace's variables and
            report what it printed and the value of its last expression. It works on a scratch
            copy of the namespace: names you assign stay here for your later run_code calls,
            never reach the notebook. Do not modify the person's objects in place."""
            ns, hidden = manager._ns()
            memo: dict[int, Any] = {}  # an object two of the person's values hold is copied once
            for k, v in ns.items():
                if k not in own and not (k in scratch and origins.get(k) is v):  # (else its copy, as the code left it)
                    scratch[k] = _guarded(v, memo)
                    origins[k] = v
            for alias, module in (("pd", "pandas"), ("np", "numpy")):
                if alias not in scratch:
                    try:
                        scratch[alias] = __import__(module)
                    except ImportError:
                        pass
            shared = user_variables(ns, hidden)
            before = {k: fingerprint(v) for k, v in shared.items()}
            executor = Executor(scratch, hidden=hidden, code_timeout=manager.code_timeout,
                                label=f"{manager.alias} code")
            result = await executor.run(code)
            own.update(result.created)
            own.update(result.changed)  # rebound (or changed) in the scratch copy: keep its version
            text = result.for_model()
            touched = [k for k, v in shared.items() if k in before and fingerprint(v) != before[k]]
            if result.created or result.changed:
                text += ("\n(names assigned here live in this scratch copy only" +
                         ("" if touched else "; the notebook's variables are unchanged") + ")")
            if touched:
                text += ("\nwarning: the code changed the person's " + ", ".join(f"`{k}`" for k in touched)
                         + " in place; do not modify their data")
            return text

        return [list_variables, describe_variable, run_code]

    def _context(self) -> str:
        ns, hidden = self._ns()
        return "Variables in the namespace now:\n" + describe_namespace(user_variables(ns, hidden), budget=3000)

    # -- public: loops ----------------------------------------------------------------------------

    def describe(self, request: str) -> LoopHandle:
        """Describe data in the namespace as asked (one variable, or all of a kind): what each
        holds, its shape, columns and types, missing values, and anything notable, concisely.
        """
        return self._loop("describe", request, tools=self._tools(), context=self._context())

    def find(self, request: str) -> LoopHandle:
        """Find which variables in the namespace hold what is described ("the table of
        customer orders", "anything with a date column"); answer with their exact names and a
        line on each, or say that none does.
        """
        return self._loop("find", request, tools=self._tools(), context=self._context())

    def ask(self, question: str) -> LoopHandle:
        """Answer a question about the data in the namespace by computing it with pandas
        (run_code): quote the numbers computed and say which variables and columns they come
        from. Never changes the person's variables.
        """
        return self._loop("ask", question, tools=self._tools(), context=self._context())
