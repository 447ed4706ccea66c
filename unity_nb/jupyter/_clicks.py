"""Clicks from a widget, carried to the handle's own event loop and worked off in arrival order.

Why (issue 14). JupyterLab (4.6 here) sends a widget's comm messages over a kernel *subshell*
by default (its ``commsOverSubshells`` setting: one subshell per comm target), and ipykernel 7
runs such a message on the subshell's thread, under that thread's own asyncio loop, whenever
the comm's last message out had a subshell parent. A widget update sent while handling a click
has one: the click's message is its parent. So after the first click, later clicks could run
their handler on the subshell's thread, and ``asyncio.ensure_future`` put the steering on *that*
thread's loop. ``resume()`` there set an ``asyncio.Event`` of the main loop from the wrong
thread: its waiter was queued without waking the main loop, which, idle while paused, slept
until something unrelated woke it (a cell run, seconds or minutes later). ``stop()``'s
``task.cancel()`` was lost the same way.

Without subshells (ipykernel before 7; VS Code and Colab, whose front ends do not use them), a click
waits in the kernel's shell queue until the running cell ends: buttons act when the kernel is idle.
:func:`watch_cells` tells each widget so (``subshells`` false) and whether a cell runs now
(``cell_running``), so the widget can say a click will act when the cell ends.

Here every click, whichever thread receives it, joins one inbox and is handed to the handle's
loop (``call_soon_threadsafe`` from another thread), into one FIFO per widget. One worker task
on that loop performs the clicks one at a time, in the order they arrived. Each click only
*steers* (pause, resume, interject, answer, approve, skip, stop, the start of an Ask): nothing
slow stands in the queue, so a Stop is never held up; the rest of a click (an Ask's answer)
runs as a task of its own. Every task is kept referenced until it ends (the loop holds tasks
only weakly), and every error reaches ``report``. Everything runs in a copy of the context the
widget was made in, so every update names the same parent and the kernel routes the widget's
clicks to one place (the shell that started the operation) instead of switching threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ("Clicks", "kernel_has_subshells", "watch_cells", "watch_interrupts")

log = logging.getLogger("unity_nb.widget")

Perform = Callable[[dict], Awaitable[Awaitable[Any] | None]]
Report = Callable[[dict, BaseException | None], None]


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Clicks:
    """One widget's clicks: a FIFO on ``loop``, performed one at a time by one worker task.

    ``perform(click)`` is awaited for each click in turn; it may return an awaitable (the rest
    of the click, like an Ask's answer), which then runs as its own task without holding the
    queue. ``report(click, error)`` is called on the loop after each click (``error`` is None
    when it worked) and when the rest of a click fails.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, perform: Perform, report: Report) -> None:
        self.loop = loop
        self._perform = perform
        self._report = report
        # the context the widget was made in (the cell that started the operation): everything
        # here runs in a copy of it, so what the widget sends names that cell as its parent
        self.context = contextvars.copy_context()
        self._inbox: deque[dict] = deque()  # appended from any thread, in the order clicks arrive
        self._queue: deque[dict] = deque()
        self._worker: asyncio.Task | None = None
        self.tasks: set[asyncio.Task] = set()
        """Every task of ours still running (kept here: the event loop holds tasks only weakly)."""
        self.received = 0
        """Clicks queued on the loop so far."""
        self.performed = 0
        """Clicks performed so far, failed ones included."""

    # -- any thread --------------------------------------------------------------------------

    def receive(self, click: dict) -> None:
        """Queue ``click``. Safe from any thread: a kernel subshell's as well as the main one.

        Clicks join one inbox in the order they arrive, whichever thread brings them; on the
        loop's own thread they are queued at once (with any that other threads brought before).
        """
        self._inbox.append(click)
        if _running_loop() is self.loop:
            self._accept()
        else:
            self.loop.call_soon_threadsafe(self._accept, context=self.context.copy())

    # -- on the loop ---------------------------------------------------------------------------

    def spawn(self, coro: Any) -> asyncio.Task:
        """Run ``coro`` as a task of ours on the loop, referenced until it ends."""
        task = self.loop.create_task(coro, context=self.context.copy())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def _accept(self) -> None:
        while self._inbox:
            self._queue.append(self._inbox.popleft())
            self.received += 1
        if self._queue and self._worker is None:
            self._worker = self.spawn(self._work())

    async def _work(self) -> None:
        try:
            while self._queue:
                click = self._queue.popleft()
                error: BaseException | None = None
                try:
                    rest = await self._perform(click)
                    if rest is not None:
                        self.spawn(self._finish(click, rest))
                except asyncio.CancelledError as err:
                    me = asyncio.current_task()
                    if me is not None and me.cancelling():
                        raise  # the worker itself is cancelled (the kernel is going away)
                    error = err  # something the click awaited was cancelled: report it, go on
                except Exception as err:  # a click's error is shown, never raised
                    error = err
                self.performed += 1
                self._safe_report(click, error)
        finally:
            self._worker = None  # (cancelled with clicks left, the next click starts a new worker)

    async def _finish(self, click: dict, rest: Awaitable[Any]) -> None:
        try:
            await rest
        except Exception as err:  # the rest of a click fails: shown, never lost
            self._safe_report(click, err)

    def _safe_report(self, click: dict, error: BaseException | None) -> None:
        if error is not None:
            log.warning("widget click %s failed: %s: %s", click.get("action"), type(error).__name__, error)
        try:
            self._report(click, error)
        except Exception:  # reporting must not stop the queue
            log.exception("reporting a widget click failed")

    async def settled(self) -> None:
        """Wait until every click received on the loop so far has been performed."""
        while self._worker is not None:
            await asyncio.wait({self._worker})


