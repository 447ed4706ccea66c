"""One declaration per ``%unity`` subcommand: its parser, its help and its errors all come from it.

A :class:`Subcommand` lists its positional arguments (:class:`Arg`), its options (:class:`Option`, each
with the :class:`Kind` of value it takes and a description), the free text that follows (:class:`Text`,
required or not; ``None``: none), a paragraph saying what it does, and (``%unity task``) its actions.
:func:`render` writes its help from that, :func:`parse_declared` reads a line by it, and every mistake
is a UsageError saying the problem in the declaration's words in one line, then where the subcommand's help is
(``%unity help SUB``: its whole usage would bury the line).

The grammar of every subcommand is the same: ``[OPTIONS] ARG... [OPTIONS] TEXT``, options standing
before the arguments, or after them when the subcommand has any (the text is taken verbatim: a verb's
message starting with ``--`` stays its message); the cell of ``%%unity`` adds to the text.
"""

from __future__ import annotations

import difflib
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError

__all__ = ("FLAG", "Arg", "Command", "Kind", "Option", "Subcommand", "Text", "parse_declared", "render", "unknown")

WIDTH = 110
"""Help lines are wrapped at this width."""


@dataclass(frozen=True)
class Kind:
    """The kind of value an option or argument takes: its converter (``ValueError`` for a bad value) and
    what it takes in words (``option --x takes <takes>, not 'y'``)."""

    convert: Callable[[str], Any]
    takes: str


FLAG = Kind(bool, "no value")
"""An option that is a flag: present (``True``) or not."""


@dataclass(frozen=True)
class Option:
    flag: str
    """``--max-steps``; its value lands in ``Command.options`` under the flag's name with ``_``: ``max_steps``."""
    kind: Kind
    doc: str
    """What it does, in a sentence (the help lists it after the flag)."""
    metavar: str = ""
    """How the help names its value (``N``, ``SECONDS``); none for a flag."""
    required: bool = False

    @property
    def key(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def is_flag(self) -> bool:
        return self.kind is FLAG

    @property
    def usage(self) -> str:
        return self.flag if self.is_flag else f"{self.flag} {self.metavar}"


@dataclass(frozen=True)
class Arg:
    """A positional argument: one word of the line."""

    metavar: str
    what: str
    """What it is, said in its errors: ``needs <what>`` (or ``takes <what>, not ...`` when optional)."""
    key: str = "name"
    """Where it lands: ``Command.name``, else ``Command.options[key]``."""
    kind: Kind | None = None
    """Its converter (a text when ``None``)."""
    optional: bool = False
    short: str = ""
    """How ``takes only <short>, got extra text`` names it (``what`` by default)."""


@dataclass(frozen=True)
class Text:
    """The free text after the arguments and options (with the cell's body, if any)."""

    metavar: str
    what: str
    """Said when it is required and missing: ``needs <what>``."""
    required: bool = True
    cell: bool = False
    """The help says the text may be the cell (``%%unity ...``)."""


@dataclass(frozen=True)
class Subcommand:
    name: str
    """``act``; an action of a subcommand is named with it: ``task new``."""
    doc: str
    """What it does, in a paragraph."""
    args: tuple[Arg, ...] = ()
    options: tuple[Option, ...] = ()
    text: Text | None = None
    note: str = ""
    """A line under its usage line (``(also: ...)``)."""
    more: str = ""
    """A paragraph after its options."""
    actions: tuple[Subcommand, ...] = ()
    """The actions its first word chooses among (``%unity task new|run|...``): each parsed by its own
    declaration, the doc of this one said after theirs."""

    def option(self, flag: str) -> Option | None:
        return next((o for o in self.options if o.flag == flag), None)

    @property
    def action_names(self) -> list[str]:
        return [a.name.rpartition(" ")[2] for a in self.actions]


@dataclass
class Command:
    """A parsed ``%unity`` line: what its declaration says it holds."""

    sub: str
    name: str | None = None
    """The first argument (an operation's name, the items, a task) when the declaration names it ``name``."""
    text: str = ""
    """The free text (the cell's body on lines below it)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The declared options given (by ``Option.key``) and the other arguments (by ``Arg.key``), converted."""
    action: str | None = None
    """``%unity task``'s action: new, run, message or show."""
    line: str = ""
    """What followed the subcommand (after its leading options), and the cell's text on lines below it
    (``%unity map`` keeps it to resume)."""


# -- help -------------------------------------------------------------------------------------


def _wrap(text: str, indent: str = "    ", more: str = "    ") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=more, break_on_hyphens=False,
                         break_long_words=False)


