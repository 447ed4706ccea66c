"""Join: the pairs of a left and a right table that meet a condition, without asking about every pair.

Blocking: each side's text (the values the template names of it) is cut into words (three letters or more,
lower case, common English words left out). A word in more than ``common`` of the right rows (10% by
default, at least 5) is too common to say anything and is ignored; every other shared word scores a pair
by its rarity (log(m / rows having it)). Each left row is asked about its ``per_left`` best-scoring right
rows (5 by default), only those sharing at least one word. So a 1,000 x 1,000 join asks at most 5,000
questions, not 1,000,000 (bench/bench_operators.py: 2,934 asked, every true pair among them, blocking in
0.02 s of CPU); ``h.pairs_asked`` and ``h.pairs_total`` say how many. ``blocking=None`` asks every
pair (n x m questions: say so knowingly).
"""

from __future__ import annotations

import collections
import math
import re
from typing import Any

import pydantic

from .._errors import UserError
from ._estimate import estimate_map
from ._map import MapHandle
from ._operators import as_pandas
from ._registry import Operator, Param, register_operator
from ._rows import Template

__all__ = ("JoinHandle", "Match", "block_pairs", "join", "words")


class Match(pydantic.BaseModel):
    """match: true if the two rows meet the condition, false if not; reason: one sentence."""

    match: bool
    reason: str


_DECIDE = "\n\nAnswer with submit_answer: match true or false, and a one-sentence reason."
_WORD = re.compile(r"[^\W_]{3,}")
_STOP = frozenset(
    "the and for are but not you all any can had her was one our out has have this that with from they will "
    "would there their what which when who how its into than then them these those were been being also such "
    "only over more most other some very about after before between both each few under while where why use "
    "used using our may might shall should could does did doing".split()
)


def words(text: str) -> set[str]:
    """The words blocking compares: three letters or more, lower case, common English words left out."""
    return {w for w in _WORD.findall(str(text).lower()) if w not in _STOP}


def block_pairs(left: list[str], right: list[str], *, per_left: int = 5, common: float = 0.1) -> list[tuple[int, int]]:
    """Positions ``(i, j)`` of the pairs worth asking: for each left text, the ``per_left`` right texts sharing the
    rarest words with it (at least one word in at most ``common`` of the right texts, and at least 5 of them)."""
    m = len(right)
    postings: dict[str, list[int]] = collections.defaultdict(list)
    for j, text in enumerate(right):
        for w in words(text):
            postings[w].append(j)
    most = max(5, int(common * m))
    weight = {w: math.log(m / len(js)) + 1e-6 for w, js in postings.items() if len(js) <= most}
    pairs: list[tuple[int, int]] = []
    for i, text in enumerate(left):
        score: dict[int, float] = collections.defaultdict(float)
        for w in words(text):
            wt = weight.get(w)
            if wt is not None:
                for j in postings[w]:
                    score[j] += wt
        best = sorted(score.items(), key=lambda item: (-item[1], item[0]))[:per_left]
        pairs.extend((i, j) for j, _s in sorted(best))
    return pairs


def _sides(template: str, names: tuple[str, str], left: Any, right: Any) -> tuple[list[str], list[str]]:
    """The columns of each side the template names (``{papers.abstract}``), checked."""
    fields = Template(template).fields
    said: tuple[list[str], list[str]] = ([], [])
    for field in fields:
        side, dot, column = field.partition(".")
        if not dot or side not in names:
            raise UserError(f"the join's task names {{{field}}}: a join's fields name a side and a column, "
                            f"{{{names[0]}.column}} or {{{names[1]}.column}}")
        frame = left if side == names[0] else right
        if column not in [str(c) for c in frame.columns]:
            raise UserError(f"the join's task names {{{field}}}, and {side} has no column {column!r}; columns: "
                            f"{[str(c) for c in frame.columns]}")
        said[names.index(side)].append(column)
    return said


def _frame(items: Any) -> Any:
    import pandas as pd

    items = as_pandas(items, "join")
    if isinstance(items, pd.Series):
        return items.to_frame(str(items.name) if items.name is not None else "value")
    return items


