"""Aggregate: one answer per group of rows, reduced hierarchically when a group does not fit one request.

Each group's rows (the values the task names, else every column) are cut into chunks of at most ``chunk_chars``
characters (12,000 by default: about 3,000 tokens). A group that fits one chunk is answered by one call.
Otherwise each chunk is summarised with the task in mind, and the summaries are chunked and combined the
same way, level by level, until one text per group remains. The levels are bounded: at ``max_depth`` (3 by
default) the remaining summaries of a group go into one request whatever their length. Every level is one
map over the chunks of every group, so its rows run concurrently and are steered together.
"""

from __future__ import annotations

from typing import Any

from .._errors import UserError
from ._estimate import DEFAULT_OUTPUT, Estimate, combine, estimate_map
from ._operators import as_pandas, field_free, row_texts
from ._phased import Flow, Phase, PhasedHandle
from ._registry import Operator, Param, register_operator

__all__ = ("AggHandle", "agg", "chunk_texts", "estimate_agg")

_FIRST = "{task}\n\nAnswer it for the group {group} from these rows:\n\n{text}"
_PART = ("{task}\n\nThese rows are one part of the group {group}: write what the answer needs from them (it will "
         "be combined with the other parts' notes), concisely.\n\n{text}")
_COMBINE = "{task}\n\nAnswer it for the group {group} from these notes, each on one part of its rows:\n\n{text}"
_COMBINE_PART = ("{task}\n\nThese notes cover some parts of the group {group}: combine them into one note that "
                 "keeps what the answer needs.\n\n{text}")


