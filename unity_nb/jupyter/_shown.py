"""What ``%unity`` shows for an operation: its live widget, and right after it a second output, the operation's
static snapshot as plain ``text/html``, kept up to date when the operation ends.

Why two outputs: a notebook reopened without saved widget state (JupyterLab's default) has no model for the
widget's view; JupyterLab picks the widget's mime type anyway and says "model not found", never falling back
to the ``text/html`` in the widget's own bundle. The second output is ordinary HTML, shown wherever the
widget cannot be. While the live widget is rendered, the widget's script hides it (one global rule it adds
to the page, ``widgets/handle.js``): a dead widget (kernel gone) or a missing one lets it show.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..loop import LoopHandle
from ._snapshot import render_html

__all__ = ("Widgets", "show_with_snapshot")

_ENDS = ("loop_finished", "loop_failed")


def _snapshot(handle: LoopHandle, widget: Any) -> dict[str, str]:
    return {"text/html": render_html(handle, notice=getattr(widget, "notice", "") or "")}


def show_with_snapshot(widget: Any, handle: LoopHandle) -> None:
    """Display ``widget`` (the handle's live view) and, after it, the handle's snapshot; once the operation
    ends both outputs are refreshed (same display ids), so a saved notebook keeps the final snapshot."""
    from IPython.display import display

    shown = display(widget, display_id=True)
    beside = display(_snapshot(handle, widget), raw=True, display_id=True)
    if shown is None and beside is None:  # no shell to display in
        return

    def refresh(src: LoopHandle, e: Any) -> None:
        if src is handle and e.kind in _ENDS:
            if shown is not None:
                shown.update(widget)
            if beside is not None:
                beside.update(_snapshot(handle, widget), raw=True)

    handle.run.add_listener(refresh)


class Widgets:
    """The live widgets the magics show: the newest by operation name (:attr:`by_name`), the open one of each
    handle, and the cell each handle's was shown in.

    ipywidgets keeps every widget until it is closed, and a widget keeps its handle, transcript and all: a widget
    whose name a newer operation took (``h = %unity act ...`` run again) is retired, closed once its operation is
    done (its cell keeps the snapshot shown beside it); a handle displayed again shows its open widget, not a new
    one. Where the front end names its cells (JupyterLab, Notebook 7, VS Code and nbclient send ``cellId`` with
    each execution, and JupyterLab the cells deleted since), a widget is retired too once no cell shows it: every
    cell it was shown in ran again (a front end clears a cell's outputs when it runs it) or was deleted."""

    def __init__(self, shell: Any, *, ask: Callable[[LoopHandle, str], LoopHandle] | None = None) -> None:
        self.shell = shell
        self.ask = ask
        """How the widgets' Ask button starts an Ask (the magics': named and listed as an operation)."""
        self.by_name: dict[str, Any] = {}
        """The newest widget of each operation name."""
        self._open: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._cell: dict[str, int] = {}  # handle id -> the execution count of the cell that showed its widget
        self._where: dict[str, set[str]] = {}  # handle id -> the ids of the cells showing its open widget
        self._cell_id: str | None = None  # the id of the cell running now, when the front end sent one
        events = getattr(shell, "events", None)
        if events is not None:
            events.register("pre_run_cell", self._cell_starts)

    def _cell_starts(self, info: Any = None) -> None:
        """A cell starts: the widgets only it, or only cells deleted since, showed are seen nowhere now."""
        self._cell_id = cell = getattr(info, "cell_id", None)
        meta = getattr(info, "cell_meta", None)
        gone = set(meta.get("deletedCells") or ()) if isinstance(meta, dict) else set()
        if cell is not None:
            gone.add(cell)  # its outputs are cleared as it runs again
        if not gone:
            return
        for key, cells in list(self._where.items()):
            if cells.isdisjoint(gone):
                continue
            cells -= gone
            if not cells:
                del self._where[key]
                widget = self._open.get(key)
                if widget is not None:
                    widget.retire()

    def _shown_in_cell(self, handle: LoopHandle) -> None:
        if self._cell_id is not None:
            self._where.setdefault(handle.id, set()).add(self._cell_id)

    def _count(self) -> int:
        return self.shell.execution_count if self.shell is not None else -1

    def show(self, handle: LoopHandle, key: str | None, *, notice: str, max_hz: float) -> None:
        """A new operation's widget, and its snapshot beside it; the one it replaces under ``key`` is retired."""
        from ._widget import HandleWidget

        widget = HandleWidget(handle, max_hz=max_hz, ask=self.ask)
        if notice:
            widget.notice = notice
        key = key or handle.name
        old = self.by_name.get(key)
        self.by_name[key] = self._open[handle.id] = widget
        self._cell[handle.id] = self._count()
        self._where.pop(handle.id, None)
        self._shown_in_cell(handle)
        if old is not None and old.handle is not handle:  # retired even where a cell shows it: the snapshot stays
            self._cell.pop(old.handle.id, None)
            self._where.pop(old.handle.id, None)
            old.retire()
        # the widget, then its snapshot as a second output (what a notebook reopened without widget state shows)
        show_with_snapshot(widget, handle)

    def shown_here(self, handle: LoopHandle) -> bool:
        """Whether this cell already shows ``handle``'s widget (``%unity act ...`` as the cell's last line)."""
        return self._cell.get(handle.id) == self._count()

    def display(self, handle: LoopHandle, *, max_hz: float) -> None:
        """Display ``handle``'s open widget (another view of it), or a new one if it has none, and its snapshot
        after it (as ``%unity`` shows it: a notebook reopened without widget state shows that, not "model not
        found")."""
        from ._widget import HandleWidget

        widget = self._open.get(handle.id)
        if widget is None or widget.comm is None or widget.retired:  # a retired one closes once the operation ends
            widget = self._open[handle.id] = HandleWidget(handle, max_hz=max_hz, ask=self.ask)
            self._where.pop(handle.id, None)
        self._shown_in_cell(handle)
        show_with_snapshot(widget, handle)

    def retire_all(self) -> None:
        """Retire every widget shown (the magics are unloaded)."""
        for widget in list(self._open.values()):
            widget.retire()
        self._where.clear()
        events = getattr(self.shell, "events", None)
        if events is not None:
            try:
                events.unregister("pre_run_cell", self._cell_starts)
            except ValueError:
                pass