def _text(frame: Any, columns: list[str]) -> list[str]:
    cols = columns or [str(c) for c in frame.columns]
    data = frame.rename(columns=str)[cols]
    return [" \n".join(str(v) for v in values) for values in data.itertuples(index=False, name=None)]


class JoinHandle(MapHandle):
    """A join as one steerable batch: a map over the pairs blocking kept (see the module's docstring), each
    answering a :class:`Match`. ``await h`` gives the matched pairs: ``left`` and ``right`` (each side's index
    label) and ``reason``; ``.attrs["reasons"]`` maps a pair that failed to why. ``pairs_asked``, ``pairs_total``;
    ``verdicts`` every pair asked, indexed by (left, right)."""

    kind = "join"

    def __init__(self, left: Any, right: Any, task: str, *, names: tuple[str, str] = ("left", "right"),
                 blocking: str | None = "words", per_left: int = 5, common: float = 0.1, **options: Any) -> None:
        frame, row_task, map_options, self.pairs_total = _join_plan(left, right, task, names, blocking, per_left,
                                                                    common, options)
        self.pairs_asked = len(frame)
        """Pairs the model is asked about (after blocking)."""
        super().__init__(frame, row_task, **map_options)

    @property
    def verdicts(self) -> Any:
        """Every pair asked: ``match`` (missing where it failed) and ``reason``, indexed by (left, right);
        ``.attrs["reasons"]`` maps a pair that failed to why."""
        frame = MapHandle.results(self)
        frame["match"] = frame["match"].astype("boolean")
        return frame

    def results(self) -> Any:
        """The pairs matched so far: ``left``, ``right``, ``reason``; ``.attrs["reasons"]`` for pairs that failed."""
        import pandas as pd

        frame = self.verdicts
        found = frame[frame["match"].fillna(False).to_numpy(dtype=bool)]
        out = pd.DataFrame({"left": found.index.get_level_values(0), "right": found.index.get_level_values(1),
                            "reason": found["reason"].to_numpy()})
        out.attrs = {"reasons": dict(frame.attrs.get("reasons", {}))}
        return out


def _join_plan(left: Any, right: Any, task: str, names: Any, blocking: str | None, per_left: int, common: float,
               options: dict[str, Any]) -> tuple[Any, str, dict[str, Any], int]:
    """A join's row plan: the pairs blocking kept (a frame indexed by (left, right)), each row's task, the map's
    options, and the number of pairs there are."""
    import pandas as pd

    if not isinstance(task, str) or not task.strip():
        raise UserError("join needs a task naming both sides, e.g. "
                        "'On {papers.abstract} and {grants.aims}: is this grant funding this work?'")
    if (not isinstance(names, tuple | list) or len(names) != 2 or names[0] == names[1]
            or not all(isinstance(n, str) and n.isidentifier() for n in names)):
        raise UserError(f"names takes the two sides' names as the task writes them, e.g. ('papers', 'grants'), "
                        f"not {names!r}")
    if blocking not in ("words", None):
        raise UserError(f"blocking takes 'words' (pairs sharing rare words) or None (every pair), not {blocking!r}")
    if isinstance(per_left, bool) or not isinstance(per_left, int) or per_left < 1:
        raise UserError(f"per_left takes a whole number of at least 1, not {per_left!r}")
    if "output" in options or "columns" in options:
        raise UserError("join answers with its own fields (match, reason): it takes no output= or columns=")
    names = (names[0], names[1])
    lf, rf = _frame(left), _frame(right)
    lcols, rcols = _sides(task, names, lf, rf)
    pairs_total = len(lf) * len(rf)
    if blocking is None:
        pairs = [(i, j) for i in range(len(lf)) for j in range(len(rf))]
    else:
        pairs = block_pairs(_text(lf, lcols), _text(rf, rcols), per_left=per_left, common=common)
    if not pairs:
        raise UserError("no pair of rows shares a word that is not common: nothing to ask. Check the task's "
                        "columns, or ask every pair with blocking=None (len(left) x len(right) questions)")
    lrows = lf.rename(columns=str)
    rrows = rf.rename(columns=str)
    data: dict[str, list] = {}
    for col in dict.fromkeys(lcols):
        values = lrows[col].to_numpy(dtype=object)
        data[f"{names[0]}.{col}"] = [values[i] for i, _ in pairs]
    for col in dict.fromkeys(rcols):
        values = rrows[col].to_numpy(dtype=object)
        data[f"{names[1]}.{col}"] = [values[j] for _, j in pairs]
    index = pd.MultiIndex.from_arrays(
        [[lf.index[i] for i, _ in pairs], [rf.index[j] for _, j in pairs]], names=["left", "right"])
    frame = pd.DataFrame(data, index=index)
    if not data:  # the task names no column: each side's values follow it
        ltext, rtext = _text(lf, []), _text(rf, [])
        frame = pd.DataFrame({names[0]: [ltext[i] for i, _ in pairs], names[1]: [rtext[j] for _, j in pairs]},
                             index=index)
    options.setdefault("label", task)
    options.setdefault("max_steps", 3)
    return frame, task + _DECIDE, {**options, "output": Match}, pairs_total


