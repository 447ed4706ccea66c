"""The tool loop: handles, nesting, steering, tools, policies and answer hooks."""

from ._answers import Evaluation, HandOff, Reference, ToolResult, cites_references, handoff
from ._approval import pending_approvals, skipped_result, was_skipped
from ._context import CallInfo, current_call, current_loop, forward_call, resolve_tool_value
from ._engine import Driver, Engine
from ._gate import PendingCall, gated_function
from ._handle import LoopHandle, start_ask
from ._options import LoopOptions
from ._policy import (
    DiscoveryFirst,
    DynamicTools,
    ForcedFirstTools,
    LoopPolicy,
    Step,
    TimeAwareness,
    ToolPolicyFunction,
    discovery_first,
)
from ._records import Message, ToolCallRecord
from ._requests import RequestHandle
from ._run import Run
from ._source import OwnTools, ToolSource
from ._start import start_loop
from ._status import Status
from ._steering import VERBS, Verb, register_verb, steering_entry, stop_once, unregister_verb
from ._text import TextBuffer
from ._tools import Tool, ToolContext, ToolFailed, as_tool, json_schema, render_result
from ._views import Inbox, Requests, Tree
from ._workers import ToolTimeout, in_worker

__all__ = (
    "LoopHandle",
    "start_ask",
    "LoopOptions",
    "Message",
    "Status",
    "ToolCallRecord",
    "current_loop",
    "current_call",
    "CallInfo",
    "forward_call",
    "resolve_tool_value",
    "start_loop",
    "Tool",
    "ToolContext",
    "ToolFailed",
    "as_tool",
    "json_schema",
    "render_result",
    "in_worker",
    "TextBuffer",
    "stop_once",
    "ToolTimeout",
    "RequestHandle",
    "Reference",
    "ToolResult",
    "Evaluation",
    "HandOff",
    "handoff",
    "cites_references",
    "discovery_first",
    "LoopPolicy",
    "Step",
    "DiscoveryFirst",
    "DynamicTools",
    "ForcedFirstTools",
    "TimeAwareness",
    "ToolPolicyFunction",
    "VERBS",
    "Verb",
    "steering_entry",
    "register_verb",
    "unregister_verb",
    "Engine",
    "Driver",
    "skipped_result",
    "was_skipped",
    "pending_approvals",
    "gated_function",
    "PendingCall",
    "Run",
    "ToolSource",
    "OwnTools",
    "Tree",
    "Inbox",
    "Requests",
)
