"""What a loop's parts write as it runs: counters, references, its lifecycle and its outcome.

One small slotted object: the turn counts steps and tokens, the tool runner counts calls and
printed characters, the engine keeps thinking lines, verdicts and cited references, and the
ending writes status, answer and error. The handle only reads it (``h.state`` is this object).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..models import Usage
from ._status import Status

__all__ = ("UNSET", "LoopState")

UNSET: Any = object()
"""``LoopState.result_object`` before a tool handed the loop a value to return."""


@dataclass(slots=True, eq=False, repr=False)
class LoopState:
    """The state a loop's parts write; people read it as ``h.state`` (and ``h.steps``, ``h.usage``, ...)."""

    steps: int = 0
    """Model calls made so far (an interrupted and re-issued call counts)."""
    tool_calls: int = 0
    """Tool calls completed so far."""
    usage: Usage = field(default_factory=Usage)
    """Input and output tokens of this loop's own model calls."""
    printed: int = 0
    """Characters tools have printed so far (routed to their call records)."""
    compressions: int = 0
    """How many times the context was compressed."""
    called_tools: set[str] = field(default_factory=set)
    """Names of the tools called successfully so far (what policies like discovery-first read)."""
    all_references: list[Any] = field(default_factory=list)
    """Every :class:`Reference` tools returned, numbered in order of arrival."""
    references: list[Any] = field(default_factory=list)
    """The references the final answer cites."""
    thinking: list[str] = field(default_factory=list)
    """Short progress lines (what the model said it was doing, which tools it called)."""
    evaluation_results: list[Any] = field(default_factory=list)
    """Every :class:`Evaluation` verdict, in order (failed ones that sent the model back included)."""
    status: Status = Status.RUNNING
    """RUNNING until the loop ends (paused, waiting and idle are read from the gate and the inbox)."""
    idle: bool = False
    """A persistent multi-request loop waiting for its next request."""
    answer: str | None = None
    error: BaseException | None = None
    stop_reason: str | None = None
    result_object: Any = UNSET
    """What ``result()`` returns instead of the answer text (a tool's value, a hand-off's child)."""
    finishing: tuple[Any, str] | None = None
    """``(value, text)`` a tool ended the loop with (:meth:`Run.finish_with`), taken once the step's calls end."""
    cancelled_waits: int = 0
    """Waits for the answer (``await h``) cancelled while the operation went on (a cell interrupted: ``_wake``)."""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    streams: tuple[Any, Any] | None = None
    """The text and reasoning buffers of the model call in flight (the turn writes them as it makes them)."""

    @property
    def elapsed(self) -> float:
        """Seconds since the loop started, until it ended."""
        return (self.ended_at or time.time()) - self.started_at

    @property
    def streaming_text(self) -> str:
        """The assistant text of the model call in flight, as streamed so far (scrubbed: an end that
        could be the start of a secret value shows once the next piece settles it)."""
        return self.streams[0].text if self.streams is not None else ""

    @property
    def streaming_thinking(self) -> str:
        """The reasoning of the model call in flight, as far as it has streamed (where the provider streams it)."""
        return self.streams[1].text if self.streams is not None else ""
