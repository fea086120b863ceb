"""The deployment shapes a study tried, side by side (issue 23 §3): data-parallel replicas x
tensor-parallel size, with prefix caching on or off. Pure: trial points in, rows out; the
report and `tuner best` show them when the study tried more than one shape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.spec.figures import figure
from tuner.spec.parts import Serving
from tuner.spec.space import effective_flags
from tuner.spec.values import Params
from tuner.trial import TrialPoint, words
from tuner.trial.outcome import tally_words


@dataclass(frozen=True)
class ShapeRow:
    """Every trial of one shape: how many, how they ended, the best of them."""

    shape: str  # "2 x TP=2, prefix caching on"
    trials: int
    # how they ended, in `tuner trials`' words and order (`outcome.tally_words`): every trial
    # counted once, a config ruled out on a prediction or refused before launch among them
    ended: tuple[tuple[str, int], ...]
    best: TrialPoint | None  # the lowest score among the feasible ones
    reason: str | None  # why its trials failed (the first one's reason), when none measured

    def line(self) -> str:
        counts = ", ".join(f"{n} {w}" for w, n in self.ended)
        ended = f"{self.trials} trial(s): {counts}"
        if self.best is None:
            return f"{self.shape}: {ended}" + (f": {self.reason}" if self.reason else "")
        top = self.best
        found = top.capacity_rps
        head = (
            f"capacity {words.rate(found, top.capacity_capped, top.capacity_interval)}"
            if found is not None
            else f"score {figure(top.score, 3, sign=True)}"
        )
        return f"{self.shape}: {ended}; best trial {top.number}: {head}"


def shape_of(spec: Serving, params: Params) -> str:
    """The shape a trial's flags give its engine, in words."""
    flags = effective_flags(spec, params)

    def size(name: str) -> int:
        return int(flags.get(name) or 1)

    tp, dp = size("tensor-parallel-size"), size("data-parallel-size")
    prefix = flags.get("enable-prefix-caching", True) is not False  # on by default (V1)
    return f"{dp} x TP={tp}, prefix caching {'on' if prefix else 'off'}"


def shape_rows(spec: Serving, points: Sequence[TrialPoint]) -> list[ShapeRow]:
    """One row per shape tried, best first (feasible ones by score, then the others); [] when
    every trial had the same shape (nothing to compare)."""
    groups: dict[str, list[TrialPoint]] = {}
    for p in points:
        if p.status != "running":
            groups.setdefault(shape_of(spec, p.params), []).append(p)
    if len(groups) < 2:
        return []
    rows = []
    for shape, group in groups.items():
        feasible = [p for p in group if p.feasible and p.score is not None]
        failed = [p for p in group if p.status == "failed"]
        best = min(feasible, key=lambda p: p.score or 0.0) if feasible else None
        reason = _first_sentence(failed[0].failure) if failed and best is None else None
        ended = tuple(tally_words(group))
        rows.append(ShapeRow(shape, len(group), ended, best, reason))
    return sorted(rows, key=lambda r: (r.best is None, r.best.score if r.best else 0.0))


def _first_sentence(text: str | None) -> str | None:
    """A failure's kind and the first sentence of its reason: one line in a list of shapes."""
    return None if text is None else text.split(". ")[0].rstrip(".")


def shape_lines(spec: Serving, points: Sequence[TrialPoint]) -> list[str]:
    """The comparison in text, for `tuner best`; [] when one shape was tried."""
    rows = shape_rows(spec, points)
    if not rows:
        return []
    return ["deployment shapes tried (replicas x TP), best first:"] + [
        f"  {row.line()}" for row in rows
    ]
