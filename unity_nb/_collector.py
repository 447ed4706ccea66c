"""The cycle collector while many loops run.

CPython collects its youngest generation every 700 net allocations of container objects. With
hundreds of loops waiting on the network at once, nearly every object a step makes outlives an
``await``: it survives the young collections, is promoted, and the full collections that follow walk
the whole heap again and again. At 1,000 concurrent loops the collector took 44% of the process's CPU
(``bench/bench_scale.py`` B; a bare aiohttp loop beside it: 23%).

So while at least ``start_at`` loops are live, unity_nb raises the first threshold to ``per_loop``
allocations per live loop (at most ``ceiling``), and puts back the thresholds it found once fewer
than half of ``start_at`` are live. A batch holds its concurrency for as long as it runs
(:func:`hold_loops`): it counts as that many live loops, so a batch whose rows end and start in waves
(all of them waiting on the same latency) keeps the threshold raised between waves, instead of putting
it back and collecting every 700 allocations while the next wave starts. Reference counting still frees
every object without a cycle at once; only cyclic garbage waits longer, for at most that many allocations.
``per_loop`` is 200: a loop waiting on its model request holds about 140 container objects, so the next
wave of loops (as many as end) fits under the threshold; at 50 a loop, each wave set off young collections
that walked every live loop's objects and found no garbage (7% of a 1,000-row batch's CPU).
``start_at`` is 16: at 50 loops with 50 ms latency, the defaults' young collections were 7-8% of the
CPU (a bare aiohttp loop's: 2-3%); from 16 loops the threshold is 3,200, and they were 1.5-2%.

A batch raises it whatever its concurrency, as if at least :data:`BATCH_FLOOR` (64) loops were live, for as
long as it runs: its rows end and start all the time, each leaving its objects to the collector, so at
concurrency 8 the defaults' collections were 16-20% of a map's CPU (a row cost 1.3x what it cost at 64;
``bench/bench_cost.py`` E), at 1,600 (8 loops' worth) 10%, at 3,200 6%, at 12,800 (64 loops') 2%.

Thresholds a person sets are theirs: if ``gc.get_threshold()`` is not what unity_nb last set, it
leaves them alone until the loops have all ended. A first threshold already above what unity_nb
would set is left as it is. ``tune_collector(False)`` (or ``UNITY_NB_TUNE_GC=0`` in the environment)
turns this off and puts back what it changed.

Loops are counted per event loop. An event loop closed with loops still on it (their tasks are destroyed
unrun) takes its loops out of the count: the next time the count is read or changed, or at the next
collection while the threshold is raised (a ``gc.callbacks`` entry, there only while raised).
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from typing import Any

from ._errors import UserError

__all__ = ("BATCH_FLOOR", "hold_loops", "loop_ended", "loop_started", "release_loops", "tune_collector")

_lock = threading.Lock()

BATCH_FLOOR = 64
"""While a batch runs (:func:`hold_loops`), the threshold is set as if at least this many loops were live."""


class _State:
    def __init__(self) -> None:
        self.enabled = os.environ.get("UNITY_NB_TUNE_GC", "1").strip().lower() not in ("0", "false", "no", "off")
        self.start_at = 16
        self.per_loop = 200
        self.ceiling = 100_000
        self.live = 0
        self.held = 0
        """Loops batches said they keep running (:func:`hold_loops`): the count is the larger of the two."""
        self.loops: dict[Any, list[int]] = {}
        """Per event loop, ``[live, held]`` of the loops on it: a closed event loop's are taken out."""
        self.found: tuple[int, ...] | None = None
        """The thresholds before unity_nb raised them (``None``: not raised)."""
        self.ours: tuple[int, ...] | None = None
        """What unity_nb set last."""
        self.yielded = False
        """The person changed the thresholds while they were raised: left alone until no loop is live."""


_state = _State()


def _on(event_loop: Any) -> Any:
    if event_loop is None:
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None
    return event_loop


def _count(s: _State, event_loop: Any, live: int, held: int) -> None:
    if event_loop is not None:
        c = s.loops.get(event_loop)
        if c is None:
            if live < 0 or held < 0:
                return  # an event loop already taken out (closed): its loops are not counted
            c = s.loops[event_loop] = [0, 0]
        c[0] = max(0, c[0] + live)
        c[1] = max(0, c[1] + held)
        if c == [0, 0]:
            del s.loops[event_loop]
    s.live = max(0, s.live + live)
    s.held = max(0, s.held + held)


def _prune(s: _State) -> bool:
    """Take the loops of closed event loops out of the count; True if there were any."""
    closed = [el for el in s.loops if el.is_closed()]
    for el in closed:
        live, held = s.loops.pop(el)
        s.live = max(0, s.live - live)
        s.held = max(0, s.held - held)
    return bool(closed)


