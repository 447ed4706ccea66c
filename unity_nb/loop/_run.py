"""A loop's run: where it sits in the tree, the events it published, and the signal of its end.

:class:`~unity_nb.loop.LoopHandle` is the person's facade over a :class:`Run`: ``h.events``,
``h.children`` and ``h.parent`` read the run's, and ``h.publish`` records an event here. The run
names the handles above and below it by a protocol (:class:`_Node`), so this module imports nothing
above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .. import events as ev
from ._status import Signal

__all__ = ("Run",)

Listener = Callable[[Any, ev.Event], None]
"""``fn(handle, event)``: told of every event of a loop and of its descendants."""


class _Node(Protocol):
    """What a run reads of the handles in its tree: their runs."""

    @property
    def run(self) -> Run: ...


class Run:
    """The tree (``parent``, ``children``), the events (``events``, listeners, waiters) and the end
    signal of one loop. The handle owns it; its parts reach it through the handle."""

    __slots__ = ("bus", "children", "ended", "events", "id", "lineage", "listeners", "parent", "parent_call", "waiters")

    def __init__(self, id: str, lineage: tuple[str, ...], bus: ev.EventBus, parent: Any = None) -> None:
        self.id = id
        self.lineage = lineage
        self.bus = bus
        """Where this loop's events are published (a child publishes where its parent does)."""
        self.parent: Any = parent
        """The handle whose tool call started this loop (``None`` for a root)."""
        self.parent_call: str | None = None
        """The parent's tool call that started this loop (``None`` if none did)."""
        self.children: list[Any] = []
        self.events: list[ev.Event] = []
        self.listeners: list[Listener] = []
        self.waiters: ev.Waiters = []
        self.ended = Signal()

    def publish(self, event: ev.Event, source: Any) -> None:
        """Record ``event`` (of handle ``source``), tell listeners here and above, and publish it on the bus."""
        self.events.append(event)
        if self.waiters:
            ev.resolve_waiters(self.waiters, event)
        run: Run | None = self  # here and above (a plain walk: this runs for every event)
        while run is not None:
            for fn in run.listeners:
                fn(source, event)
            parent: _Node | None = run.parent
            run = parent.run if parent is not None else None
        self.bus.publish(event)

    def event(self, kind: type[ev.Event], **fields: Any) -> ev.Event:
        """An event of this loop: ``event(ev.ToolStarted, call_id=..., ...)``."""
        return kind(loop_id=self.id, lineage=self.lineage, **fields)

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(handle, event)`` for every event of this loop and of its descendants; returns its remover."""
        self.listeners.append(fn)

        def remove() -> None:
            if fn in self.listeners:
                self.listeners.remove(fn)

        return remove

    async def wait_for(self, pred: Callable[[ev.Event], bool], timeout: float) -> ev.Event:
        """The first event of this loop matching ``pred``, past or future."""
        for e in self.events:
            if pred(e):
                return e
        return await ev.wait_matching(self.waiters, pred, timeout)
