"""Models: the protocol, the OpenAI-compatible client, the scripted double, record/replay."""

from ._base import Model, ModelRequest, Reply, ToolCall, Usage, call_tool
from ._cache import CachedModel
from ._openai import OpenAIModel
from ._scripted import ScriptedModel


def default_model(who: str) -> OpenAIModel:
    """The model named by ``UNITY_NB_MODEL``; else a UserError telling ``who`` how to get one."""
    import os

    from .._errors import UserError

    name = os.environ.get("UNITY_NB_MODEL")
    if not name:
        raise UserError(
            f"{who} needs model=...: an OpenAIModel('gpt-4.1-mini'), a ScriptedModel(fn), or any object with "
            "`async def complete(request, on_delta)` (or set UNITY_NB_MODEL)"
        )
    return OpenAIModel(name)


__all__ = ("Model", "ModelRequest", "Reply", "ToolCall", "Usage", "call_tool", "CachedModel", "OpenAIModel", "ScriptedModel", "default_model")
