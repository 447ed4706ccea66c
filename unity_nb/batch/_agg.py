"""Aggregate: one answer per group of rows, reduced hierarchically when a group does not fit one request.

Each group's rows (the values the task names, else every column) are joined into chunks sized from the model's
context window (``context_window=`` in tokens, else the model's own, else an assumed 8,192 tokens, said), or of
``chunk_chars`` characters when given; a row longer than a chunk is split into parts, in order, each marked as a part
of that row, never cut (``.attrs["split"]`` says which rows were, into how many parts). A group that fits one chunk
is answered by one call. Otherwise each chunk is summarised with the task in mind, and the summaries are chunked and
combined the same way, level by level, until one text per group remains. The levels are bounded: at ``max_depth``
(3 by default) the remaining summaries of a group go into one request whatever their length. Every level is one map
over the chunks of every group, so its rows run concurrently and are steered together.

Streamed: the handle returns at once, whatever the input's size. The groups are found off the event loop (a sort
of the ``by`` column's codes, no row's text read), and the first level's chunks are made as its map starts them,
group after group: memory holds the chunks in flight and one answer per chunk done. The later levels are small (a
note per chunk).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from .._errors import UnityError, UserError
from ._agg_chunks import Groups, Sizing, chunk_texts, sizing
from ._estimate import DEFAULT_OUTPUT, Estimate, combine, estimate_map
from ._operators import field_free
from ._phased import Flow, Phase, PhasedHandle
from ._registry import Operator, Param, register_operator

__all__ = ("AggHandle", "agg", "chunk_texts", "estimate_agg")

_FIRST = "{task}\n\nAnswer it for the group {group} from these rows:\n\n{text}"
_PART = ("{task}\n\nThese rows are one part of the group {group} (a row too long for one part comes in marked "
         "parts): write what the answer needs from them (it will be combined with the other parts' notes), "
         "concisely.\n\n{text}")
_COMBINE = "{task}\n\nAnswer it for the group {group} from these notes, each on one part of its rows:\n\n{text}"
_COMBINE_PART = ("{task}\n\nThese notes cover some parts of the group {group}: combine them into one note that "
                 "keeps what the answer needs.\n\n{text}")


class AggHandle(PhasedHandle):
    """An aggregate as one steerable operation: one map per level (see the module's docstring). ``await h``
    gives a Series indexed by group (one entry, ``"all"``, without ``by``); a group whose answer failed is missing
    with ``.attrs["reasons"]`` saying why (rows without a value of ``by`` under the key ``None``);
    ``.attrs["split"]`` maps each row longer than a chunk to its number of parts, ``.attrs["chunk_chars"]`` and
    ``.attrs["sizing"]`` say the chunks' size and how it was chosen. ``h.depth`` is the number of levels run,
    ``h.calls`` model calls, ``h.sizing`` the chunks' :class:`Sizing`, ``h.split`` the rows split so far."""

    kind = "agg"

    def __init__(self, items: Any, task: str, *, by: Any = None, chunk_chars: int | None = None,
                 context_window: int | None = None, max_depth: int = 3, model: Any = None, **options: Any) -> None:
        self.groups, self.sizing = _checked(items, task, by, chunk_chars, context_window, max_depth, model)
        self.items = items
        self.by, self.max_depth = by, max_depth
        self.chunk_chars = self.sizing.chunk_chars
        self.question = _question(task)
        self.depth = 0
        """Levels run so far (1 when every group fitted one request)."""
        self.split: dict[Any, int] = {}
        """Rows longer than a chunk, each with the number of parts it was split into (filled as level 1 reads)."""
        self.bounded: dict[Any, int] = {}
        """Groups that reached ``max_depth`` with more than one chunk left, each with the number of chunks its last
        request holds at once (past the chunks' size: the bound, said in ``.attrs["bounded"]`` and the summary)."""
        options.setdefault("max_steps", 2)
        super().__init__(task, model=model, **options)

    def flow(self) -> Flow:
        import pandas as pd

        groups = self.groups
        groups.prepare()  # the phased engine runs the plan's steps off the event loop
        answers: dict[int, Any] = {}
        reasons: dict[Any, str] = {}
        if groups.missing:
            reasons[None] = (f"{groups.missing:,} row(s) have no value in the column {self.by!r}: they belong to no "
                             "group and were not read")
        owners: list[tuple[int, bool]] = []
        pending: dict[int, list[str]]
        level, pending = 0, {}
        while len(groups) and (level == 0 or pending):
            level += 1
            last = level >= self.max_depth
            self.depth = level
            if level == 1:
                owners = []
                rows: Any = _first_level(groups, self.sizing.chunk_chars, last, self.question, owners, self.split,
                                         self.bounded)
            else:
                rows, owners = _level_frame(pending, groups, level, last, self.question, self.bounded)
            step = yield Phase(f"level{level}", rows, "{text}", partial=level > 1)  # a group's failure is its own
            out = step.results()
            why = out.attrs.get("reasons", {})
            notes: dict[int, list[str]] = {}
            failed: set[int] = set()
            for i, (group, one) in enumerate(owners):
                if group in failed:
                    continue
                value = out.iloc[i]
                if i in why or value is None:
                    failed.add(group)
                    reasons[groups.name(group)] = f"level {level}: {why.get(i) or 'no answer'}"
                    notes.pop(group, None)
                elif one:
                    answers[group] = value
                else:
                    notes.setdefault(group, []).append(str(value))
            pending = {g: list(chunk_texts(enumerate(n, 1), self.sizing.chunk_chars, kind="note"))
                       for g, n in notes.items()}
        if len(groups) and not answers:  # nothing came of it: not a success
            said = "; ".join(f"{k!r}: {why}" for k, why in reasons.items() if k is not None)
            raise UnityError(f"no group was answered ({len(groups):,}): {said}")
        result = pd.Series([answers.get(g) for g in range(len(groups))], index=groups.keys, dtype=object,
                           name="answer")
        result.attrs = {"reasons": reasons, "split": dict(self.split), "chunk_chars": self.sizing.chunk_chars,
                        "sizing": str(self.sizing), "bounded": dict(self.bounded)}
        return result

    def summary(self) -> str:
        split = (f"; {len(self.split):,} row(s) longer than a chunk split into parts (.attrs['split'])"
                 if self.split else "")
        missing = (f"; {self.groups.missing:,} row(s) without a value of {self.by!r} in no group"
                   if self.groups.missing else "")
        bounded = (f"; {len(self.bounded):,} group(s) reached max_depth={self.max_depth} with more than one chunk "
                   f"left, answered from one request past the chunks' size (.attrs['bounded'])" if self.bounded else "")
        return (f"{len(self.groups)} group(s) answered in {self.depth} level(s), {self.calls} model calls; "
                f"{self.sizing}{split}{missing}{bounded}")


def _question(task: str) -> str:
    return field_free(task).replace("{{", "{").replace("}}", "}")


def _checked(items: Any, task: str, by: Any, chunk_chars: Any, context_window: Any, max_depth: Any,
             model: Any) -> tuple[Groups, Sizing]:
    """The groups (not read yet) and the chunks' size, checked: nothing of the rows is read but a generator's first."""
    from ..models import default_model

    if not isinstance(task, str) or not task.strip():
        raise UserError("agg needs a task: what to answer for each group, e.g. 'Summarise the main findings'")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise UserError(f"max_depth takes a whole number of at least 1, not {max_depth!r}")
    size = sizing(model if model is not None else default_model("agg"), chunk_chars, context_window)
    return Groups(items, task, by), size


def _first_level(groups: Groups, budget: int, last: bool, question: str, owners: list[tuple[int, bool]],
                 split: dict[Any, int], bounded: dict[Any, int]) -> Iterator[dict[str, str]]:
    """The first level's rows, made as the map asks for them, group after group (each carrying its own instructions
    as ``text``); ``owners`` gets each one's group and whether it is the group's only chunk; ``bounded`` each group
    whose chunks the bound (``last``) put into one request, with their number."""
    for group in range(len(groups)):
        name = str(groups.name(group))
        chunks = chunk_texts(groups.rows(group), budget, split=split)
        if last:  # the bound: the group goes into one request
            whole = list(chunks)
            if len(whole) > 1:
                bounded[groups.name(group)] = len(whole)
            owners.append((group, True))
            yield {"text": _FIRST.format(task=question, group=name, text="\n\n".join(whole))}
            continue
        first, second = next(chunks, None), next(chunks, None)
        if first is None:
            continue
        if second is None:
            owners.append((group, True))
            yield {"text": _FIRST.format(task=question, group=name, text=first)}
            continue
        for chunk in itertools.chain((first, second), chunks):
            owners.append((group, False))
            yield {"text": _PART.format(task=question, group=name, text=chunk)}


def _level_frame(pending: dict[int, list[str]], groups: Groups, level: int, last: bool,
                 question: str, bounded: dict[Any, int] | None = None) -> tuple[Any, list[tuple[int, bool]]]:
    """A later level's rows (each carrying its own instructions as ``text``) and who each belongs to; ``bounded``
    gets each group whose notes the bound (``last``) put into one request, with their number of chunks."""
    import pandas as pd

    rows, owners = [], []
    for group, chunks in pending.items():
        if len(chunks) > 1 and last:  # the bound: what remains goes into one request
            if bounded is not None:
                bounded[groups.name(group)] = len(chunks)
            chunks = ["\n\n".join(chunks)]
        one = len(chunks) == 1
        template = _COMBINE if one else _COMBINE_PART
        for chunk in chunks:
            rows.append(template.format(task=question, group=str(groups.name(group)), text=chunk))
            owners.append((group, one))
    return pd.DataFrame({"text": rows}), owners


def estimate_agg(items: Any, task: str, *, by: Any = None, chunk_chars: int | None = None,
                 context_window: int | None = None, max_depth: int = 3, model: Any = None,
                 **options: Any) -> Estimate:
    """What :func:`agg` would cost, without running anything: its first level exactly (every chunk of every group,
    read once), and for each group of more than one chunk the levels that combine its notes (each note a row's
    output)."""
    from ..models import default_model

    model = model if model is not None else default_model("estimate")
    groups, size = _checked(items, task, by, chunk_chars, context_window, max_depth, model)
    groups.prepare()
    question = _question(task)
    options.pop("max_steps", None)
    owners: list[tuple[int, bool]] = []
    parts = [estimate_map(_first_level(groups, size.chunk_chars, max_depth <= 1, question, owners, {}, {}), "{text}",
                          model=model, **options)]
    per_row = parts[0].output_per_row or DEFAULT_OUTPUT
    counts: dict[int, int] = {}
    for group, one in owners:
        if not one:
            counts[group] = counts.get(group, 0) + 1
    notes = {g: ["x" * (per_row * 4)] * n for g, n in counts.items()}
    level = 1
    while notes and level < max_depth:
        level += 1
        pending = {g: list(chunk_texts(enumerate(n), size.chunk_chars, kind="note")) for g, n in notes.items()}
        frame, _owners = _level_frame(pending, groups, level, level >= max_depth, question)
        parts.append(estimate_map(frame, "{text}", model=model, **options))
        notes = {g: ["x" * (per_row * 4)] * len(c) for g, c in pending.items() if len(c) > 1}
    return combine(parts, f"Agg projected over {len(groups):,} group(s), {size}: its first level exactly, then "
                          f"{level - 1} combining level(s), each note as long as a row's expected output.")


def agg(items: Any, task: str, *, by: Any = None, estimate: bool = False, **options: Any) -> Any:
    """One answer to ``task`` for each group of ``items``' rows (grouped by the column ``by``; all rows as one
    group without it), as one steerable operation: ``await h`` gives a Series indexed by group. The handle returns
    at once, whatever the input's size: rows are read as the first level's map starts them (a generator too).

    A group whose rows do not fit one request is reduced hierarchically: its rows are chunked, each chunk
    summarised, the summaries combined, at most ``max_depth`` levels (3). Chunks are sized from the model's context
    window (``context_window=`` in tokens says it; unknown: 8,192 assumed, said in the result) or are
    ``chunk_chars`` characters; a row longer than a chunk is split into marked parts, never cut.
    ``resume_from=store`` keeps the rows an earlier run of the same ``name`` finished (each level's map,
    ``NAME.level1``, ...). Options are the map's (``model``, ``concurrency``, ``rate``, ...); ``estimate=True``
    runs nothing and returns what it would cost."""
    if estimate:
        return estimate_agg(items, task, by=by, **options)
    return AggHandle(items, task, by=by, **options)


register_operator(Operator(
    "agg", agg, "One answer to TASK per group of rows; await it for a Series.", phased=True,
    params=(
        Param("by", "text", "the column whose values make the groups (else all rows are one).", "COLUMN"),
        Param("chunk_chars", "count", "the characters of a chunk (default: sized from the model's context window); "
                                      "a group larger is summarised in chunks and combined."),
        Param("context_window", "count", "the model's context window in tokens, which the chunks are sized from "
                                         "(default: the model's own if known, else 8192)."),
        Param("max_depth", "count", "levels of combining at most (default 3)."),
    ),
))
