"""One rate limit per model, shared by every loop that calls it.

``RateLimit(requests_per_minute=600, tokens_per_minute=200_000)`` spaces requests so that no
rolling minute exceeds either budget; a 429 (or a provider's ``retry-after``) pauses every caller
until it has passed, instead of each retrying on its own. Set one with
``set_rate_limit(model, ...)``; :func:`rate_limit_of` finds it. A limit learned from a provider's
``x-ratelimit-limit-*`` headers applies when the person set none.

What a response's headers teach is bounded, so one header cannot stall every loop on a model: a pause
(``retry-after``) lasts at most :data:`MAX_PAUSE` seconds, and a learned rate is at least one request
(and :data:`MIN_LEARNED_TPM` tokens) a minute. A wait longer than :data:`WAIT_NOTICE` seconds is announced
through ``wait_hook`` first (the loop shows it as a ``model_wait`` event).
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
import weakref
from typing import Any

from .._errors import UserError
from ._base import queued, wait_hook

__all__ = ("MAX_PAUSE", "MIN_LEARNED_TPM", "WAIT_NOTICE", "RateLimit", "rate_limit_of", "set_rate_limit")

MAX_PAUSE = 60.0
"""The longest pause a response's header can start (a 429's Retry-After is capped alike)."""
MIN_LEARNED_TPM = 1000.0
"""The lowest tokens-a-minute limit taken from a header (the lowest requests-a-minute is 1)."""
WAIT_NOTICE = 3.0
"""A wait longer than this many seconds is announced through ``wait_hook`` before it starts."""
_ARGS = ("requests_per_minute", "tokens_per_minute")


def _positive(value: Any) -> float | None:
    """A header's number if it is above 0 (``inf`` included), else None."""
    if value is None:  # no such header (every response without one: no exception raised and caught)
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None  # nan > 0 is False


