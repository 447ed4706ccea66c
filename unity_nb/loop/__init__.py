"""The tool loop: handles, nesting, steering, tools, policies and answer hooks."""

from ._answers import Evaluation, HandOff, Reference, ToolResult, cites_references, handoff
from ._handle import LoopHandle, Message, ToolCallRecord, current_loop, forward_call, start_loop
from ._policies import discovery_first
from ._requests import RequestHandle
from ._status import Status
from ._tools import Tool, ToolContext, ToolFailed, as_tool

__all__ = (
    "LoopHandle", "Message", "Status", "ToolCallRecord", "current_loop", "forward_call", "start_loop", "Tool",
    "ToolContext", "ToolFailed", "as_tool", "RequestHandle", "Reference", "ToolResult", "Evaluation", "HandOff",
    "handoff", "cites_references", "discovery_first",
)
