"""An incremental decoder for server-sent events, as the WHATWG HTML specification defines them.

Why not a library: the maintained SSE decoders are each tied to one HTTP client (``httpx-sse``
to httpx, openai's to its own stream class) and decode text line by line in Python. Both
request paths here hand over raw bytes, from aiohttp or from the client a user passed in, so one
decoder serves both; it works on bytes and splits with C-level ``bytes`` methods, which keeps the
stream's CPU cost below the JSON decoding of its payloads (``bench/bench_loop.py``).

What the specification asks and this does:

- a line ends with CRLF, LF or a bare CR (a CR at the end of one chunk waits for the next, in case
  an LF follows it);
- a leading byte-order mark is dropped;
- ``data:`` lines of one event are joined with ``\\n``; a blank line dispatches the event, and an
  event with no data is not dispatched;
- ``event:``, ``id:`` and ``retry:`` set the event type, the last event id and the reconnection time;
  a line starting with ``:`` is a comment; a line without a colon is a field with an empty value;
  one space after the colon is dropped;
- chunk boundaries may fall anywhere, inside a UTF-8 character too: bytes are decoded only once a
  whole line is there.

Its cost is linear in the bytes fed, however they are cut: a chunk with no line end in it is kept aside
(no copy of what came before), the pieces are joined once when the line ends, and only the new chunk is
searched for a line end. A line, or an event's data, longer than ``max_line`` bytes raises
:class:`LineTooLong` as soon as it passes the limit, so a hostile body (one endless line, a gzip bomb
decompressed piece by piece) holds at most about ``max_line`` bytes here.

Two deliberate extensions, for servers that speak the format loosely:

- :meth:`end` dispatches a last event that the server closed the stream on without a blank line
  after it (the specification discards it; providers' streams do end so);
- lines the specification ignores but a reader must not, an ``error:`` field (llama.cpp's server)
  or a bare JSON object with no field name (Ollama writes its errors so), are kept in
  :attr:`SSEDecoder.stray` for the reader to look at.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("DEFAULT_MAX_LINE", "LineTooLong", "RawEvent", "SSEDecoder", "ServerSentEvent")

DEFAULT_MAX_LINE = 8 * 1024 * 1024
"""The longest line (and event data) :class:`SSEDecoder` accepts by default: 8 MiB."""


class LineTooLong(ValueError):
    """A line of the stream, or one event's data, passed the decoder's ``max_line`` bytes."""

RawEvent = tuple[bytes, str, str, "int | None"]
"""An event as :meth:`SSEDecoder.feed_raw` gives it: ``(data, event, id, retry)``, the fields of a
:class:`ServerSentEvent`."""


@dataclass(slots=True, frozen=True)
class ServerSentEvent:
    data: bytes
    """The event's data lines joined with ``\\n`` (bytes: JSON payloads are decoded straight from them)."""
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """``feed(bytes) -> events``, then ``end() -> events`` once the stream closed."""

    __slots__ = (
        "_cr", "_data", "_data_len", "_event", "_held", "_id", "_pending", "_retry", "_started", "lines", "max_line",
        "stray",
    )

    def __init__(self, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.max_line = max_line
        """The longest line, and the most data one event may gather, in bytes."""
        self._pending: list[bytes] = []
        """The start of a line not ended yet, as the chunks brought it (joined once, when it ends)."""
        self._held = 0
        self._cr = False
        """The held bytes end with a CR: perhaps the first half of a CRLF."""
        self._data: list[bytes] = []
        self._data_len = 0
        self._event = ""
        self._id = ""
        self._retry: int | None = None
        self._started = False
        self.lines = 0
        """Complete lines seen so far, comments included (a sign of life from the server)."""
        self.stray: list[bytes] = []
        """Lines outside the format that may carry an error (an ``error:`` field, a bare JSON object);
        the reader empties it."""

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        return [ServerSentEvent(*e) for e in self.feed_raw(chunk)]

    def end(self) -> list[ServerSentEvent]:
        """The stream closed: its last line, and a last event not followed by a blank line."""
        return [ServerSentEvent(*e) for e in self.end_raw()]

    def feed_raw(self, chunk: bytes) -> list[RawEvent]:
        """As :meth:`feed`, each event as a tuple ``(data, event, id, retry)``: a reader on the hot path
        makes no object per event."""
        if not self._started:
            buf = b"".join(self._pending) + chunk if self._pending else chunk
            self._pending, self._held = [], 0
            if len(buf) < 3 and b"\xef\xbb\xbf".startswith(buf):
                self._pending, self._held = [buf], len(buf)
                return []
            self._started = True
            chunk = buf[3:] if buf.startswith(b"\xef\xbb\xbf") else buf
        if not self._cr and b"\n" not in chunk and b"\r" not in chunk:
            if chunk:  # no line ends here: kept aside until one does, nothing copied
                self._pending.append(chunk)
                self._held += len(chunk)
                if self._held > self.max_line:
                    self._pending, self._held = [], 0
                    raise LineTooLong(f"a line of more than {self.max_line} bytes")
            return []
        if self._pending:
            self._pending.append(chunk)
            buf = b"".join(self._pending)
            self._pending = []
        else:
            buf = chunk
        tail = b""
        self._cr = False
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # perhaps the first half of a CRLF split across chunks
                buf, tail = buf[:-1], b"\r"
                self._cr = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        rest = lines.pop() + tail
        if rest:
            self._pending.append(rest)
        self._held = len(rest)
        if len(buf) > self.max_line and (self._held > self.max_line or max(map(len, lines), default=0) > self.max_line):
            self._pending, self._held = [], 0
            raise LineTooLong(f"a line of more than {self.max_line} bytes")
        return self._lines(lines) if lines else []

    def end_raw(self) -> list[RawEvent]:
        """As :meth:`end`, each event as a tuple ``(data, event, id, retry)``."""
        rest = b"".join(self._pending)
        self._pending, self._held, self._cr = [], 0, False
        if rest.endswith(b"\r"):
            rest = rest[:-1]
        out = self._lines([rest]) if rest else []
        if self._data:
            out.extend(self._lines([b""]))
        return out

    def _lines(self, lines: list[bytes]) -> list[RawEvent]:
        out: list[RawEvent] = []
        self.lines += len(lines)
        data = self._data
        held = self._data_len  # bytes of data the event being read gathers (a line each at least)
        for line in lines:
            if line.startswith(b"data: "):  # the usual line first: a data field, its one space dropped
                data.append(line[6:])
                held += len(line)
                continue
            if not line:  # a blank line dispatches the event
                if data:
                    out.append((b"\n".join(data), self._event or "message", self._id, self._retry))
                    data.clear()
                    held = 0
                self._event = ""
                continue
            if line[0] == 0x3A:  # ":" a comment
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
                held += len(line) + 1
            elif name == b"event":
                self._event = value.decode("utf-8", "replace")
            elif name == b"id":
                if b"\x00" not in value:
                    self._id = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                self._retry = int(value)
            elif name == b"error" or line[:1] in (b"{", b"["):
                self.stray.append(line)
            # any other field is ignored, as the specification says
        self._data_len = held
        if held > self.max_line:
            data.clear()
            self._data_len = 0
            raise LineTooLong(f"an event whose data is more than {self.max_line} bytes")
        return out
