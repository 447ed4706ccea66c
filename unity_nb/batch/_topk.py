"""Top-k: the k best rows for a question, exact whenever the model's comparisons are consistent and its scores
are no further off than its margin and checks reach.

Two steps, each round of questions one map (so it runs at full concurrency, pauses, resumes from a store):

1. **Score** every row once, 0 to 10, with a reason: n questions. Scores are coarse (a model gives many rows the
   same score: about 90 of 1,000 tie at the top), so they cannot rank the top; they cut. Rows scored below the
   edge (the ``candidates``-th best score, k by default) minus ``margin`` (1) are out.
2. **Compare** the rest head to head, as a quickselect planned in rounds (``_select.py``): a pivot meets every
   row of its task in one round; the rows above it hold the top; a task of at most 10 rows is settled by a round
   robin; rows scored at the margin that reach the top make the next score's rows meet the k-th row. The k
   found come out in order.

So at n = 1,000 and k = 10 with ~90 rows tied at the top: about 1,300 questions (1,000 scores, ~300 comparisons)
where LOTUS's quickselect (which scores nothing) asks about 2,000 on average, and every pair 499,500
(bench/bench_topk.py). A comparison is never asked twice. ``h.questions`` counts the questions asked;
``h.bound`` is the most it will ask (n scores and ``max_comparisons``, by default 3n + k(k-1)/2 and at most every
pair): past it the plan stops, and says so. ``h.calls`` counts the model calls they took (one each, unless an
answer did not validate and was sent back).

**Inconsistency is said, never hidden.** The order is exact when the comparisons are consistent (a total order),
among the rows the scores let in: a row scored below the lowest score compared is never compared, and the summary
says how many were left out that way (``h.uncompared``; ``margin`` compares more).
A model's may not be (A over B, B over C, C over A): ``h.inconsistent`` counts the 3-cycles among the comparisons
made (the round robins ask every pair, so cycles among the rows at the top show), and the result's ``.attrs``,
the summary and the progress say so, with ``h.exact`` false.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from .._errors import UserError
from ._estimate import Estimate, combine, estimate_map
from ._operators import as_pandas, check_fields, field_free, row_texts
from ._phased import Flow, Phase, PhasedHandle
from ._registry import Operator, Param, register_operator
from ._rows import Reason, add_reason
from ._select import Selection, expected_comparisons

__all__ = ("Choice", "Score", "TopKHandle", "default_comparisons", "estimate_topk", "topk")


class Score(pydantic.BaseModel):
    """score: 0 (does not fit the question at all) to 10 (fits it exactly); reason: one sentence."""

    score: int = pydantic.Field(ge=0, le=10)
    reason: Reason


class Choice(pydantic.BaseModel):
    """better: "A" or "B", the one that fits the question better; reason: one sentence."""

    better: Literal["A", "B"]
    reason: Reason


_SCORE = ("\n\nRate this row against the question with submit_answer: a score from 0 (not at all) to 10 (exactly) "
          "and a reason.")
_COMPARE = ("{question}\n\nWhich of these two fits the question better? Answer with submit_answer: better A or B, "
            "and a reason.\n\nA:\n{a}\n\nB:\n{b}")


def default_comparisons(n: int, k: int) -> int:
    """The most comparisons top-k asks unless told (``max_comparisons``): 3 a row and k(k-1)/2, at most every
    pair. Consistent comparisons take far fewer (about 1.4 a row when every score ties)."""
    return min(n * (n - 1) // 2, 3 * n + k * (k - 1) // 2)


def _count(value: Any, what: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UserError(f"{what} takes a whole number of at least {least}, not {value!r}")


def _checked(items: Any, k: Any, question: Any, candidates: Any, margin: Any, max_comparisons: Any) -> Any:
    """The items as pandas, once the options are known good (a mistake said now, not in a phase)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"topk takes k, a whole number of at least 1, not {k!r}")
    if not isinstance(question, str) or not question.strip():
        raise UserError("topk needs a question each row is rated against, e.g. "
                        "'Which abstract is most relevant to sleep and memory?'")
    if candidates is not None:
        _count(candidates, f"candidates (rows compared head to head at least; k is {k})", k)
    _count(margin, "margin (score points below the edge whose rows are compared)", 0)
    if max_comparisons is not None:
        _count(max_comparisons, "max_comparisons", 0)
    field_free(question)
    items = as_pandas(items, "topk")
    check_fields(items, question)  # the scoring map fills it per row: a column it names that no row has, said now
    return items


