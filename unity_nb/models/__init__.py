"""Models: the protocol, the OpenAI-compatible client, the scripted double, record/replay."""

from ._base import Model, ModelRequest, Reply, ToolCall, Usage, call_tool, retry_hook
from ._cache import CachedModel
from ._openai import OpenAIModel
from ._scripted import ScriptedModel


def default_model(who: str) -> Model:
    """The model ``%unity model`` set in this kernel, else the one ``UNITY_NB_MODEL`` names; else a
    UserError telling ``who`` how to get one."""
    import os
    import sys

    from .._errors import UserError

    if "IPython" in sys.modules:
        from IPython import get_ipython

        shell = get_ipython()
        magics = shell.magics_manager.registry.get("UnityMagics") if shell is not None else None
        if getattr(magics, "model", None) is not None:
            return magics.model
    name = os.environ.get("UNITY_NB_MODEL")
    if not name:
        raise UserError(
            f"{who} needs model=...: an OpenAIModel('gpt-4.1-mini'), a ScriptedModel(fn), or any object with "
            "`async def complete(request, on_delta)` (or set UNITY_NB_MODEL)"
        )
    return OpenAIModel(name)


__all__ = ("CachedModel", "Model", "ModelRequest", "OpenAIModel", "Reply", "ScriptedModel", "ToolCall", "Usage", "call_tool", "default_model", "retry_hook")
