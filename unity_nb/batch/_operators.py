"""Semantic operators over DataFrames, built on the map: filter and extract are row plans (a map with an answer
tool and a reduction), join a row plan over blocked pairs; top-k and aggregate are phased plans (``_phased.py``).
Every operator is an entry of the registry (``_registry.py``), which the magics, their help, ``--estimate`` and
``%unity resume`` read.

Every operator is one steerable handle: pause, resume and stop reach the batch running (and each row); an
interjection reaches every running row and every row not started yet, in this phase and the later ones; ``ask``
answers about the operation so far. ``await`` gives a DataFrame (or a Series) keyed by the input's index, with
what did not come out missing and ``.attrs["reasons"]`` saying why.
"""

from __future__ import annotations

from typing import Any

import pydantic

from .._errors import UserError
from ._estimate import estimate_map
from ._map import MapHandle
from ._registry import Operator, Param, register_operator
from ._rows import Reason, Template, add_reason, as_text

__all__ = ("ExtractHandle", "FilterHandle", "Verdict", "as_pandas", "extract", "field_free", "filter_rows",
           "row_texts")


class Verdict(pydantic.BaseModel):
    """keep: true if the row meets the condition, false if it does not, null if its text does not let you
    decide; reason: one sentence saying why."""

    keep: bool | None
    reason: Reason


_DECIDE = (
    "\n\nDecide for this row with submit_answer: keep true if it does, false if it does not, null if the text does "
    "not let you decide; and a one-sentence reason."
)


def as_pandas(items: Any, what: str) -> Any:
    """A DataFrame or Series as it is; a list as a Series (its positions the index)."""
    import pandas as pd

    if isinstance(items, pd.DataFrame | pd.Series):
        return items
    if isinstance(items, str | bytes | dict) or not hasattr(items, "__iter__"):
        raise UserError(f"{what} takes a Series, a DataFrame or a list of items, not {type(items).__name__}")
    return pd.Series(list(items), dtype=object)


class FilterHandle(MapHandle):
    """A filter: each row asked ``condition`` once, answering a :class:`Verdict`. ``await`` gives the rows kept
    (the input's rows, its index); ``verdicts`` every row's ``keep`` (true, false or missing) and ``reason``.
    A row the model could not decide (``keep`` null, or its row failed) is neither kept nor dropped silently:
    it is missing from the result and ``.attrs["reasons"]`` says why ("undecided: ..." or "failed: ...")."""

    kind = "filter"

    def __init__(self, items: Any, condition: str, **options: Any) -> None:
        self._items, task, options = _filter_plan(items, condition, options)
        super().__init__(self._items, task, **options)

    @property
    def verdicts(self) -> Any:
        """Every row's ``keep`` (a nullable boolean: missing when undecided or failed) and ``reason`` (the
        model's, or why the row failed), aligned to the input's index; ``.attrs["failed"]``: why each row without a
        verdict has none, by position (labels may repeat)."""
        import pandas as pd

        frame = MapHandle.results(self)
        failed = self.rows.reasons(len(frame))  # by position: labels may repeat
        frame["keep"] = frame["keep"].astype("boolean")
        if failed:  # (every row answered: nothing to write)
            reason = frame["reason"].astype(object).to_numpy(copy=True)
            for position, why in failed.items():
                reason[position] = why or "no answer"
            frame["reason"] = pd.array(reason, dtype=frame["reason"].dtype)
        frame.attrs = {"failed": failed}
        return frame

    def results(self) -> Any:
        """The rows kept so far; ``.attrs["reasons"]`` maps each row not decided to why: ``"undecided: ..."``,
        ``"failed: ..."``, ``"stopped: ..."``, ``"not started: ..."`` (the filter ended before it), ``None`` (still to
        come)."""
        import pandas as pd

        frame = self.verdicts
        failed = frame.attrs["failed"]
        ended_badly = self.rows.bad  # position -> (status, reason): how a row without a verdict ended
        keep = frame["keep"].fillna(False).to_numpy(dtype=bool)
        kept = self._items[keep].copy()
        reasons: dict[Any, Any] = {}
        for position, (key, verdict, why) in enumerate(zip(frame.index, frame["keep"], frame["reason"])):
            if position in ended_badly:
                said = f"{ended_badly[position][0]}: {why}"
            elif position in failed:  # not started (the filter ended first), or still to come
                said = failed[position]
            elif verdict is None or verdict is pd.NA:
                said = f"undecided: {why}"
            else:
                continue
            add_reason(reasons, key, said)
        kept.attrs = {"reasons": reasons}
        return kept


class ExtractHandle(MapHandle):
    """Extraction: each row answers ``columns`` (the map's ``columns=``, types included where the map takes
    them); ``await`` gives a DataFrame of those columns aligned to the input's index."""

    kind = "extract"


_EXTRACT = "\n\nGive the fields with submit_answer; a text field the text does not give is an empty string."


