"""A durable task's conversation as wire messages: read from the store, repaired after an interruption, or rendered
as text (for a child task that sees its parent's conversation)."""

from __future__ import annotations

import json
from typing import Any

from .._errors import UserError

__all__ = ("decode_messages", "render", "repair_history", "turn_ending")


def decode_messages(task_id: str, path: Any, rows: list[dict]) -> list[dict]:
    """Stored messages (``task_messages`` rows: ``n``, ``message``) as wire messages; one changed by hand or damaged is
    a UserError saying which, in the store file ``path``."""
    out = []
    for r in rows:
        try:
            out.append(json.loads(r["message"]))
        except (ValueError, TypeError) as err:
            raise UserError(
                f"task {task_id}'s message {r['n']} in the store {path!r} cannot be read ({err}): it "
                "was changed by hand or damaged; fix or delete that task_messages row, or move the file aside"
            ) from None
    return out


def turn_ending(message: dict | None) -> bool:
    """Whether ``message`` ends a turn: the assistant's answer (no tool calls)."""
    return message is not None and message.get("role") == "assistant" and not message.get("tool_calls")


def repair_history(messages: list[dict]) -> list[dict]:
    """Every assistant tool call followed by exactly one result, no result without its call:
    missing results become error results saying the run was interrupted; orphans are dropped."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        i += 1
        if m.get("role") == "tool":
            continue  # a result whose call is not right before it
        out.append(m)
        calls = [c["id"] for c in m.get("tool_calls") or ()]
        seen: set[str] = set()
        while i < len(messages) and messages[i].get("role") == "tool":
            r = messages[i]
            i += 1
            if r.get("tool_call_id") in calls and r["tool_call_id"] not in seen:
                seen.add(r["tool_call_id"])
                out.append(r)
        for cid in calls:
            if cid not in seen:
                out.append({"role": "tool", "tool_call_id": cid,
                            "content": "error: no result was recorded (the run was interrupted)"})
    return out


def render(messages: list[dict], prefix: str) -> str:
    """Wire messages as text with roles rewritten (``parent_user``, ``parent_tool[name]``, ...)."""
    names: dict[str, str] = {}
    lines = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "tool":
            lines.append(f"{prefix}_tool[{names.get(m.get('tool_call_id') or '', '?')}]: {m.get('content') or ''}")
            continue
        text = m.get("content") or ""
        if not isinstance(text, str):
            text = json.dumps(text, ensure_ascii=False)
        calls = m.get("tool_calls") or []
        for c in calls:
            names[c.get("id") or ""] = c["function"]["name"]
        if calls:
            shown = ", ".join(f"{c['function']['name']}({c['function'].get('arguments') or ''})" for c in calls)
            text = f"{text}\n[calls {shown}]" if text else f"[calls {shown}]"
        lines.append(f"{prefix}_{role}: {text}")
    return "\n".join(lines)
