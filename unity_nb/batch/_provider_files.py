"""What a map run through the provider's Batch API keeps besides its engine (``_provider_batch``): its settings
(``via="batch"`` and the ``batch_*`` options), each file of requests with the provider batch running it
(:class:`Chunk`), the rows a file holds as ranges, and how a provider's answer is read (its statuses, a batch
gone, a reply's answer)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import UserError
from ..models import Usage, batch_price
from ._estimate import CHARS_PER_TOKEN, tokens_out
from ._rows import Row, parse_answer

__all__ = (
    "FINAL", "MAX_BACKOFF", "OVERDUE", "READS", "BatchSettings", "again", "Chunk", "batch_settings", "count_of",
    "errors_said", "estimated_dollars", "files_short", "gone",
    "parse_ranges", "progress_of", "provider_batches", "ranges", "read_results", "reply_answer",
    "resume_chunk", "unused_usage",
)

FINAL = frozenset({"completed", "failed", "expired", "cancelled"})
MAX_BACKOFF = 10.0
"""Polls back off to this many times ``batch_poll`` while nothing changes."""
READS = 5
"""Times an ended provider batch's files are tried (one try a look) before its rows fail: work the provider did, and
is paid for, is not given up at the first error of a download."""
OVERDUE = 3600.0
"""Seconds past its window's end (:func:`window_end`; for a Batch object that says nothing of its window, a day after
this kernel first looked at it) after which a provider batch not ended fails its rows."""


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """The ``batch_*`` options of a map run ``via="batch"``."""

    poll: float = 30.0
    max_requests: int = 50_000
    max_bytes: int = 200_000_000
    stop_wait: float = 600.0
    resumed: tuple[Any, ...] = ()
    """``provider_batch`` events of the run this one continues (:func:`provider_batches`)."""


def batch_settings(options: dict[str, Any]) -> BatchSettings | None:
    """Take ``via`` and the ``batch_*`` options out of a map's ``options``: the settings for ``via="batch"``,
    ``None`` for a live map (which takes none of them)."""
    via = options.pop("via", None) or "live"
    keys = ("batch_poll", "batch_max_requests", "batch_max_bytes", "batch_stop_wait", "batches")
    given: dict[str, Any] = {k: options.pop(k) for k in keys if k in options}
    if via not in ("live", "batch"):
        raise UserError(f"via takes 'live' (a call per row now) or 'batch' (the provider's Batch API), not {via!r}")
    if via == "live":
        if given:
            raise UserError(f"{', '.join(sorted(given))} go with via='batch' only")
        return None
    for key in ("batch_poll", "batch_stop_wait"):
        value = given.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not value > 0):
            raise UserError(f"{key} takes a number of seconds above 0, not {value!r}")
    for key in ("batch_max_requests", "batch_max_bytes"):
        value = given.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UserError(f"{key} takes a whole number of at least 1, not {value!r}")
    resumed = given.get("batches") or ()
    if not isinstance(resumed, list | tuple):
        raise UserError("batches takes what u.provider_batches(store, name) gives (a list of its events)")
    return BatchSettings(
        poll=float(given.get("batch_poll") or 30.0), max_requests=given.get("batch_max_requests") or 50_000,
        max_bytes=given.get("batch_max_bytes") or 200_000_000, stop_wait=float(given.get("batch_stop_wait") or 600.0),
        resumed=tuple(resumed),
    )


def provider_batches(store: Any, name: str) -> list[Any]:
    """The ``provider_batch`` events of the newest run of ``name`` (or the run of that uid) in ``store``: what
    ``batches=`` takes to continue its provider batches without sending their rows again."""
    return list(store.events(name, kind="provider_batch"))


def ranges(positions: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``."""
    out: list[str] = []
    start = prev = None
    for p in sorted(positions):
        if prev is not None and p == prev + 1:
            prev = p
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = p
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def parse_ranges(text: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


class Chunk:
    """One file of requests, and the provider batch running it."""

    __slots__ = ("batch_id", "counts", "ended", "expires_at", "file_id", "index", "positions", "reads", "requests",
                 "reserved", "resumed", "rows", "status")

    def __init__(self, index: int, rows: dict[str, Row]) -> None:
        self.index = index
        self.rows = rows
        """custom_id -> the row (its values dropped; its task kept for the cache's key)."""
        self.positions: set[int] = set()
        self.requests = len(rows)
        """Requests its file holds (a line each in its results, also for a row a resume keeps): bounds their read."""
        self.file_id: str | None = None
        self.batch_id: str | None = None
        self.status = "uploading"
        self.counts = {"completed": 0, "failed": 0, "total": len(rows)}
        self.expires_at: float | None = None
        self.ended = False
        self.resumed = False
        self.reserved = 0.0
        """Dollars its rows are estimated to cost (counted against the budget until it ends)."""
        self.reads = 0
        """Tries at reading its files that failed (one a look, at most :data:`READS`)."""


def gone(err: BaseException) -> bool:
    """A look at a provider batch answered 404: there is no such batch there (it will never end)."""
    return getattr(err, "status", None) == 404


def reply_answer(reply: Any, output: Any) -> Any:
    """A row's answer from the provider's reply: the answer tool's fields for typed output (``output``), else its
    text; a ValueError saying why when the reply holds none (a refusal, arguments that are not JSON, nothing)."""
    if reply.refusal and not reply.content and not reply.tool_calls:
        raise ValueError(f"the model refused: {reply.refusal}")
    if output is not None:
        for call in reply.tool_calls:
            if call.name == "submit_answer":
                try:
                    fields = json.loads(call.arguments or "{}")
                except ValueError:
                    raise ValueError(f"the answer's arguments are not JSON: {call.arguments[:200]!r}") from None
                return parse_answer(fields, output)
        return parse_answer(reply.content or "", output)
    if not (reply.content or "").strip():  # a reply that says nothing is not an answer (as in a live loop)
        raise ValueError(f"the model answered nothing (finish_reason={reply.finish_reason!r})")
    return reply.content


WINDOW = 86400.0
"""The Batch API's completion window (``"24h"``, the one window it offers), for a Batch object that names none."""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def window_end(batch: Mapping[str, Any]) -> float | None:
    """When a provider batch's window ends: its ``expires_at``; else its ``created_at`` plus its
    ``completion_window`` (``"24h"``); None when it says neither."""
    expires = _number(batch.get("expires_at"))
    if expires is not None:
        return expires
    created = _number(batch.get("created_at"))
    if created is None:
        return None
    window = batch.get("completion_window")
    hours = window[:-1] if isinstance(window, str) and window.endswith("h") else ""
    return created + (float(hours) * 3600 if hours.isdigit() else WINDOW)


def errors_said(batch: Mapping[str, Any]) -> str | None:
    """What a provider batch's ``errors`` say (its first three messages), or ``None``: the documented shape
    (``{"data": [{"message": ...}]}``) or a provider's own (a list, a string), never an error itself."""
    errors = batch.get("errors")
    if isinstance(errors, Mapping):
        errors = errors.get("data", errors.get("message"))
    if isinstance(errors, Mapping | str):
        errors = [errors]
    if not isinstance(errors, list):
        return None
    said = [str(e.get("message") or e.get("code") or "") if isinstance(e, Mapping) else str(e) for e in errors[:3]]
    return "; ".join(w for w in said if w.strip())[:2000] or None


def count_of(value: Any, was: int) -> int:
    """A count a provider batch gives (its progress, shown): a whole number >= 0, else the one it gave before."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else was


async def read_results(api: Any, chunk: Chunk, batch: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """An ended provider batch's output and error files (read through ``api``, a ``BatchAPI``): each row's result
    (a ``RowResult``) by ``custom_id``, and every result of a row answered more than once."""
    results: dict[str, Any] = {}
    twice: dict[str, list[Any]] = {}  # custom_id -> every result given for it, where more than one was
    for key in ("output_file_id", "error_file_id"):
        fid = batch.get(key)
        if fid:
            for r in await api.file_results(str(fid), chunk.requests):
                if r.custom_id in results:
                    twice.setdefault(r.custom_id, [results[r.custom_id]]).append(r)
                results[r.custom_id] = r
    return results, twice


def progress_of(chunks: list[Chunk]) -> dict[str, Any]:
    """What the progress line says of a map's provider batches (their files, statuses and request counts)."""
    statuses = sorted({c.status for c in chunks if not c.ended}) or sorted({c.status for c in chunks})
    expires = [c.expires_at for c in chunks if not c.ended and c.expires_at]
    return {
        "files": len(chunks), "status": ", ".join(statuses) or "gathering",
        "completed": sum(c.counts["completed"] for c in chunks), "failed": sum(c.counts["failed"] for c in chunks),
        "total": sum(c.counts["total"] for c in chunks), "window": "24h",
        "expires_at": min(expires) if expires else None,
    }


def files_short(chunk: Chunk, results: Mapping[str, Any], twice: Mapping[str, list[Any]]) -> str | None:
    """What an ended provider batch's files lack, as a read counts (``chunk.reads``): fewer results than its
    ``request_counts`` say requests ended (its files not all there yet: read again); ``None`` when they hold them."""
    have = len(results) + sum(len(r) - 1 for r in twice.values())
    counted = chunk.counts["completed"] + chunk.counts["failed"]
    if have >= counted:
        return None
    chunk.reads += 1
    return (f"the files of provider batch {chunk.batch_id} hold {have} result(s) where its request_counts say "
            f"{counted} request(s) ended ({chunk.reads} of {READS} reads)")


def estimated_dollars(plan: Any, expected_output_tokens: int | None, line_bytes: int, rows: int) -> float:
    """Dollars ``rows`` requests of ``line_bytes`` bytes in all are estimated to cost at the batch price, at the
    estimate's assumptions: about 4 characters a token in, and its tokens out for each row (``expected_output_tokens``);
    0 when the model's price is unknown."""
    price, _note = batch_price(plan.config.model)
    if price is None:
        return 0.0
    per_out, _assumed = tokens_out(plan.output, expected_output_tokens)
    return (line_bytes / CHARS_PER_TOKEN * price.input + rows * per_out * price.output) / 1_000_000


def unused_usage(chunk: Chunk, unused: Mapping[str, Any]) -> Usage:
    """The tokens of a provider batch's results no row took (``unused``: ``RowResult`` by ``custom_id``), which the
    provider charged for: all but those of rows the run this one continues finished (kept, and counted there)."""
    usage = Usage()
    for cid, r in unused.items():
        position = cid.partition(":")[0]
        if chunk.resumed and position.isdigit() and int(position) not in chunk.positions:
            continue  # a row kept (done=): its answer was counted by the run that took it
        if r.reply is not None and r.reply.usage is not None:
            usage += r.reply.usage
    return usage


def resume_chunk(chunks: list[Chunk], claimed: dict[int, Chunk], event: Any) -> None:
    """Take a ``provider_batch`` event of the run a map continues into its ``chunks`` (the file it names, made
    once), each of its rows' positions ``claimed`` by it."""
    chunk = next((c for c in chunks if c.index == event.chunk), None)
    if chunk is None:
        chunk = Chunk(event.chunk, {})
        chunk.resumed = True
        chunks.append(chunk)
    if event.positions:
        chunk.positions = parse_ranges(event.positions)
        chunk.requests = len(chunk.positions)
        for p in chunk.positions:
            claimed[p] = chunk
    chunk.file_id = event.file_id or chunk.file_id
    chunk.batch_id = event.batch_id or chunk.batch_id
    chunk.status = event.status or ("created" if chunk.batch_id else "uploaded")
    chunk.counts["total"] = event.total or len(chunk.positions)
    if event.stage == "ended":
        chunk.ended = True  # its rows' ends are row_finished events: kept by done=, else sent again


def again(name: str) -> str:
    """What a row the provider never answered (its batch expired, lost, or its files without it) says to do: a
    resume sends it in a new provider batch, and keeps the rows that finished."""
    return (f"; to ask it again: %unity resume {name} (or u.map(..., done=u.finished_rows(store, {name!r}))) "
            "asks only the rows without an answer")