class TopKHandle(PhasedHandle):
    """Top-k as one steerable operation: a scoring map, then rounds of comparisons (see the module's docstring).
    ``await h`` gives the k best rows of the input, best first, with their index; ``h.scores`` every row's score
    and reason; ``h.ranking`` the rows compared; ``h.comparisons`` every comparison; ``h.inconsistent`` the
    cycles among them; ``h.exact`` whether the order is exact; ``h.calls`` model calls."""

    kind = "topk"

    def __init__(self, items: Any, k: int, question: str, *, candidates: int | None = None, margin: int = 1,
                 max_comparisons: int | None = None, **options: Any) -> None:
        self.items = _checked(items, k, question, candidates, margin, max_comparisons)
        self.k = k
        self.question = question
        self.candidates = candidates
        """At least this many rows are compared head to head: the edge is the candidates-th best score (k)."""
        self.margin = margin
        """Rows scored up to this many points below the edge are compared too (1); 0 trusts the scores."""
        n = len(self.items)
        self.max_comparisons = default_comparisons(n, k) if max_comparisons is None else max_comparisons
        """The most comparisons asked: past it the plan stops, fills the places left from the scores, says so."""
        self.scores: Any = None
        """Every row's ``score`` and ``reason`` (missing where its row failed), once scored."""
        self.ranking: Any = None
        """The rows compared: ``score``, ``wins``, ``games`` and ``rank`` (1 = best, for the k kept), best
        first."""
        self.selection: Selection | None = None
        """The comparisons' plan and what they found (``_select.py``), once scored."""
        self.unscored = 0
        """Rows whose scoring failed (``.attrs["reasons"]`` says why): never compared, what :attr:`exact` does not
        cover (said beside it)."""
        self.given: int | None = None
        """Rows the result gives (fewer than k when fewer were scored, or comparisons they needed got no answer)."""
        self._compared: list[tuple[int, int, int, Any]] = []
        self._texts: dict[int, str] = {}
        options.setdefault("max_steps", 3)
        super().__init__(question, **options)

    @property
    def bound(self) -> int:
        """The most questions this top-k asks (``h.questions``): one per row, and ``max_comparisons``."""
        return len(self.items) + self.max_comparisons

    @property
    def inconsistent(self) -> int:
        """The cycles (A over B, B over C, C over A) among the comparisons made so far: 0 when consistent."""
        return self.selection.inconsistent if self.selection is not None else 0

    @property
    def uncompared(self) -> int:
        """Rows its scores left out without a comparison (scored below the lowest score compared): what
        :attr:`exact` does not cover."""
        return self.selection.uncompared if self.selection is not None else 0

    @property
    def exact(self) -> bool | None:
        """Whether the order is exact: every comparison it needed answered, consistently, within the bound
        (``None`` until the comparisons end). Exact among the rows the scores let in: :attr:`uncompared` rows
        scored lower and :attr:`unscored` rows (their scoring failed) were never compared, which the summary and
        ``.attrs`` say beside it."""
        sel = self.selection
        if sel is None or not (sel.done or sel.stopped):
            return None
        return sel.exact

    @property
    def comparisons(self) -> Any:
        """Every comparison made: ``round``, ``first`` and ``second`` (shown as A and B: the input's index),
        ``better`` ("A", "B", or missing where it got no answer)."""
        import pandas as pd

        labels = self.items.index
        return pd.DataFrame({
            "round": [r for r, _, _, _ in self._compared], "first": [labels[a] for _, a, _, _ in self._compared],
            "second": [labels[b] for _, _, b, _ in self._compared],
            "better": [x if x in ("A", "B") else None for _, _, _, x in self._compared],
        })

    @property
    def progress(self) -> dict[str, Any]:
        """The phased progress, with ``inconsistent`` (cycles among the comparisons so far)."""
        p = super().progress
        p["inconsistent"] = self.inconsistent
        return p

    def flow(self) -> Flow:
        scoring = yield Phase("score", self.items, self.question + _SCORE, {"output": Score})
        self.scores = scoring.results()
        import pandas as pd

        values = {i: int(v) for i, v in enumerate(self.scores["score"].to_numpy()) if not pd.isna(v)}
        self.unscored = len(self.items) - len(values)
        ranked = sorted(values, key=lambda i: (-values[i], i))  # by score, ties in input order
        sel = self.selection = Selection(ranked, [values[i] for i in ranked], self.k, candidates=self.candidates,
                                         margin=self.margin, max_comparisons=self.max_comparisons,
                                         label=self._label)
        while pairs := sel.next_round():
            compare = yield Phase(_round_name(sel.rounds), self._pair_frame(pairs), _template(self.question),
                                  {"output": Choice}, partial=True)  # a comparison without an answer is said
            answers = compare.results()
            reasons = answers.attrs.get("reasons", {})
            better = list(answers["better"])
            sel.record(pairs, better, [reasons.get(i) for i in range(len(pairs))])
            self._compared.extend((sel.rounds, a, b, x) for (a, b), x in zip(pairs, better))
        best_rows = sel.order()
        self.given = len(best_rows)
        self.ranking = self._ranked(best_rows)
        best = self.items.iloc[best_rows].copy()
        labels = self.items.index
        why: dict[Any, str | None] = {}
        ended = scoring.rows.bad  # position -> (status, reason): said as a comparison's failure is ("failed: ...")
        for row, reason in scoring.rows.reasons(len(self.items)).items():
            add_reason(why, labels[row], f"{ended[row][0]}: {reason}" if row in ended else reason)
        for row, reason in sel.failed.items():  # a label the input repeats keeps its other rows' reasons too
            add_reason(why, labels[row], f"failed: {reason}")
        best.attrs = {"reasons": why, "exact": sel.exact, "inconsistent": sel.inconsistent,
                      "cycles": [tuple(labels[r] for r in trio) for trio in sel.cycles()],
                      "comparisons": sel.asked, "uncompared": sel.uncompared, "unscored": self.unscored}
        if sel.stopped:
            best.attrs["stopped"] = sel.stopped
        return best

    def _label(self, row: int) -> Any:
        """Row ``row``'s label in the input's index, as a reason names it (a numpy scalar as its Python value)."""
        label = self.items.index[row]
        return label.item() if hasattr(label, "item") else label

    def _pair_frame(self, pairs: list[tuple[int, int]]) -> Any:
        """A round's rows: each pair's two texts (``a`` shown first, ``b``)."""
        import pandas as pd

        new = sorted({row for pair in pairs for row in pair} - self._texts.keys())
        if new:
            texts = row_texts(self.items.iloc[new], self.question)
            self._texts.update(zip(new, (text for _, text in texts)))
        return pd.DataFrame({"a": [self._texts[a] for a, _ in pairs], "b": [self._texts[b] for _, b in pairs]})

    def _ranked(self, best: list[int]) -> Any:
        import pandas as pd

        sel = self.selection
        assert sel is not None
        games: dict[int, int] = {}
        for a, _ in sel.won:
            games[a] = games.get(a, 0) + 1
        rank = {row: i + 1 for i, row in enumerate(best)}
        rows = sorted(set(games) | set(best), key=lambda r: (rank.get(r, len(best) + 1), sel.pos[r]))
        labels = self.items.index
        return pd.DataFrame(
            {"score": [sel.score[r] for r in rows], "wins": [len(sel.beats.get(r, ())) for r in rows],
             "games": [games.get(r, 0) for r in rows],
             "rank": pd.array([rank.get(r) for r in rows], dtype="Int64")},
            index=pd.Index([labels[r] for r in rows], name=labels.name),
        )

    def summary(self) -> str:
        short = f", only {self.given} given" if self.given is not None and self.given < self.k else ""
        out = (f"top {self.k} of {len(self.items)} rows{short}: {self.questions} questions (at most {self.bound}), "
               f"{self.calls} model calls")
        sel = self.selection
        if sel is None:
            return out
        said = []
        if sel.inconsistent:
            said.append(f"{sel.inconsistent} inconsistent comparison cycle(s) (A over B, B over C, C over A), e.g. "
                        f"rows {', '.join(repr(self.items.index[r]) for r in sel.cycles(1)[0])}")
        if sel.failed or sel.unsure:
            left = [f"{len(sel.failed):,} row(s) left out undecided: .attrs['reasons'] names them"
                    ] if sel.failed else []
            if sel.unsure:
                a, b = sel.unsure[0]
                left.append(f"which of rows {self._label(a)!r} and {self._label(b)!r} comes first is undecided"
                            + (f", and {len(sel.unsure) - 1} more such pair(s)" if len(sel.unsure) > 1 else ""))
            said.append(f"{sel.no_answer} comparison(s) got no answer ({'; '.join(left)})")
        if sel.stopped:
            said.append(sel.stopped)
        unscored = (f"; {self.unscored:,} row(s) got no score (.attrs['reasons'] says why) and were never compared"
                    if self.unscored else "")
        if said:
            return f"{out}; NOT exact: {'; '.join(said)}{unscored}"
        out = f"{out}; exact: its {sel.asked} comparisons were consistent"
        if sel.no_answer:  # none of them could change the rows given or their order
            out += (f" ({sel.no_answer} got no answer: between rows whose places the other answers fix, or in a "
                    "pivot's sample)")
        if sel.uncompared or self.unscored:  # what exact rests on: the scores that left those rows out
            out += f", among the rows scored {sel.floor} or more"
        if sel.uncompared:
            out += (f"; {sel.uncompared:,} row(s) scored lower were not compared (a margin above {self.margin} "
                    f"compares more)")
        return out + unscored


