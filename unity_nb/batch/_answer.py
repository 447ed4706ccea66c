"""A row's answer: the ``submit_answer`` tool a typed map's rows answer with, the model of its fields, and how an
answer is read (moved out of :mod:`._rows`, which re-exports these names)."""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import Iterable
from typing import Annotated, Any

import pydantic
from pydantic import WithJsonSchema

from .._errors import UserError
from ..loop import Tool, current_call

__all__ = ("Invalid", "answer_tool", "check_text_answer", "output_model", "parse_answer", "short")


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."



class Invalid:
    """A row's answer that failed validation twice: the row fails with ``reason``."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _problems(err: pydantic.ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'the answer'}: {e['msg']} (got {short(e.get('input'))})"
        for e in err.errors()
    )


_UNREAD = " unread"
"""The key :class:`_AnswerTool` hands ``submit_answer`` what made its arguments unreadable under (no field's name)."""


@dataclasses.dataclass(slots=True)
class _AnswerTool(Tool):
    """``submit_answer``: its arguments go to the tool as they came, so the tool counts every answer it cannot take
    (arguments that are not JSON, a field missing) and fails the row at the second, instead of the loop's own check
    sending them back at every step up to ``max_steps``."""

    def parse(self, arguments: str) -> dict[str, Any]:
        try:
            raw = json.loads(arguments or "{}")
        except ValueError as err:
            return {_UNREAD: f"the arguments are not JSON ({err}; got {short(arguments)})"}
        if not isinstance(raw, dict):
            return {_UNREAD: f"the arguments are not a JSON object (got {short(raw)})"}
        return raw


def answer_tool(output: type[pydantic.BaseModel]) -> Tool:
    """``submit_answer``: the tool through which a row's model gives its structured answer (it ends the row). An
    answer that does not validate (its arguments not JSON, a field missing or mistyped) is sent back once, saying what
    is wrong; a second invalid one fails the row."""
    misses: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
    names = output.model_fields

    async def submit(**fields: Any) -> str:
        call = current_call()
        problems = fields.pop(_UNREAD, None)
        if problems is None:
            try:
                value = output.model_validate({k: v for k, v in fields.items() if k in names})
            except pydantic.ValidationError as err:
                problems = _problems(err)
        if problems is not None:
            if call is None:
                raise ValueError(problems)
            misses[call.loop] = tried = misses.get(call.loop, 0) + 1
            if tried >= 2:
                reason = f"the answer did not validate twice: {problems}"
                call.loop.run.finish_with(Invalid(reason), reason)
                return reason
            raise ValueError(f"the answer does not validate: {problems}. Call submit_answer again with "
                             f"{output.__name__}'s fields as typed: {_types(output)}")
        if call is not None:
            call.loop.run.finish_with(value, value.model_dump_json())
        return "answer recorded"

    doc = output.__doc__ or ""
    description = (
        f"Give your answer for this row as {output.__name__}: {_types(output)}. "
        "Calling this ends the work on the row." + (f" {doc.strip()}" if doc.strip() and output.__doc__ != _DOC
                                                       else "")
    )
    return _AnswerTool(name="submit_answer", description=description, fn=submit, params=_loose(output),
                       ctx_param=None, is_async=True)


_LOOSE: weakref.WeakKeyDictionary[type, type[pydantic.BaseModel]] = weakref.WeakKeyDictionary()
"""``output -> _loose(output)``: made once per model class (pydantic takes about a millisecond a model; each
typed ``map`` and each operator call makes a ``submit_answer``)."""


def _loose(output: type[pydantic.BaseModel]) -> type[pydantic.BaseModel]:
    """``output``'s schema, taking any value: the tool validates the answer itself (so it counts the misses)."""
    loose = _LOOSE.get(output)
    if loose is None:
        loose = _make_loose(output)
        if loose is not output:  # a value that is its key would keep it alive
            _LOOSE[output] = loose
    return loose


def _make_loose(output: type[pydantic.BaseModel]) -> type[pydantic.BaseModel]:
    schema = output.model_json_schema()
    if "$defs" in schema:  # nested models: the schema's references need their definitions; validated as it is
        return output
    props = schema.get("properties", {})
    fields: dict[str, Any] = {
        n: (Annotated[Any, WithJsonSchema(props.get(n, {}))], ... if f.is_required() else f.default)
        for n, f in output.model_fields.items()
    }
    return pydantic.create_model(output.__name__, __doc__=output.__doc__, **fields)


def _types(output: type[pydantic.BaseModel]) -> str:
    return ", ".join(
        f"{n} ({getattr(f.annotation, '__name__', str(f.annotation))})" for n, f in output.model_fields.items()
    )


_DOC = "A row's answer, in typed fields."
_ANSWERS: dict[tuple[tuple[str, str], ...], type[pydantic.BaseModel]] = {}
"""``columns`` (its names and types) -> the answer's model (:func:`output_model`), made once for those columns. At
most 256 (emptied when full)."""
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool}
_PYDANTIC_OWN = frozenset(n for n in dir(pydantic.BaseModel) if not n.startswith("_"))
"""Names a pydantic model uses itself (``model_config``, ``model_dump``, ``json``, ``copy``, ...): no column's."""