def usage(spec: Subcommand) -> str:
    """``%unity NAME ARG [--option VALUE] ... TEXT``, wrapped between its parts."""
    parts = [f"%unity {spec.name}"] + [f"[{a.metavar}]" if a.optional else a.metavar for a in spec.args]
    parts += [o.usage if o.required else f"[{o.usage}]" for o in spec.options]
    if spec.text is not None:
        parts.append(spec.text.metavar if spec.text.required else f"[{spec.text.metavar}]")
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 1 + len(part) > WIDTH:
            lines.append(" " * 11 + part)
        else:
            lines[-1] += " " + part
    return "\n".join(lines)


def render(spec: Subcommand, *, brief: bool = False) -> str:
    """The help of a subcommand: its usage line, what it does, each option, and what more it says
    (``brief``: its usage line and what it does)."""
    if spec.actions:
        return "\n".join([*(render(a, brief=brief) for a in spec.actions), *_wrap(spec.doc)])
    lines = [usage(spec)]
    if spec.note:
        lines += _wrap(spec.note)
    if spec.text is not None and spec.text.cell:
        args = "".join(f" {a.metavar}" for a in spec.args) + (" [options]" if spec.options else "")
        lines += _wrap(f"(or %%unity {spec.name}{args} with the {spec.text.metavar.lower()} as the cell)")
    lines += _wrap(spec.doc)
    if brief:
        return "\n".join(lines)
    for o in spec.options:
        lines += _wrap(f"{o.usage}: {o.doc}", "    ", "        ")
    if spec.more:
        lines += _wrap(spec.more)
    return "\n".join(lines)


# -- parsing ----------------------------------------------------------------------------------


def usage_hint(sub: str) -> str:
    """What follows a usage error's one line: where the subcommand's whole usage is (not the usage itself)."""
    return f"(%unity help {sub} shows its usage)"


def unknown(what: str, choices: list[str], see: str) -> UsageError:
    """A mistyped subcommand or option: a short error, with the nearest name if one is close (not the help)."""
    close = difflib.get_close_matches(what.split()[-1], choices, n=1, cutoff=0.6)
    hint = f": did you mean {close[0]}?" if close else ""
    return UsageError(f"unknown {what}{hint} ({see})")


_OPTION = re.compile(r"""^--([A-Za-z][\w-]*)(?:=|\s+)("[^"]*"|'[^']*'|\S+)\s*""")