def _tuned(s: _State) -> bool:
    """Whether the threshold is to be raised now: a batch runs, or at least ``start_at`` loops are live."""
    return s.enabled and not s.yielded and (s.held > 0 or max(s.live, s.held) >= s.start_at)


def loop_started(event_loop: Any = None) -> None:
    """A loop began on ``event_loop`` (the running one if not given): its handle exists and its task is
    scheduled."""
    s = _state
    with _lock:
        _count(s, _on(event_loop), 1, 0)
        _prune(s)
        if _tuned(s):
            _raise(s)


def loop_ended(event_loop: Any = None) -> None:
    """A loop ended (once per :func:`loop_started`, with the same event loop)."""
    s = _state
    with _lock:
        _count(s, _on(event_loop), -1, 0)
        _prune(s)
        _ended(s)


def hold_loops(n: int) -> None:
    """A batch starts that keeps up to ``n`` loops running until :func:`release_loops`: until then, at least
    ``n`` loops count as live, also between one wave of its rows ending and the next starting, and the
    threshold is raised whatever ``n`` is (as for :data:`BATCH_FLOOR` loops at least)."""
    s = _state
    with _lock:
        _count(s, _on(None), 0, n)
        _prune(s)
        if _tuned(s):
            _raise(s)


def release_loops(n: int) -> None:
    """The batch that held ``n`` loops (:func:`hold_loops`) ended."""
    s = _state
    with _lock:
        _count(s, _on(None), 0, -n)
        _prune(s)
        _ended(s)


def _on_collection(phase: str, info: dict) -> None:
    """While the threshold is raised, each collection checks for closed event loops (cheap: a few at most)."""
    if phase != "start" or not _lock.acquire(blocking=False):
        return  # a collection set off inside the lock (it is not reentrant): the next one looks
    try:
        s = _state
        if _prune(s):
            _ended(s)
    finally:
        _lock.release()


def _ended(s: _State) -> None:
    if s.ours is not None and not s.held and s.live < s.start_at // 2:
        _restore(s)
    if s.live == 0 and s.held == 0:
        s.yielded = False


def _raise(s: _State) -> None:
    live = max(s.live, s.held)
    want = min(s.ceiling, (max(live, BATCH_FLOOR) if s.held else live) * s.per_loop)
    current = gc.get_threshold()
    if s.ours is None:
        if want <= current[0]:
            return  # already that high (the person's own setting, or a later Python's default)
        s.found = current
    elif current != s.ours:
        s.found = s.ours = None  # the person set their own: theirs from now on
        s.yielded = True
        _unhook()
        return
    elif want <= s.ours[0]:
        return  # raised as loops start, never lowered while many are live
    s.ours = (want, *current[1:])
    gc.set_threshold(*s.ours)
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


def _restore(s: _State) -> None:
    if s.found is not None and gc.get_threshold() == s.ours:
        gc.set_threshold(*s.found)
    s.found = s.ours = None
    _unhook()


def _unhook() -> None:
    if _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"tune_collector: {name} takes a whole number of at least 1, not {value!r}")
    return value


def tune_collector(
    enabled: bool | None = None,
    *,
    start_at: int | None = None,
    per_loop: int | None = None,
    ceiling: int | None = None,
) -> dict[str, Any]:
    """Turn the collector tuning on or off, or change it; returns the settings now in force.

    While at least ``start_at`` loops (16) are live, the collector's first threshold is raised to
    ``per_loop`` (200) per live loop, at most ``ceiling`` (100,000); the thresholds found are put back
    once fewer than half of ``start_at`` are live. While a batch runs, it is raised whatever its
    concurrency (as for 64 live loops at least). Called with no argument, it changes nothing. The
    returned dict also says how many loops are live (a batch's rows as its concurrency) and what threshold unity_nb
    set (``None``: none).
    """
    s = _state
    with _lock:
        _prune(s)
        if enabled is not None:
            if not isinstance(enabled, bool):
                raise UserError(f"tune_collector: enabled takes True or False, not {enabled!r}")
            s.enabled = enabled
        if start_at is not None:
            s.start_at = _positive("start_at", start_at)
        if per_loop is not None:
            s.per_loop = _positive("per_loop", per_loop)
        if ceiling is not None:
            s.ceiling = _positive("ceiling", ceiling)
        if s.ours is not None and (not s.enabled or (not s.held and s.live < s.start_at // 2)):
            _restore(s)
        elif _tuned(s):
            _raise(s)
        return {
            "enabled": s.enabled,
            "start_at": s.start_at,
            "per_loop": s.per_loop,
            "ceiling": s.ceiling,
            "live_loops": s.live + s.held,  # a batch's rows count through it (as its concurrency)
            "threshold_set": s.ours[0] if s.ours is not None else None,
        }
