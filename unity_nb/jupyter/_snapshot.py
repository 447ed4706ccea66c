"""A handle's static snapshot: the HTML shown where the live widget cannot be (GitHub, nbconvert, a front end
without anywidget or without the kernel), and the helpers the widget shares with it (clipping, the tree)."""

from __future__ import annotations

import html

from ..loop import LoopHandle

__all__ = ("LIMIT", "clip", "render_html", "tree")

LIMIT = 4000  # characters of one entry kept in widget state; the handle keeps everything


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


_CAPTION = (  # where the widget cannot load (no kernel, no anywidget front end), the snapshot says what it is
    '<div style="color:#6b7280;font-size:12px;margin-bottom:4px">unity_nb: a snapshot of this operation taken '
    "when this output was made, not updated since; the live view is a widget, shown where its front end loads "
    "and its kernel runs</div>"
)


def _rows(h: LoopHandle) -> str:
    """A batch's rows as its progress counts them (``rows_text``: one source for every count shown), else ``""``."""
    progress = getattr(h, "progress", None)
    if not isinstance(progress, dict) or not progress.get("rows_text"):
        return ""
    phase = f"phase {progress['phase']}: " if "phase" in progress else ""
    return f'<div style="color:#374151">{html.escape(phase + progress["rows_text"])}</div>'


def render_html(root: LoopHandle, *, notice: str = "") -> str:
    """A static snapshot of the handle tree and its transcripts (no scripts, no kernel needed), under the widget's
    ``notice`` (what the live widget says above it: shown once, in whichever of the two is seen)."""
    parts = ['<div class="unity-nb-snapshot" style="font-family:sans-serif;font-size:13px">', _CAPTION]
    if notice:
        parts.append(f'<div style="color:#92400e;margin-bottom:4px">{html.escape(notice)}</div>')
    for h, depth in tree(root):
        status = getattr(h, "outcome", h.status.value)  # a batch with failed rows: "finished with failures"
        parts.append(
            f'<div style="margin-left:{depth * 20}px;border-left:3px solid {_BADGE[status]};'
            'padding-left:8px;margin-bottom:6px">'
            f"<b>{html.escape(h.name)}</b> "
            f'<span style="background:{_BADGE[status]};color:white;border-radius:8px;padding:0 6px">{status}</span> '
            f"{h.steps} steps, {'≈' if h.usage.estimated else ''}{h.usage.input_tokens}/{h.usage.output_tokens} tokens"
            f"{_rows(h)}"
        )
        for m in h.transcript:
            if m.kind in ("system", "context"):
                continue
            label = {"tool": f"tool {m.name}", "user": m.kind if m.kind != "task" else "task"}.get(m.role, m.role)
            text = html.escape(clip(m.content, 1000))
            calls = "".join(
                f"<div><code>{html.escape(c.name)}({html.escape(clip(c.arguments, 300))})</code></div>"
                for c in m.tool_calls
            )
            color = "#dc2626" if m.error else "#374151"
            parts.append(
                f'<div style="color:{color}"><i>{html.escape(label)}</i>: '
                f'<span style="white-space:pre-wrap">{text}</span>{calls}</div>'
            )
        parts.append("</div>")
    parts.append("</div>")
    return "".join(parts)
