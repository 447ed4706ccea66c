"""Errors, sorted by who must act.

::

    UnityError                      base of everything unity_nb raises on purpose
    ├── UserError (ValueError)      the person must act: the message says what to do
    │   ├── HandleStateError        steering a handle whose state forbids it ("... is finished")
    │   ├── ToolDefinitionError     a function cannot be a tool (no type hints, bad name)
    │   ├── ModelConfigError        no model, no key, no base_url
    │   └── CacheMiss               a replay-only CachedModel met a request it never recorded
    ├── Stopped                     raised by ``result()`` of a loop that was stopped; ``.reason``
    ├── NotApproved                 a call of a function marked needs_approval did not run (skipped by the
    │                               person, or no one could be asked): raised where it was called
    └── ModelError                  the model could not be reached after retries (the run failed)

Errors the *model* must act on (a tool raising, an unknown tool name, arguments failing
validation) are not raised at all: they go back into the transcript as error results.
"""

from __future__ import annotations

__all__ = (
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


class UnityError(Exception):
    """Base class of every error unity_nb raises on purpose."""


class UserError(UnityError, ValueError):
    """A usage mistake: the message says what to do instead."""


class HandleStateError(UserError):
    """The handle's state forbids the call (for example steering a finished loop)."""

    def __init__(self, message: str, *, state: str) -> None:
        super().__init__(message)
        self.state = state


class ToolDefinitionError(UserError):
    """A function cannot be offered to a model as a tool."""


class ModelConfigError(UserError):
    """The model is missing or misconfigured."""


class CacheMiss(UserError):
    """A replay-only ``CachedModel`` was asked a request it has not recorded."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key


class Stopped(UnityError):
    """The loop was stopped by ``stop(reason)``; ``reason`` says why."""

    def __init__(self, reason: str | None = None) -> None:
        super().__init__(f"stopped: {reason}" if reason else "stopped")
        self.reason = reason


class NotApproved(UnityError):
    """A call of a function marked ``needs_approval`` did not run: the person skipped it, or no one could be
    asked (its operation ended, or the thread it was called in carries no trace of one). Raised where the call
    was made (a plan's code, a tool), so the model reads why."""


class ModelError(UnityError):
    """The model call failed for good (after retries); the loop failed with it.

    ``status`` is the HTTP status the provider answered with (401, 404, 429, ...), or None when
    there was none (a dropped connection, a stream that broke off, a body that is not a reply).
    ``fails_every_call``: no call to this model can succeed now (its local server has ended), so a batch
    stops at once instead of failing each row on its own."""

    def __init__(self, message: str = "", *, status: int | None = None, fails_every_call: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.fails_every_call = fails_every_call