def _filter_plan(items: Any, condition: str, options: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """A filter's row plan: its items, each row's task and the map's options."""
    if not isinstance(condition, str) or not condition.strip():
        raise UserError("filter needs a condition: a question each row answers yes or no, e.g. "
                        "'Does {abstract} report an experiment on humans?'")
    if "output" in options or "columns" in options:
        raise UserError("filter answers with its own fields (keep, reason): it takes no output= or columns=")
    options.setdefault("label", condition)
    options.setdefault("max_steps", 3)
    return as_pandas(items, "filter"), condition + _DECIDE, {**options, "output": Verdict}


def filter_rows(items: Any, condition: str, *, estimate: bool = False, **options: Any) -> Any:
    """Keep the rows of ``items`` (a DataFrame, a Series or a list) that meet ``condition``, a template filled per
    row like the map's (``"Does {abstract} report an experiment on humans?"``), as one steerable batch.

    Each row answers once with a verdict (``keep``: true, false or null for "cannot tell", and a ``reason``).
    ``await h`` gives the input's rows kept, in order, with their index; ``h.verdicts`` every row's verdict
    and reason. A row undecided or failed is missing from the result with ``.attrs["reasons"]`` saying why:
    never silently kept or dropped. Options are the map's (``model``, ``concurrency``, ``rate``, ``name``,
    ``done``, ...); ``estimate=True`` runs nothing and returns what it would cost."""
    if estimate:
        rows, task, map_options = _filter_plan(items, condition, options)
        return estimate_map(rows, task, **map_options)
    return FilterHandle(items, condition, **options)


def extract(items: Any, task: str, *, columns: Any, estimate: bool = False, **options: Any) -> Any:
    """Extract ``columns`` (``"method,sample_size,venue"`` or a list; a type per column where the map takes one)
    from every row of ``items`` as one steerable batch: ``await h`` gives a DataFrame of those columns aligned to
    the input's index, rows that failed missing with ``.attrs["reasons"]``. ``task`` is a template
    (``"From {abstract}"``). Options are the map's; ``estimate=True`` runs nothing and returns what it would cost."""
    if isinstance(columns, str):
        columns = [c.strip() for c in columns.split(",") if c.strip()]
    if not isinstance(task, str) or not task.strip():
        raise UserError("extract needs a task: a template saying what to read, e.g. 'From {abstract}'")
    options.setdefault("label", task)
    if estimate:
        return estimate_map(as_pandas(items, "extract"), task + _EXTRACT, columns=columns, **options)
    return ExtractHandle(as_pandas(items, "extract"), task + _EXTRACT, columns=columns, **options)


# -- what the operators share ----------------------------------------------------------------------


def field_free(template: str) -> str:
    """``template`` with each ``{field}`` written as ``<field>`` and braces escaped: a text another template
    can hold (the question a comparison or a summary repeats)."""
    out = []
    for literal, field, _spec, _conv in Template(template).parts:
        out.append(literal.replace("{", "{{").replace("}", "}}"))
        if field is not None:
            out.append(f"<{field}>")
    return "".join(out)


def check_fields(items: Any, template: str) -> None:
    """A UserError now, before anything runs, if ``template`` names a column the rows of ``items`` (a DataFrame or a
    Series: a map over them fills ``{value}``, and ``{name}`` for a named Series) do not have."""
    import pandas as pd

    if isinstance(items, pd.DataFrame):
        columns = [str(c) for c in items.columns]
    elif isinstance(items, pd.Series):
        columns = ["value", *([str(items.name)] if items.name is not None else [])]
    else:
        return
    Template(template).check(columns)


def row_texts(items: Any, template: str) -> list[tuple[Any, str]]:
    """Each row's key and the text the model reads of it: the values the template names (``name: value``), else
    every column's (a Series' or a list's value as it is)."""
    import pandas as pd

    fields = Template(template).fields
    if isinstance(items, pd.Series):
        return [(k, as_text(v)) for k, v in items.items()]
    columns = [str(c) for c in items.columns]
    named = [c for c in columns if c in fields] or columns
    out = []
    for key, values in zip(items.index, items.itertuples(index=False, name=None)):
        row = dict(zip(columns, values))
        out.append((key, "\n".join(f"{c}: {as_text(row[c])}" for c in named)))
    return out


register_operator(Operator(
    "filter", filter_rows,
    "Keep the rows of ITEMS that meet CONDITION (Does {abstract} report an experiment on humans?), one verdict per "
    "row; await it for the rows kept. h.verdicts: every row's keep and reason; a row the model could not decide is "
    "missing with .attrs['reasons'] saying why.",
    text="CONDITION",
))
register_operator(Operator(
    "extract", extract,
    "Extract the columns from every row (From {abstract}); await it for a DataFrame aligned to ITEMS.",
    params=(Param("columns", "columns", "the fields to extract, e.g. --columns method,sample_size (each typed str, "
                  "int, float or bool: str by default).", "NAME[:TYPE],...", required=True),),
))
