"""A server's URL as a person may see it: what it carries that is a secret shown as ``***``."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

__all__ = ("shown_url",)

_SECRET_PARAM = re.compile(r"key|token|secret|passw|sig|auth", re.I)


def shown_url(url: Any) -> str:
    """A server's URL as it may be shown: the password of a ``user:password@`` in it, and the value of a query
    parameter named like a key (``api_key=``, ``token=``, ``sig=``), as ``***`` (a cell's output and its errors are
    saved with the notebook, and the URL may come from ``OPENAI_BASE_URL``, never typed in the notebook)."""
    text = str(url)
    parts = urllib.parse.urlsplit(text)
    if parts.password is not None:
        user = parts.netloc.rpartition("@")[0].partition(":")[0]
        parts = parts._replace(netloc=f"{user}:***@{parts.netloc.rpartition('@')[2]}")
    if parts.query:
        pairs = [p.partition("=") for p in parts.query.split("&")]
        parts = parts._replace(query="&".join(
            f"{k}={'***' if v and _SECRET_PARAM.search(urllib.parse.unquote(k)) else v}" if eq else k
            for k, eq, v in pairs
        ))
    return urllib.parse.urlunsplit(parts)
