"""What a loop's parts write as it runs: counters, references, its lifecycle and its outcome.

One small slotted object: the turn counts steps and tokens, the tool runner counts calls and
printed characters, the engine keeps thinking lines, verdicts and cited references, and the
ending writes status, answer and error. The handle only reads it (``h.steps`` is ``state.steps``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..models import Usage
from ._status import Status

__all__ = ("UNSET", "LoopState", "StateReadings")

UNSET: Any = object()
"""``LoopState.result_object`` before a tool handed the loop a value to return."""


@dataclass(slots=True, eq=False, repr=False)
class LoopState:
    """The state a loop's parts write; people read it through the handle's properties."""

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


class StateReadings:
    """A handle's readings of its :class:`LoopState`: what the parts count, and how the loop ended
    (a batch's handle sums its rows' steps, tool calls and usage instead)."""

    __slots__ = ()

    state: LoopState

    @property
    def steps(self) -> int:
        """Model calls made so far (an interrupted and re-issued call counts)."""
        return self.state.steps

    @property
    def tool_calls(self) -> int:
        """Tool calls completed so far."""
        return self.state.tool_calls

    @property
    def usage(self) -> Usage:
        """Input and output tokens of this loop's own model calls."""
        return self.state.usage

    @property
    def printed(self) -> int:
        """Characters tools have printed so far (routed to their call records)."""
        return self.state.printed

    @property
    def compressions(self) -> int:
        """How many times the context was compressed."""
        return self.state.compressions

    @property
    def called_tools(self) -> set[str]:
        """Names of the tools called successfully so far."""
        return self.state.called_tools

    @property
    def all_references(self) -> list[Any]:
        """Every reference tools returned, numbered in order of arrival."""
        return self.state.all_references

    @property
    def references(self) -> list[Any]:
        """The references the final answer cites."""
        return self.state.references

    @property
    def thinking(self) -> list[str]:
        """Short progress lines (what the model said it was doing, which tools it called)."""
        return self.state.thinking

    @property
    def evaluation_results(self) -> list[Any]:
        """Every evaluation verdict, in order (failed ones that sent the model back included)."""
        return self.state.evaluation_results

    @property
    def started_at(self) -> float:
        return self.state.started_at

    @property
    def ended_at(self) -> float | None:
        return self.state.ended_at

    @property
    def result_value(self) -> str | None:
        """The final answer once finished (``None`` before, or if it did not finish)."""
        return self.state.answer

    @property
    def error(self) -> BaseException | None:
        """Why the loop failed or stopped (``Stopped``), once it has."""
        return self.state.error

    @property
    def stop_reason(self) -> str | None:
        return self.state.stop_reason
