"""What a loop's transcript is made of: messages, tool call records, and rendering them as text."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ._face import Loop
from ._text import PrintedOutput

__all__ = ("Message", "ToolCallRecord", "render_conversation")


@dataclass(slots=True)
class ToolCallRecord:
    """One tool call in the transcript, with its result once it has one."""

    id: str
    name: str
    arguments: str
    result: str | None = None
    error: bool = False
    child: Loop | None = None
    _displays: list[dict] | None = field(default=None, repr=False, compare=False)
    _printed: PrintedOutput | None = field(default=None, repr=False, compare=False)
    """What :attr:`output` is kept in (scrubbed across writes, bounded, published in order); made when the
    tool first prints (most print nothing)."""

    @property
    def displays(self) -> Sequence[dict]:
        """Rich outputs the call displayed (mime bundles: ``text/html``, ``image/png``, ...), in order."""
        return self._displays if self._displays is not None else ()

    def add_display(self, bundle: dict) -> None:
        """Keep a rich output the call displayed (the list is made on the first: most calls show none)."""
        if self._displays is None:
            self._displays = []
        self._displays.append(bundle)

    @property
    def printed(self) -> PrintedOutput:
        """Where what the call prints is kept (made on first use)."""
        if self._printed is None:
            self._printed = PrintedOutput()
            if self.result is not None:  # first printed after the call ended (a thread it started): kept as such
                self._printed.end()
        return self._printed

    @property
    def output(self) -> str:
        """What the tool printed while it ran (when the notebook layer routes output), scrubbed.
        Past a million characters, its first and last half million, with a line saying how many
        characters were cut between them."""
        return self._printed.text if self._printed is not None else ""

    @output.setter
    def output(self, text: str) -> None:
        self.printed.replace(text)

    @property
    def output_cut(self) -> int:
        """How many printed characters :attr:`output` left out (0 unless the tool printed more than a million)."""
        return self._printed.buffer.cut if self._printed is not None else 0


@dataclass(slots=True)
class Message:
    """One transcript entry.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool``; ``kind`` says more:
    ``task``, ``interjection``, ``steering`` (pause, resume, stop, ask), ``clarification``,
    ``notification``, ``answer`` (the final assistant message), ``text``, ``tool_result``,
    ``interrupted`` (what the model had streamed when a stop or an interjection cut its reply off).
    """

    role: str
    content: str | None
    kind: str = "text"
    tool_calls: Sequence[ToolCallRecord] = ()
    """The calls an assistant entry made (a list; other entries share the empty tuple)."""
    tool_call_id: str | None = None
    name: str | None = None
    error: bool = False
    ts: float = field(default_factory=time.time)
    thinking: str | None = None
    """The model's reasoning behind an assistant entry, where the provider streams it."""


def render_conversation(messages: Iterable[Message], prefix: str) -> str:
    """A transcript as text with roles rewritten (``outer_user``, ``inner_assistant``, ...)."""
    lines = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            lines.append(f"{prefix}_tool[{m.name}]: {m.content}")
            continue
        text = m.content or ""
        if m.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            text = f"{text}\n[calls {calls}]" if text else f"[calls {calls}]"
        role = "user" if m.role == "user" else m.role
        lines.append(f"{prefix}_{role}: {text}")
    return "\n".join(lines)
