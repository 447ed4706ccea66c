"""What ``%unity`` shows for an operation: its live widget, and right after it a second output, the operation's
static snapshot as plain ``text/html``, kept up to date when the operation ends.

Why two outputs: a notebook reopened without saved widget state (JupyterLab's default) has no model for the
widget's view; JupyterLab picks the widget's mime type anyway and says "model not found", never falling back
to the ``text/html`` in the widget's own bundle. The second output is ordinary HTML, shown wherever the
widget cannot be. While the live widget is rendered, the widget's script hides it (one global rule it adds
to the page, ``widgets/handle.js``): a dead widget (kernel gone) or a missing one lets it show.
"""

from __future__ import annotations

from typing import Any

from ..loop import LoopHandle
from ._snapshot import render_html

__all__ = ("show_with_snapshot",)

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
