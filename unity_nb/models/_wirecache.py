"""What ``OpenAIModel`` keeps of each conversation's JSON, so a step encodes only its new messages."""

from __future__ import annotations

import json
import marshal
import threading
from collections import OrderedDict
from typing import Any

from .._json import dumps

__all__ = ("WireCache",)

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_MESSAGES_KEY = _ENCODER.encode("messages") + ":"
_MAX_ENDS = 64
"""Kinds of request (model, tools, options) whose JSON around the messages a model keeps."""


class _Conversation:
    """The encoded messages of one request: reused by the next request that starts with them."""

    __slots__ = ("anchors", "encoded", "head", "keys", "last", "marshal", "n")

    def __init__(self, anchors: tuple, n: int, marshalled: bytes, encoded: bytes, last: Any) -> None:
        self.anchors = anchors  # held, so the ids they are found by are not reused while they are
        self.keys = 0  # how many of the cache's keys lead here
        # marshal of the messages after the list's 5-byte header (type, count), and the type byte: it
        # says whether the list is back-reference 0, which every later back-reference's number counts on
        self.head = marshalled[0]
        self.marshal = marshalled[5:]
        self.n = n
        self.encoded = encoded  # the messages' JSON, comma-separated, without the brackets
        self.last = last  # the last message encoded (held): a request that continues these must have it there

    @property
    def size(self) -> int:
        return len(self.marshal) + len(self.encoded)


