"""How many tokens a model reads in one request (its context window): what an operator sizes its requests by.

A model object may say it (a ``context_window`` attribute, in tokens: a :class:`LocalModel` says its server's
``n_ctx``); else a few common models' windows are known by name (OpenAI's, as documented in 2025-11; a dated
snapshot and a provider prefix take the window of the model they name); else it is unknown (``None``).
"""

from __future__ import annotations

import re
from typing import Any

from ._base import token_count

__all__ = ("context_window_of",)

_KNOWN = {
    "gpt-4.1": 1_047_576, "gpt-4.1-mini": 1_047_576, "gpt-4.1-nano": 1_047_576,
    "gpt-4o": 128_000, "gpt-4o-mini": 128_000, "gpt-4-turbo": 128_000, "gpt-3.5-turbo": 16_385,
    "o1": 200_000, "o3": 200_000, "o3-mini": 200_000, "o4-mini": 200_000,
    "gpt-5": 400_000, "gpt-5-mini": 400_000, "gpt-5-nano": 400_000,
}
_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def context_window_of(model: Any) -> int | None:
    """The tokens ``model`` (a model object or a name) reads in one request: its own ``context_window``, else a
    known model's by name (``inner`` for a wrapper such as :class:`CachedModel`); ``None`` when unknown."""
    seen = 0
    while model is not None and seen < 4:
        if not isinstance(model, str):
            own = token_count(getattr(model, "context_window", None))
            if own:
                return own
        name = model if isinstance(model, str) else getattr(model, "name", None)
        if isinstance(name, str):
            bare = name.rpartition("/")[2]
            for candidate in (name, _DATED.sub("", name), bare, _DATED.sub("", bare)):
                if candidate in _KNOWN:
                    return _KNOWN[candidate]
        model = None if isinstance(model, str) else getattr(model, "inner", None)
        seen += 1
    return None