class _Reader:
    """Reading one line by the declaration ``spec`` of the subcommand ``sub``; every error names where ``help()`` is."""

    def __init__(self, spec: Subcommand, sub: str, help: Callable[[], str], stored: bool = False) -> None:
        self.spec, self.sub, self.help = spec, sub, help
        self.path = f"%unity {spec.name}"
        self.stored = stored  # a line the store kept: a version that took the last of an option given twice ran it

    def error(self, problem: str) -> UsageError:
        return UsageError(f"{problem}\n{usage_hint(self.sub)}")

    def convert(self, key: str, value: str, options: dict) -> None:
        flag = f"--{key}"
        option = self.spec.option(flag)
        if option is None:
            raise unknown(f"option {flag}", [o.flag for o in self.spec.options],
                          f"%unity {self.sub} --help lists its options")
        if option.is_flag:
            raise self.error(f"{flag} is a flag: it takes no value")
        if value[:1] in "'\"" and value[-1:] == value[:1]:
            value = value[1:-1]
        if option.key in options and not self.stored:  # which one was meant cannot be told: neither is taken
            raise self.error(f"option {flag} is given twice: give it once")
        try:
            options[option.key] = option.kind.convert(value)
        except ValueError:
            raise self.error(f"option {flag} takes {option.kind.takes}, not {value!r}") from None

    def options(self, rest: str, options: dict) -> str:
        """Take ``--option value`` pairs (and ``--flag``) from the front of ``rest``; the remainder stays raw text."""
        rest = rest.strip()
        while rest.startswith("--"):
            flag = rest.split(maxsplit=1)[0]
            option = self.spec.option(flag)
            if option is not None and option.is_flag:
                if option.key in options and not self.stored:
                    raise self.error(f"option {flag} is given twice: give it once")
                options[option.key] = True
                rest = rest[len(flag):].strip()
                continue
            m = _OPTION.match(rest)
            if m is None:
                if self.spec.option(flag.partition("=")[0]) is None:
                    self.convert(flag[2:].partition("=")[0], "", options)  # unknown: said so, with a did-you-mean
                raise self.error(f"option {flag} needs a value")
            self.convert(m.group(1), m.group(2), options)
            rest = rest[m.end():]
        return rest.strip()

    def extra(self, text: str) -> UsageError:
        args = self.spec.args
        if not args:
            return self.error(f"{self.path} takes no arguments, got {text!r}")
        only = "" if all(a.optional for a in args) else "only "
        return self.error(f"{self.path} takes {only}{' and '.join(a.short or a.what for a in args)}, "
                          f"got extra text {text!r}")

    def read(self, rest: str, cell: str | None) -> Command:
        spec, cell = self.spec, (cell or "").strip()
        cmd = Command(self.sub)
        options: dict[str, Any] = {}
        # the line as typed, options before the items too: what a resume reads again (it ran with them)
        cmd.line = "\n".join(t for t in (rest.strip(), cell) if t)
        rest = self.options(rest, options)
        for arg in spec.args:
            value, _, after = rest.partition(" ")
            if not value or value.startswith("--"):
                if arg.optional:
                    break
                raise self.error(f"{self.path} needs {arg.what}")
            try:
                converted = arg.kind.convert(value) if arg.kind is not None else value
            except ValueError:
                raise self.error(f"{self.path} {'takes' if arg.optional else 'needs'} {arg.what}, "
                                 f"not {value!r}") from None
            if arg.key == "name":
                cmd.name = converted
            else:
                options[arg.key] = converted
            rest = after.strip()
        if spec.args and spec.options:
            rest = self.options(rest, options)
        for option in spec.options:
            if option.required and option.key not in options:
                raise self.error(f"{self.path} needs {option.flag}: {option.doc}")
        text = "\n".join(t for t in (rest, cell) if t)
        if spec.text is None:
            if text:
                raise self.extra(text)
        elif spec.text.required and not text:
            raise self.error(f"{self.path} needs {spec.text.what}")
        cmd.text, cmd.options = text, options
        return cmd


def parse_declared(spec: Subcommand, rest: str, cell: str | None, *, help: Callable[[], str],
                   stored: bool = False) -> Command:
    """What follows ``%unity <spec.name>`` (and the cell), read by ``spec``; each error names where ``help()`` is.
    ``stored``: a line read back from the store (to resume it), read as it ran: of an option given twice, the last."""
    if not spec.actions:
        return _Reader(spec, spec.name, help, stored).read(rest, cell)
    action, _, rest = rest.strip().partition(" ")
    if rest.split()[:1] in (["--help"], ["-h"]):  # %unity task new --help: the subcommand's help
        return Command("help", name=spec.name)
    chosen = next((a for a, n in zip(spec.actions, spec.action_names) if n == action), None)
    if chosen is None:
        got = f", not {action!r}" if action else ""
        raise UsageError(f"%unity {spec.name} takes an action: {', '.join(spec.action_names)}{got}\n"
                         f"{usage_hint(spec.name)}")
    cmd = _Reader(chosen, spec.name, help, stored).read(rest, cell)
    cmd.action = action
    return cmd
