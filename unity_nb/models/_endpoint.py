"""Which provider a model is, and the server it talks to: what traces say (``gen_ai.provider.name``,
``server.address``, ``server.port`` in OpenTelemetry's GenAI conventions).

A model object may say its provider itself (a ``provider`` attribute: ``LocalModel`` is ``llama_cpp``,
``ScriptedModel`` ``unity_nb.scripted``, a ``CachedModel`` its inner model's). Otherwise an OpenAI-compatible
model's provider is read from its server's address: the conventions' well-known names for the providers'
own addresses (``api.openai.com`` is ``openai``, ``api.anthropic.com`` ``anthropic``, ``*.openai.azure.com``
``azure.ai.openai``, ...), and ``openai`` (the API it speaks, as the conventions ask for a server reached
through the OpenAI API) for any other server, whose address then tells it apart.
"""

from __future__ import annotations

import functools
import urllib.parse
from dataclasses import dataclass
from typing import Any

__all__ = ("Endpoint", "endpoint_of")

_HOSTS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.deepseek.com": "deepseek",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "api.cohere.ai": "cohere",
    "api.cohere.com": "cohere",
    "api.moonshot.ai": "moonshot_ai",
    "generativelanguage.googleapis.com": "gcp.gemini",
    "aiplatform.googleapis.com": "gcp.vertex_ai",
    "models.inference.ai.azure.com": "azure.ai.inference",
}
_SUFFIXES = (
    (".openai.azure.com", "azure.ai.openai"),
    (".services.ai.azure.com", "azure.ai.inference"),
    ("-aiplatform.googleapis.com", "gcp.vertex_ai"),
    (".amazonaws.com", "aws.bedrock"),
)
_OTHER = "_OTHER"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A model's provider (``gen_ai.provider.name``) and its server's host and port (``None``: no server)."""

    provider: str
    address: str | None = None
    port: int | None = None


def _provider_of_host(host: str) -> str:
    found = _HOSTS.get(host)
    if found is not None:
        return found
    for suffix, provider in _SUFFIXES:
        if host.endswith(suffix) and (provider != "aws.bedrock" or host.startswith("bedrock")):
            return provider
    return "openai"  # another server speaking the OpenAI API: its address says which


def endpoint_of(model: Any) -> Endpoint:
    """``model``'s provider and server, as traces name them."""
    said = getattr(model, "provider", None)
    inner = getattr(model, "inner", None)  # a CachedModel: the model it records
    if not isinstance(said, str) and inner is not None and inner is not model:
        return endpoint_of(inner)
    base = getattr(model, "base_url", None) or getattr(getattr(model, "client", None), "base_url", None)
    if base is None:
        return Endpoint(said if isinstance(said, str) and said else _OTHER)
    found = _of_base(str(base))
    return Endpoint(said, found.address, found.port) if isinstance(said, str) and said else found


@functools.lru_cache(maxsize=256)
def _of_base(base: str) -> Endpoint:
    parts = urllib.parse.urlsplit(base)
    address = parts.hostname
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        port = None
    return Endpoint(_provider_of_host(address) if address else _OTHER, address, port)
