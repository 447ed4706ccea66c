"""Context compression's helpers (the policies that choose tools and add notes are objects, in ``_policy.py``).

Compression keeps the head of the conversation (system messages and the task) and its latest
messages verbatim, and replaces what lies between with a summary the model writes. The cut
never separates a tool call from its result: the kept tail never starts with a tool result.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

__all__ = (
    "estimate_tokens",
    "split_for_compression",
    "render_for_summary",
    "SUMMARY_PROMPT",
    "SUMMARY_TAG",
)

SUMMARY_TAG = "[summary of the earlier conversation, compressed to save context]"
SUMMARY_PROMPT = (
    "You compress the middle of a long working conversation so the work can go on in less context. "
    "Write a faithful summary of it: the facts found (with exact values, names and identifiers), what "
    "was tried and what failed, decisions made, what the user asked for or changed, and open questions. "
    "Write plain text, as short as it can be without losing anything the work still needs."
)


def estimate_tokens(messages: Sequence[dict]) -> int:
    """About four characters a token: cheap, provider-neutral, good enough to decide when to compress."""
    return message_chars(messages) // 4 + 1


def message_chars(messages: Sequence[dict]) -> int:
    """The characters :func:`estimate_tokens` counts in ``messages``."""
    chars = 0
    for m in messages:
        content = m.get("content")
        chars += len(content) if isinstance(content, str) else len(json.dumps(content)) if content else 0
        for call in m.get("tool_calls") or ():
            chars += len(call["function"]["name"]) + len(call["function"]["arguments"]) + 16
        chars += 8
    return chars


def split_for_compression(wire: list[dict], keep_last: int) -> tuple[list[dict], list[dict], list[dict]]:
    """``(head, middle, tail)``: the head (system messages and the first user message), the part
    to summarise, and the latest ``keep_last`` messages or more, starting at a message that is not
    a tool result (so every tool call in the tail keeps its result, and none in the middle loses one)."""
    h = 0
    while h < len(wire) and wire[h].get("role") == "system":
        h += 1
    if h < len(wire) and wire[h].get("role") == "user":
        h += 1
    start = max(h, len(wire) - keep_last)
    while start > h and wire[start].get("role") == "tool":
        start -= 1
    return wire[:h], wire[h:start], wire[start:]


def render_for_summary(messages: Sequence[dict]) -> str:
    lines = []
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content else ""
        if role == "tool":
            lines.append(f"tool result ({m.get('tool_call_id')}): {text}")
            continue
        calls = m.get("tool_calls") or ()
        if calls:
            text += ("\n" if text else "") + "\n".join(
                f"calls {c['function']['name']}({c['function']['arguments']}) [{c['id']}]" for c in calls
            )
        lines.append(f"{role}: {text}")
    return "\n".join(lines)
