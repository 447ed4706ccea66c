"""A handle's static snapshot: the HTML shown where the live widget cannot be (GitHub, nbconvert, a front end
without anywidget or without the kernel), and the helpers the widget shares with it (clipping, the tree)."""

from __future__ import annotations

import html
from typing import Any

from ..loop import LoopHandle
from ._batch_view import preview

__all__ = ("ENTRIES", "LIMIT", "clip", "omitted_line", "render_html", "shown_entries", "tree")

LIMIT = 4000  # characters of one entry kept in widget state; the handle keeps everything
ENTRIES = 200
"""Transcript entries of one loop a view shows (its widget's state, its snapshot): its start and its newest ones."""
_HEAD = 3  # the entries of a transcript's start kept (its system prompt, context and task)


def shown_entries(transcript: list[Any]) -> tuple[list[Any], list[Any], int]:
    """What a view shows of ``transcript``: its start (up to its task), its newest entries, and how many between
    them it leaves out (the handle, ``%unity show`` and the store keep every one)."""
    if len(transcript) <= ENTRIES:
        return list(transcript), [], 0
    kinds = [m.kind for m in transcript[:_HEAD]]
    head = kinds.index("task") + 1 if "task" in kinds else 1
    tail = transcript[len(transcript) - (ENTRIES - head):]
    return list(transcript[:head]), list(tail), len(transcript) - head - len(tail)


def omitted_line(n: int, name: str) -> str:
    return f"... {n:,} earlier entries not shown here (%unity show {name} shows every one)"


def clip(text: str | None, limit: int = LIMIT) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + f"\n... [{len(text) - limit} more characters]"


def tree(root: LoopHandle) -> list[tuple[LoopHandle, int]]:
    out: list[tuple[LoopHandle, int]] = []

    def walk(h: LoopHandle, depth: int) -> None:
        out.append((h, depth))
        for c in h.children:
            walk(c, depth + 1)

    walk(root, 0)
    return out


_BADGE = {
    "running": "#2563eb", "paused": "#d97706", "waiting": "#9333ea",
    "finished": "#16a34a", "stopped": "#6b7280", "failed": "#dc2626", "idle": "#0891b2",
    "finished with failures": "#ea580c",
}


# Colours: the theme's where the page has JupyterLab's variables (Light, Dark, any theme), else the page's own text
# colour (``inherit``: GitHub, nbconvert, VS Code in light or dark); a red for errors mixed toward that text colour,
# so it reads on a dark page as on a light one (``color-mix``; a plain red where a browser lacks it)
_TEXT = "color:var(--jp-content-font-color1, inherit)"
_MUTED = "color:var(--jp-content-font-color2, inherit)"
_ERROR = "color:#dc2626;color:var(--jp-error-color1, color-mix(in srgb, #dc2626 75%, currentColor))"

_CAPTION = (  # where the widget cannot load (no kernel, no anywidget front end), the snapshot says what it is
    f'<div style="{_MUTED};font-size:12px;margin-bottom:4px">unity_nb: a snapshot of this operation taken '
    "when this output was made, not updated since; the live view is a widget, shown where its front end loads "
    "and its kernel runs</div>"
)


def _rows(h: LoopHandle) -> str:
    """A batch's rows as its progress counts them (``rows_text``: one source for every count shown), else ``""``."""
    progress = getattr(h, "progress", None)
    if not isinstance(progress, dict) or not progress.get("rows_text"):
        return ""
    phase = f"phase {progress['phase']}: " if "phase" in progress else ""
    return f'<div style="{_MUTED}">{html.escape(phase + progress["rows_text"])}</div>'


def _outcome(h: LoopHandle) -> str:
    """Its badge: its status, or a batch's outcome as its progress says it ("finished with failures": some rows
    failed or stopped), as the live widget's badge shows it."""
    progress = getattr(h, "progress", None)
    outcome = progress.get("outcome") if isinstance(progress, dict) else None
    return outcome if outcome in _BADGE else h.status.value


def _preview_html(h: LoopHandle) -> str:
    """An ended batch's first rows (as its widget shows them), as a table; else nothing."""
    shown = preview(h)
    if shown is None:
        return ""
    cell = 'style="text-align:left;padding:1px 8px 1px 0;vertical-align:top;white-space:pre-wrap"'
    head = "".join(f"<th {cell}>{html.escape(c)}</th>" for c in ["", *shown["columns"]])
    body = "".join(
        "<tr>" + "".join(f"<{'td' if i else 'th'} {cell}>{html.escape(str(c))}</{'td' if i else 'th'}>"
                         for i, c in enumerate(r)) + "</tr>"
        for r in shown["rows"]
    )
    more = f" of {shown['answered']} answered" if shown["answered"] > len(shown["rows"]) else ""
    return (f'<div style="margin:4px 0"><i>first rows{more}</i><table style="border-collapse:collapse;font-size:12px">'
            f"<tr>{head}</tr>{body}</table></div>")


def render_html(root: LoopHandle, *, notice: str = "") -> str:
    """A static snapshot of the handle tree and its transcripts (no scripts, no kernel needed), under the widget's
    ``notice`` (what the live widget says above it: shown once, in whichever of the two is seen)."""
    # data-unb-for: the operation it shows, so that operation's live widget, wherever the front end puts the two
    # outputs in the page, can hide it while it is live (widgets/handle.js)
    parts = [
        f'<div class="unity-nb-snapshot" data-unb-for="{html.escape(root.id)}" '
        f'style="font-family:sans-serif;font-size:13px;{_TEXT}">',
        _CAPTION,
    ]
    if notice:
        parts.append(f'<div style="{_MUTED};margin-bottom:4px">{html.escape(notice)}</div>')
    if not root.done():  # what a notebook saved while it ran shows once its kernel is gone: how to go on
        parts.append(
            f'<div style="{_MUTED};font-size:12px;margin-bottom:4px">If its kernel stopped before it ended: in a new '
            f"kernel, <code>%load_ext unity_nb</code> then <code>%unity resume {html.escape(root.name)}</code>, "
            "which says whatever else it needs.</div>"
        )
    for h, depth in tree(root):
        status = _outcome(h)
        parts.append(
            f'<div style="margin-left:{depth * 20}px;border-left:3px solid {_BADGE[status]};'
            'padding-left:8px;margin-bottom:6px">'
            f"<b>{html.escape(h.name)}</b> "
            f'<span style="background:{_BADGE[status]};color:white;border-radius:8px;padding:0 6px">{status}</span> '
            f"{h.steps} steps, {'≈' if h.usage.estimated else ''}{h.usage.input_tokens}/{h.usage.output_tokens} tokens"
            f"{_rows(h)}"
        )
        parts.append(_preview_html(h))
        head, tail, omitted = shown_entries(h.transcript)
        for m in [*head, None, *tail] if omitted else head:
            if m is None:
                parts.append(f'<div style="{_MUTED}"><i>{html.escape(omitted_line(omitted, h.name))}</i></div>')
                continue
            if m.kind in ("system", "context"):
                continue
            label = {"tool": f"tool {m.name}", "user": m.kind if m.kind != "task" else "task"}.get(m.role, m.role)
            text = html.escape(clip(m.content, 1000))
            calls = "".join(
                f"<div><code>{html.escape(c.name)}({html.escape(clip(c.arguments, 300))})</code></div>"
                for c in m.tool_calls
            )
            parts.append(
                f'<div style="{_ERROR if m.error else _TEXT}"><i>{html.escape(label)}</i>: '
                f'<span style="white-space:pre-wrap">{text}</span>{calls}</div>'
            )
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)
