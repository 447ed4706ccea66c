"""The map's result cache: the same model, the same row prompt and the same options give the stored answer
without a call.

Kept in the store, in a table of its own (``map_cache``: key, answer, model, created), not in the events: a hit
is one primary-key look-up, whatever the number of events, and a row's answer is written there once it
finished (``row_finished`` events still record every row, cached or not). The key hashes what determines the
answer: the model's identity (its name and the server's address; a :class:`ScriptedModel`, whose answers come
from its script, is never cached), the row's full prompt, the answer's typed fields, and the row options a
person may change (system prompt, tools with their schemas, max steps, tool policy...).
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from typing import Any

__all__ = ("ResultCache", "model_identity", "options_fingerprint")

_TABLE = (
    "CREATE TABLE IF NOT EXISTS map_cache (key TEXT PRIMARY KEY, answer TEXT NOT NULL, model TEXT, created REAL)"
)


def model_identity(model: Any) -> str | None:
    """What names a model's answers: ``None`` for a model whose answers are not a function of its name and the
    prompt (a ScriptedModel, an object without a name)."""
    from ..models import OpenAIModel

    explicit = getattr(model, "cache_identity", None)
    if isinstance(explicit, str):
        return explicit
    if isinstance(model, OpenAIModel):
        base = getattr(getattr(model, "client", None), "base_url", None) or ""
        return f"{model.name}@{base}\0{sorted(getattr(model, 'options', {}).items())!r}"
    return None


def options_fingerprint(options: dict[str, Any], output: Any) -> str:
    """The row options that change an answer, as text: tools by name, description and parameters; the rest by repr."""
    parts = []
    for key in sorted(options):
        value = options[key]
        if key == "tools":
            value = [(getattr(t, "name", repr(t)), getattr(t, "description", ""), _schema(t)) for t in value]
        parts.append(f"{key}={value!r}")
    if output is not None:
        parts.append(f"output={_schema_of(output)}")
    return "\n".join(parts)


def _schema(tool: Any) -> str:
    params = getattr(tool, "params", None)
    return _schema_of(params) if params is not None else ""


def _schema_of(model: Any) -> str:
    try:
        return repr(model.model_json_schema())
    except Exception:  # noqa: BLE001 - a schema that cannot be made: its name stands for it
        return repr(model)


class ResultCache:
    """Answers by key in ``store``'s ``map_cache`` table."""

    def __init__(self, store: Any, identity: str, fingerprint: str) -> None:
        self.store = store
        self._prefix = f"{identity}\0{fingerprint}\0".encode(errors="surrogatepass")
        self.hits = 0
        store.execute(_TABLE)

    def key(self, prompt: str) -> str:
        h = hashlib.blake2b(self._prefix, digest_size=16)
        h.update(prompt.encode(errors="surrogatepass"))
        return h.hexdigest()

    def get(self, key: str) -> str | None:
        try:
            found = self.store.query("SELECT answer FROM map_cache WHERE key = ?", (key,))
        except sqlite3.Error:  # a cache that cannot be read is a miss
            return None
        return found[0]["answer"] if found else None

    def get_many(self, keys: list[str]) -> dict[str, str]:
        """The answers the cache holds for ``keys`` (one query for all of them)."""
        if not keys:
            return {}
        try:
            found = self.store.query(
                f"SELECT key, answer FROM map_cache WHERE key IN ({','.join('?' * len(keys))})", tuple(keys)
            )
        except sqlite3.Error:
            return {}
        return {r["key"]: r["answer"] for r in found}

    def put(self, key: str, answer: str, model: str) -> None:
        try:
            self.store.execute(
                "INSERT OR REPLACE INTO map_cache (key, answer, model, created) VALUES (?, ?, ?, ?)",
                (key, answer, model, time.time()),
            )
        except sqlite3.Error:  # the store has its own ways of saying it is unwell; the row's answer stands
            pass
