"""The rows of a batch: what each row's task says, and the result assembled in the input's order."""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pydantic

from .._errors import UserError
from ..loop import Tool, current_call

__all__ = (
    "Row", "Template", "answer_tool", "asked_hash", "assemble", "make_rows", "parse_answer", "row_id", "row_key",
    "to_json",
)

to_json = json.JSONEncoder(default=str, ensure_ascii=False).encode
"""``json.dumps(value, default=str, ensure_ascii=False)`` with its encoder made once (not once per call)."""


class Row:
    """One row: its position, its key (the index label), the values its task is filled from."""

    __slots__ = ("answer", "asked", "child", "kept", "key", "position", "reason", "status", "task", "tokens", "values")

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
        self.asked: str | None = None
        """What it is asked (:func:`asked_hash`), once the batch needed it."""
        self.kept = False
        """Finished by the run this batch continues (not run again)."""


def row_key(key: Any) -> str:
    """A row's key as the store keeps it (JSON; labels that are not JSON as their text)."""
    if hasattr(key, "item"):  # numpy scalars
        key = key.item()
    return to_json(key)


_WHAT = (
    "a template may hold {column} (a column's name, or {value} for a Series' or a list's values), with an "
    "optional !r, !s or !a and a format after a colon ({price:.2f}); write {{ and }} for a brace"
)


class Template:
    """A row's task: literal text and ``{column}`` fields, checked once and filled per row (no ``str.format``:
    a column named ``0`` is ``{0}``, and a mistake says what a template may hold)."""

    __slots__ = ("parts", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.parts: list[tuple[str, str | None, str, str | None]] = []
        try:
            parsed = list(string.Formatter().parse(source))
        except ValueError as err:
            raise UserError(f"the task template is not valid: {err} ({_WHAT})") from None
        for literal, field, spec, conversion in parsed:
            if field is not None:
                if not field.strip():
                    raise UserError(f"the task template holds {{}}, which names no column ({_WHAT})")
                if conversion not in (None, "r", "s", "a"):
                    raise UserError(f"the task template holds {{{field}!{conversion}}}: {conversion!r} is not a "
                                    f"conversion ({_WHAT})")
                if "{" in (spec or ""):
                    raise UserError(f"the task template holds {{{field}:{spec}}}: a format cannot hold a field "
                                    f"({_WHAT})")
            self.parts.append((literal, field, spec or "", conversion))

    @property
    def fields(self) -> list[str]:
        return [f for _l, f, _s, _c in self.parts if f is not None]

    def check(self, columns: Iterable[str]) -> None:
        """A UserError if the template names a column the rows do not have."""
        known = set(columns)
        for field in self.fields:
            if field not in known:
                hint = " (a Series' or a list's values are {value})" if field.isdigit() and "value" in known else ""
                raise UserError(f"the task names {{{field}}}, which no row has{hint}; columns: {sorted(known)} "
                                f"({_WHAT})")

    def render(self, values: Mapping[str, Any], label: Any) -> str:
        out = []
        for literal, field, spec, conversion in self.parts:
            out.append(literal)
            if field is None:
                continue
            try:
                value = values[field]
            except KeyError:
                self.check(values)
                raise
            if conversion is not None:
                value = repr(value) if conversion == "r" else ascii(value) if conversion == "a" else str(value)
            try:
                out.append(format(value, spec))
            except (ValueError, TypeError) as err:
                raise UserError(
                    f"the task's {{{field}:{spec}}} cannot format row {label!r}'s value {_short(value)}: {err} "
                    f"({_WHAT})"
                ) from None
        return "".join(out)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _append(template: str, values: Mapping[str, Any], single: bool) -> str:
    """A template without fields: the row's value (a Series', a list's), or its columns, after it."""
    shown = values["value"] if single else "\n".join(f"{k}: {v}" for k, v in values.items())
    return f"{template}\n\n{shown}"


def make_rows(items: Any, template: str) -> tuple[list[Row], Any]:
    """Rows from a Series, a DataFrame or any iterable, with their tasks; and the index to align results to."""
    import pandas as pd

    if not isinstance(template, str) or not template.strip():
        raise UserError("map needs a task: a non-empty string (a template like 'Label {abstract}' fills it per row)")
    parsed = Template(template)
    single = False  # one value per row (a Series, a list of plain values): appended once, not as columns
    if isinstance(items, pd.DataFrame):
        index = items.index
        columns = [str(c) for c in items.columns]
        if len(set(columns)) < len(columns):
            raise UserError(f"map needs distinct column names; these repeat as text: {columns}")
        records: Iterable[Mapping[str, Any]] = (
            dict(zip(columns, values)) for values in items.itertuples(index=False, name=None)
        )
    elif isinstance(items, pd.Series):
        index = items.index
        single = True
        label = str(items.name) if items.name is not None else "value"
        records = ({"value": v, label: v} for v in items.to_numpy(dtype=object))
    elif isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise UserError(f"map takes a Series, a DataFrame or a list of items, not {type(items).__name__}")
    else:
        listed = list(items)
        index = pd.RangeIndex(len(listed))
        records = ({str(k): v for k, v in x.items()} if isinstance(x, Mapping) else {"value": x} for x in listed)
    rows = [Row(i, key, values, "") for i, (key, values) in enumerate(zip(index, records))]
    if not rows:
        raise UserError("map needs at least one row; the input is empty")
    fields = parsed.fields
    for row in rows:
        if fields:
            row.task = parsed.render(row.values, row.key)
        else:
            row.task = _append(template, row.values, single or set(row.values) == {"value"})
    return rows, index


def asked_hash(task: str, model: str, output: Any) -> str:
    """What a row was asked, as the store keeps it: its task, the model's name and the answer's fields."""
    fields = ",".join(output.model_fields) if output is not None else ""
    return hashlib.blake2b(f"{model}\0{fields}\0{task}".encode(errors="surrogatepass"), digest_size=12).hexdigest()


def row_id(position: int, key: str, asked: str) -> str:
    """A finished row as ``done=`` names it: its position, its key (JSON) and what it was asked."""
    return to_json([position, key, asked])


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
