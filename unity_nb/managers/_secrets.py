"""The secrets manager: named secrets the actor and tools use by reference (see unity_nb._secrets)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._secrets import forget_secret, secret_names, set_secret
from ..loop import LoopHandle
from ._base import Manager

__all__ = ("SecretsManager",)


class SecretsManager(Manager):
    """Named secrets (API tokens, passwords) that plans use with get_secret('NAME') and JSON
    tools receive as '<<secret:NAME>>'. Their values are never shown to a model and are
    scrubbed from transcripts, events, the widget and saved notebooks; only names and
    descriptions are ever visible."""

    alias = "secrets"
    caller_description = "answering which secrets exist (names only, never values)"
    exposed = ("ask",)

    def set(self, name: str, value: str | None = None, *, env: str | None = None, description: str = "") -> None:
        """Keep a secret (prefer ``env=``: the value then never appears in a cell)."""
        set_secret(name, value, env=env, description=description)

    def forget(self, name: str) -> None:
        forget_secret(name)

    def names(self) -> dict[str, str]:
        """``{name: description}``."""
        return secret_names()

    def _tools(self) -> list[Callable[..., Any]]:
        def list_secrets() -> dict[str, str]:
            """The secrets that exist: name -> description (values are never available)."""
            return secret_names()

        return [list_secrets]

    def ask(self, question: str) -> LoopHandle:
        """Answer which secrets exist and what they are for (never their values)."""
        return self._loop("ask", question)