def _kernel() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency
        return None, None
    shell = get_ipython()
    return shell, getattr(shell, "kernel", None)


def kernel_has_subshells() -> bool:
    """Whether this kernel can take a widget's click while a cell runs (kernel subshells, ipykernel 7 and later).

    Outside a kernel (a plain script, an ``InteractiveShell``) nothing holds clicks back: True."""
    _, kernel = _kernel()
    if kernel is None:
        return True
    return bool(getattr(kernel, "_supports_kernel_subshells", False))


class _Cells:
    """Whether a cell runs now, told to every watched widget (IPython's pre/post_run_cell events)."""

    def __init__(self) -> None:
        self.running = False
        self.widgets: weakref.WeakSet[Any] = weakref.WeakSet()

    def _set(self, running: bool) -> None:
        self.running = running
        for widget in list(self.widgets):
            try:
                widget.cell_running = running
            except Exception:  # a closed widget must not break a cell
                log.debug("could not update a widget's cell_running", exc_info=True)

    def pre(self, *args: Any) -> None:
        self._set(True)

    def post(self, *args: Any) -> None:
        self._set(False)


_CELLS: weakref.WeakKeyDictionary[Any, _Cells] = weakref.WeakKeyDictionary()


def watch_cells(widget: Any) -> None:
    """Set ``widget.subshells``; where the kernel has none, keep ``widget.cell_running`` true while a cell runs.

    The shell's events are registered once per shell, when the first widget is watched."""
    widget.subshells = kernel_has_subshells()
    if widget.subshells:
        return
    shell, _ = _kernel()
    if shell is None:
        return
    cells = _CELLS.get(shell)
    if cells is None:
        cells = _CELLS[shell] = _Cells()
        cells.running = True  # a widget is made by a cell (the one that started its operation)
        shell.events.register("pre_run_cell", cells.pre)
        shell.events.register("post_run_cell", cells.post)
    cells.widgets.add(widget)
    widget.cell_running = cells.running


_INTERRUPTS: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()


def watch_interrupts(widget: Any) -> None:
    """After each cell of the shell (one hook per shell), each live widget checks whether a cell awaiting its
    operation was interrupted (``LoopHandle.state.cancelled_waits``): the interrupt ends the wait, not the operation."""
    shell, _ = _kernel()
    if shell is None:
        return
    widgets = _INTERRUPTS.get(shell)
    if widgets is None:
        widgets = _INTERRUPTS[shell] = weakref.WeakSet()

        def after(result: Any = None) -> None:
            for w in list(widgets):
                w._after_cell(result)

        shell.events.register("post_run_cell", after)
    widgets.add(widget)