class WireCache:
    """Each request's ``messages`` JSON-encoded once: a step costs what its new messages cost.

    A tool loop sends a list that only grows by appending: each step's list starts with the
    previous step's messages (the same dicts) and adds a few. The JSON of the messages is kept per
    conversation, found by the identity of the list's first or second message (held, and checked
    with ``is``), and reused when the new list starts with the same content; only the messages
    after it are encoded. "The same content" is checked, not assumed: the new list is marshalled
    (in C, about an eighth of what JSON-encoding it costs) and the kept JSON is used only when the
    new marshal bytes start with the kept ones, which holds only if those messages are equal in
    value to the ones encoded. So a message mutated in place, or a different message at the same
    place, is encoded again, never sent stale; anything marshal cannot take (a dict subclass, an
    object of another type) is encoded whole, as before. The bytes are those of
    ``json.dumps(body, ensure_ascii=False, separators=(",", ":"))`` in meaning, written by orjson where it can
    (:func:`unity_nb._json.dumps`).

    A loop's request says how many of its messages are the previous request's very objects, unchanged
    (``ModelRequest.continues``: a loop never edits a message it has sent). When the kept conversation
    ends with the same message object within that many, the caller's word is taken: only the new
    messages are encoded and nothing is marshalled, so a step's cost does not grow with the history.
    Any other request is checked as above.

    Everything happens synchronously inside one call (under a lock, for event loops in other
    threads), so loops sharing a model (and this cache) cannot interleave inside it. The cache is
    bounded in conversations and in bytes; the least recently used go first.
    """

    def __init__(self, max_conversations: int = 4096, max_bytes: int = 64 << 20) -> None:
        self.max_conversations = max_conversations
        self.max_bytes = max_bytes
        self._by_anchor: OrderedDict[int, _Conversation] = OrderedDict()
        self._ends: dict[bytes, tuple[bytes, bytes]] = {}  # what goes before and after the messages
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        """Requests whose earlier messages were reused."""
        self.misses = 0
        """Requests encoded whole (a new conversation, or one that changed)."""
        self.vouched = 0
        """Of the hits, requests whose kept messages were reused on the caller's word, unchecked."""

    def __len__(self) -> int:
        return len(self._by_anchor)

    def clear(self) -> None:
        with self._lock:
            self._by_anchor.clear()
            self._ends.clear()
            self._bytes = 0

    def body(self, body: dict, messages: Any, continues: int = 0, *, keep: bool = True) -> bytes:
        """The JSON bytes of ``body``, whose ``"messages"`` is ``messages``; ``continues``: how many of them
        are the previous request's very messages, unchanged (``ModelRequest.continues``). ``keep=False``: a
        request no other is expected to continue (a conversation's first, offering no tools: its answer ends
        it), encoded whole and not kept; one that continues it after all is encoded whole too."""
        if not keep and not continues:
            return dumps(body)
        if body.get("messages") is not messages or type(messages) is not list or not messages:
            return dumps(body)
        head: dict = {}
        tail: dict = {}
        part = head
        for key, value in body.items():
            if key == "messages":
                part = tail
            else:
                part[key] = value
        # '{"model":"m","messages":[' and '],"stream":true,...}': the same for most requests of a model, so
        # kept by the marshal bytes of what they encode (equal marshal bytes, equal values, equal JSON)
        try:
            kept: bytes | None = marshal.dumps((head, tail))
        except ValueError:  # something marshal cannot take: encoded each time
            kept = None
        ends = self._ends.get(kept) if kept is not None else None
        if ends is None:
            start = (_ENCODER.encode(head)[:-1] + ("," if head else "") + _MESSAGES_KEY + "[").encode()
            end = ("]," + _ENCODER.encode(tail)[1:] if tail else "]}").encode()
            if kept is not None:
                if len(self._ends) >= _MAX_ENDS:
                    self._ends.clear()
                self._ends[kept] = (start, end)
        else:
            start, end = ends
        with self._lock:  # a model may serve event loops in several threads; the join reads the kept bytes
            encoded = self._messages(messages, continues)
            if encoded is not None:
                return b"".join((start, encoded, end))
        return dumps(body)

    def _messages(self, messages: list, continues: int = 0) -> bytes | None:
        """The messages' JSON without brackets, reusing what an earlier request encoded."""
        conv = self._continued(messages, continues) if continues else None
        if conv is not None:  # the loop vouches for the kept messages: only the new ones are looked at
            self.hits += 1
            self.vouched += 1
            new = messages[conv.n :]
            if new:
                added = dumps(new)[1:-1]
                conv.encoded = b",".join((conv.encoded, added))
                self._bytes += len(added) + 1 - len(conv.marshal)
                conv.marshal, conv.head = b"", -1  # not kept: a request that does not vouch is encoded whole
                conv.n, conv.last = len(messages), messages[-1]
            self._trim()
            return conv.encoded
        try:
            marshalled = marshal.dumps(messages)
        except ValueError:  # something marshal cannot take: it is not cached
            return None
        conv = self._find(messages, marshalled)
        if conv is not None:
            new = messages[conv.n :]
            self.hits += 1
            if new:
                added = dumps(new)[1:-1]
                conv.encoded = b",".join((conv.encoded, added))  # exact size (a bytearray over-allocates)
                self._bytes += len(added) + 1 + len(marshalled) - 5 - len(conv.marshal)
                conv.marshal = marshalled[5:]
                conv.n, conv.last = len(messages), messages[-1]
            self._trim()
            return conv.encoded
        self.misses += 1
        encoded = dumps(messages)[1:-1]
        conv = _Conversation(tuple(messages[:2]), len(messages), marshalled, encoded, messages[-1])
        for anchor in conv.anchors:
            self._put(id(anchor), conv)
        self._trim()
        return encoded

    def forget(self, messages: list) -> None:
        """A conversation that will not be sent again (its loop ended): drop what was kept for it."""
        if not self._by_anchor:  # nothing kept (a batch's rows, whose requests are ``once``): no lock to take
            return
        with self._lock:
            for anchor in messages[:2]:
                conv = self._by_anchor.get(id(anchor))
                if conv is None or not any(a is anchor for a in conv.anchors):
                    continue
                for a in conv.anchors:
                    if self._by_anchor.get(id(a)) is conv:
                        del self._by_anchor[id(a)]
                        self._drop(conv)

    def _continued(self, messages: list, continues: int) -> _Conversation | None:
        """The kept conversation that ``messages`` continue: found by an anchor, ending at the same message
        object, and within the ``continues`` messages the caller vouches for (no marshal, no walk)."""
        for anchor in messages[:2]:
            conv = self._by_anchor.get(id(anchor))
            if conv is None or not any(a is anchor for a in conv.anchors):
                continue
            n = conv.n
            if 0 < n <= continues and n <= len(messages) and messages[n - 1] is conv.last:
                for a in conv.anchors:
                    if self._by_anchor.get(id(a)) is conv:
                        self._by_anchor.move_to_end(id(a))
                return conv
        return None

    def _find(self, messages: list, marshalled: bytes) -> _Conversation | None:
        for anchor in messages[:2]:
            conv = self._by_anchor.get(id(anchor))
            if conv is None or not any(a is anchor for a in conv.anchors):
                continue
            if conv.n <= len(messages) and marshalled[0] == conv.head and marshalled.startswith(conv.marshal, 5):
                for a in conv.anchors:
                    if self._by_anchor.get(id(a)) is conv:
                        self._by_anchor.move_to_end(id(a))
                return conv
        return None

    def _put(self, key: int, conv: _Conversation) -> None:
        old = self._by_anchor.get(key)
        if old is conv:
            return
        if old is not None:
            self._drop(old)
        self._by_anchor[key] = conv
        if conv.keys == 0:
            self._bytes += conv.size
        conv.keys += 1

    def _drop(self, conv: _Conversation) -> None:
        conv.keys -= 1
        if conv.keys == 0:
            self._bytes -= conv.size

    def _trim(self) -> None:
        while self._by_anchor and (len(self._by_anchor) > self.max_conversations or self._bytes > self.max_bytes):
            _, conv = self._by_anchor.popitem(last=False)
            self._drop(conv)
