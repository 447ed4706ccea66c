"""Join: the pairs of a left and a right table that meet a condition, without asking about every pair, and saying
how many true pairs that may have missed.

**Blocking** (``_blocking.py``) asks each left row about its ``per_left`` (5) best right rows among those sharing a
word that is not common, scored by cosine (so a right row stuffed with other rows' words does not crowd out the
rows that share the rarest words). A 1,000 x 1,000 join asks a few thousand pairs, not 1,000,000.

**Recall, checked on every blocked join** (``_recall.py``). Beside the blocked pairs the join asks a seeded random
sample (``sample``, 500) of the pairs blocking left out: half among pairs sharing no word, half among the
candidates ranked past ``per_left``. From it, the matches missed are estimated with a 95% bound (Clopper-Pearson).
Below the recall wanted (``recall``, 0.95): if the sample's misses share words, the blocks widen (``per_left``
raised past where the misses ranked; a fresh sample checks again, three times at most); if they share none,
blocking cannot reach them and every pair not asked yet is asked. Widening and asking every pair ask at most
``max_pairs`` (100,000) pairs more; past it, the result says so and how to raise it. ``h.recall`` (a
:class:`Recall`), ``progress["recall"]`` and the result's ``.attrs["recall"]`` say what was found and missed.

**Streamed.** The handle comes back at once, whatever the sides' sizes: the right side is indexed in a worker
thread (``progress["indexed"]``), and each left row is scored as its pairs are made, so what the join holds grows
with the pairs asked, not with the input. ``blocking=None`` asks every pair (n x m questions: say so knowingly, and
with ``max_pairs`` at least n x m); ``per_left``, ``sample``, ``recall``, ``common`` and ``seed`` tune blocking and
its check, and are refused beside it.

A join is a phased operation: its maps are ``NAME.pairs`` (the blocked pairs and the sample), ``NAME.widen1``...
and ``NAME.all``; ``resume_from=store`` keeps what an earlier run of them finished (the samples are seeded:
``seed``, so a resumed join asks the same pairs).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any

import pydantic

from .._errors import UserError
from ._blocking import block_pairs, words
from ._estimate import estimate_map
from ._join_pairs import ASKED_AS, BLOCKED, FAR, NEAR, WIDENED, Asked, Listed, PairPlan, Side, sides_of
from ._map import MapHandle
from ._operators import as_pandas
from ._phased import Flow, Phase, PhasedHandle, Work
from ._recall import METHOD, Recall, estimate_recall
from ._registry import Operator, Param, register_operator
from ._rows import Reason, add_reason

__all__ = ("JoinHandle", "Match", "Recall", "block_pairs", "join", "words")


class Match(pydantic.BaseModel):
    """match: true if the two rows meet the condition, false if not; reason: one sentence."""

    match: bool
    reason: Reason


_DECIDE = "\n\nAnswer with submit_answer: match true or false, and a one-sentence reason."
_WIDENINGS = 3
"""Rounds of widening at most before the join asks every pair (or says it would not)."""
_BLOCKING_ONLY = {"per_left": (5, "--per-left"), "sample": (500, "--sample"), "recall": (0.95, "--recall"),
                  "common": (0.1, None), "seed": (0, None)}
"""The options that tune blocking and its recall check (``seed``: its samples'), with their defaults and their
``%unity join`` options: ``blocking=None`` asks every pair in order, where they change nothing (given beside it,
they are refused)."""


def _frame(items: Any) -> Any:
    """A side as a DataFrame; a list or a tuple as it is (a :class:`Listed`: no copy of ten million values)."""
    import pandas as pd

    if isinstance(items, list | tuple):
        return Listed(items)
    items = as_pandas(items, "join")
    if isinstance(items, pd.Series):
        return items.to_frame(str(items.name) if items.name is not None else "value")
    return items


def _fraction(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = math.nan
    if isinstance(value, bool) or not 0.0 < out <= 1.0:
        raise UserError(f"recall takes the share of true pairs wanted, above 0 and at most 1 (0.95), not {value!r}")
    return out


def _whole(name: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise UserError(f"{name} takes a whole number of at least {least}, not {value!r}")
    return value


def _plan(left: Any, right: Any, task: str, names: Any, blocking: Any, per_left: Any, common: Any, recall: Any,
          sample: Any, max_pairs: Any, seed: Any, options: dict[str, Any]) -> tuple[PairPlan, dict[str, Any]]:
    """A join's pairs, checked (no pair made yet), and its settings."""
    if not isinstance(task, str) or not task.strip():
        raise UserError("join needs a task naming both sides, e.g. "
                        "'On {papers.abstract} and {grants.aims}: is this grant funding this work?'")
    if (not isinstance(names, tuple | list) or len(names) != 2 or names[0] == names[1]
            or not all(isinstance(n, str) and n.isidentifier() for n in names)):
        raise UserError(f"names takes the two sides' names as the task writes them, e.g. ('papers', 'grants'), "
                        f"not {names!r}")
    if blocking not in ("words", None):
        raise UserError(f"blocking takes 'words' (pairs sharing rare words) or None (every pair), not {blocking!r}")
    given = {"per_left": per_left, "sample": sample, "recall": recall, "common": common, "seed": seed}
    if blocking is None and (said := [k for k, v in given.items() if v is not None]):
        flags = " and ".join(f"{k}=" + (f" ({_BLOCKING_ONLY[k][1]})" if _BLOCKING_ONLY[k][1] else "") for k in said)
        it = ("they", "them") if len(said) > 1 else ("it", "it")
        raise UserError(f"{flags} only apply with blocking (blocking='words', the default: blocking and its recall "
                        f"check): blocking=None (--blocking none, --all-pairs) asks every pair, where {it[0]} would "
                        f"change nothing. Leave {it[1]} out, or leave blocking as 'words'")
    per_left, sample, recall, common, seed = (_BLOCKING_ONLY[k][0] if v is None else v for k, v in given.items())
    if "output" in options or "columns" in options:
        raise UserError("join answers with its own fields (match, reason): it takes no output= or columns=")
    if "done" in options:
        raise UserError("join takes no done=: it runs several maps; resume_from=store keeps the pairs an earlier "
                        "run of the same name finished")
    settings = {"blocking": blocking, "recall": _fraction(recall), "max_pairs": _whole("max_pairs", max_pairs, 0)}
    per_left, sample = _whole("per_left", per_left, 1), _whole("sample", sample, 0)
    if isinstance(common, bool) or not isinstance(common, int | float) or not 0 < common <= 1:
        raise UserError(f"common takes the share of right rows above which a word is too common, not {common!r}")
    names = (names[0], names[1])
    lf, rf = _frame(left), _frame(right)
    if not len(lf) or not len(rf):
        raise UserError(f"join needs rows on both sides; {names[0] if not len(lf) else names[1]} is empty")
    lcols, rcols = sides_of(task, names, lf, rf)
    plan = PairPlan(Side(lf, lcols), Side(rf, rcols), names, per_left=per_left, common=float(common),
                    sample=sample if blocking else 0, seed=_whole("seed", seed, 0))
    return plan, settings


class JoinHandle(PhasedHandle):
    """A join as one steerable operation (see the module's docstring). ``await h`` gives the matched pairs: ``left``
    and ``right`` (each side's index label) and ``reason``; ``.attrs["reasons"]`` maps a pair that failed to why,
    ``.attrs["recall"]`` what the recall check found. ``recall`` (a :class:`Recall`); ``pairs_asked``,
    ``pairs_blocked``, ``pairs_total``; ``verdicts`` every pair asked, indexed by (left, right)."""

    kind = "join"

    def __init__(self, left: Any, right: Any, task: str, *, names: tuple[str, str] = ("left", "right"),
                 blocking: str | None = "words", per_left: int | None = None, common: float | None = None,
                 recall: float | None = None, sample: int | None = None, max_pairs: int = 100_000,
                 seed: int | None = None, **options: Any) -> None:
        self._pairs, settings = _plan(left, right, task, names, blocking, per_left, common, recall, sample,
                                      max_pairs, seed, options)
        self.blocking = settings["blocking"]
        self.target = settings["recall"]
        self.max_pairs = settings["max_pairs"]
        self.pairs_total = self._pairs.pairs
        """Pairs there are (n x m)."""
        if self.blocking is None and self.pairs_total > self.max_pairs:  # every pair is asked beyond blocking
            raise UserError(
                f"blocking=None asks every pair: {self.pairs_total:,} questions, more than max_pairs="
                f"{self.max_pairs:,}. Pass max_pairs={self.pairs_total} (--max-pairs {self.pairs_total}) to ask them "
                "all (estimate=True, --estimate, says what that costs), or leave blocking as 'words'")
        self._asked: list[Asked] = []  # one per phase, in order: position -> pair
        self._found = 0
        self._tallies = [0, 0, 0, 0]  # far hits, far answered, near hits, near answered (the last round's near)
        self._extra = 0  # pairs asked by widening and falling back (max_pairs bounds them)
        self._near_hits: list[tuple[int, int]] = []  # the last round's near sample's matches (where to widen to)
        self._recall = self._checking()
        self._question = task
        options.setdefault("max_steps", 3)
        super().__init__(task, **options)

    # -- what it says -----------------------------------------------------------------------------------

    @property
    def recall(self) -> Recall:
        """How many of the true pairs it found: estimate and bound, the sample behind them, whether it widened or
        asked every pair (see :class:`Recall`)."""
        return self._recall

    @property
    def pairs_asked(self) -> int:
        """Pairs the model was asked so far (blocked, sampled, widened and every pair)."""
        return sum(len(a) for a in self._asked)

    @property
    def pairs_blocked(self) -> int:
        """Pairs blocking kept (widening included)."""
        return sum(a.count(BLOCKED, WIDENED) for a in self._asked)

    @property
    def progress(self) -> dict[str, Any]:
        """The running map's progress (see :class:`PhasedHandle`), with ``pairs_asked``, ``pairs_total``,
        ``recall`` (its fields, ``text`` the line the widget shows) and, while the right side is indexed,
        ``indexed`` of ``right_rows``."""
        p = super().progress
        p.update(pairs_asked=self.pairs_asked, pairs_total=self.pairs_total, recall=self._recall.as_dict())
        index = self._pairs.index
        if self.blocking is not None and not index.ready:
            p.update(indexed=index.indexed, right_rows=self._pairs.right.n)
            if not self.done():  # the widget's line says what the wait is
                p["recall"]["text"] = (f"indexing the right side's words: {index.indexed:,} of "
                                       f"{self._pairs.right.n:,} rows; then {p['recall']['text']}")
        return p

    @property
    def verdicts(self) -> Any:
        """Every pair asked: ``match`` (missing where it failed), ``reason`` and ``asked`` (why: blocked, widened,
        sample (near), sample (far), all pairs), indexed by (left, right); ``.attrs["reasons"]`` maps a pair that
        failed to why (pairs of rows whose labels repeat: their reasons joined, in order)."""
        import numpy as np
        import pandas as pd

        frames: list = []
        reasons: dict[Any, str | None] = {}
        left, right = self._pairs.left.index, self._pairs.right.index
        for m, asked in zip(self.phases, self._asked, strict=False):
            frame = m.results()
            n = len(frame)
            li = np.frombuffer(asked.left, dtype=np.int32 if asked.left.itemsize == 4 else np.int64)[:n]
            rj = np.frombuffer(asked.right, dtype=np.int32 if asked.right.itemsize == 4 else np.int64)[:n]
            keys = pd.MultiIndex.from_arrays([left.take(li), right.take(rj)], names=["left", "right"])
            failed = frame.attrs.get("reasons", {})
            for pos, why in failed.items():
                add_reason(reasons, keys[pos], why)  # labels either side repeats: each pair's reason, in order
            if failed:  # a pair without an answer: why, in its reason column too (as a filter's verdicts say)
                said = frame["reason"].astype(object).to_numpy(copy=True)
                for pos, why in failed.items():
                    said[pos] = why or "no answer"
                frame["reason"] = pd.array(said, dtype=frame["reason"].dtype)
            frame = frame.set_axis(keys)
            frame["asked"] = np.array(ASKED_AS, dtype=object)[np.frombuffer(bytes(asked.kind[:n]), dtype=np.uint8)]
            frames.append(frame)
        if frames:
            out = pd.concat(frames)
        else:
            out = pd.DataFrame({"match": [], "reason": [], "asked": []},
                               index=pd.MultiIndex.from_arrays([[], []], names=["left", "right"]))
        out["match"] = out["match"].astype("boolean")
        out.attrs = {"reasons": reasons}
        return out

    def results(self) -> Any:
        """The pairs matched so far: ``left``, ``right``, ``reason``; ``.attrs["reasons"]`` for pairs that failed,
        ``.attrs["recall"]`` what the recall check found."""
        import pandas as pd

        frame = self.verdicts
        found = frame[frame["match"].fillna(False).to_numpy(dtype=bool)]
        out = pd.DataFrame({"left": found.index.get_level_values(0), "right": found.index.get_level_values(1),
                            "reason": found["reason"].to_numpy()})
        out.attrs = {"reasons": dict(frame.attrs["reasons"]), "recall": self._recall.as_dict()}
        return out

    @property
    def ended_badly(self) -> list:
        """Pairs that failed or stopped, over every phase, each keyed by its (left, right) labels."""
        from ._rows import Row

        out = []
        for m, asked in zip(self.phases, self._asked, strict=False):
            for r in m.rows.ended_badly:
                pos = r.position
                row = Row(pos, (self._pairs.left.index[asked.left[pos]], self._pairs.right.index[asked.right[pos]]),
                          {}, "")
                row.status, row.reason, row.child = r.status, r.reason, r.child
                out.append(row)
        return out

    def summary(self) -> str:
        return (f"{self._found} pairs matched; {self.pairs_asked:,} of {self.pairs_total:,} pairs asked; "
                f"{self._recall.text}")

    # -- the plan ---------------------------------------------------------------------------------------

    def _phase(self, name: str, items: Any, *, partial: bool = True) -> Phase:
        """A round's map; after the first, one whose every pair failed is counted (unanswered), not the join's end."""
        return Phase(name, items, self._question + _DECIDE, {"output": Match}, partial=partial)

    def _primed(self, rows: Any) -> Any:
        """``rows`` with its first row made (in the worker thread: it may read many left rows), or None if empty."""
        first = next(rows, None)
        return None if first is None else itertools.chain([first], rows)

    def _every(self, asked: Asked, stop: Any) -> Any:
        return self._primed(self._pairs.every_pair(asked))

    def _widen(self, asked: Asked, before: int, stop: Any) -> Any:
        return self._primed(self._pairs.stream(asked, before, self._pairs.k))

    def _read_all(self, asked: Asked) -> Any:
        self._pairs.left.load()
        self._pairs.right.load()
        return self._primed(self._pairs.every_pair(asked))

    def flow(self) -> Flow:
        plan = self._pairs
        if self.blocking is None:
            asked = Asked()
            rows = yield Work("read", lambda stop: self._read_all(asked))
            self._asked.append(asked)
            self._take((yield self._phase("all", rows, partial=False)))
            self._recall = self._exact()
            return self.results()
        asked = Asked()
        rows = yield Work("index", lambda stop: self._primed(plan.stream(asked, 0, plan.k)) if plan.prepare(stop)
                          else None)
        if rows is None:
            raise UserError("no pair of rows shares a word that is not common, and sample=0 asks no other: nothing "
                            "to ask. Check the task's columns, or ask every pair with blocking=None "
                            "(len(left) x len(right) questions)")
        self._asked.append(asked)
        self._take((yield self._phase("pairs", rows, partial=False)))
        while True:
            step = self._decide()
            if step is None:
                break
            asked = Asked()
            if step == "all":
                name = "all"
                rows = yield Work("all pairs", functools.partial(self._every, asked))
            else:
                before, plan.k = plan.k, int(step)
                self._tallies[2:] = [0, 0]
                name = f"widen{plan.rounds}"
                rows = yield Work(name, functools.partial(self._widen, asked, before))
            if rows is None:
                break
            self._asked.append(asked)
            self._take((yield self._phase(name, rows)))
            self._extra += len(asked)
            if step == "all":
                self._recall = self._exact()
                break
        return self.results()

    def _take(self, m: MapHandle) -> None:
        """Count what a finished map found: matches, and each sample's answers and matches."""
        import numpy as np

        asked = self._asked[-1]
        frame = m.results()
        n = len(frame)
        kinds = np.frombuffer(bytes(asked.kind[:n]), dtype=np.uint8)
        match = frame["match"]  # nullable (``boolean``): missing where the pair got no answer
        ok = match.notna().to_numpy(dtype=bool)
        hit = ok & match.fillna(False).to_numpy(dtype=bool)
        self._found += int(hit.sum())
        far, near = kinds == FAR, kinds == NEAR
        self._tallies[0] += int((hit & far).sum())
        self._tallies[1] += int((ok & far).sum())
        self._tallies[2] += int((hit & near).sum())
        self._tallies[3] += int((ok & near).sum())
        self._near_hits = [(asked.left[p], asked.right[p]) for p in np.flatnonzero(hit & near)]

    def _decide(self) -> str | int | None:
        """After a round: done (None), widen to ``k`` (an int), or ask every pair (``"all"``); ``h.recall`` says
        which and why."""
        plan = self._pairs
        strata = plan.strata(*self._tallies)
        missed, bound, estimate, lower = estimate_recall(self._found, strata)
        sampled = sum(s.sampled for s in strata)
        hits = sum(s.hits for s in strata)
        left_out = plan.pairs - self.pairs_asked
        unanswered = self._unanswered()
        unseen = sum(s.unasked for s in strata if s.unasked and not s.sampled)  # pairs the sample says nothing of
        unknown = None
        if unseen:
            tried = sum(a.count(NEAR, FAR) for a in self._asked)
            unknown = ("no pair left out was sampled" if not tried else
                       f"none of the {tried:,} sampled pairs got an answer (h.verdicts says why)" if not sampled else
                       f"no sampled pair got an answer among {unseen:,} of the pairs never asked (h.verdicts says why)")
        base = dict(status="checked" if plan.sample and estimate is not None else "not checked",
                    estimate=estimate, bound=lower,
                    missed=round(missed, 1), missed_bound=round(bound, 1), found=self._found, sampled=sampled,
                    sample_found=hits, left_out=left_out, unanswered=unanswered, target=self.target, per_left=plan.k,
                    widened=plan.rounds > 1, fallback=False, refused=None, method=METHOD)
        said = _said(self._found, missed, bound, estimate, lower, sampled, hits, left_out, unknown)
        if unanswered and not unknown:
            said += f"; {unanswered:,} pairs asked got no answer (h.verdicts says why)"
        if not self.pairs_blocked:
            said += (" (blocking kept no pair: no row shares a word that is not common with a row of the other side; "
                     "check the task's columns)")
        if not plan.sample:
            self._recall = Recall(**base, text="recall not checked (sample=0): " + said)
            return None
        if hits == 0 or (estimate is not None and estimate >= self.target):
            widened = f"; widened to {plan.k} right rows per left row" if plan.rounds > 1 else ""
            loose = (f"; a larger sample= narrows the bound (its {self.target:.0%} wanted is met by the estimate)"
                     if estimate is not None and lower is not None and lower < self.target else "")
            self._recall = Recall(**base, text=f"recall {said}{widened}{loose}")
            return None
        room = self.max_pairs - self._extra
        far_hits = self._tallies[0]
        step: str | int | None = None
        if not far_hits and plan.rounds <= _WIDENINGS and plan.k < plan.widest():
            k = self._wider(room)
            if k is not None:
                step = k
                why = f"{hits} of {sampled} sampled left-out pairs matched, each sharing words: widening to {k} " \
                      f"right rows per left row"
        if step is None:
            need = left_out
            if need <= room:
                step = "all"
                why = (f"{hits} of {sampled} sampled left-out pairs matched" +
                       (", some sharing no word with each other (blocking cannot reach them)" if far_hits else "") +
                       f": asking the {need:,} pairs never asked")
            else:
                why = (f"below the {self.target:.0%} wanted, and asking the {need:,} pairs never asked would pass "
                       f"max_pairs={self.max_pairs:,} ({self._extra:,} asked beyond blocking so far): raise it "
                       f"(max_pairs=, --max-pairs) to ask them, or lower recall=")
                base["refused"] = why
        self._recall = Recall(**base, text=f"recall {said}; {why}")
        return step

    def _wider(self, room: int) -> int | None:
        """How far to widen: past the furthest rank a sampled miss had (half as far again, at least twice as
        wide), as far as ``room`` pairs allow; None if not one more."""
        plan = self._pairs
        furthest = max(plan.rank(i, j) for i, j in self._near_hits) + 1 if self._near_hits else plan.k
        k = min(plan.widest(), max(2 * plan.k, math.ceil(1.5 * furthest)))
        if plan.added(k) > room:
            lo, hi = plan.k, k  # the widest that fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if plan.added(mid) <= room else (lo, mid - 1)
            k = lo
        return k if k > plan.k else None

    def _checking(self) -> Recall:
        plan = self._pairs
        exact = self.blocking is None
        text = ("recall exact once every pair is asked" if exact else
                f"recall: checked once the blocked pairs are asked, on a sample of up to {plan.sample} pairs "
                f"blocking leaves out" if plan.sample else "recall not checked (sample=0)")
        return Recall(status="checking" if plan.sample or exact else "not checked", estimate=None, bound=None,
                      missed=0.0, missed_bound=0.0, found=0, sampled=0, sample_found=0, left_out=self.pairs_total,
                      unanswered=0,
                      target=self.target, per_left=plan.k, widened=False, fallback=False, refused=None,
                      method=METHOD, text=text)

    def _unanswered(self) -> int:
        return sum(m.rows.counts["failed"] + m.rows.counts["stopped"] for m in self.phases)

    def _exact(self) -> Recall:
        """Every pair asked: recall 1.0 when every one answered; else unknown (any pair without an answer may be a
        match), with its bound: each such pair counted a miss."""
        failed = self._unanswered()
        unasked = self.pairs_total - self.pairs_asked
        found = self._found
        estimate: float | None = 1.0 if found else None
        bound = estimate
        if failed:
            text = (f"recall unknown: every pair asked ({self.pairs_total:,}), {found:,} matched; {failed:,} got no "
                    "answer (h.verdicts says why)")
            bound = found / (found + failed)
            if found:
                text += f": at least {bound:.1%} (each pair without an answer counted a miss)"
            estimate = None
        else:
            text = f"recall exact: every pair asked ({self.pairs_total:,}), {found:,} matched"
        if self.blocking is not None:
            text += f" (blocking and its sample had found {self._recall.found:,})"
        return dataclasses.replace(self._recall, status="exact", estimate=estimate, bound=bound, missed=0.0,
                                   missed_bound=float(failed), found=found, left_out=unasked, unanswered=failed,
                                   fallback=self.blocking is not None, refused=None, text=text)


def _said(found: int, missed: float, bound: float, estimate: float | None, lower: float | None, sampled: int,
          hits: int, left_out: int, unknown: str | None = None) -> str:
    """What the sample says, in a line; ``unknown``: why it says nothing of some pairs never asked (no estimate,
    only the bound)."""
    if unknown:
        return (f"unknown: {unknown}; {found:,} pairs matched; {hits} of {sampled:,} sampled left-out pairs matched; "
                f"at most {math.ceil(bound):,} missed at 95% among {left_out:,} pairs never asked")
    if estimate is None:
        head = "unknown: nothing matched"
    else:
        head = f"≈{estimate:.1%}" + (f" (at least {lower:.1%} at 95%)" if lower is not None else "")
    return (f"{head}: {found:,} pairs matched; {hits} of {sampled:,} sampled left-out pairs matched; "
            f"≈{missed:,.0f} missed (at most {math.ceil(bound):,} at 95%) among {left_out:,} pairs never asked")


def estimate_join(left: Any, right: Any, task: str, *, names: tuple[str, str] = ("left", "right"),
                  blocking: str | None = "words", per_left: int | None = None, common: float | None = None,
                  recall: float | None = None, sample: int | None = None, max_pairs: int = 100_000,
                  seed: int | None = None, **options: Any) -> Any:
    """What :func:`join` would cost, without running anything: the blocked pairs and the sample exactly (every left
    row is scored: this reads both sides), and what widening or asking every pair could add, said."""
    plan, settings = _plan(left, right, task, names, blocking, per_left, common, recall, sample, max_pairs, seed,
                           options)
    options.pop("max_steps", None)
    asked = Asked()
    if blocking is None:
        plan.left.load()
        plan.right.load()
        rows = plan.every_pair(asked)
        basis = "Every pair asked (blocking=None)."
    else:
        plan.prepare(None)
        rows = plan.stream(asked, 0, plan.k)
        basis = (f"The pairs blocking keeps ({plan.k} per left row at most) and a recall sample of up to {plan.sample} "
                 f"of those it leaves out; if the sample finds true pairs missed, the join widens its blocks or asks "
                 f"every pair: at most {settings['max_pairs']:,} more questions (max_pairs).")
    est = estimate_map(rows, task + _DECIDE, output=Match, **options)
    return dataclasses.replace(est, basis=basis)


def join(left: Any, right: Any, task: str, *, estimate: bool = False, **options: Any) -> Any:
    """The pairs of ``left`` and ``right`` (DataFrames, Series or lists) that meet ``task``, as one steerable
    operation; the handle comes back at once, whatever their sizes.

    ``task`` names each side's columns as ``{left.column}`` and ``{right.column}`` (or by ``names=('papers',
    'grants')``: ``{papers.abstract}``). Blocking asks only pairs that share rare words, ``per_left`` (5) right rows
    per left row; then a seeded sample of ``sample`` (500) pairs it left out checks its recall, and below
    ``recall`` (0.95) the join widens its blocks or asks every pair, at most ``max_pairs`` (100,000) more
    (``h.recall`` says what it found). ``h.pairs_asked`` and ``h.pairs_total`` say how many of the n x m were asked
    (``blocking=None`` asks all). ``await h`` gives a DataFrame of matched pairs: ``left``, ``right`` (index
    labels) and ``reason``. Other options are the map's; ``estimate=True`` runs nothing and returns what the pairs
    blocking keeps and the sample would cost."""
    if estimate:
        return estimate_join(left, right, task, **options)
    return JoinHandle(left, right, task, **options)


def _line_options(given: dict[str, Any], exprs: dict[str, str]) -> dict[str, Any]:
    """``%unity join LEFT RIGHT ...``: the sides are named after the expressions when both are names (the task
    writes ``{papers.abstract}``), ``--blocking none`` (or ``--all-pairs``) asks every pair, ``--blocking words``
    (the default) blocks, ``--recall 0.99`` is a share."""
    left, right = exprs.get("items", ""), exprs.get("right", "")
    out = {k: v for k, v in given.items() if k not in ("all_pairs", "blocking")}
    named = left.isidentifier() and right.isidentifier() and left != right
    out["names"] = (left, right) if named else ("left", "right")
    said = given.get("blocking")
    blocking = "none" if given.get("all_pairs") else "words"
    if said is not None:
        blocking = said.strip().lower()
        if blocking not in ("words", "none"):
            raise UserError(f"blocking takes words (only pairs sharing rare words) or none (every pair), not {said!r}")
        if given.get("all_pairs") and blocking == "words":
            raise UserError("--all-pairs asks every pair and --blocking words only pairs sharing rare words: give one "
                            "of them")
    out["blocking"] = None if blocking == "none" else "words"
    if "recall" in out:
        out["recall"] = _fraction(out["recall"])
    return out


def _start(left: Any, task: str, *, right: Any, **options: Any) -> Any:
    """The registry's form of :func:`join` (its text second, like every operator's)."""
    return join(left, right, task, **options)


register_operator(Operator(
    "join", _start,
    "The pairs of LEFT and RIGHT rows that meet TASK, which names columns as {LEFT.column} and {RIGHT.column} (On "
    "{papers.abstract} and {grants.aims}: is this grant funding this work?). Only pairs sharing rare words are asked, "
    "then a sample of the others checks the recall (h.recall); below --recall the blocks widen or every pair is "
    "asked. Await it for a DataFrame of left, right, reason.",
    phased=True,
    params=(
        Param("right", "items", "the right items after the left ones (e.g. %unity join papers grants ...)", "RIGHT",
              positional=True, required=True),
        Param("per_left", "count", "pairs asked at most per left row, those sharing the rarest words (default 5)."),
        Param("recall", "text", "the share of true pairs wanted (default 0.95): below it, as the sample of left-out "
              "pairs estimates, the blocks widen or every pair is asked.", "SHARE"),
        Param("sample", "whole", "left-out pairs asked to check the recall (default 500; 0 checks none)."),
        Param("max_pairs", "whole", "pairs asked at most beyond blocking, to widen or ask every pair (default "
              "100000); with --blocking none, at least every pair (LEFT rows x RIGHT rows)."),
        Param("blocking", "text", "words (the default): only pairs sharing rare words are asked, a sample checks the "
              "recall; none: every pair (as --all-pairs).", "words|none"),
        Param("all_pairs", "flag", "ask every pair (--blocking none)."),
    ),
    line_options=_line_options,
))
