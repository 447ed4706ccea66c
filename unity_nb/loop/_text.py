"""Text that grows piece by piece: streamed replies and what tools print.

Appending to a ``str`` attribute copies everything so far each time, which is quadratic: a 3 MB
reply streamed in small pieces took seconds and blocked the event loop. :class:`TextBuffer`
keeps the pieces and joins them when read (the join is cached until the next append), and can
keep only a head and a tail of huge text, saying how much was cut between them.

:class:`PrintedOutput` is what one tool call printed: scrubbed as it accumulates (a secret value
written in pieces is caught, see :class:`unity_nb._secrets.ScrubStream`), bounded, and handed
out for publishing in order, also when the writes come from worker threads.
"""

from __future__ import annotations

import threading

from .._secrets import ScrubStream

__all__ = ("OUTPUT_LIMIT", "PrintedOutput", "TextBuffer", "cut_line")

OUTPUT_LIMIT = 1_000_000
"""Characters of printed output a call record keeps: the first and the last half of it."""


def cut_line(count: int) -> str:
    """The line that stands where ``count`` characters were cut."""
    return f"\n[... {count:,} characters cut ...]\n"


class TextBuffer:
    """Text appended to in linear time, read as one ``str``.

    With ``limit``, once more than ``limit`` characters came, only the first ``limit // 2`` and
    the last ``limit - limit // 2`` are kept, with :func:`cut_line` saying how many were cut.
    """

    __slots__ = (
        "_head",
        "_head_len",
        "_head_max",
        "_sealed",
        "_tail",
        "_tail_len",
        "_tail_max",
        "_text",
        "_total",
        "limit",
    )

    def __init__(self, text: str = "", limit: int | None = None) -> None:
        self.limit = limit
        self._head: list[str] = []
        self._head_len = 0
        self._head_max = limit // 2 if limit is not None else None
        self._tail: list[str] = []
        self._tail_len = 0
        self._tail_max = limit - limit // 2 if limit is not None else 0
        self._total = 0
        self._text: str | None = ""
        self._sealed = False
        if text:
            self.append(text)

    def append(self, text: str) -> str:
        """Add ``text``. Returns the part of it that is now shown as it is and will stay so (the
        head's part; all of it once :meth:`seal` was called, or without a limit)."""
        if not text:
            return ""
        self._text = None
        self._total += len(text)
        room = len(text) if self._head_max is None else self._head_max - self._head_len
        head, rest = (text, "") if room >= len(text) else (text[:room], text[room:])
        if head:
            self._head.append(head)
            self._head_len += len(head)
        if rest:
            self._tail.append(rest)
            self._tail_len += len(rest)
            if self._tail_len > 2 * self._tail_max:  # amortised: each character is copied a bounded number of times
                self._trim_tail()
        return text if self._sealed else head

    def _trim_tail(self) -> str:
        tail = "".join(self._tail)[-self._tail_max :] if self._tail_max else ""
        self._tail = [tail] if tail else []
        self._tail_len = len(tail)
        return tail

    @property
    def cut(self) -> int:
        """How many characters were cut (0 while everything is kept)."""
        return max(self._total - self._head_len - self._tail_max, 0)

    @property
    def total(self) -> int:
        """How many characters were appended in all."""
        return self._total

    @property
    def text(self) -> str:
        if self._text is None:
            head = "".join(self._head)
            self._head = [head] if head else []
            tail = self._trim_tail() if self._tail else ""
            cut = self._total - self._head_len - len(tail)
            self._text = head + (cut_line(cut) if cut else "") + tail
        return self._text

    def __len__(self) -> int:
        return len(self.text)

    def seal(self) -> str:
        """The text is complete: returns what :meth:`append` has not returned (the kept tail, after
        the line saying how much was cut); from now on, appends return all they add."""
        if self._sealed:
            return ""
        self._sealed = True
        return self.text[self._head_len :] if self._tail else ""


class PrintedOutput:
    """What one tool call printed: scrubbed across writes, kept within ``limit``, published in order.

    :meth:`write` may be called from any thread. Text is released for publishing (:meth:`take`)
    once it is safe: when the head of the output is kept as it is, at once; past the head, at
    :meth:`end` (the kept tail, after a line saying how much was cut). So the published pieces
    add up to exactly what the record keeps.
    """

    __slots__ = ("_cut", "_lock", "_scrub", "_unpublished", "buffer", "ended")

    def __init__(self, text: str = "", limit: int | None = OUTPUT_LIMIT) -> None:
        self.buffer = TextBuffer(text, limit)
        self.ended = False
        self._cut = False
        self._scrub = ScrubStream()
        self._lock = threading.Lock()
        self._unpublished: list[str] = []

    @property
    def text(self) -> str:
        with self._lock:
            return self.buffer.text

    def __reduce__(self) -> tuple:  # copied or pickled (a lock cannot be): the text, kept as it is
        return (PrintedOutput, (self.text, self.buffer.limit))

    def replace(self, text: str) -> None:
        """Set the text (kept as given, also when longer than the limit: say, already cut once)."""
        with self._lock:
            limit = self.buffer.limit
            self.buffer = TextBuffer(text, limit if limit is None else max(limit, len(text)))

    def _add(self, text: str) -> None:
        shown = self.buffer.append(text)
        if shown:
            self._unpublished.append(shown)

    def write(self, text: str) -> int:
        """Add a write's text; returns how many characters became safe to show (0 while held back)."""
        with self._lock:
            safe = self._scrub.feed(text)
            self._add(safe)
            return len(safe)

    def _settle(self) -> str:
        """What the scrubber held back, scrubbed; nothing once the call was cut off: then it stays held (it could
        be part of a secret value), shown only if later writes (a thread left running) settle that it is not."""
        return "" if self._cut else self._scrub.flush()

    def release(self) -> int:
        """Release what the scrubber holds back (no more text is coming for now), unless the call was cut off
        (see :meth:`end`)."""
        with self._lock:
            rest = self._settle()
            self._add(rest)
            return len(rest)

    def end(self, *, cut: bool = False) -> int:
        """The call ended: release what is held back and the kept tail. ``cut``: it was cut off (stopped, out
        of time), maybe mid-value, so what the scrubber holds back could be part of a secret value: it is never
        released (nor is such an end of what a thread it left running writes later)."""
        with self._lock:
            self._cut = self._cut or cut
            rest = self._settle()
            self._add(rest)
            tail = self.buffer.seal()
            if tail:
                self._unpublished.append(tail)
            self.ended = True
            return len(rest)

    def take(self) -> str:
        """The text released for publishing since the last call, in order."""
        with self._lock:
            text = "".join(self._unpublished)
            self._unpublished.clear()
            return text
