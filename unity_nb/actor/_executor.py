"""Running a plan (model-written Python) in a live namespace.

The pattern measured in real kernels: parse, compile with ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``,
``eval`` the code object in the namespace, and await the result when the code object is a
coroutine. A trailing expression is compiled apart (``eval`` mode) so its value can be
reported and displayed, as a cell's ``Out`` would be. The source is registered in
``linecache`` under a unique file name, so tracebacks show the plan's own lines.

What a plan prints or displays is captured (and also streamed to the call record the widget
shows) through the routing in :mod:`unity_nb._output`, so a plan running in the background
never prints into whichever cell is running.

A plan that computes without awaiting blocks the event loop, so no click can stop it. A
watchdog interrupts any synchronous stretch longer than ``code_timeout`` seconds: a timer
signal when the plan runs on the main thread (it also interrupts ``time.sleep``), else an
asynchronous exception raised in the plan's thread. Time spent awaiting does not count.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import builtins
import ctypes
import inspect
import io
import itertools
import linecache
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _output
from .._secrets import scrub
from ..loop import TextBuffer
from . import _plan_guard
from ._describe import describe_value, snapshot
from ._meanwhile import Cells, bound_names, theirs
from ._plan_guard import INPUT_MESSAGE, input_again, no_input, own_thread, threads_left
from ._watch import Watch

__all__ = ("Executor", "PlanResult", "FinalAnswer", "PlanTimeout", "final_answer")

log = logging.getLogger("unity_nb.actor")

_OUTPUT_LIMIT = 4000
_KEPT = 200_000
"""Characters of each stream a plan prints that its result keeps: the first and the last half (the model reads
:data:`_OUTPUT_LIMIT` of them, the transcript keeps its own share). A plan printing without end holds no more."""
_counter = itertools.count(1)


class FinalAnswer(BaseException):
    """Raised by ``final_answer(value)`` in a plan. A ``BaseException``, so a plan's own
    ``except Exception`` cannot swallow it."""

    def __init__(self, value: Any) -> None:
        super().__init__("final_answer")
        self.value = value


class PlanTimeout(BaseException):
    """A plan computed for longer than ``code_timeout`` seconds without awaiting."""


def final_answer(value: Any = None) -> None:
    """End the task with ``value`` as its result (call it in a plan)."""
    raise FinalAnswer(value)


def truncate(text: str, limit: int = _OUTPUT_LIMIT, total: int = 0) -> str:
    """``text`` kept whole up to ``limit`` characters; else its head and tail, saying so. ``total``: how long the
    text was before a middle part of it was cut already (see :data:`_KEPT`), when it was."""
    total = max(total, len(text))
    if total <= limit:
        return text
    head, tail = text[: limit // 2], text[-limit // 2 :]
    return f"{head}\n[... truncated: {total - len(head) - len(tail):,} characters omitted ...]\n{tail}"


@dataclass
class PlanResult:
    """What running one plan did."""

    success: bool
    stdout: str = ""
    stderr: str = ""
    stdout_chars: int = 0
    """How many characters the plan printed to stdout (``stdout`` keeps the first and last :data:`_KEPT`, with a line
    saying how many were cut between them)."""
    stderr_chars: int = 0
    error: str | None = None
    """The traceback (pointing at the plan's lines) or the reason it did not run."""
    has_value: bool = False
    value: Any = None
    created: dict[str, str] = field(default_factory=dict)
    changed: dict[str, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    by_cells: list[str] = field(default_factory=list)
    """Names that changed while the plan ran because of cells the person ran meanwhile (not the plan's doing: in
    none of ``created``, ``changed`` and ``deleted``; see :mod:`._meanwhile`)."""
    seen: dict[str, tuple] | None = None
    """The namespace as the plan left it for the person's next changes to be told against: :attr:`Executor.last`
    with the names of :attr:`by_cells` as they were before the plan (so they are told as the person's)."""
    displays: list[dict] = field(default_factory=list)
    final: bool = False
    final_value: Any = None
    filename: str = ""
    input_calls: int = 0
    """How many times the plan called ``input()``, which cannot read from the person in a plan (it raised)."""
    threads: list[str] = field(default_factory=list)
    """The names of threads the plan started that still ran when it ended (it did not wait for them)."""

    def for_model(self) -> str:
        """The tool result the model reads."""
        parts = ["success: true" if self.success else "success: false"]
        if self.final:
            parts.append("final_answer was called: the task ends with that value.")
        if self.stdout:
            parts.append("stdout:\n" + truncate(self.stdout, total=self.stdout_chars))
        if self.stderr:
            parts.append("stderr:\n" + truncate(self.stderr, total=self.stderr_chars))
        if self.error:
            parts.append("error:\n" + truncate(self.error))
        if self.has_value:
            parts.append("value of the last expression: " + describe_value(self.value))
        for d in self.displays:
            if d.get("value"):
                continue
            plain = d.get("data", {}).get("text/plain", "")
            kinds = ", ".join(k for k in d.get("data", {}) if k != "text/plain")
            # scrubbed whole before the cut, so no cut leaves a piece of a secret value where nothing can tell it
            parts.append(f"displayed to the user ({kinds or 'text'}): " + truncate(scrub(str(plain)), 500))
        if self.created:
            parts.append("variables created:\n" + "\n".join(f"- {k}: {v}" for k, v in self.created.items()))
        if self.changed:
            parts.append("variables changed:\n" + "\n".join(f"- {k}: {v}" for k, v in self.changed.items()))
        if self.deleted:
            parts.append("variables deleted: " + ", ".join(self.deleted))
        for name in self.restored:
            parts.append(f"note: a plan may not rebind or delete `{name}`; it was restored.")
        if self.input_calls and INPUT_MESSAGE not in (self.error or ""):  # the plan caught the error: said here
            parts.append(f"note: the plan called input() {self.input_calls} time(s). {INPUT_MESSAGE}")
        if self.threads:
            parts.append(
                f"note: {len(self.threads)} thread(s) the plan started still run after it ended (not waited for): "
                + ", ".join(self.threads) + ". What they print or change from now on is not in this result."
            )
        if len(parts) == 1:
            parts.append("(the plan printed and displayed nothing, had no value, and created, changed and deleted no "
                         "variable)")
        return "\n".join(parts)


class _Watchdog:
    """Interrupt a synchronous stretch of a plan that runs longer than ``timeout`` seconds."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self._active = False
        self._prev: Any = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._thread = threading.get_ident()
        self._main = threading.current_thread() is threading.main_thread()

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        if self._active:
            self._active = False
            raise PlanTimeout

    def _on_timer(self) -> None:
        with self._lock:
            if not self._active:
                return
            self._active = False
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread), ctypes.py_object(PlanTimeout))

    def __enter__(self) -> _Watchdog:
        if not self.timeout:
            return self
        self._active = True
        if self._main:
            self._prev = signal.signal(signal.SIGALRM, self._on_signal)
            signal.setitimer(signal.ITIMER_REAL, self.timeout)
        else:
            self._timer = own_thread(threading.Timer(self.timeout, self._on_timer))
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.timeout:
            return
        if self._main:
            self._active = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._prev if self._prev is not None else signal.SIG_DFL)
        else:
            with self._lock:
                self._active = False
                if self._timer is not None:
                    self._timer.cancel()


class _Guarded:
    """Drive a coroutine step by step with the watchdog armed only while it runs (not while
    it awaits), passing whatever it awaits through to the task."""

    def __init__(self, coro: Any, watchdog: _Watchdog) -> None:
        self.coro = coro
        self.watchdog = watchdog

    def __await__(self):
        coro = self.coro
        send: Any = None
        throw: BaseException | None = None
        try:
            while True:
                with self.watchdog:
                    try:
                        yielded = coro.throw(throw) if throw is not None else coro.send(send)
                    except StopIteration as stop:
                        return stop.value
                try:
                    send, throw = (yield yielded), None
                except BaseException as err:
                    send, throw = None, err
        finally:
            coro.close()


class Executor:
    """Runs plans in ``namespace``; reports output, value, displays and variable changes.

    ``protected`` names (``primitives``, ``final_answer``, IPython's own) are put back if a
    plan rebinds or deletes them. ``hidden`` is IPython's ``user_ns_hidden``.
    """

    def __init__(
        self,
        namespace: dict,
        *,
        protected: Mapping[str, Any] | None = None,
        hidden: Mapping[str, Any] | None = None,
        code_timeout: float | None = 60.0,
        label: str = "plan",
        shell: Any = None,
        carry: bool = False,
    ) -> None:
        self.namespace = namespace
        self.protected = dict(protected or {})
        self.hidden = hidden
        self.code_timeout = code_timeout
        self.label = label
        self.shell = shell
        self.watch = Watch(namespace, hidden, carry=carry)
        """Takes the snapshots; against the last one, it redoes only what could differ (see :mod:`._watch`).
        ``carry``: the first starts from the last run's over this namespace (the next run's starts from this one's)."""
        self._looked = False

    def carry(self) -> None:
        """Leave what this executor's looks learnt for the next run's over its namespace (when it was made with
        ``carry`` and looked at all): its run ended."""
        if self._looked:
            try:
                self.watch.leave()
            except Exception:  # noqa: BLE001 - the next run looks afresh: never a reason for this one's end to fail
                log.exception("unity_nb: the namespace's last look could not be kept for the next run")

    @property
    def last(self) -> dict[str, tuple]:
        """The snapshot the last :meth:`snapshot` or :meth:`diff` took (so a caller needs no second pass); empty
        before the first."""
        return self.watch.last if self._looked else {}

    def _bindings(self) -> tuple:
        """Every name of the namespace and the identity of what it is bound to (two C-level copies)."""
        ns = self.namespace
        return tuple(ns), tuple(map(id, ns.values()))

    def snapshot(self, hint: dict[str, tuple] | None = None) -> dict[str, tuple]:
        """Fingerprints of the user's variables (to diff before and after). One pass over the namespace;
        a DataFrame that did not change costs a few identity checks (see :func:`fingerprint`). Given the
        last snapshot as ``hint``, only what could differ from it is looked at again (see :class:`Watch`); without
        one, against the watch's own last (the same snapshot: a hint changes only what is looked at again)."""
        self._looked = True
        return self.watch.take(hint if hint is not None else self.watch.last or None)[0]

    def diff(self, before: dict[str, tuple], result: PlanResult | None = None) -> PlanResult:
        """What changed since ``before``, in one pass that also leaves the snapshot it took in :attr:`last`.
        Against :attr:`last` only the names the pass looked at again can differ (see :class:`Watch`)."""
        result = result if result is not None else PlanResult(success=True)
        self._looked = True
        now, looked = self.watch.take(hint=before)
        if looked is not None:  # each differs from before: a fingerprint changed, or it is no variable now
            for name in looked:
                if name in now:
                    result.changed[name] = describe_value(self.namespace[name])
                else:
                    result.deleted.append(name)
            return result
        for name, fp in now.items():
            if name not in before:
                result.created[name] = describe_value(self.namespace[name])
            elif fp != before[name]:
                result.changed[name] = describe_value(self.namespace[name])
        result.deleted = [n for n in before if n not in now]
        return result

    async def run(
        self,
        code: str,
        *,
        on_output: Callable[[str, str], None] | None = None,
        on_display: Callable[[dict], None] | None = None,
        before: dict[str, tuple] | None = None,
    ) -> PlanResult:
        """Run ``code``; never raises for the plan's own errors (they are in the result).

        ``before`` is a recent snapshot (taken before this step, say): its fingerprints are reused for
        names still bound to the same objects, so the plan's "before" costs identity checks only, or
        nothing when it is :attr:`last` and no name was bound, rebound or deleted since (what was
        created, deleted or rebound meanwhile is not the plan's doing; an in-place change meanwhile
        would be reported as the plan's). Without it a full snapshot is taken. After the run,
        :attr:`last` is the namespace's snapshot.
        Cancellation (a stop) propagates, after the namespace changes so far are recorded.
        """
        filename = f"<{self.label} #{next(_counter)}>"
        cells = Cells(self.shell)
        cells_at = cells.mark()  # cells the person starts while the plan runs are theirs, not the plan's
        try:
            tree = ast.parse(code, filename=filename)
        except SyntaxError as err:
            detail = traceback.format_exception_only(type(err), err)
            return PlanResult(success=False, error="".join(detail).rstrip(), filename=filename)
        if not tree.body:  # a result that says nothing is no success: the model is told nothing ran
            return PlanResult(
                success=False, filename=filename,
                error="the plan has no statements (it is empty, or only comments): nothing ran",
            )
        linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)

        body, last = tree.body, None
        if body and isinstance(body[-1], ast.Expr):
            last = body[-1].value
            body = body[:-1]
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        try:
            main = compile(ast.Module(body=body, type_ignores=[]), filename, "exec", flags=flags) if body else None
            tail = compile(ast.Expression(body=last), filename, "eval", flags=flags) if last is not None else None
        except SyntaxError as err:  # e.g. `return` or `yield` outside a function
            detail = traceback.format_exception_only(type(err), err)
            return PlanResult(success=False, error="".join(detail).rstrip(), filename=filename)

        # bounded while the plan runs (``while True: print(...)`` holds no more than _KEPT a stream)
        stdout, stderr = TextBuffer(limit=_KEPT), TextBuffer(limit=_KEPT)
        written = threading.Lock()  # a thread the plan started may write too
        displays: list[dict] = []
        running = [True]  # a thread the plan started may write after it ended: only on_output gets that

        def on_write(text: str, stream: str = "stdout") -> None:
            if running[0]:
                with written:
                    (stderr if stream == "stderr" else stdout).append(text)
            if on_output is not None:
                on_output(text, stream)

        def on_pub(data: dict, metadata: dict) -> None:
            bundle = {"data": _keep(data), "metadata": metadata}
            if running[0]:
                displays.append(bundle)
            if on_display is not None:
                on_display(bundle)

        _output.install()
        if self.shell is not None:
            _output.install_display(self.shell)
        figures_before = _figure_numbers()
        if before is None:
            before = self.snapshot()
        elif before is not self.last or self._bindings() != self.watch.bound:
            before = snapshot(self.namespace, self.hidden, trust=before)
        protected_before = {n: self.namespace[n] for n in GUARDED if n in self.namespace}
        # the real builtins, whatever an earlier plan left there (`__builtins__ = {}` in a dict namespace)
        protected_before["__builtins__"] = _real_builtins(self.namespace.get("__builtins__"))
        self.namespace["__builtins__"] = protected_before["__builtins__"]
        self.namespace.update(self.protected)
        out_token = _output.tool_output.set(on_write)
        disp_token = _output.display_output.set(on_pub)
        watchdog = _Watchdog(self.code_timeout)
        result = PlanResult(success=True, filename=filename)
        closed = False
        reads, input_token = no_input()  # input() from the plan says it cannot read from the person
        try:
            for code_obj in (main, tail):
                if code_obj is None:
                    continue
                with watchdog:
                    value = eval(code_obj, self.namespace)
                if code_obj.co_flags & inspect.CO_COROUTINE:
                    value = await _Guarded(value, watchdog)
                if code_obj is tail:
                    result.has_value = value is not None
                    result.value = value
        except FinalAnswer as fa:
            result.final, result.final_value = True, fa.value
        except asyncio.CancelledError as err:
            task = asyncio.current_task()
            if task is None or task.cancelling():  # a stop, a timeout: this call was cancelled
                raise
            # the plan's own (it cancelled a task it then awaited, say): the model sees it, the loop goes on
            result.success = False
            result.error = _plan_traceback(err, filename) + "\n(raised by the plan: the operation was not stopped)"
        except PlanTimeout as err:
            result.success = False
            result.error = (
                _plan_traceback(err, filename) + f"\nthe plan computed for more than code_timeout="
                f"{self.code_timeout:g} s without awaiting and was interrupted. Work in smaller pieces, "
                "or on a sample of the data."
            )
        except GeneratorExit:  # its event loop was closed under it: closed by the collector, not in its context
            closed = True
            raise
        except BaseException as err:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, any other: the plan's error
            result.success = False
            result.error = _plan_traceback(err, filename)
            if isinstance(err, SystemExit):
                result.error += "\n(sys.exit in a plan ends the plan, not the kernel)"
        finally:
            if not closed:
                _output.tool_output.reset(out_token)
                _output.display_output.reset(disp_token)
                input_again(input_token)
            result.restored = self._restore(protected_before)
            self._collect_figures(figures_before, on_pub)
            running[0] = False
            result.input_calls, result.threads = reads.calls, threads_left(on_write)
            with written:
                result.stdout, result.stderr = stdout.text, stderr.text
                result.stdout_chars, result.stderr_chars = stdout.total, stderr.total
        if result.has_value:
            data, md = self._format(result.value)
            bundle = {"data": _keep(data), "metadata": md, "value": True}
            displays.append(bundle)
            if on_display is not None:
                on_display(bundle)
        result.displays = displays
        self.diff(before, result)
        person = cells.bound_since(cells_at)
        if person:
            self._set_apart(result, before, theirs(
                [*result.created, *result.changed, *result.deleted], bound_names(tree), person,
            ))
        return result

    def _set_apart(self, result: PlanResult, before: dict[str, tuple], names: list[str]) -> None:
        """``names`` changed because of the person's cells, not the plan: out of what the plan made, into
        :attr:`PlanResult.by_cells`, and as they were before the plan in :attr:`PlanResult.seen`."""
        if not names:
            return
        result.by_cells = names
        seen = dict(self.last)
        for name in names:
            result.created.pop(name, None)
            result.changed.pop(name, None)
            if name in result.deleted:
                result.deleted.remove(name)
            if name in before:
                seen[name] = before[name]
            else:
                seen.pop(name, None)
        result.seen = seen

    def _restore(self, before: dict[str, Any]) -> list[str]:
        restored = []
        for name, value in {**before, **self.protected}.items():
            if self.namespace.get(name, _MISSING) is not value:
                self.namespace[name] = value
                restored.append(name)
        return restored

    def _format(self, value: Any) -> tuple[dict, dict]:
        if self.shell is not None:
            try:
                data, md = self.shell.display_formatter.format(value)
                return data, md
            except Exception:
                pass
        return {"text/plain": describe_value(value, 2000)}, {}

    def _collect_figures(self, before: set[int], publish: Callable[[dict, dict], None]) -> None:
        """Figures a plan drew show in the widget (and are closed, so no cell shows them later)."""
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in sorted(set(plt.get_fignums()) - before):
            fig = plt.figure(num)
            buf = io.BytesIO()
            try:
                fig.savefig(buf, format="png", bbox_inches="tight")
                png = base64.b64encode(buf.getvalue()).decode("ascii")
                publish({"image/png": png, "text/plain": f"<Figure {num}>"}, {})
            except Exception:
                pass
            finally:
                plt.close(fig)


_MISSING = object()


def _real_builtins(current: Any) -> Any:
    """``current`` if it is Python's builtins (the module, or its dict, as ``eval`` inserts), else the module."""
    return current if current is builtins or current is builtins.__dict__ else builtins
GUARDED = ("In", "Out", "get_ipython", "exit", "quit", "__builtins__", "__name__", "_ih", "_oh", "_dh")
"""IPython's names in a kernel namespace: put back if a plan rebinds or deletes them."""
_MIMES = ("text/plain", "text/html", "text/markdown", "image/png", "image/jpeg", "image/svg+xml", "application/json")


def _keep(data: dict) -> dict:
    return {k: v for k, v in data.items() if k in _MIMES}


def _figure_numbers() -> set[int]:
    plt = sys.modules.get("matplotlib.pyplot")
    return set(plt.get_fignums()) if plt is not None else set()


_OWN_FILES = frozenset({__file__, _plan_guard.__file__})
"""The executor's files: their frames are not the plan's (``input()`` raising in the plan shows the plan's line)."""


def _plan_traceback(err: BaseException, filename: str) -> str:
    """The traceback from the plan's first frame on (the executor's own frames dropped)."""
    tb = err.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    last = "".join(traceback.format_exception_only(type(err), err)).rstrip()
    if tb is None:
        return last
    frames = [f for f in traceback.extract_tb(tb) if f.filename not in _OWN_FILES]
    return "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + last
