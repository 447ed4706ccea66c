"""``%unity approve NAME --always [TOOL]``: which waiting call the widget's "Always allow TOOL" would approve, read
from the operation's inbox before anything is sent (a line that cannot be carried out is a usage error at once,
not a failure of the steering call in the log)."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError

from ._args import HELP

__all__ = ("always_call",)


def _waiting(approvals: list[dict]) -> str:
    tools = sorted({a["tool"] for a in approvals if "tool" in a})
    plans = sum("tool" not in a for a in approvals)
    return ", ".join([*tools, *(["a plan"] if plans == 1 else [f"{plans} plans"] if plans else [])]) or "nothing"


def always_call(handle: Any, tool: str) -> str:
    """The id of the call of ``tool`` (the one tool waiting when ``tool`` is empty) waiting in ``handle``'s
    operation, for ``handle.inbox.approve(call_id, always=True)``; a ``UsageError`` saying what waits otherwise."""
    name, approvals = handle.name, handle.inbox.approvals
    calls = [a for a in approvals if "tool" in a]
    if tool:
        found = next((a for a in calls if a["tool"] == tool), None)
        if found is None:
            raise UsageError(f"{name!r} has no call of {tool!r} waiting for approval (waiting: {_waiting(approvals)})"
                             f"\n\n{HELP['approve']}")
        return str(found["call_id"])
    tools = sorted({a["tool"] for a in calls})
    if not tools:
        raise UsageError(f"{name!r} waits on a plan: a plan is approved one at a time (%unity approve {name}); "
                         f"--always is for a tool's calls\n\n{HELP['approve']}")
    if len(tools) > 1:
        raise UsageError(f"calls of {len(tools)} tools wait in {name!r}: say which with %unity approve {name} "
                         f"--always TOOL ({', '.join(tools)})\n\n{HELP['approve']}")
    return str(calls[0]["call_id"])
