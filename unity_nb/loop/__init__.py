"""The tool loop: handles, nesting, steering, tools."""

from ._handle import LoopHandle, Message, Status, ToolCallRecord, current_loop, forward_call, start_loop
from ._tools import Tool, ToolContext, ToolFailed, as_tool

__all__ = ("LoopHandle", "Message", "Status", "ToolCallRecord", "current_loop", "forward_call", "start_loop", "Tool", "ToolContext", "ToolFailed", "as_tool")