class RateLimit:
    """Requests and tokens per minute, and a shared cool-down after a 429."""

    def __init__(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None) -> None:
        for label, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0
            ):
                raise UserError(f"{label} takes a number above 0 (or None), not {value!r}")
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.learned = False
        """True when the limits came from a provider's headers, not from the person."""
        self._sent: collections.deque[float] = collections.deque()
        self._tokens: collections.deque[tuple[float, int]] = collections.deque()
        self._token_sum = 0
        self._resume_at = 0.0
        self._pause_reason = ""
        self._lock: asyncio.Lock | None = None
        self.waits = 0
        """Times a request had to wait for its turn."""
        self.cooldowns = 0
        """Times a 429 or a retry-after paused every caller."""

    def __repr__(self) -> str:
        return f"RateLimit(requests_per_minute={self.requests_per_minute}, tokens_per_minute={self.tokens_per_minute})"

    @classmethod
    def parse(cls, spec: Any) -> RateLimit:
        """A ``RateLimit``, a number (requests a minute), ``"600/min"``, ``"10/s"``, or a dict of its arguments."""
        if isinstance(spec, RateLimit):
            return spec
        if isinstance(spec, dict):
            unknown = sorted(str(k) for k in spec if k not in _ARGS)
            if unknown:
                raise UserError(
                    f"a rate given as a dict takes {', '.join(_ARGS)}, not {', '.join(map(repr, unknown))}: e.g. "
                    "{'requests_per_minute': 600, 'tokens_per_minute': 200000}, or '600/min', '10/s', a number of "
                    "requests a minute, or a RateLimit"
                )
            return cls(**spec)
        if isinstance(spec, int | float) and not isinstance(spec, bool):
            return cls(requests_per_minute=spec)
        if isinstance(spec, str):
            number, _, unit = spec.replace(" ", "").partition("/")
            per = {"min": 1.0, "m": 1.0, "minute": 1.0, "s": 60.0, "sec": 60.0, "second": 60.0, "": 1.0}.get(unit)
            try:
                value = float(number)
            except ValueError:
                value = -1.0
            if per is not None and value > 0:
                return cls(requests_per_minute=value * per)
        raise UserError(f"a rate is a number of requests a minute, '600/min', '10/s' or a RateLimit, not {spec!r}")

    def _window(self, now: float) -> None:
        while self._sent and now - self._sent[0] >= 60.0:
            self._sent.popleft()
        while self._tokens and now - self._tokens[0][0] >= 60.0:
            self._token_sum -= self._tokens.popleft()[1]

    def _delay(self, now: float, tokens: int) -> float:
        delay = max(0.0, self._resume_at - now)
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        if rpm is not None:
            # spaced evenly (no burst of a minute's budget at once): one request every 60/rpm seconds
            if self._sent:
                delay = max(delay, self._sent[-1] + 60.0 / rpm - now)
            if len(self._sent) >= rpm:
                delay = max(delay, self._sent[0] + 60.0 - now)
        if tpm is not None and self._tokens and self._token_sum + tokens > tpm:
            need, freed = self._token_sum + tokens - tpm, 0
            for t, n in self._tokens:
                freed += n
                if freed >= need:
                    delay = max(delay, t + 60.0 - now)
                    break
        return delay

    async def acquire(self, tokens: int = 0) -> None:
        """Wait until a request of about ``tokens`` tokens may be sent, and count it."""
        if self.requests_per_minute is None and self.tokens_per_minute is None and time.monotonic() >= self._resume_at:
            return  # no limit and no cool-down: nothing to wait for or count
        if self._lock is None:
            self._lock = asyncio.Lock()
        with queued():  # a row waiting here is queued, not running
            await self._turn(tokens)

    async def _turn(self, tokens: int) -> None:
        assert self._lock is not None
        async with self._lock:  # first come, first served
            while True:
                now = time.monotonic()
                self._window(now)
                delay = self._delay(now, tokens)
                if delay <= 0:
                    break
                self.waits += 1
                if delay > WAIT_NOTICE:
                    hook = wait_hook.get()
                    if hook is not None:
                        hook(delay, self._why(now))
                await asyncio.sleep(delay)
            if self.requests_per_minute is None and self.tokens_per_minute is None:
                return  # no limit (yet): nothing to count, only cool-downs to honour
            self._sent.append(now)
            if tokens:
                self._tokens.append((now, tokens))
                self._token_sum += tokens

    def _why(self, now: float) -> str:
        if self._resume_at > now:
            return self._pause_reason or "a pause every caller of this model waits out"
        how = "learned from the provider's x-ratelimit-limit-* headers" if self.learned else "set for this model"
        return f"the rate limit {how}: {self!r}"

    @property
    def resume_at(self) -> float:
        """When the cool-down every caller waits out ends (``time.monotonic()``; in the past when there is none)."""
        return self._resume_at

    def cooldown(self, seconds: float, reason: str = "") -> None:
        """A 429 (or a retry-after): no caller sends anything for ``seconds`` (at most :data:`MAX_PAUSE`)."""
        if seconds > 0:  # nan is not
            seconds = min(seconds, MAX_PAUSE)
            until = time.monotonic() + seconds
            if until > self._resume_at:
                self._resume_at = until
                self._pause_reason = reason or f"the provider asked every caller to wait {seconds:.3g} s (a 429)"
            self.cooldowns += 1

    def learn(self, headers: Any) -> None:
        """Take limits from a provider's ``x-ratelimit-limit-requests``/``-tokens`` headers (OpenAI's
        names) unless the person set limits; a ``retry-after`` header starts a cool-down."""
        get = getattr(headers, "get", None)
        if get is None:
            return
        if self.learned or (self.requests_per_minute is None and self.tokens_per_minute is None):
            for attr, key, floor in (("requests_per_minute", "x-ratelimit-limit-requests", 1.0),
                                     ("tokens_per_minute", "x-ratelimit-limit-tokens", MIN_LEARNED_TPM)):
                value = _positive(get(key))
                if value is not None and math.isfinite(value):
                    setattr(self, attr, max(value, floor))  # one header cannot space requests hours apart
                    self.learned = True
        retry_after = _positive(get("retry-after"))
        if retry_after is not None:
            self.cooldown(retry_after, f"the provider's Retry-After: {get('retry-after')} on a successful response, "
                                       f"capped at {MAX_PAUSE:g} s")


_LIMITS: weakref.WeakKeyDictionary[Any, RateLimit] = weakref.WeakKeyDictionary()
_BY_ID: dict[int, RateLimit] = {}


def set_rate_limit(model: Any, limit: Any) -> RateLimit:
    """Share ``limit`` (a :class:`RateLimit`, ``600``, ``"600/min"``, ``"10/s"``) among every loop calling ``model``."""
    rate = RateLimit.parse(limit)
    try:
        _LIMITS[model] = rate
    except TypeError:  # not weak-referenceable
        _BY_ID[id(model)] = rate
    return rate


def rate_limit_of(model: Any, *, create: bool = False) -> RateLimit | None:
    """The rate limit shared by the loops calling ``model`` (made empty, to learn from headers, when ``create``)."""
    try:
        found = _LIMITS.get(model)
    except TypeError:
        found = _BY_ID.get(id(model))
    if found is None and create:
        found = set_rate_limit(model, RateLimit())
    return found
