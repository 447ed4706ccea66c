"""Models: the protocol, the OpenAI-compatible client, the scripted double, record/replay."""

from ._base import Model, ModelRequest, Reply, ToolCall, Usage, call_tool
from ._cache import CachedModel
from ._openai import OpenAIModel
from ._scripted import ScriptedModel

__all__ = ("Model", "ModelRequest", "Reply", "ToolCall", "Usage", "call_tool", "CachedModel", "OpenAIModel", "ScriptedModel")