def _round_name(n: int) -> str:
    """The ``n``-th round of comparisons' phase: ``compare``, then ``compare2``, ``compare3``, ..."""
    return "compare" if n == 1 else f"compare{n}"


def _template(question: str) -> str:
    return _COMPARE.replace("{question}", field_free(question))


_SAMPLE_PAIRS = 50
"""Pairs of the first rows an estimate reads for the comparisons' prompts (scaled to their number)."""


def estimate_topk(items: Any, k: int, question: str, *, candidates: int | None = None, margin: int = 1,
                  max_comparisons: int | None = None, **options: Any) -> Estimate:
    """What :func:`topk` would cost, without running anything: the scoring map exactly (one question a row), and
    the comparisons its plan makes on rows like these whose scores spread evenly over 0-10 and whose comparisons
    are consistent (simulated; their prompts from pairs of the first rows). Its bound is said beside."""
    frame = _checked(items, k, question, candidates, margin, max_comparisons)
    n = len(frame)
    bound = default_comparisons(n, k) if max_comparisons is None else max_comparisons
    projected = min(bound, expected_comparisons(n, k, candidates=candidates, margin=margin))
    options.pop("max_steps", None)
    parts = [estimate_map(frame, question + _SCORE, output=Score, **options)]
    firsts = list(range(min(n, 11)))
    pairs = [(a, b) for i, a in enumerate(firsts) for b in firsts[i + 1:]][:_SAMPLE_PAIRS]
    if pairs and projected:
        import pandas as pd

        texts = [text for _, text in row_texts(frame.iloc[firsts], question)]
        sample = pd.DataFrame({"a": [texts[a] for a, _ in pairs], "b": [texts[b] for _, b in pairs]})
        parts.append(_scaled(estimate_map(sample, _template(question), output=Choice, **options), projected))
    return combine(parts, f"Top-k projected: {n:,} scores, then about {projected:,} comparisons (its plan simulated "
                          f"on {n:,} rows scored evenly over 0-10 with consistent comparisons; at most {bound:,}); "
                          "their prompts from pairs of the first rows.")


