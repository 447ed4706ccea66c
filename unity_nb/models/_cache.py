"""Record/replay: a notebook recorded once against a real model re-runs offline, byte for byte.

The file is JSON lines: a header line, then one recording a line, appended as each reply arrives by a
writer thread (never on the event loop). A file in the older format (one JSON object, rewritten whole)
still loads, and is converted to JSON lines, once and off the event loop, when the first new recording
is written to it. A process killed mid-write leaves at most a partial last line, skipped (with a warning)
when the file is read and cut off before the next append.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import tempfile
import threading
import warnings
import weakref
from pathlib import Path
from typing import Literal

from .._errors import CacheMiss, UserError
from ._base import DeltaCallback, Model, ModelRequest, Reply, ToolCall, Usage
from ._urls import shown_url

__all__ = ("CachedModel",)

Mode = Literal["auto", "replay", "record"]

_HEADER = {"unity_nb_cache": 2}
"""The first line of a recording file in JSON lines; a file without it is the older single JSON object."""
_IDLE = 2.0
"""Seconds a writer thread waits for more recordings before it ends (the next recording starts another)."""
_LIVE: weakref.WeakSet[CachedModel] = weakref.WeakSet()


def _save_all(path: Path | None = None) -> None:
    """Write every live CachedModel's unwritten recordings (of the file ``path`` only, if given). A file that
    cannot be written is said (a warning), and the others are still written."""
    for model in list(_LIVE):
        if path is None or model._resolved == path:
            try:
                model.save()
            except Exception:  # noqa: BLE001 - said, and the next model's recordings still written
                model._warn_once()


atexit.register(_save_all)


DEFAULT_SERVER = "https://api.openai.com/v1"
"""The server a model names no other than (``OpenAIModel``'s default base URL): left out of a key."""


def served_by(model: object) -> dict:
    """What besides a request decides ``model``'s replies: its own options (``OpenAIModel(options=...)``, sent with
    every request) and its server (its ``cache_server``, else its ``base_url``), each where it has one: empty for
    a model with no options at the default server, whose key is then the one recordings were made under before
    these were in it."""
    served: dict = {}
    options = getattr(model, "options", None)
    if isinstance(options, dict) and options:
        served["model_options"] = {k: v for k, v in options.items() if k != "prompt_cache_key"}
    server = getattr(model, "cache_server", None) or getattr(model, "base_url", None)
    if isinstance(server, str) and server.rstrip("/") != DEFAULT_SERVER:
        served["server"] = server.rstrip("/")
    return served


def request_key(model_name: str, request: ModelRequest, served: dict | None = None) -> str:
    """The canonical key of a request: model, messages, tools, tool choice and options, and what the model serving
    it adds (``served``: :func:`served_by`). Never a key or header, nor a prompt-cache key (an id that differs every
    run and changes no reply)."""
    canonical = json.dumps(
        {
            "model": model_name,
            "messages": request.messages,
            "tools": request.tools,
            "tool_choice": request.tool_choice,
            "options": {k: v for k, v in request.options.items() if k != "prompt_cache_key"},
            **({"served": served} if served else {}),
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


def _line(obj: object) -> bytes:
    return (json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _read(path: Path) -> tuple[dict[str, dict], bool, int | None, int]:
    """Read a recording file: (recordings, whether it is JSON lines, where to cut a partial or broken tail,
    how many recordings the file holds, repeats included: ``mode="record"`` appends a request again).

    Lines that do not parse are skipped with a warning: a partial last line is what a process killed
    mid-write leaves, and its request is asked again."""
    data = path.read_bytes()
    first, _, _ = data.partition(b"\n")
    try:
        header = json.loads(first) if first.strip() else None
    except ValueError:
        header = None
    if not (isinstance(header, dict) and "unity_nb_cache" in header):
        text = data.decode("utf-8").strip()
        whole: dict[str, dict] = json.loads(text) if text else {}
        return whole, False, None, len(whole)
    entries: dict[str, dict] = {}
    skipped = lines = 0
    cut: int | None = None
    pos = len(first) + 1
    while pos < len(data):
        end = data.find(b"\n", pos)
        raw = data[pos:] if end < 0 else data[pos:end]
        try:
            record = json.loads(raw)
            entries[record["key"]] = record["entry"]
            lines += 1
        except (ValueError, KeyError, TypeError):
            if raw.strip():
                skipped += 1
                if end < 0:
                    cut = pos  # a partial last line: cut off before the next append
        if end < 0:
            break
        pos = end + 1
    if skipped:
        warnings.warn(
            f"CachedModel: skipped {skipped} unreadable line(s) of {path} (a write cut short, most likely "
            "by a killed kernel); those requests go to the model again",
            RuntimeWarning,
            stacklevel=3,
        )
    return entries, True, cut, lines


class CachedModel:
    """Wrap ``inner``; replay recorded replies from the file at ``path``.

    ``mode="auto"`` replays a hit and records a miss; ``"replay"`` fails loudly on a miss
    (raising :class:`CacheMiss` naming the request), for CI; ``"record"`` always calls through
    and overwrites (the later recording of a request wins). The key is the canonical request
    (model name, messages, tools, tool choice, options) and what the wrapped model adds to every request (its own
    ``options``, and its server's base URL unless it is OpenAI's: :func:`served_by`), never an API key: a recording
    made at one temperature or server is not replayed for another. A model with neither has the key recordings were
    made under before these were in it; such a recording is refused for a model with either (a
    :class:`CacheMiss` saying so in replay mode; asked again in auto mode), as it may have been made at others. The
    environment variable ``UNITY_NB_CACHE_MODE`` overrides the default mode.

    Each recording is appended to the file as one JSON line by a writer thread as soon as it arrives,
    so recording never blocks the event loop, whatever the file's size. :meth:`save` writes what the
    thread has not written yet (it is called at exit and before another CachedModel opens the same file).
    A process killed outright loses at most the recording being written. A reply marked ``truncated`` (its stream
    ended with neither a finish_reason nor ``[DONE]``: perhaps cut off) is used but never recorded: the request is
    asked again next time.
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
        self._served = served_by(inner)
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, dict] = {}
        self._lines = False  # the file is JSON lines (else it is written whole once, then appended to)
        self._cut: int | None = None
        if self.path.exists():
            self._entries, self._lines, self._cut, held = _read(self.path)
            if held > 2 * len(self._entries):  # mostly superseded recordings: rewritten compact at the next write
                self._lines = False
        elif mode == "replay":
            raise UserError(f"CachedModel: no recording at {self.path}; record it first with mode='auto'")
        self._write_lock = threading.Lock()
        self._rewritten: dict[str, dict] = {}
        """What the last whole rewrite wrote (the very entries): a recording queued after it is not appended twice."""
        self._pending: list[tuple[str, dict, bytes]] = []  # (key, entry, its line), appended on the loop
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self.write_error: BaseException | None = None
        """The last error writing the file, ``None`` once a write succeeds (the recordings stay in memory and are
        written again every few seconds while recording, and at exit). A failure is said once, as it happens (a
        ``RuntimeWarning``), and on the next reply (``Reply.warnings``, recorded in its ``model_response`` event)."""
        self._warned = False  # the current failure was said as a warning
        self._noted = False  # ... and on a reply
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"CachedModel({self.inner!r}, path={str(self.path)!r}, mode={self.mode!r})"

    async def complete(self, request: ModelRequest, on_delta: DeltaCallback | None = None) -> Reply:
        key = request_key(self.name, request, self._served)
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
                id=entry.get("id"),
            )
            thinking = getattr(on_delta, "thinking", None)
            if reply.thinking and thinking is not None:
                thinking(reply.thinking)
            if reply.content and on_delta is not None:
                on_delta(reply.content)
            return self._noting(reply)
        if self.mode == "replay":
            raise CacheMiss(
                f"CachedModel (replay only) has no recording for this request to {self.name!r}: "
                f"{_describe(request)} [key {key[:12]}]{self._older(request)}. Re-record with mode='auto' against a "
                "real model.",
                key=key,
            )
        self.misses += 1
        reply = self._noting(await self.inner.complete(request, on_delta))
        if reply.truncated:  # perhaps cut off: used this once, never replayed as if it were whole
            return reply
        entry = {
            "content": reply.content,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments, "id": c.id, **({"extra": c.extra} if c.extra else {})}
                for c in reply.tool_calls
            ],
            # [in, out], and True when estimated (the provider reported none): replayed as the estimate it was
            "usage": [reply.usage.input_tokens, reply.usage.output_tokens, *([True] if reply.usage.estimated else [])],
            "model": reply.model,
            "finish_reason": reply.finish_reason,
        }
        for optional in ("thinking", "refusal", "echo", "id"):  # only when present
            if getattr(reply, optional):
                entry[optional] = getattr(reply, optional)
        self._entries[key] = entry
        self._recorded(key, entry)
        return reply

    def _older(self, request: ModelRequest) -> str:
        """What a miss says of a recording of the request made before the key held the model's options and server
        (it is not replayed: it may have been made at others)."""
        if not self._served or request_key(self.name, request) not in self._entries:
            return ""
        said = ", ".join(f"options {json.dumps(v, sort_keys=True, default=str)}" if k == "model_options" else
                         f"server {shown_url(v)}" for k, v in self._served.items())
        return (f"; a recording of it made before a recording's key held the model's options and server is there, "
                f"but it is not replayed for a model with {said}: it may have been made at others")

    def _failure(self) -> str:
        return (f"CachedModel could not write its recordings to {self.path} ({type(self.write_error).__name__}: "
                f"{self.write_error}); they are kept in memory and written once the file can be written (tried again "
                "every few seconds while recording, and at exit)")

    def _warn_once(self) -> None:
        """Say a failed write (a warning), once until a write succeeds."""
        if self.write_error is not None and not self._warned:
            self._warned = True
            warnings.warn(self._failure(), RuntimeWarning, stacklevel=2)

    def _noting(self, reply: Reply) -> Reply:
        """``reply``, saying on it (once a failure) that recordings could not be written."""
        if self.write_error is not None and not self._noted:
            self._noted = True
            reply.warnings.append(self._failure())
        return reply

    def _recorded(self, key: str, entry: dict) -> None:
        self._pending.append((key, entry, _line({"key": key, "entry": entry})))
        with self._thread_lock:  # held only to start or retire the writer, never while writing
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_while_busy, name="unity_nb-cache", daemon=True)
                self._writer.start()
        self._wake.set()

    def _write_while_busy(self) -> None:
        """The writer thread: write what is pending whenever woken; retire after two idle seconds."""
        while True:
            woken = self._wake.wait(timeout=_IDLE)
            self._wake.clear()
            try:
                self.save()
            except Exception:  # noqa: BLE001 - said to the person; the lines stay pending and are retried
                self._warn_once()
            if not woken:
                with self._thread_lock:
                    if not self._pending:
                        self._writer = None
                        return

    def save(self) -> None:
        """Write the recordings not yet in the file (appended as JSON lines; an older file is converted once)."""
        with self._write_lock:
            if not self._pending:
                return
            try:
                self._write_pending()
            except Exception as e:
                self.write_error = e
                raise
            self.write_error = None
            self._warned = self._noted = False  # a later failure is said again

    def _write_pending(self) -> None:
        """(Under the write lock.)"""
        count = len(self._pending)  # the loop only appends: the first ``count`` stay where they are
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self._lines or not self.path.exists():
            self._rewrite()  # whole, once: a new file, or an older file converted (with what is pending)
        else:
            # a recording the last rewrite wrote whole (its entry set before the copy, queued just after it)
            # is not appended again
            done = self._rewritten
            self._append(b"".join(p[2] for p in self._pending[:count] if done.get(p[0]) is not p[1]))
            del self._pending[:count]

    def _rewrite(self) -> None:
        seen = len(self._pending)
        written = dict(self._entries)  # a copy (one call: the loop cannot change it meanwhile)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".cache-", suffix=".jsonl")
        # one write, not one a recording: each write lets go of the GIL, and a thread waits ~5 ms to take it back
        # from a busy event loop (a file of 10,000 recordings took about 50 s to write while a loop ran)
        data = b"".join([_line(_HEADER), *(_line({"key": key, "entry": entry}) for key, entry in written.items())])
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        self._lines, self._cut = True, None
        self._rewritten = written
        # what the file now holds leaves the queue (the loop only appends: indices below len() stay put); a
        # recording queued before the copy is in it, or superseded by what is
        for i in reversed(range(len(self._pending))):
            key, entry, _ = self._pending[i]
            if (i < seen and key in written) or written.get(key) is entry:
                del self._pending[i]

    def _append(self, batch: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            if self._cut is not None:
                os.ftruncate(fd, self._cut)
                self._cut = None
            view = memoryview(batch)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def __del__(self) -> None:
        try:
            self.save()
        except Exception:  # noqa: BLE001, S110 - at interpreter exit the file system may be gone: nothing to do
            pass
