"""The rows of a batch: what each row's task says, and the result assembled in the input's order."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import string
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Annotated, Any

import pydantic

from .._errors import UserError
from ._answer import Invalid, answer_tool, check_text_answer, output_model, parse_answer, short

__all__ = (
    "MISSING", "Invalid", "Reason", "Row", "RowSource", "Template", "add_reason", "answer_tool", "as_text",
    "asked_hash", "assemble", "check_text_answer", "finished_rows", "output_model", "parse_answer", "row_id",
    "row_key", "to_json",
)

Reason = Annotated[str, pydantic.StringConstraints(strip_whitespace=True, min_length=1)]
"""An operator's ``reason`` field: a blank one does not validate (it is sent back once, then the row fails), so no
verdict, score, choice or match comes without a reason."""

to_json = json.JSONEncoder(default=str, ensure_ascii=False).encode
_json_str = json.encoder.encode_basestring  # what to_json writes for a str (non-ASCII kept)
"""``json.dumps(value, default=str, ensure_ascii=False)`` with its encoder made once (not once per call)."""


class Row:
    """One row: its position, its key (the index label), the values its task is filled from."""

    # __weakref__: its turn hook holds it weakly (``models.weak_hook``)
    __slots__ = (
        "__weakref__", "answer", "asked", "child", "kept", "key", "position", "queued", "reason", "status", "task",
        "tokens", "told", "values",
    )

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
        self.told = 0
        """How many of the batch's interjections the row was told as it started (they are part of its cache key);
        -1 when that is not known (a row an earlier kernel submitted to the provider's Batch API: not cached)."""
        self.queued = 0
        """Requests of the running row waiting for their turn at the model (its rate limit, a server's one slot):
        while above 0 the row counts as queued, not running (``models.turn_hook``)."""

    def waits(self, waiting: bool) -> None:
        """``models.turn_hook`` of the row's loops: a request of it starts or stops waiting for its turn."""
        self.queued += 1 if waiting else -1


def row_key(key: Any) -> str:
    """A row's key as the store keeps it (JSON; labels that are not JSON as their text)."""
    kind = type(key)
    if kind is int:  # a position (a list's rows): what to_json writes, without its encoder
        return int.__repr__(key)
    if kind is str:
        return _json_str(key)
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
            if _missing(value):  # no value: said so, not 'nan' or 'None' as if it were one (nor formatted)
                out.append(MISSING)
                continue
            if conversion is not None:
                value = repr(value) if conversion == "r" else ascii(value) if conversion == "a" else str(value)
            try:
                out.append(format(value, spec))
            except (ValueError, TypeError) as err:
                raise UserError(
                    f"the task's {{{field}:{spec}}} cannot format row {label!r}'s value {short(value)}: {err} "
                    f"({_WHAT})"
                ) from None
        return "".join(out)


MISSING = "(missing)"
"""What a prompt says in place of a missing value (None, NaN, pd.NA, NaT): not its text ('nan'), as if it were one."""


def _missing(value: Any) -> bool:
    """A missing value: None, NaN (a float's, numpy's), pandas' NA or NaT."""
    if value is None:
        return True
    if type(value) is str:  # the usual cell: never missing
        return False
    try:
        return value != value or type(value).__name__ in ("NAType", "NaTType")  # NaN, NaT: not equal to themselves
    except (TypeError, ValueError):  # pd.NA's comparison is ambiguous; an array's too (not a missing value)
        return type(value).__name__ == "NAType"


def as_text(value: Any) -> str:
    """A value as a prompt shows it: its text, or :data:`MISSING` when it has none."""
    return MISSING if _missing(value) else str(value)


def _append(template: str, values: Mapping[str, Any], single: bool) -> str:
    """A template without fields: the row's value (a Series', a list's), or its columns, after it."""
    shown = as_text(values["value"]) if single else "\n".join(f"{k}: {as_text(v)}" for k, v in values.items())
    return f"{template}\n\n{shown}"


class RowSource:
    """The rows of a Series, a DataFrame or any iterable (a generator too), made one at a time as the batch starts
    them: nothing is built up front. The first row is made at once, so a template naming a column the rows lack
    (or an empty input) is refused before the batch starts. ``total`` is the number of rows when the input knows
    it (``None`` for a generator until it is used up); ``index`` the index results align to."""

    def __init__(self, items: Any, template: str) -> None:
        import pandas as pd

        if not isinstance(template, str) or not template.strip():
            raise UserError(
                "map needs a task: a non-empty string (a template like 'Label {abstract}' fills it per row)"
            )
        self.template = template
        self.parsed = Template(template)
        self._filled = bool(self.parsed.fields)  # the template names columns (else the row's values follow it)
        self.single = False  # one value per row (a Series, a list of plain values): appended once, not as columns
        self.index: Any = None
        self.total: int | None = None
        records: Iterator[tuple[Any, Mapping[str, Any]]]
        if isinstance(items, pd.DataFrame):
            self.index, self.total = items.index, len(items)
            columns = [str(c) for c in items.columns]
            if len(set(columns)) < len(columns):
                raise UserError(f"map needs distinct column names; these repeat as text: {columns}")
            records = zip(iter(items.index), (dict(zip(columns, v)) for v in items.itertuples(index=False, name=None)))
        elif isinstance(items, pd.Series):
            self.index, self.total, self.single = items.index, len(items), True
            label = str(items.name) if items.name is not None else "value"
            records = zip(iter(items.index), ({"value": v, label: v} for v in items))
        elif isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise UserError(f"map takes a Series, a DataFrame or a list of items, not {type(items).__name__}")
        else:
            if isinstance(items, Sized) and not isinstance(items, Iterator):
                self.total = len(items)
                self.index = pd.RangeIndex(self.total)
            records = enumerate(
                {str(k): v for k, v in x.items()} if isinstance(x, Mapping) else {"value": x} for x in items
            )
        self._records = records
        self.made = 0
        """Rows made so far."""
        self._buffer: collections.deque[Row] = collections.deque()
        try:
            self._buffer.append(self._make(*next(records)))
        except StopIteration:
            raise UserError("map needs at least one row; the input is empty") from None

    def _make(self, key: Any, values: Mapping[str, Any]) -> Row:
        row = Row(self.made, key, values, "")
        self.made += 1
        if self._filled:
            row.task = self.parsed.render(values, key)
            if not row.task.strip():  # a loop takes no blank task: the row fails alone, no call (not the batch)
                row.reason = (f"row {short(key)} cannot fill the task: its values make it blank "
                              f"({self.template!r} gives {row.task!r})")
            elif all([_missing(values[f]) for f in self.parsed.fields]):  # 'Is nan good?': nothing to ask about
                row.reason = (f"row {short(key)} has no value for what the task names ("
                              + ", ".join(f"{f}: {short(values[f])}" for f in self.parsed.fields) + "): not asked")
        else:
            single = self.single or (len(values) == 1 and "value" in values)
            row.task = _append(self.template, values, single)
            shown = values["value"] if single else dict(values)
            if all([_missing(v) for v in ((shown,) if single else values.values())]):
                row.reason = f"row {short(key)} has no value ({short(shown)}): not asked"
        return row

    def __iter__(self) -> Iterator[Row]:
        return self

    def __next__(self) -> Row:
        """The next row (its task filled); a row whose template cannot be filled comes with ``reason`` set."""
        if self._buffer:
            return self._buffer.popleft()
        return self._next()

    def _next(self) -> Row:
        key, values = next(self._records)
        try:
            return self._make(key, values)
        except UserError as err:  # this row's values do not fit the template: the row fails, the batch goes on
            row = Row(self.made - 1 if self.made else 0, key, values, "")
            row.reason = f"row {short(key)} cannot fill the task: {err}"
            return row

    @property
    def taken(self) -> int:
        """Rows the batch took so far (made, and not just looked at ahead): the next one taken is at this position."""
        return self.made - len(self._buffer)

    def peek(self, n: int) -> list[Row]:
        """The next ``n`` rows (fewer at the end), made now and kept until the batch takes them."""
        while len(self._buffer) < n:
            try:
                self._buffer.append(self._next())
            except StopIteration:
                break
        return list(itertools.islice(self._buffer, n))

    def index_for(self, count: int) -> Any:
        """The index results align to: the input's, or positions for an iterable without a length."""
        import pandas as pd

        return self.index if self.index is not None else pd.RangeIndex(count)


def asked_hash(task: str, model: str, output: Any, system: str | None = None) -> str:
    """What a row was asked, as the store keeps it: its task, the model's name, the answer's fields (a pydantic
    model, or its fields' names joined by commas) and the system prompt its loop was given, when it was given one
    (a row asked without one keeps the hash it had before the system prompt counted: ``done=`` of such a run still
    holds its answers)."""
    fields = output if isinstance(output, str) else ",".join(output.model_fields) if output is not None else ""
    text = f"{model}\0{fields}\0{task}" + (f"\0system\0{system}" if system else "")
    return hashlib.blake2b(text.encode(errors="surrogatepass"), digest_size=12).hexdigest()


def row_id(position: int, key: str, asked: str) -> str:
    """A finished row as ``done=`` names it: its position, its key (JSON) and what it was asked."""
    return to_json([position, key, asked])


def assemble(
    answers: Mapping[int, Any], reasons: Mapping[int, str | None], index: Any,
    output: type[pydantic.BaseModel] | None, name: str | None,
) -> Any:
    """The batch's result aligned to ``index`` (position ``i`` is ``index[i]``): a Series of answers, or a DataFrame
    of ``output``'s fields; a row without an answer is missing, and ``.attrs["reasons"]`` maps its key to why (where
the index repeats a key, the reasons of its rows without an answer, in order, joined by ``"; "``).

    A field typed ``int``, ``float``, ``bool`` or ``str`` (``Optional`` too) is a column of pandas' nullable dtype
    (``Int64``, ``Float64``, ``boolean``, ``string``): a missing row is ``<NA>`` and every other value is exact (an
    ``int`` column with a gap is not turned into floats). Other fields keep the values as they are (``object``)."""
    import pandas as pd

    n = len(index)
    if output is None:
        result: Any = pd.Series([answers.get(i) for i in range(n)], index=index, dtype=object, name=name)
    else:
        fields = output.model_fields
        rows = [a.model_dump() if (a := answers.get(i)) is not None else None for i in range(n)]
        result = pd.DataFrame(
            {c: _column([r[c] if r is not None else None for r in rows], f.annotation) for c, f in fields.items()},
            columns=list(fields),
        )
        result.index = index
    said: dict[Any, str | None] = {}
    for i, why in reasons.items():
        if i < n:
            add_reason(said, index[i], why)
    result.attrs["reasons"] = said
    return result


def add_reason(reasons: dict[Any, str | None], key: Any, why: str | None) -> None:
    """``reasons[key] = why``, where ``key`` (an index label) may name several rows: a label the input repeats keeps
    each of its rows' reasons, joined in order by ``"; "`` (``None``, a row still to come, adds nothing)."""
    earlier = reasons.get(key)
    if earlier is None:
        reasons[key] = why
    elif why is not None:
        reasons[key] = f"{earlier}; {why}"


_NULLABLE = {bool: "boolean", int: "Int64", float: "Float64", str: "string"}
"""A field's type and the nullable pandas dtype its column takes (a gap is ``<NA>``, never a float's NaN)."""


def _column(values: list[Any], annotation: Any) -> Any:
    """One field's values as a column: in its nullable dtype when the field is typed ``int``, ``float``, ``bool`` or
    ``str`` (``X | None`` too); as they are (``object``) otherwise, or when a value does not fit (an ``int`` past
    64 bits)."""
    import pandas as pd

    dtype = _NULLABLE.get(_bare(annotation))
    if dtype is not None:
        try:
            return pd.Series(pd.array(values, dtype=dtype))
        except (OverflowError, TypeError, ValueError):
            pass
    return pd.Series(values, dtype=object)  # a Series: an object array would be read as text


def _bare(annotation: Any) -> Any:
    """``X`` for ``X``, ``X | None`` and ``Optional[X]``; else the annotation itself."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def finished_rows(store: Any, name: str) -> dict[str, Any]:
    """The rows the newest run of batch ``name`` (or the run of that uid) finished, from ``store``, for ``done=``:
    ``{'[position, label, what it was asked]': answer}``. One run only: a new ``u.map`` of the same name is a new
    run; a run that continued another (``done=``) holds the rows it kept too."""
    out: dict[str, Any] = {}
    for event in store.events(name, kind="row_finished"):
        if event.status == "finished" and event.answer is not None and event.asked is not None:
            out[row_id(event.position, event.row, event.asked)] = json.loads(event.answer)
    return out