def _scaled(est: Estimate, rows: int) -> Estimate:
    """``est`` (of a sample of rows) for ``rows`` rows like them."""
    f = rows / est.rows if est.rows else 0.0  # (no pair of the sample asked: nothing to scale)
    return Estimate(
        rows=rows, input_tokens=round(est.input_tokens * f), output_tokens=est.output_per_row * rows,
        output_per_row=est.output_per_row, output_assumed=est.output_assumed, model=est.model, price=est.price,
        dollars=None if est.dollars is None else est.dollars * f,
        minutes=None if est.minutes is None else est.minutes * f, limit=est.limit, prompts=est.prompts,
    )


def topk(items: Any, k: int, question: str, *, estimate: bool = False, **options: Any) -> Any:
    """The ``k`` rows of ``items`` (a DataFrame, a Series or a list) that best fit ``question``, as one steerable
    operation; ``await h`` gives them best first, with the input's index.

    Every row is scored once (0-10); rows scored below the ``candidates``-th best score (k) minus ``margin`` (1)
    are out; the rest are compared head to head in rounds (a quickselect whose pivots meet many rows at once, round
    robins among at most 10), and the k found are ordered. Exact whenever the model's comparisons are consistent;
    where they are not (cycles), ``h.inconsistent`` counts them and ``h.exact``, ``.attrs`` and the summary say
    so. ``h.questions`` counts the questions asked, at most ``h.bound`` (n + ``max_comparisons``, by default
    3n + k(k-1)/2); ``h.calls`` the model calls they took. Rows whose scoring failed are left out, with
    ``.attrs["reasons"]`` ("failed: ...", as a row whose comparison failed), never compared (``h.unscored`` counts
    them, beside ``h.exact``); so is every row left out whose place a comparison without an answer leaves
    undecided; fewer than ``k`` rows given is said in the summary. ``resume_from=store`` keeps the
    rows an earlier run of the same ``name`` finished (each round's map, ``NAME.score``, ``NAME.compare``,
    ``NAME.compare2``, ...: the same answers plan the same rounds).
    Other options are the map's (``model``, ``concurrency``, ``rate``, ``max_steps``, ...), for every phase.
    ``estimate=True`` runs nothing and returns what it would cost."""
    if estimate:
        return estimate_topk(items, k, question, **options)
    return TopKHandle(items, k, question, **options)


def _start(items: Any, question: str, *, k: int, **options: Any) -> Any:
    """The registry's form of :func:`topk` (its text second, like every operator's)."""
    return topk(items, k, question, **options)


register_operator(Operator(
    "topk", _start,
    "The K rows that best fit QUESTION, best first: every row scored once (0-10), then the rows the scores cannot "
    "separate compared head to head (exact when the model's comparisons are consistent; h.inconsistent counts "
    "cycles). h.calls counts model calls.",
    text="QUESTION", phased=True,
    params=(
        Param("k", "count", "K, the number of rows to keep (a whole number of at least 1), after the items", "K",
              positional=True, required=True),
        Param("candidates", "count", "rows compared head to head at least (default K)."),
        Param("margin", "count", "score points below the K-th best score whose rows are compared too (default 1)."),
        Param("max_comparisons", "count", "comparisons at most (default 3 a row and K(K-1)/2)."),
    ),
))
