"""Record/replay: a notebook recorded once against a real model re-runs offline, byte for byte."""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import json
import os
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Literal

from .._errors import CacheMiss, UserError
from ._base import DeltaCallback, Model, ModelRequest, Reply, ToolCall, Usage

__all__ = ("CachedModel",)

Mode = Literal["auto", "replay", "record"]

_SAVE_EVERY = 1.0
"""Seconds between writes of a recording file while recordings keep coming (each write is the whole file)."""
_LIVE: weakref.WeakSet[CachedModel] = weakref.WeakSet()


def _save_all(path: Path | None = None) -> None:
    """Write every live CachedModel's unwritten recordings (of the file ``path`` only, if given)."""
    for model in list(_LIVE):
        if path is None or model._resolved == path:
            model.save()


atexit.register(_save_all)


def request_key(model_name: str, request: ModelRequest) -> str:
    """The canonical key of a request: model, messages, tools, tool choice and options. Never a key or header,
    nor a prompt-cache key (an id that differs every run and changes no reply)."""
    canonical = json.dumps(
        {
            "model": model_name,
            "messages": request.messages,
            "tools": request.tools,
            "tool_choice": request.tool_choice,
            "options": {k: v for k, v in request.options.items() if k != "prompt_cache_key"},
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def _describe(request: ModelRequest) -> str:
    last = request.messages[-1] if request.messages else {}
    text = str(last.get("content") or last.get("tool_calls") or "")
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{len(request.messages)} messages, last ({last.get('role', '?')}): {text!r}"


class CachedModel:
    """Wrap ``inner``; replay recorded replies from the JSON file at ``path``.

    ``mode="auto"`` replays a hit and records a miss; ``"replay"`` fails loudly on a miss
    (raising :class:`CacheMiss` naming the request), for CI; ``"record"`` always calls through
    and overwrites. The key is the canonical request (model name, messages, tools, tool
    choice, options), never an API key. The environment variable ``UNITY_NB_CACHE_MODE``
    overrides the default mode.

    Recordings are written to the file at once, and then at most once a second while more keep coming
    (the file is rewritten whole: a write per reply made recording a batch quadratic). What is not yet
    written is written by :meth:`save`, at exit, and before another CachedModel opens the same file; a
    process killed outright loses at most the last second of recordings (those requests are asked again).
    """

    def __init__(self, inner: Model, path: str | os.PathLike, *, mode: Mode | None = None) -> None:
        mode = mode or os.environ.get("UNITY_NB_CACHE_MODE", "auto")  # type: ignore[assignment]
        if mode not in ("auto", "replay", "record"):
            raise UserError(f"CachedModel mode must be 'auto', 'replay' or 'record', not {mode!r}")
        self.inner = inner
        self.path = Path(path)
        self._resolved = self.path.resolve()
        _save_all(self._resolved)  # another instance's recordings of this file reach it before it is read
        self.mode: Mode = mode
        self.name = inner.name
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, dict] = {}
        if self.path.exists():
            self._entries = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        elif mode == "replay":
            raise UserError(f"CachedModel: no recording at {self.path}; record it first with mode='auto'")
        self._write_lock = threading.Lock()
        self._dirty = False
        self._saved_at = -_SAVE_EVERY
        self._timer: asyncio.TimerHandle | None = None
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"CachedModel({self.inner!r}, path={str(self.path)!r}, mode={self.mode!r})"

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply:
        key = request_key(self.name, request)
        entry = self._entries.get(key) if self.mode != "record" else None
        if entry is not None:
            self.hits += 1
            reply = Reply(
                content=entry["content"],
                tool_calls=[ToolCall(**c) for c in entry["tool_calls"]],
                usage=Usage(*entry["usage"]),
                model=entry["model"],
                finish_reason=entry.get("finish_reason"),
                thinking=entry.get("thinking"),
                refusal=entry.get("refusal"),
                echo=entry.get("echo") or {},
            )
            thinking = getattr(on_delta, "thinking", None)
            if reply.thinking and thinking is not None:
                thinking(reply.thinking)
            if reply.content and on_delta is not None:
                on_delta(reply.content)
            return reply
        if self.mode == "replay":
            raise CacheMiss(
                f"CachedModel (replay only) has no recording for this request to {self.name!r}: "
                f"{_describe(request)} [key {key[:12]}]. Re-record with mode='auto' against a real model.",
                key=key,
            )
        self.misses += 1
        reply = await self.inner.complete(request, on_delta)
        entry = {
            "content": reply.content,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments, "id": c.id, **({"extra": c.extra} if c.extra else {})}
                for c in reply.tool_calls
            ],
            "usage": [reply.usage.input_tokens, reply.usage.output_tokens],
            "model": reply.model,
            "finish_reason": reply.finish_reason,
        }
        for optional in ("thinking", "refusal", "echo"):  # only when present: older recordings stay byte-identical
            if getattr(reply, optional):
                entry[optional] = getattr(reply, optional)
        self._entries[key] = entry
        self._recorded()
        return reply

    def _recorded(self) -> None:
        self._dirty = True
        wait = self._saved_at + _SAVE_EVERY - time.monotonic()
        if wait <= 0:
            self.save()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(wait, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.save()

    def save(self) -> None:
        """Write the recordings not yet in the file (the whole file, atomically)."""
        with self._write_lock:
            if not self._dirty:
                return
            self._dirty = False
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".cache-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self._entries, f, indent=1, sort_keys=True, ensure_ascii=False)
            os.replace(tmp, self.path)
            self._saved_at = time.monotonic()

    def __del__(self) -> None:
        try:
            self.save()
        except Exception:  # noqa: BLE001, S110 - at interpreter exit the file system may be gone: nothing to do
            pass