def _reserved(name: str) -> str | None:
    """Why ``name`` cannot be a column of the answer's pydantic model (None if it can)."""
    if name.startswith("_"):
        return "starts with an underscore, which pydantic keeps for private attributes (the column would be lost)"
    if name in _PYDANTIC_OWN or name.startswith(("model_dump", "model_validate")):
        return "is a name pydantic's models use themselves"
    return None


def _instead(name: str, taken: Iterable[str]) -> str:
    """A name like ``name`` that a column may have, not among ``taken``."""
    bare = name.lstrip("_")
    for candidate in (bare, f"{bare}_", f"the_{bare}", f"{bare}_column"):
        if candidate.isidentifier() and _reserved(candidate) is None and candidate not in taken:
            return candidate
    return "answer_" + bare  # pragma: no cover - one above always fits


def _column_names(columns: Any) -> list[tuple[str, str]]:
    """``columns`` as ``[(name, type), ...]``: each name an identifier a pydantic field keeps as it is, given
    once, with a type among :data:`_TYPES`; else a UserError naming the column and what to do."""
    specs = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else list(columns)
    out: list[tuple[str, str]] = []
    for spec in specs:
        name, _, kind = spec.partition(":") if isinstance(spec, str) else (spec, "", "")
        name, kind = str(name).strip(), kind.strip() or "str"
        if not isinstance(spec, str) or not name.isidentifier() or kind not in _TYPES:
            raise UserError(
                f"columns takes names of the answer's fields, each with an optional type among "
                f"{', '.join(_TYPES)} (method,sample_size:int,score:float), not {columns!r}"
            )
        taken = [n for n, _k in out]
        why = _reserved(name)
        if why is not None:
            raise UserError(f"columns takes no column named {name!r}: it {why}; name it otherwise, "
                            f"say {_instead(name, taken)!r}")
        if name in taken:
            raise UserError(f"columns names {name!r} twice ({columns!r}): give each column once, with one type")
        out.append((name, kind))
    if not out:
        raise UserError(f"columns takes at least one name of a field, not {columns!r}")
    return out


def output_model(output: Any, columns: Iterable[str] | None) -> type[pydantic.BaseModel] | None:
    """The answer's fields: ``output`` (a pydantic model) or ``columns`` (``"method,sample_size:int,score:float"``,
    or a list of such names: a type per column among str, int, float and bool; str when none is said). A column's
    name is an identifier, given once, neither starting with ``_`` nor one pydantic's models use themselves
    (``model_dump``, ``json``, ...): each comes back as the result's column exactly as given."""
    if output is not None and columns is not None:
        raise UserError("give output= (a pydantic model) or columns=, not both")
    if output is not None:
        if not (isinstance(output, type) and issubclass(output, pydantic.BaseModel)):
            raise UserError(f"output takes a pydantic model class, not {output!r}")
        return output
    if columns is None:
        return None
    named = tuple(_column_names(columns))
    model = _ANSWERS.get(named)
    if model is not None:
        return model
    fields: dict[str, Any] = {name: (_TYPES[kind], ...) for name, kind in named}
    try:
        model = pydantic.create_model("Answer", __doc__=_DOC, **fields)
    except (TypeError, ValueError, NameError) as err:  # a name this pydantic refuses, which the checks missed
        raise UserError(f"columns {columns!r} cannot be the answer's fields ({err}); name them otherwise") from None
    lost = [n for n in fields if n not in model.model_fields]
    if lost:  # a name this pydantic treats otherwise: a column is never dropped without a word
        raise UserError(f"columns takes no column named {lost[0]!r} (pydantic would not keep it as a field); "
                        f"name it otherwise, say {_instead(lost[0], fields)!r}")
    if len(_ANSWERS) >= 256:
        _ANSWERS.clear()
    _ANSWERS[named] = model
    return model


def check_text_answer(output: type[pydantic.BaseModel]) -> Any:
    """An evaluation for a row answered in text instead of ``submit_answer``: what does not validate is said to
    the model once (``max_corrections=1``)."""

    def evaluate(answer: Any, loop: Any) -> Any:
        if isinstance(answer, output | Invalid):
            return True
        try:
            parse_answer(answer, output)
        except ValueError as err:
            return f"{err}. Answer with submit_answer, its fields as typed: {_types(output)}"
        return True

    return evaluate


def parse_answer(value: Any, output: type[pydantic.BaseModel] | None) -> Any:
    """A row's result as the batch keeps it: the model's text, or a validated ``output`` instance."""
    if isinstance(value, Invalid):
        raise ValueError(value.reason)
    if output is None or isinstance(value, output):
        return value
    try:
        if isinstance(value, dict):
            return output.model_validate(value)
        text = str(value).strip()
        if text.startswith("```"):
            text = text.strip("`").removeprefix("json").strip()
        return output.model_validate_json(text)
    except pydantic.ValidationError as err:
        raise ValueError(f"the answer is not a {output.__name__}: {_problems(err)}") from None
