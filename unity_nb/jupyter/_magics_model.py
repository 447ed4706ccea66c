"""What ``%unity model`` says about the names a server lists: ``%unity model list`` shows them, and
``%unity model NAME --base-url URL`` warns when the server lists models and NAME is not one of them (a server
that ignores the name, as llama.cpp's and many others do, answers any name with its own model)."""

from __future__ import annotations

from typing import Any

from .._errors import ModelError

__all__ = ("listing", "unlisted")


def listing(model: Any, *, base_url_given: bool) -> str:
    """The models ``model``'s server lists, for a person (a :class:`ModelError` when it gives no list)."""
    listed = model.available_models()
    where = model.client.base_url
    return (f"models at {where}: " + (", ".join(listed) if listed else "none listed")
            + "\n(use one: %unity model NAME" + (f" --base-url {where})" if base_url_given else ")"))


def unlisted(model: Any, name: str) -> str | None:
    """A warning when ``model``'s server lists models and ``name`` is not among them; ``None`` otherwise (the
    name is listed, the list is empty, or the server gives none)."""
    try:
        listed = model.available_models()
    except ModelError:
        return None
    if not listed or name in listed:
        return None
    shown = ", ".join(map(repr, listed[:20])) + (" ..." if len(listed) > 20 else "")
    return (f"warning: the server at {model.client.base_url} lists no model named {name!r} (it lists {shown}); "
            "a server that ignores the name answers with its own model. See them all: "
            f"%unity model list --base-url {model.client.base_url}")
