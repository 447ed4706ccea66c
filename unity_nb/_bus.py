"""The event bus: in-process pub/sub for loop events, waiting for an event, the process-wide bus.

Re-exported by :mod:`unity_nb.events`, where the event types are. The bus sees an event through
:class:`Published`, the few fields it reads, so this module imports nothing of ``events`` (which
imports it): the two are layers, not a circle.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ("EventBus", "Predicate", "Published", "Waiters", "default_bus", "resolve_waiters", "wait_matching")


class Published(Protocol):
    """What the bus reads of an event (every :class:`unity_nb.events.Event` has it)."""

    @property
    def kind(self) -> str: ...
    @property
    def loop_id(self) -> str: ...
    @property
    def lineage(self) -> tuple[str, ...]: ...
    @property
    def seq(self) -> int: ...
    def model_dump(self) -> dict[str, Any]: ...


Event = Any
"""An event as callers hold it (the concrete :class:`unity_nb.events.Event`; published ones satisfy
:class:`Published`)."""

log = logging.getLogger("unity_nb.events")

Predicate = Callable[[Event], bool]
Waiters = list[tuple[Predicate, asyncio.Future]]


async def wait_matching(waiters: Waiters, pred: Predicate, timeout: float | None) -> Event:
    """Register a waiter for the next event matching ``pred`` (see :func:`resolve_waiters`)."""
    fut = asyncio.get_running_loop().create_future()
    entry = (pred, fut)
    waiters.append(entry)
    try:
        return await asyncio.wait_for(fut, timeout)
    finally:
        if entry in waiters:
            waiters.remove(entry)


def resolve_waiters(waiters: Waiters, event: Published) -> None:
    """Wake every waiter whose predicate matches ``event``. A predicate that raises ends its own wait with that
    error: it is the waiter's (``wait_for(kind, where)``), never the publisher's, whose loop goes on."""
    for entry in list(waiters):
        pred, fut = entry
        if fut.done():
            continue
        try:
            if not pred(event):
                continue
        except Exception as err:  # noqa: BLE001 - handed to the one waiting, raised where it awaits
            fut.set_exception(err)
        else:
            fut.set_result(event)
        waiters.remove(entry)


def _observe(callback: Callable[[Event], Any], tasks: set[asyncio.Future], task: asyncio.Future) -> None:
    """An async subscriber's failure is logged like a sync one's, never left unobserved."""
    tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("event subscriber %r failed", callback, exc_info=task.exception())


class EventBus:
    """In-process pub/sub for loop events, with a bounded history per kind: at most ``history`` events of each
    kind, and what tools printed (``tool_output``) at most ``printed_chars`` characters in all (one event can
    carry megabytes: a DataFrame printed whole); the oldest go first, and :attr:`dropped` counts them.

    ``subscribe(callback)`` registers a function (sync, or async: scheduled as a task) called
    with each event; an exception in a callback is logged, never raised into the loop. The bus
    holds each async subscriber's task until it ends (the event loop alone keeps only a weak
    reference: a task nobody holds can vanish before it runs), and logs its failure.
    """

    def __init__(self, *, history: int = 2000, printed_chars: int = 16_000_000) -> None:
        self._limit = history
        self._printed_limit = printed_chars
        self._printed = 0  # characters of the tool_output events kept
        self.dropped = 0
        """Events the history let go of to stay within its bounds (the oldest, by count or by size)."""
        self._history: dict[str, collections.deque[Event]] = {}
        # replaced, never changed in place: a publish walks the tuple it read, so a callback that unsubscribes
        # (itself, a one-shot) or subscribes leaves every other subscriber this event
        self._subscribers: tuple[tuple[Callable[[Event], Any], frozenset[str] | None], ...] = ()
        self._waiters: Waiters = []
        self._tasks: set[asyncio.Future] = set()

    def publish(self, event: Published) -> None:
        hist = self._history.get(event.kind)
        if hist is None:
            hist = self._history[event.kind] = collections.deque(maxlen=self._limit)
        if len(hist) == self._limit:
            self.dropped += 1
            if event.kind == "tool_output":
                self._printed -= len(getattr(hist[0], "text", ""))
        hist.append(event)
        if event.kind == "tool_output":
            self._printed += len(getattr(event, "text", ""))
            while self._printed > self._printed_limit and len(hist) > 1:
                self._printed -= len(getattr(hist.popleft(), "text", ""))
                self.dropped += 1
        for callback, kinds in self._subscribers:
            if kinds is None or event.kind in kinds:
                try:
                    out = callback(event)
                    if out is not None and inspect.isawaitable(out):  # a sync callback's None: no check to pay
                        self._schedule(callback, out)
                except Exception:  # a subscriber must never break a loop
                    log.exception("event subscriber %r failed", callback)
        if self._waiters:
            resolve_waiters(self._waiters, event)

    def _schedule(self, callback: Callable[[Event], Any], out: Any) -> None:
        try:
            task = asyncio.ensure_future(out)
        except RuntimeError:  # published outside a running event loop: the coroutine cannot run
            if inspect.iscoroutine(out):
                out.close()  # not left to warn "never awaited"
            log.error("event subscriber %r is async, but the event was published with no event loop running", callback)
            return
        self._tasks.add(task)
        task.add_done_callback(functools.partial(_observe, callback, self._tasks))

    @property
    def pending(self) -> int:
        """Async subscriber calls still running."""
        return len(self._tasks)

    async def drain(self, timeout: float | None = 10.0) -> None:
        """Wait until every async subscriber call scheduled so far has ended (their failures are logged)."""
        async with asyncio.timeout(timeout):
            while self._tasks:
                await asyncio.wait(list(self._tasks))

    def subscribe(
        self, callback: Callable[[Event], Any], *, kinds: Iterable[str] | None = None
    ) -> Callable[[], None]:
        """Call ``callback(event)`` for every event (of ``kinds`` if given); returns an unsubscribe function."""
        entry = (callback, frozenset(kinds) if kinds is not None else None)
        self._subscribers = (*self._subscribers, entry)

        def unsubscribe() -> None:
            if entry in self._subscribers:
                at = self._subscribers.index(entry)
                self._subscribers = self._subscribers[:at] + self._subscribers[at + 1:]

        return unsubscribe

    def history(
        self,
        kind: str | Iterable[str] | None = None,
        *,
        loop_id: str | None = None,
        lineage: Iterable[str] | None = None,
        where: Predicate | None = None,
    ) -> list[Event]:
        """Past events, oldest first: of a kind (or kinds), of one loop, under a lineage prefix."""
        if kind is None:
            kinds = list(self._history)
        elif isinstance(kind, str):
            kinds = [kind]
        else:
            kinds = list(kind)
        prefix = tuple(lineage) if lineage is not None else None
        out = [
            e
            for k in kinds
            for e in self._history.get(k, ())
            if (loop_id is None or e.loop_id == loop_id)
            and (prefix is None or e.lineage[: len(prefix)] == prefix)
            and (where is None or where(e))
        ]
        out.sort(key=lambda e: e.seq)
        return out

    async def wait_for(
        self, kind: str | None = None, where: Predicate | None = None, *, timeout: float | None = 10.0
    ) -> Event:
        """Wait for the next published event matching ``kind`` and ``where``."""

        def pred(e: Event) -> bool:
            return (kind is None or e.kind == kind) and (where is None or where(e))

        return await wait_matching(self._waiters, pred, timeout)

    def clear(self) -> None:
        """Forget the history (subscribers stay)."""
        self._history.clear()
        self._printed = 0

    @staticmethod
    def to_dataframe(events: Iterable[Event]):
        """A pandas DataFrame with one row per event and one column per field (``kind`` first)."""
        import pandas as pd  # lazily: pandas is heavy and only this needs it

        rows = [e.model_dump() for e in events]
        df = pd.DataFrame(rows)
        if not df.empty:
            df["lineage"] = df["lineage"].map(lambda t: "/".join(t))
            df["ts"] = pd.to_datetime(df["ts"], unit="s")
            first = ["seq", "ts", "kind", "loop_id", "lineage"]
            df = df[first + [c for c in df.columns if c not in first]]
        return df

    def dataframe(self, kind: str | Iterable[str] | None = None, **filters: Any):
        """``to_dataframe(history(kind, **filters))``."""
        return self.to_dataframe(self.history(kind, **filters))


_DEFAULT = EventBus()


def default_bus() -> EventBus:
    """The process-wide bus loops publish to unless given another."""
    return _DEFAULT
