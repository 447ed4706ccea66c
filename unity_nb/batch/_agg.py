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
from ._operators import PhasedHandle, as_pandas, field_free, row_texts

__all__ = ("AggHandle", "agg", "chunk_texts")

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
        self.items, self.by, self.chunk_chars, self.max_depth = frame, by, chunk_chars, max_depth
        self.question = field_free(task).replace("{{", "{").replace("}}", "}")
        self.depth = 0
        """Levels run so far (1 when every group fitted one request)."""
        texts = dict(row_texts(frame, task))
        if by is None:
            self.groups: dict[Any, list[str]] = {"all": list(texts.values())}
        else:
            self.groups = {g: [texts[k] for k in keys] for g, keys in frame.groupby(by, sort=True).groups.items()}
        options.setdefault("max_steps", 2)
        super().__init__(f"[agg{' by ' + str(by) if by is not None else ''}] {task}", **options)

    async def run_phases(self) -> Any:
        import pandas as pd

        pending = {g: chunk_texts(t, self.chunk_chars) for g, t in self.groups.items()}
        answers: dict[Any, Any] = {}
        reasons: dict[Any, str] = {}
        level = 0
        while pending:
            level += 1
            last = level >= self.max_depth
            rows, owners = [], []
            for group, chunks in pending.items():
                if len(chunks) > 1 and last:  # the bound: what remains goes into one request
                    chunks = ["\n\n".join(chunks)]
                one = len(chunks) == 1
                template = (_FIRST if level == 1 else _COMBINE) if one else (_PART if level == 1 else _COMBINE_PART)
                for chunk in chunks:
                    rows.append({"group": str(group), "text": chunk})
                    owners.append((group, one, template))
            frame = pd.DataFrame(rows)
            # one template for the map: each row carries its own instructions in {text}'s place
            frame["text"] = [t.format(task=self.question, group=g, text=x)
                             for (_, _, t), g, x in zip(owners, frame["group"], frame["text"])]
            self.depth = level
            step = await self.run_map(f"level{level}", frame[["text"]], "{text}")
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


def agg(items: Any, task: str, *, by: Any = None, **options: Any) -> AggHandle:
    """One answer to ``task`` for each group of ``items``' rows (grouped by the column ``by``; all rows as one
    group without it), as one steerable operation: ``await h`` gives a Series indexed by group.

    A group whose rows do not fit one request (``chunk_chars`` characters, 12,000 by default) is reduced
    hierarchically: its rows are chunked, each chunk summarised, the summaries combined, at most ``max_depth``
    levels (3). ``resume_from=store`` keeps the rows an earlier run of the same ``name`` finished (each level's map,
    ``NAME.level1``, ...). Options are the map's (``model``, ``concurrency``, ``rate``, ...)."""
    return AggHandle(items, task, by=by, **options)
