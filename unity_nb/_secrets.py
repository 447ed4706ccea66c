"""Named secrets, used by reference and scrubbed from everything people or models see.

``set_secret("GITHUB_TOKEN", env="GITHUB_TOKEN")`` keeps a value in this process only (never
in the store). A JSON tool argument ``"<<secret:GITHUB_TOKEN>>"`` is replaced by the value at
call time, after the arguments were recorded; a plan calls ``get_secret("GITHUB_TOKEN")``.
The model is only ever told the names.

Every text on its way into a transcript, an event, the widget or a tool result the model reads
(tool results, what tools and plans print or display, model replies) goes through
:func:`scrub`, which replaces each secret's value with its reference. So a value a tool echoes,
a plan prints or an error message quotes shows as ``<<secret:NAME>>`` everywhere, including
the store and a saved notebook. Text that arrives in pieces (writes, streamed deltas) goes through
a :class:`ScrubStream`, so a value split over pieces is caught too; text cut off by a stop while
its end could still become a value loses that end (it is never shown).
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ._errors import UserError

__all__ = (
    "SECRET_REF", "ScrubStream", "forget_secret", "forms", "get_secret", "resolve_secrets", "scrub", "scrub_clipped",
    "scrub_error", "secret_names", "set_secret", "watch_environment",
)

SECRET_REF = re.compile(r"<<secret:([A-Za-z_][A-Za-z0-9_]*)>>")
_MIN = 4  # shorter values would scrub ordinary words
_SECRETS: dict[str, tuple[str, str]] = {}
_ORDER: list[tuple[str, str]] = []  # (form of a value, name), longest form first


def _escaped(value: str, quote: str) -> str:
    """``value`` as it stands between ``quote``s in a Python repr (backslashes, the quote and
    unprintable characters escaped)."""
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == quote:
            out.append("\\" + ch)
        elif not ch.isprintable():
            out.append(repr(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out)


def forms(value: str) -> set[str]:
    """Every form ``value`` takes when shown: itself, its repr body in either quote style, its
    JSON-escaped body (ASCII or not), and each of those escaped once more (a repr of a repr, a
    repr in JSON). A value with no quote, backslash or unusual character has one form."""
    first = {value, _escaped(value, "'"), _escaped(value, '"'), json.dumps(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1]}
    out = set(first)
    for f in first:
        out |= {_escaped(f, "'"), _escaped(f, '"'), json.dumps(f)[1:-1], json.dumps(f, ensure_ascii=False)[1:-1]}
    return out


_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE", re.IGNORECASE)
_ENV_MIN = 8  # an environment variable's value shorter than this (``false``, ``1``) is no key
_ENV_WHERE = re.compile(r"_(PATH|FILE|DIR|DIRECTORY|HOME|LOCATION)$", re.IGNORECASE)
"""A name that says where a key is kept (``HF_TOKEN_PATH``, ``GOOGLE_KEY_FILE``), not the key: its value is shown."""
_ENV: set[tuple[str, str]] = set()
"""``(name, value)`` of the environment variables whose names say they hold a key (``OPENAI_API_KEY``,
``GITHUB_TOKEN``): scrubbed as secrets of that name, though no plan gets them by :func:`get_secret`."""


_ENV_NAMES: list = [-1]
"""How many environment variables there were when their names were last read, then the names that say they hold a
key (a plan's step reads only their values again)."""


def watch_environment() -> None:
    """Scrub the values of the environment variables whose names say they hold a key, a token, a secret or a
    password, from now on, as ``<<secret:NAME>>`` (a plan that prints ``os.environ`` shows no key). Read again on
    each call (a plan runs after one), so a variable set or changed since is scrubbed too; a value once seen stays
    scrubbed."""
    env, found = os.environ, []
    if len(env) != _ENV_NAMES[0]:  # variables added or removed: their names read again (each read decodes it)
        _ENV_NAMES[:] = [len(env), *(
            n for n in env if _ENV_NAME.search(n) is not None and n.isidentifier() and _ENV_WHERE.search(n) is None
        )]
    for name in _ENV_NAMES[1:]:  # the few names that say they hold a key: their values read each time
        value = env.get(name)
        if value is not None and len(value) >= _ENV_MIN and (name, value) not in _ENV:
            found.append((name, value))
    if found:
        _ENV.update(found)
        _reindex()


def _reindex() -> None:
    values = [(n, v) for n, (v, _d) in _SECRETS.items()] + sorted(_ENV)
    pairs = {(f, n) for n, v in values for f in forms(v)}
    _ORDER[:] = sorted(pairs, key=lambda p: (-len(p[0]), p))


def set_secret(name: str, value: str | None = None, *, env: str | None = None, description: str = "") -> None:
    """Keep a secret under ``name``: ``value``, or the environment variable ``env`` (so the value
    never appears in a notebook cell). Only ``name`` and ``description`` are ever shown."""
    if not isinstance(name, str) or not name.isidentifier():
        raise UserError(f"a secret's name must be an identifier, not {name!r}")
    if value is None and env is None:
        raise UserError("set_secret needs a value or env='VARIABLE' (better: the value never appears in a cell)")
    if value is None:
        value = os.environ.get(env or "")
        if value is None:
            raise UserError(f"the environment variable {env!r} is not set")
    if not isinstance(value, str) or len(value) < _MIN:
        raise UserError(f"a secret's value must be a string of at least {_MIN} characters")
    _SECRETS[name] = (value, description)
    _reindex()


def forget_secret(name: str) -> None:
    """Drop secret ``name`` (no error if absent); its value is no longer scrubbed."""
    _SECRETS.pop(name, None)
    _reindex()


def secret_names() -> dict[str, str]:
    """``{name: description}`` (never the values)."""
    return {n: d for n, (_v, d) in _SECRETS.items()}


def get_secret(name: str) -> str:
    """The value of secret ``name`` (for plans and tools; never print it)."""
    try:
        return _SECRETS[name][0]
    except KeyError:
        raise KeyError(f"no secret named {name!r}; secrets: {sorted(_SECRETS) or 'none'}") from None


def scrub(text: Any) -> Any:
    """``text`` with every secret value replaced by its ``<<secret:NAME>>`` reference, in each form the
    value takes when shown (as is, in a repr with either quote, JSON-escaped: see :func:`forms`)."""
    if not _ORDER or not isinstance(text, str):
        return text
    for value, name in _ORDER:
        if value in text:
            text = text.replace(value, f"<<secret:{name}>>")
    return text


def scrub_clipped(text: Any, marker: str = "...") -> Any:
    """:func:`scrub`, and the start of a value cut off by ``marker`` too: text that was cut to a width and marked
    (a DataFrame's cell as pandas shows it, ``'sk-live-5f2b9c1e8a7d...'``; a description clipped to its limit)
    holds only a piece of a value, which :func:`scrub` cannot recognise. A piece of at least as many characters
    as a value's least length (:data:`_MIN`) that ends right where a ``marker`` starts is replaced by the value's
    reference (a shorter piece says too little to be told from ordinary text). Costs nothing without secrets, or
    without a marker in ``text``."""
    text = scrub(text)
    if not _ORDER or not isinstance(text, str) or marker not in text:
        return text
    out: list[str] = []
    done = 0
    at = text.find(marker)
    while at != -1:
        best, ref = 0, ""
        for value, name in _ORDER:
            # the longest proper start of this form of a value that ends at ``at`` (a whole one was scrubbed)
            for k in range(min(len(value) - 1, at - done), max(_MIN, best + 1) - 1, -1):
                if text.startswith(value[:k], at - k):
                    best, ref = k, f"<<secret:{name}>>"
                    break
        if best:
            out.append(text[done : at - best])
            out.append(ref)
            done = at
        at = text.find(marker, at + len(marker))
    out.append(text[done:])
    return "".join(out)


def scrub_error(err: Any) -> Any:
    """``err`` (an exception) with every secret value in its arguments, and in those of the errors
    it was raised from, replaced by its reference, in place: what ``str(err)`` gives, and so every
    failure reason, event, transcript and traceback made from it, is scrubbed."""
    seen: set[int] = set()
    e = err
    while _ORDER and isinstance(e, BaseException) and id(e) not in seen:
        seen.add(id(e))
        if any(isinstance(a, str) for a in e.args):
            try:
                e.args = tuple(scrub(a) for a in e.args)
            except (AttributeError, TypeError):  # an exception that will not take new arguments
                pass
        e = e.__cause__ or e.__context__
    return err


def _held_from(text: str) -> int:
    """Where the end of ``text`` that could still become a secret value starts (``len(text)`` if none):
    the earliest start of a proper prefix of a value that ends ``text``, moved back over any whole
    value crossing that point (so scrubbing the text before it cannot cut a value in two)."""
    cut = len(text)
    for value, _name in _ORDER:
        first, i = value[0], text.find(value[0], max(len(text) - len(value) + 1, 0))
        while i != -1 and i < cut:
            if value.startswith(text[i:]):
                cut = i
                break
            i = text.find(first, i + 1)
    moved = True
    while moved:
        moved = False
        for value, _name in _ORDER:
            i = text.find(value, max(cut - len(value) + 1, 0))
            if i != -1 and i < cut:
                cut, moved = i, True
    return cut


class ScrubStream:
    """Scrubs text that arrives in pieces (writes, streamed deltas), so a value split over pieces is caught.

    :meth:`feed` returns the scrubbed text that is safe to show now. An end that could be the start
    of a secret value is held back (about as long as the longest value) until the next piece settles
    it; :meth:`flush` releases what is held when the text is complete, :meth:`drop` drops it when the text was cut
    off mid-way (it could be part of a value). Not thread-safe: callers lock.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def feed(self, text: str) -> str:
        if self._held:
            text, self._held = self._held + text, ""
        if not _ORDER or not text:
            return text
        cut = _held_from(text)
        if cut < len(text):
            text, self._held = text[:cut], text[cut:]
        return scrub(text)

    def flush(self) -> str:
        held, self._held = self._held, ""
        return scrub(held)

    def drop(self) -> int:
        """The text was cut off (a stop, an interjection, a timeout): what is held back could be the start of a
        secret value, so it is dropped, never shown. Returns how many characters were dropped."""
        held, self._held = self._held, ""
        return len(held)


def _scrub_json(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _scrub_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_json(v) for v in value]
    return value


def scrub_bundle(bundle: dict) -> dict:
    """A display's mime bundle with its text scrubbed, SVG and JSON included (binary images, base64
    encoded, are left as they are)."""
    if not _ORDER:
        return bundle
    data = {
        k: (v if k.startswith("image/") and k != "image/svg+xml" else _scrub_json(v))
        for k, v in bundle.get("data", {}).items()
    }
    return {**bundle, "data": data}


def resolve_secrets(value: Any) -> Any:
    """Arguments with every ``"<<secret:NAME>>"`` string (whole or inside a string) replaced by the value."""
    if isinstance(value, str):
        if "<<secret:" not in value:
            return value

        def sub(m: re.Match) -> str:
            try:
                return _SECRETS[m[1]][0]
            except KeyError:
                raise ValueError(f"there is no secret named {m[1]!r}; secrets: {sorted(_SECRETS) or 'none'}") from None

        return SECRET_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: resolve_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_secrets(v) for v in value]
    return value
