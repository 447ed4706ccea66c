"""The models a server lists (``GET {base_url}/models``): what ``%unity model list`` shows, and what
``%unity model NAME --base-url URL`` checks NAME against (a server that ignores the name answers with its own).

Asked with the model's own key and headers, as its requests are sent: through the proxy the environment names
for the URL (as the chat requests go), never following a redirect (the key would go with it), bounded in time
(``timeout``) and size (1 MiB). Blocking: a few seconds at most, for a magic that shows the answer.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .._errors import ModelError
from .._json import loads
from ._transport import env_proxy

__all__ = ("listed_models",)

_LIMIT = 1 << 20


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx is raised as an HTTPError: the key is never sent on to another address


def listed_models(base_url: str, headers: dict[str, str], *, timeout: float = 5.0, scrub: Any = str) -> list[str]:
    """The ids ``GET {base_url}/models`` lists (in its order); a :class:`ModelError` saying why when the server
    gives no list (no answer, an error status, or a body that is not a model list)."""
    url = base_url.rstrip("/") + "/models"
    proxy = env_proxy(url)
    scheme = urllib.parse.urlsplit(url).scheme
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({scheme: proxy} if proxy else {}), _NoRedirect()
    )
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            raw = response.read(_LIMIT + 1)
    except urllib.error.HTTPError as err:
        raise ModelError(scrub(f"the server at {base_url} answered GET /models with HTTP {err.code}")) from None
    except (OSError, ValueError) as err:
        raise ModelError(scrub(f"the server at {base_url} did not list its models: {err}")) from None
    if len(raw) > _LIMIT:
        raise ModelError(f"the server at {base_url} sent a model list of more than {_LIMIT} bytes")
    try:
        body = loads(raw)
    except ValueError:
        body = None
    data = body.get("data") if isinstance(body, dict) else body if isinstance(body, list) else None
    if not isinstance(data, list):
        raise ModelError(f"the server at {base_url} answered GET /models with no model list: {raw[:200]!r}")
    return [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
