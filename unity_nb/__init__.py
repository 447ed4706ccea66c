"""unity_nb: steerable LLM tool loops for Jupyter.

Every operation is an async tool loop returning a steerable handle: ``pause``, ``resume``,
``interject``, ``ask``, ``stop``; handles nest and steering reaches every depth.
"""

from ._collector import tune_collector
from ._errors import (
    CacheMiss,
    HandleStateError,
    ModelConfigError,
    ModelError,
    NotApproved,
    Stopped,
    ToolDefinitionError,
    UnityError,
    UserError,
)
from ._otel import Tracing, trace
from ._registry import register_tool, registered_tools, tool, unregister_tool
from ._secrets import forget_secret, get_secret, secret_names, set_secret
from ._version import __version__ as __version__
from .actor import Actor, ActorHandle, PlanResult, act, final_answer, primitive, registered_primitives
from .batch import (
    AggHandle,
    Estimate,
    ExtractHandle,
    FilterHandle,
    JoinHandle,
    MapHandle,
    Operator,
    Param,
    Phase,
    PhasedHandle,
    TopKHandle,
    agg,
    extract,
    finished_rows,
    join,
    provider_batches,
    register_operator,
    topk,
    unregister_operator,
)
from .batch import estimate_map as estimate
from .batch import filter_rows as filter
from .batch import map_rows as map
from .events import AnyEvent, Event, EventBus, default_bus
from .jupyter import load_ipython_extension, unload_ipython_extension
from .loop import (
    Evaluation,
    HandOff,
    LoopHandle,
    LoopOptions,
    Message,
    Reference,
    RequestHandle,
    Status,
    Tool,
    ToolCallRecord,
    ToolContext,
    ToolFailed,
    ToolResult,
    as_tool,
    cites_references,
    current_call,
    current_loop,
    discovery_first,
    handoff,
    start_loop,
)
from .models import (
    CachedModel,
    LocalModel,
    Model,
    ModelRequest,
    OpenAIModel,
    RateLimit,
    Reply,
    ScriptedModel,
    ToolCall,
    Usage,
    call_tool,
    local_model,
    price_of,
    set_price,
    set_rate_limit,
)
from .store import Store

__all__ = (
    # the loop
    "start_loop",
    "LoopOptions",
    "current_call",
    # batches
    "map",
    "MapHandle",
    "finished_rows",
    "provider_batches",
    "set_price",
    "price_of",
    "estimate",
    "Estimate",
    # operators built on the map
    "filter",
    "extract",
    "topk",
    "join",
    "agg",
    "FilterHandle",
    "ExtractHandle",
    "TopKHandle",
    "JoinHandle",
    "AggHandle",
    "Operator",
    "Param",
    "Phase",
    "PhasedHandle",
    "register_operator",
    "unregister_operator",
    "RateLimit",
    "set_rate_limit",
    "tune_collector",
    "LoopHandle",
    "Status",
    "Message",
    "ToolCallRecord",
    "Tool",
    "ToolContext",
    "as_tool",
    "current_loop",
    "ToolFailed",
    # policies and answers
    "RequestHandle",
    "discovery_first",
    "Reference",
    "ToolResult",
    "Evaluation",
    "cites_references",
    "handoff",
    "HandOff",
    # the CodeAct actor
    "act",
    "Actor",
    "ActorHandle",
    "PlanResult",
    "final_answer",
    "primitive",
    "registered_primitives",
    # secrets
    "set_secret",
    "get_secret",
    "forget_secret",
    "secret_names",
    # notebooks
    "tool",
    "register_tool",
    "unregister_tool",
    "registered_tools",
    "load_ipython_extension",
    "unload_ipython_extension",
    # models
    "Model",
    "ModelRequest",
    "Reply",
    "ToolCall",
    "Usage",
    "call_tool",
    "OpenAIModel",
    "ScriptedModel",
    "CachedModel",
    "LocalModel",
    "local_model",
    # events
    "Event",
    "AnyEvent",
    "EventBus",
    "default_bus",
    "trace",
    "Tracing",
    # the store
    "Store",
    # errors
    "UnityError",
    "UserError",
    "HandleStateError",
    "ToolDefinitionError",
    "ModelConfigError",
    "CacheMiss",
    "Stopped",
    "NotApproved",
    "ModelError",
)
