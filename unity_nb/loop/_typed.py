"""A loop's answer typed by a pydantic model (``output=``): the schema the model is told, and the answer read
back into an instance, or what is wrong with it in words the model can act on."""

from __future__ import annotations

import json
import re
from typing import Any

import pydantic

from .._errors import UserError
from ._tools import json_schema

__all__ = ("check_output", "output_instruction", "read_output", "system_with_output")

_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```\s*$", re.S)


def check_output(output: Any) -> None:
    """``output`` must be a pydantic model class (a UserError saying so when the loop starts)."""
    if output is not None and not (isinstance(output, type) and issubclass(output, pydantic.BaseModel)):
        raise UserError(
            f"output takes a pydantic model class (class Answer(pydantic.BaseModel): ...), not {output!r}"
        )


def output_instruction(output: type[pydantic.BaseModel]) -> str:
    schema = json.dumps(json_schema(output), ensure_ascii=False)
    return (
        f"Your final answer must be one JSON object matching this JSON schema ({output.__name__}), and nothing "
        f"else: {schema}"
    )


def system_with_output(system: str | None, output: type[pydantic.BaseModel] | None) -> str | None:
    """The system prompt, with the answer's schema after it when the answer is typed."""
    if output is None:
        return system
    return f"{system}\n\n{output_instruction(output)}" if system else output_instruction(output)


def read_output(output: type[pydantic.BaseModel], value: Any) -> pydantic.BaseModel:
    """``value`` (an instance, a dict, or JSON text, perhaps in a ``json`` code fence or with words around it) as
    an ``output`` instance; a ValueError saying what is wrong otherwise."""
    if isinstance(value, output):
        return value
    if isinstance(value, str):
        text = value.strip()
        fenced = _FENCE.match(text)
        if fenced:
            text = fenced.group(1).strip()
        elif not text.startswith("{") and "{" in text and "}" in text:
            text = text[text.index("{") : text.rindex("}") + 1]  # the object inside words around it
        try:
            return output.model_validate_json(text)
        except pydantic.ValidationError as err:
            raise ValueError(_problems(err)) from None
    try:
        return output.model_validate(value)
    except pydantic.ValidationError as err:
        raise ValueError(_problems(err)) from None


def _problems(err: pydantic.ValidationError) -> str:
    parts = []
    for e in err.errors()[:5]:
        where = ".".join(str(x) for x in e.get("loc", ())) or "the answer"
        parts.append(f"{where}: {e.get('msg')}")
    return "; ".join(parts)
