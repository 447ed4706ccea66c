"""``%unity model``: the model the magics use (a name on a server, ``local``, ``--var``), and what it says about the
names a server lists: ``%unity model list`` shows them, and ``%unity model NAME --base-url URL`` warns when the
server lists models and NAME is not one of them (a server that ignores the name, as llama.cpp's and many others do,
answers any name with its own model)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError

from .._errors import ModelConfigError, ModelError
from ..models import shown_url
from ._args import HELP, Command

if TYPE_CHECKING:
    from ._host import Host

__all__ = ("NO_MODEL", "describe_model", "list_models", "listing", "model_command", "unlisted")

NO_MODEL = (
    "no model is configured: run `%unity model gpt-4.1-mini` (with OPENAI_API_KEY set in the environment), "
    "`%unity model NAME --base-url http://localhost:11434/v1` for a local OpenAI-compatible server "
    "(or set OPENAI_BASE_URL), or `%unity model --var my_model` for a Model object in a variable"
)


def listing(model: Any, *, base_url_given: bool) -> str:
    """The models ``model``'s server lists, for a person (a :class:`ModelError` when it gives no list)."""
    listed = model.available_models()
    where = shown_url(model.client.base_url)
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
    where = shown_url(model.client.base_url)
    return (f"warning: the server at {where} lists no model named {name!r} (it lists {shown}); "
            "a server that ignores the name answers with its own model. See them all: "
            f"%unity model list --base-url {where}")


def model_command(magics: Host, cmd: Command) -> None:
    """``%unity model ...``: use a model (a name, ``local``, ``--var``), list the server's, or say which is used."""
    from ..models import OpenAIModel

    var = cmd.options.get("var")
    if var:
        beside = [f"NAME {cmd.name!r}" if cmd.name else "", *(f"--{k.replace('_', '-')}" for k in ("base_url", "gguf")
                                                             if cmd.options.get(k))]
        if any(beside):  # which one was meant cannot be told: neither is used silently
            raise UsageError(f"--var takes the model from a variable: give no {', '.join(b for b in beside if b)} "
                             f"beside it (or leave out --var)\n\n{HELP['model']}")
        if var not in magics.user_ns:
            raise UsageError(f"no variable named `{var}` in this notebook: make the model first (m = "
                             f"u.ScriptedModel(...), u.OpenAIModel(...)), then %unity model --var m\n\n{HELP['model']}")
        obj = magics.user_ns[var]
        if obj is None or not callable(getattr(obj, "complete", None)):
            raise UsageError(f"`{var}` is not a model (it needs an async `complete` method)\n\n{HELP['model']}")
        magics.set_model(obj, made=False)
    elif cmd.name == "local" and not cmd.options.get("base_url"):
        from ..models import local_model

        try:  # prints what it started and how to stop it
            magics.set_model(local_model(cmd.options.get("gguf")), made=True)
        except ModelConfigError as err:
            raise UsageError(f"{err}\n\n{HELP['model']}") from None
    elif cmd.options.get("gguf"):
        raise UsageError(f"--gguf goes with `%unity model local`\n\n{HELP['model']}")
    elif cmd.name == "list":
        list_models(magics, cmd.options.get("base_url"))
        return None
    elif cmd.name:
        base = cmd.options.get("base_url") or magics.base_url or None
        try:
            model = OpenAIModel(cmd.name, base_url=base)
        except ModelConfigError as err:
            raise UsageError(f"{err}\n\n{HELP['model']}") from None
        magics.set_model(model, made=True)
        warning = unlisted(model, cmd.name) if base else None  # a server of one's own may ignore the name
        if warning:
            print(warning)
    elif cmd.options.get("base_url"):
        raise UsageError(f"--base-url needs a model name\n\n{HELP['model']}")
    print(describe_model(magics))
    return None


def list_models(magics: Host, base_url: str | None) -> None:
    """``%unity model list``: the models the server lists (the current model's server, or ``base_url``'s)."""
    from ..models import OpenAIModel

    source, made = magics.model, None
    if base_url is not None or not callable(getattr(source, "available_models", None)):
        try:
            source = made = OpenAIModel("list", base_url=base_url or magics.base_url or None)
        except ModelConfigError as err:
            raise UsageError(f"{err}\n\n{HELP['model']}") from None
    try:
        print(listing(source, base_url_given=base_url is not None))
    except ModelError as err:  # it names the server: as a cell shows it (no password)
        where = str(source.client.base_url)
        raise UsageError(f"{str(err).replace(where, shown_url(where))}\n\n{HELP['model']}") from None
    finally:
        if made is not None:
            made.close_now()


def describe_model(magics: Host) -> str:
    """The model in use, and where, for a person."""
    model = magics.model
    if model is None:
        name = magics.default_model or os.environ.get("UNITY_NB_MODEL")
        return f"model: {name} (default, not yet used)" if name else f"model: none. {NO_MODEL}"
    base = getattr(model, "base_url", None) or getattr(getattr(model, "client", None), "base_url", None)
    return f"model: {model.name}" + (f" at {shown_url(base)}" if base else "")
