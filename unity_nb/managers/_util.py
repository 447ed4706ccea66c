"""Small helpers shared by the managers (private)."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable
from typing import Any

from ..loop import ToolFailed

__all__ = ("clip", "fail", "other", "words_score", "render_transcript", "when", "segment_name")


def clip(text: str | None, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying so."""
    text = text or ""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 40)] + f" [... {len(text) - limit + 40:,} more characters]"


def fail(message: str) -> ToolFailed:
    """An error result the model reads as is (``raise fail(...)``)."""
    return ToolFailed(f"error: {message}")


def other(manager: Any, alias: str) -> Any | None:
    """The manager registered as ``alias`` beside ``manager``, or ``None`` if there is none."""
    registry = getattr(manager, "registry", None)
    if registry is None or alias not in registry:
        return None
    return manager._other(alias)


_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(_WORD.findall((text or "").lower()))


def words_score(query: str, *texts: str) -> int:
    """How many of the query's words (or their first five letters) occur in ``texts``: a crude,
    dependable relevance score."""
    wanted = {w for w in words(query) if len(w) > 1}
    if not wanted:
        return 0
    haystack = " ".join(t or "" for t in texts).lower()
    score = 0
    for w in wanted:
        if w in haystack:
            score += 2
        elif len(w) > 5 and w[:5] in haystack:
            score += 1
    return score


def when(ts: float | None) -> str | None:
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def segment_name(segment: str) -> str:
    """``"knowledge.ask(7b1c)"`` -> ``"knowledge.ask"``."""
    return segment.rsplit("(", 1)[0] if segment.endswith(")") else segment


def render_transcript(messages: Iterable[Any], *, max_chars: int = 8000, per_message: int = 600) -> str:
    """A transcript (``Message`` objects) as compact text for a model to read, bounded."""
    lines: list[str] = []
    for m in messages:
        content = clip(m.content or "", per_message)
        if m.role == "assistant":
            labels = {"answer": "answer", "clarification": "question to the person", "error": "failed"}
            label = labels.get(m.kind, "assistant")
            if content:
                lines.append(f"[{label}] {content}")
            for c in m.tool_calls:
                lines.append(f"[calls {c.name}] {clip(c.arguments, per_message // 2)}")
        elif m.role == "tool":
            tag = "tool result" if m.kind == "tool_result" else m.kind
            lines.append(f"[{tag}{' ' + m.name if m.name else ''}{' (error)' if m.error else ''}] {content}")
        else:
            lines.append(f"[{m.kind if m.kind != 'text' else m.role}] {content}")
    text = "\n".join(lines)
    if len(text) > max_chars:
        half = max_chars // 2
        text = text[:half] + f"\n[... {len(text) - max_chars:,} characters of the middle omitted ...]\n" + text[-half:]
    return text or "(empty transcript)"
