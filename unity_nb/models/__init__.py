"""Models: the protocol, the OpenAI-compatible client, the scripted double, record/replay."""

from ._base import (
    Model,
    ModelRequest,
    Reply,
    ToolCall,
    Usage,
    call_tool,
    checked_usage,
    retry_hook,
    token_count,
    turn_hook,
    wait_hook,
    weak_hook,
)
from ._batch_api import BatchAPI, FileTooLarge, NoBatchAPI, RowResult, batch_api_of, batch_price
from ._cache import CachedModel
from ._endpoint import Endpoint, endpoint_of
from ._limits import RateLimit, rate_limit_of, set_rate_limit
from ._local import LocalModel, LocalServer, local_model
from ._openai import OpenAIModel
from ._prices import Price, cost_of, format_dollars, price_of, set_price
from ._scripted import ScriptedModel
from ._urls import shown_url
from ._windows import context_window_of

_DEFAULT: list[Model] = []


def set_default_model(model: Model | None) -> None:
    """Make ``model`` the kernel's default (what ``%unity model`` does); ``None`` clears it."""
    if model is not None and not callable(getattr(model, "complete", None)):
        raise TypeError(f"a default model needs `async def complete(request, on_delta)`, not {type(model).__name__}")
    _DEFAULT[:] = [model] if model is not None else []


def default_model(who: str) -> Model:
    """The model :func:`set_default_model` set (``%unity model``), else the one ``UNITY_NB_MODEL``
    names; else a UserError telling ``who`` how to get one."""
    import os

    from .._errors import UserError

    if _DEFAULT:
        return _DEFAULT[0]
    name = os.environ.get("UNITY_NB_MODEL")
    if not name:
        raise UserError(
            f"{who} needs model=...: an OpenAIModel('gpt-4.1-mini'), a ScriptedModel(fn), or any object with "
            "`async def complete(request, on_delta)` (or set UNITY_NB_MODEL)"
        )
    return OpenAIModel(name)


__all__ = (
    "shown_url",
    "BatchAPI", "FileTooLarge", "NoBatchAPI", "RowResult", "batch_api_of", "batch_price",
    "CachedModel",
    "LocalModel",
    "LocalServer",
    "Model",
    "ModelRequest",
    "OpenAIModel",
    "Reply",
    "ScriptedModel",
    "ToolCall",
    "Usage",
    "call_tool",
    "checked_usage",
    "default_model",
    "local_model",
    "retry_hook",
    "token_count",
    "turn_hook",
    "wait_hook",
    "weak_hook",
    "set_default_model", "RateLimit", "rate_limit_of", "set_rate_limit",
    "Price", "cost_of", "format_dollars", "price_of", "set_price", "Endpoint", "endpoint_of", "context_window_of",
)