def chunk_texts(texts: list[str], budget: int) -> list[str]:
    """``texts`` joined into chunks of at most ``chunk_chars`` characters (a text longer than that is a chunk alone,
    cut to ``budget``)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for text in texts:
        text = text[:budget]
        if current and size + len(text) + 2 > budget:
            chunks.append("\n\n".join(current))
            current, size = [], 0
        current.append(text)
        size += len(text) + 2
    if current:
        chunks.append("\n\n".join(current))
    return chunks


class AggHandle(PhasedHandle):
    """An aggregate as one steerable operation: one map per level (see the module's docstring). ``await h``
    gives a Series indexed by group (one entry, the task's, without ``by``); a group whose answer failed is
    missing with ``.attrs["reasons"]``. ``h.depth`` is the number of levels run, ``h.calls`` model calls."""

    kind = "agg"

    def __init__(self, items: Any, task: str, *, by: Any = None, chunk_chars: int = 12_000, max_depth: int = 3,
                 **options: Any) -> None:
        self.items, self.groups = _groups(items, task, by, chunk_chars, max_depth)
        self.by, self.chunk_chars, self.max_depth = by, chunk_chars, max_depth
        self.question = _question(task)
        self.depth = 0
        """Levels run so far (1 when every group fitted one request)."""
        options.setdefault("max_steps", 2)
        super().__init__(task, **options)

    def flow(self) -> Flow:
        import pandas as pd

        pending = {g: chunk_texts(t, self.chunk_chars) for g, t in self.groups.items()}
        answers: dict[Any, Any] = {}
        reasons: dict[Any, str] = {}
        level = 0
        while pending:
            level += 1
            last = level >= self.max_depth
            frame, owners = _level_frame(pending, level, last, self.question)
            self.depth = level
            step = yield Phase(f"level{level}", frame, "{text}")
            out = step.results()
            why = out.attrs.get("reasons", {})
            notes: dict[Any, list[str]] = {}
            for i, (group, one, _t) in enumerate(owners):
                if group in reasons:
                    continue
                value = out.iloc[i]
                if i in why or value is None:
                    reasons[group] = f"level {level}: {why.get(i) or 'no answer'}"
                    notes.pop(group, None)
                elif one:
                    answers[group] = value
                else:
                    notes.setdefault(group, []).append(str(value))
            pending = {g: chunk_texts(n, self.chunk_chars) for g, n in notes.items() if g not in reasons}
        keys = list(self.groups)
        result = pd.Series([answers.get(g) for g in keys], index=pd.Index(keys, name=self.by), dtype=object,
                           name="answer")
        result.attrs = {"reasons": reasons}
        return result

    def summary(self) -> str:
        return f"{len(self.groups)} group(s) answered in {self.depth} level(s), {self.calls} model calls"


def _question(task: str) -> str:
    return field_free(task).replace("{{", "{").replace("}}", "}")


def _groups(items: Any, task: str, by: Any, chunk_chars: int, max_depth: int) -> tuple[Any, dict[Any, list[str]]]:
    """The items as a frame and each group's rows' texts, checked."""
    import pandas as pd

    if not isinstance(task, str) or not task.strip():
        raise UserError("agg needs a task: what to answer for each group, e.g. 'Summarise the main findings'")
    if isinstance(chunk_chars, bool) or not isinstance(chunk_chars, int) or chunk_chars < 200:
        raise UserError(f"chunk_chars takes a number of characters of at least 200, not {chunk_chars!r}")
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise UserError(f"max_depth takes a whole number of at least 1, not {max_depth!r}")
    frame = as_pandas(items, "agg")
    if by is not None:
        if not isinstance(frame, pd.DataFrame) or by not in frame.columns:
            cols = list(frame.columns) if isinstance(frame, pd.DataFrame) else []
            raise UserError(f"by names a column of the items to group by; {by!r} is not one (columns: {cols})")
    if len(frame) == 0:
        raise UserError("agg needs at least one row; the input is empty")
    texts = dict(row_texts(frame, task))
    if by is None:
        return frame, {"all": list(texts.values())}
    return frame, {g: [texts[k] for k in keys] for g, keys in frame.groupby(by, sort=True).groups.items()}


def _level_frame(pending: dict[Any, list[str]], level: int, last: bool, question: str) -> tuple[Any, list]:
    """One level's rows (each carrying its own instructions as ``text``) and who each belongs to."""
    import pandas as pd

    rows, owners = [], []
    for group, chunks in pending.items():
        if len(chunks) > 1 and last:  # the bound: what remains goes into one request
            chunks = ["\n\n".join(chunks)]
        one = len(chunks) == 1
        template = (_FIRST if level == 1 else _COMBINE) if one else (_PART if level == 1 else _COMBINE_PART)
        for chunk in chunks:
            rows.append(template.format(task=question, group=str(group), text=chunk))
            owners.append((group, one, template))
    return pd.DataFrame({"text": rows}), owners


def estimate_agg(items: Any, task: str, *, by: Any = None, chunk_chars: int = 12_000, max_depth: int = 3,
                 **options: Any) -> Estimate:
    """What :func:`agg` would cost, without running anything: its first level exactly (every chunk of every group),
    and for each group of more than one chunk the levels that combine its notes (each note a row's output)."""
    _frame, groups = _groups(items, task, by, chunk_chars, max_depth)
    question = _question(task)
    pending = {g: chunk_texts(t, chunk_chars) for g, t in groups.items()}
    options.pop("max_steps", None)
    first, _owners = _level_frame(pending, 1, max_depth <= 1, question)
    parts = [estimate_map(first, "{text}", **options)]
    per_row = parts[0].output_per_row or DEFAULT_OUTPUT
    notes = {g: ["x" * (per_row * 4)] * len(c) for g, c in pending.items() if len(c) > 1}
    level = 1
    while notes and level < max_depth:
        level += 1
        pending = {g: chunk_texts(n, chunk_chars) for g, n in notes.items()}
        frame, _owners = _level_frame(pending, level, level >= max_depth, question)
        parts.append(estimate_map(frame, "{text}", **options))
        notes = {g: ["x" * (per_row * 4)] * len(c) for g, c in pending.items() if len(c) > 1}
    return combine(parts, f"Agg projected over {len(groups):,} group(s): its first level exactly, then {level - 1} "
                          "combining level(s), each note as long as a row's expected output.")


def agg(items: Any, task: str, *, by: Any = None, estimate: bool = False, **options: Any) -> Any:
    """One answer to ``task`` for each group of ``items``' rows (grouped by the column ``by``; all rows as one
    group without it), as one steerable operation: ``await h`` gives a Series indexed by group.

    A group whose rows do not fit one request (``chunk_chars`` characters, 12,000 by default) is reduced
    hierarchically: its rows are chunked, each chunk summarised, the summaries combined, at most ``max_depth``
    levels (3). ``resume_from=store`` keeps the rows an earlier run of the same ``name`` finished (each level's map,
    ``NAME.level1``, ...). Options are the map's (``model``, ``concurrency``, ``rate``, ...); ``estimate=True``
    runs nothing and returns what it would cost."""
    if estimate:
        return estimate_agg(items, task, by=by, **options)
    return AggHandle(items, task, by=by, **options)


register_operator(Operator(
    "agg", agg, "One answer to TASK per group of rows; await it for a Series.", phased=True,
    params=(
        Param("by", "text", "the column whose values make the groups (else all rows are one).", "COLUMN"),
        Param("chunk_chars", "count", "a group larger than this (default 12000) is summarised in chunks and combined."),
        Param("max_depth", "count", "levels of combining at most (default 3)."),
    ),
))
