"""Why a row of a batch failed, said so a person can act, and which errors would fail every row."""

from __future__ import annotations

import json
import re
from typing import Any

from .._errors import ModelError
from .._secrets import scrub

__all__ = ("fails_every_row", "is_row_id", "label_of", "reason_of")

_ROW_SPECIFIC = re.compile(
    r"context|too long|too large|token|maximum|length|content.?(filter|policy|management)|safety|flagged", re.I
)
"""What a 400 says when it is about one row's content, not the request's shape."""


def reason_of(err: BaseException | None) -> str:
    """Why a row failed (or the batch did), as its reason says it (no secret's value in it)."""
    return scrub(f"{type(err).__name__}: {err}")


def _status_of(err: BaseException) -> int | None:
    status = getattr(err, "status", None)
    if isinstance(status, int):
        return status
    found = re.search(r"\(HTTP (\d{3})\)", str(err))  # a ModelError made before it carried its status
    return int(found.group(1)) if found else None


def fails_every_row(err: BaseException, any_succeeded: bool) -> bool:
    """A model error that every row would meet: a key refused (401, 403), no such model or path (404), a model
    that says so (its local server ended), or a 400 before any row succeeded that is not about one row's
    content (the request's shape)."""
    if not isinstance(err, ModelError):
        return False
    if err.fails_every_call:
        return True
    status = _status_of(err)
    if status in (401, 403, 404):
        return True
    return status == 400 and not any_succeeded and not _ROW_SPECIFIC.search(str(err))


def is_row_id(key: Any) -> bool:
    if not isinstance(key, str) or not key.startswith("["):
        return False
    try:
        value = json.loads(key)
    except ValueError:
        return False
    return (isinstance(value, list) and len(value) == 3 and isinstance(value[0], int)
            and isinstance(value[1], str) and isinstance(value[2], str))


def label_of(key: Any) -> str:
    text = str(key)
    return text if len(text) <= 40 else text[:37] + "..."