def join(left: Any, right: Any, task: str, *, names: tuple[str, str] = ("left", "right"),
         blocking: str | None = "words", per_left: int = 5, common: float = 0.1, estimate: bool = False,
         **options: Any) -> Any:
    """The pairs of ``left`` and ``right`` (DataFrames, Series or lists) that meet ``task``, as one steerable batch.

    ``task`` names each side's columns as ``{left.column}`` and ``{right.column}`` (or by ``names=('papers',
    'grants')``: ``{papers.abstract}``). Blocking asks only pairs that share rare words, at most ``per_left`` (5)
    right rows per left row; ``h.pairs_asked`` and ``h.pairs_total`` say how many of the n x m were asked
    (``blocking=None`` asks all). ``await h`` gives a DataFrame of matched pairs: ``left``, ``right`` (index
    labels) and ``reason``. Other options are the map's; ``estimate=True`` runs nothing and returns what the pairs
    blocking keeps would cost."""
    if estimate:
        frame, row_task, map_options, _total = _join_plan(left, right, task, names, blocking, per_left, common,
                                                          options)
        return estimate_map(frame, row_task, **map_options)
    return JoinHandle(left, right, task, names=names, blocking=blocking, per_left=per_left, common=common, **options)


def _line_options(given: dict[str, Any], exprs: dict[str, str]) -> dict[str, Any]:
    """``%unity join LEFT RIGHT ...``: the sides are named after the expressions when both are names (the task
    writes ``{papers.abstract}``), and ``--all-pairs`` asks every pair."""
    left, right = exprs.get("items", ""), exprs.get("right", "")
    out = {k: v for k, v in given.items() if k != "all_pairs"}
    named = left.isidentifier() and right.isidentifier() and left != right
    out["names"] = (left, right) if named else ("left", "right")
    out["blocking"] = None if given.get("all_pairs") else "words"
    return out


def _start(left: Any, task: str, *, right: Any, **options: Any) -> Any:
    """The registry's form of :func:`join` (its text second, like every operator's)."""
    return join(left, right, task, **options)


register_operator(Operator(
    "join", _start,
    "The pairs of LEFT and RIGHT rows that meet TASK, which names columns as {LEFT.column} and {RIGHT.column} (On "
    "{papers.abstract} and {grants.aims}: is this grant funding this work?). Only pairs sharing rare words are asked; "
    "h.pairs_asked and h.pairs_total say how many. Await it for a DataFrame of left, right, reason.",
    params=(
        Param("right", "items", "the right items after the left ones (e.g. %unity join papers grants ...)", "RIGHT",
              positional=True, required=True),
        Param("per_left", "count", "pairs asked at most per left row, those sharing the rarest words (default 5)."),
        Param("all_pairs", "flag", "ask every pair."),
    ),
    line_options=_line_options,
))
