"""The rows of a batch: what each row's task says, and the result assembled in the input's order."""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

from .._errors import UserError
from ..loop import Tool, current_call

__all__ = ("Row", "answer_tool", "assemble", "make_rows", "parse_answer", "row_key", "to_json")

to_json = json.JSONEncoder(default=str, ensure_ascii=False).encode
"""``json.dumps(value, default=str, ensure_ascii=False)`` with its encoder made once (not once per call)."""


class Row:
    """One row: its position, its key (the index label), the values its task is filled from."""

    __slots__ = ("answer", "child", "key", "position", "reason", "status", "task", "tokens", "values")

    def __init__(self, position: int, key: Any, values: Mapping[str, Any], task: str) -> None:
        self.position = position
        self.key = key
        self.values = values
        self.task = task
        self.status = "waiting"
        """``waiting``, ``running``, ``finished``, ``failed`` or ``stopped``."""
        self.answer: Any = None
        self.reason: str | None = None
        self.child: Any = None
        self.tokens = (0, 0)


def row_key(key: Any) -> str:
    """A row's key as the store keeps it (JSON; labels that are not JSON as their text)."""
    if hasattr(key, "item"):  # numpy scalars
        key = key.item()
    return to_json(key)


def _fields(template: str) -> list[str]:
    try:
        return [f for _t, f, _s, _c in string.Formatter().parse(template) if f is not None]
    except ValueError as err:
        hint = "write {column} for a value, {{ and }} for a brace"
        raise UserError(f"the task template is not valid: {err} ({hint})") from None


class _Values(dict):
    def __missing__(self, key: str) -> Any:
        raise UserError(f"the task names {{{key}}}, which no row has; columns: {sorted(self)}")


def _render(template: str, fields: list[str], values: Mapping[str, Any]) -> str:
    if fields:
        return template.format_map(_Values(values))
    shown = values["value"] if set(values) <= {"value", "_name"} else "\n".join(
        f"{k}: {v}" for k, v in values.items() if k != "_name"
    )
    return f"{template}\n\n{shown}"


def make_rows(items: Any, template: str) -> tuple[list[Row], Any]:
    """Rows from a Series, a DataFrame or any iterable, with their tasks; and the index to align results to."""
    import pandas as pd

    if not isinstance(template, str) or not template.strip():
        raise UserError("map needs a task: a non-empty string (a template like 'Label {abstract}' fills it per row)")
    fields = _fields(template)
    if isinstance(items, pd.DataFrame):
        index = items.index
        columns = [str(c) for c in items.columns]
        records: Iterable[Mapping[str, Any]] = (
            dict(zip(columns, values)) for values in items.itertuples(index=False, name=None)
        )
    elif isinstance(items, pd.Series):
        index = items.index
        label = str(items.name) if items.name is not None else "value"
        records = ({"value": v, label: v} for v in items.to_numpy(dtype=object))
    elif isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise UserError(f"map takes a Series, a DataFrame or a list of items, not {type(items).__name__}")
    else:
        listed = list(items)
        index = pd.RangeIndex(len(listed))
        records = (dict(x) if isinstance(x, Mapping) else {"value": x} for x in listed)
    rows = [Row(i, key, values, "") for i, (key, values) in enumerate(zip(index, records))]
    if not rows:
        raise UserError("map needs at least one row; the input is empty")
    for row in rows:
        row.task = _render(template, fields, row.values)
    return rows, index


def answer_tool(output: type[pydantic.BaseModel]) -> Tool:
    """``submit_answer``: the tool through which a row's model gives its structured answer (it ends the row)."""

    async def submit(**fields: Any) -> str:
        value = output.model_validate(fields)
        call = current_call()
        if call is not None:
            call.loop.finish_with(value, value.model_dump_json())
        return "answer recorded"

    doc = output.__doc__ or ""
    description = (
        f"Give your answer for this row as {output.__name__}: {', '.join(output.model_fields)}. "
        "Calling this ends the work on the row." + (f" {doc.strip()}" if doc.strip() else "")
    )
    return Tool(name="submit_answer", description=description, fn=submit, params=output, ctx_param=None, is_async=True)


def parse_answer(value: Any, output: type[pydantic.BaseModel] | None) -> Any:
    """A row's result as the batch keeps it: the model's text, or a validated ``output`` instance."""
    if output is None or isinstance(value, output):
        return value
    if isinstance(value, dict):
        return output.model_validate(value)
    text = str(value).strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        return output.model_validate_json(text)
    except pydantic.ValidationError as err:
        raise ValueError(f"the answer is not a {output.__name__}: {err.errors()[0]['msg']}") from None


def assemble(rows: Sequence[Row], index: Any, output: type[pydantic.BaseModel] | None, name: str | None) -> Any:
    """The batch's result aligned to the input's index: a Series of answers, or a DataFrame of ``output``'s
    fields; a row that did not finish is missing. ``.attrs["reasons"]`` maps its key to why."""
    import pandas as pd

    reasons = {row.key: row.reason for row in rows if row.status != "finished"}
    if output is None:
        result: Any = pd.Series(
            [row.answer if row.status == "finished" else None for row in rows], index=index, dtype=object, name=name
        )
    else:
        columns = list(output.model_fields)
        data = [
            row.answer.model_dump() if row.status == "finished" and row.answer is not None else dict.fromkeys(columns)
            for row in rows
        ]
        result = pd.DataFrame(data, index=index, columns=columns)
    result.attrs["reasons"] = reasons
    return result
