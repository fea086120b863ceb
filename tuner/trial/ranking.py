"""The one order of trials, the one reference trial, and `--confirm`'s re-runs (pure).

`ranked` is the order that `tuner best`, `tuner export`, the report and `--confirm` share;
`reference` is the trial every score is relative to, for the pipeline and the screen alike.

`--confirm`'s re-runs as results (issue 24, items 2 and 12; docs/objective.md, "Noise"):
every finished re-run counts, an SLO-breaking one too (`confirmation_runs`); a config with a
re-run that broke a constraint or failed is never a candidate (`confirmation_misses`, in
words `miss_notes`); and once the reference (the baseline) is re-measured, scores read
relative to its pooled figures (`pooled`, which `read_all` applies).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tuner.spec.values import Params, Scalar
from tuner.trial.point import TrialPoint, read

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial


def read_all(
    trials: Iterable[FrozenTrial], read_one: Callable[[FrozenTrial], TrialPoint] = read
) -> list[TrialPoint]:
    """Every trial (Optuna's `FrozenTrial`s, duck-typed), its score relative to its
    reference's pooled figures (`pooled`); `read_one`: how one trial is read (`read`)."""
    return pooled([read_one(t) for t in trials])


def reruns(points: Sequence[TrialPoint]) -> dict[int, list[TrialPoint]]:
    """Each config's finished `--confirm` re-runs, by the trial they re-measured (an
    interrupted re-run, or one still running, is no result). A re-run of a reused result
    re-measured the trial it reused (`origin`)."""
    by_number = {p.number: p for p in points}
    out: dict[int, list[TrialPoint]] = {}
    for p in points:
        origin = by_number.get(p.confirm_of) if p.confirm_of is not None else None
        if origin is not None and p.status != "running" and not p.interrupted:
            out.setdefault(origin_of(origin, by_number).number, []).append(p)
    return out


def origin_of(p: TrialPoint, by_number: Mapping[int, TrialPoint]) -> TrialPoint:
    """The trial whose result `p` is: itself, or the measured trial a reused result copies
    (a copy of a copy: the first)."""
    seen = {p.number}
    while p.record.reused_from is not None and p.record.reused_from in by_number:
        p = by_number[p.record.reused_from]
        if p.number in seen:
            break
        seen.add(p.number)
    return p


def _measured_reruns(points: Sequence[TrialPoint]) -> dict[int, list[TrialPoint]]:
    """Each config's `--confirm` re-runs that measured it (an SLO-breaking one too): the
    runs pooled with its first (`confirmation_runs`, `configs`)."""
    out = {
        n: [r for r in again if r.status in ("feasible", "infeasible") and r.score is not None]
        for n, again in reruns(points).items()
    }
    return {n: runs for n, runs in out.items() if runs}


def confirmation_runs(points: Sequence[TrialPoint]) -> dict[int, list[float]]:
    """Every measured score of each config that `--confirm` re-measured, the original first:
    a re-run that broke an SLO counts like any other (a failed one has no score: see
    `confirmation_misses`)."""
    by_number = {p.number: p for p in points}
    runs: dict[int, list[float]] = {}
    for number, again in _measured_reruns(points).items():
        origin = by_number[number]
        if origin.score is not None:
            runs[number] = [origin.score, *(r.score for r in again if r.score is not None)]
    return runs


@dataclass(frozen=True)
class Config:
    """One measured config (`configs`): its first trial, its figures pooled over its runs."""

    point: TrialPoint  # the first measured trial; metrics, score and status pooled
    runs: tuple[int, ...]  # the trials pooled: the first, then its `--confirm` re-runs
    reused: tuple[int, ...] = ()  # trials that reused its result (copies, not runs)


def configs(points: Sequence[TrialPoint]) -> list[Config]:
    """Each measured config once, in trial order (`tuner pareto`): reused results and
    `--confirm` re-runs are not configs of their own. A re-measured config's score is the
    mean over its runs, as `ranked` ranks it (`confirmation_runs`); each metric the
    geometric mean over the same runs (scores are log-ratios, so these are the figures that
    score that mean); and it is infeasible when a re-run broke a constraint or failed
    (`confirmation_misses`: never best either)."""
    by_number = {p.number: p for p in points}
    again, misses = _measured_reruns(points), confirmation_misses(points)
    scores = confirmation_runs(points)
    copies: dict[int, list[int]] = {}
    for p in points:
        if p.record.reused_from is not None:
            copies.setdefault(origin_of(p, by_number).number, []).append(p.number)
    out = []
    for p in points:
        if not p.measured or p.confirm_of is not None:
            continue
        runs = [p, *again.get(p.number, [])]
        point = replace(p, status="infeasible") if p.number in misses else p
        if len(runs) > 1:
            mean = sum(scores[p.number]) / len(scores[p.number]) if p.number in scores else None
            point = replace(point, metrics=_pooled_metrics(runs), score=mean)
        out.append(Config(point, tuple(r.number for r in runs), tuple(copies.get(p.number, ()))))
    return out


def config_figures(points: Sequence[TrialPoint]) -> dict[int, TrialPoint]:
    """A trial's figures, the one definition every result shows (`tuner best`, `export`,
    `pareto`, `trials`, the report): each config that `--confirm` re-measured, by its first
    trial's number, with its metrics and score pooled over its runs (`configs`); a trial
    absent here is its own single run."""
    return {c.point.number: c.point for c in configs(points) if len(c.runs) > 1}


def _pooled_metrics(runs: Sequence[TrialPoint]) -> dict[str, float]:
    """Each metric every run measured: the geometric mean (the arithmetic one where a run
    measured 0, e.g. `failed`)."""
    names = [m for m in runs[0].metrics if all(m in r.metrics for r in runs[1:])]
    out = {}
    for m in names:
        values = [float(r.metrics[m]) for r in runs]
        if len(set(values)) == 1:
            out[m] = values[0]  # exactly (8 completed every time, not 7.999999999999998)
        elif all(v > 0 for v in values):
            out[m] = math.exp(sum(math.log(v) for v in values) / len(values))
        else:
            out[m] = sum(values) / len(values)
    return out


def confirmation_misses(points: Sequence[TrialPoint]) -> dict[int, list[TrialPoint]]:
    """The re-runs of each config that broke a constraint (an SLO) or failed: such a config
    is never "best", whatever its first run scored."""
    out = {n: [r for r in again if not r.feasible] for n, again in reruns(points).items()}
    return {n: misses for n, misses in out.items() if misses}


def pooled(points: list[TrialPoint]) -> list[TrialPoint]:
    """Scores relative to the reference's pooled figures: once `--confirm` has re-measured
    the reference (the baseline), 0 is the mean over its runs, not its first run alone.

    Scores are log-ratios to the reference's first run, so against the (geometric) pool of
    its runs each score moves by the mean score of those runs: the baseline's confirmed
    mean is then 0, and a trial that scored worse than the pooled baseline reads > 0.
    """
    offsets = {
        n: sum(scores) / len(scores)
        for n, scores in confirmation_runs(points).items()
        if any(p.number == n and p.reference == n for p in points)
    }
    if not offsets:
        return points
    out = []
    for p in points:
        shift = offsets.get(p.reference) if p.reference is not None else None
        out.append(p if shift is None or p.score is None else replace(p, score=p.score - shift))
    return out


def miss_notes(points: Sequence[TrialPoint]) -> list[str]:
    """In words, each config that `--confirm` re-measured and found wanting: what its re-runs
    did, and that it is not recommended (its first run alone looked good enough)."""
    all_reruns, out = reruns(points), []
    for number, misses in sorted(confirmation_misses(points).items()):
        broke = sorted(
            {c for r in misses if r.status == "infeasible" for c in r.broken_constraints}
        )
        failed = sorted({r.failure_kind or "failed" for r in misses if r.status == "failed"})
        what = []
        if broke:
            what.append(f"broke {', '.join(broke)}")
        if failed:
            what.append(f"failed ({', '.join(failed)})")
        out.append(
            f"trial {number} is not recommended: {len(misses)} of its "
            f"{len(all_reruns[number])} --confirm re-runs {' or '.join(what)}"
        )
    return out


def ranked(
    points: Sequence[TrialPoint], eligible: Callable[[TrialPoint], bool] | None = None
) -> list[TrialPoint]:
    """Candidates best first: by the mean score over `--confirm` runs where there are some (so
    one lucky run does not win), else by the single score; ties go to the earlier trial. A
    config whose re-runs broke an SLO or failed is no candidate (`confirmation_misses`).

    Candidates are feasible trials with a score (`eligible` replaces "feasible", e.g. with an
    export-time SLO); re-measurements and reused results (copies of a candidate's result,
    its re-runs not pooled in) are never candidates themselves. Each candidate comes with its
    figures (`config_figures`): a confirmed config's pooled over its runs, judged so too.
    """
    runs, misses = confirmation_runs(points), confirmation_misses(points)
    keep = eligible or (lambda p: p.feasible)
    figures = config_figures(points)
    pool = [
        figures.get(p.number, p)
        for p in points
        if p.confirm_of is None and p.record.reused_from is None and p.number not in misses
    ]
    pool = [p for p in pool if p.score is not None and keep(p)]

    def key(p: TrialPoint) -> tuple[float, int]:
        assert p.score is not None  # the pool holds scored trials only
        scores = runs.get(p.number) or [p.score]
        return (sum(scores) / len(scores), p.number)

    return sorted(pool, key=key)


def best(points: Sequence[TrialPoint]) -> TrialPoint | None:
    top = ranked(points)
    return top[0] if top else None


def baseline_of(points: Sequence[TrialPoint], host: str | None = None) -> TrialPoint | None:
    """The measured baseline trial (of `host`, when given), if any."""
    return next((p for p in points if p.baseline and p.metrics and host in (None, p.host)), None)


def host_baselines(points: Sequence[TrialPoint]) -> dict[str, TrialPoint]:
    """Each host's measured baseline (its first), in the order the hosts first measured one."""
    out: dict[str, TrialPoint] = {}
    for p in sorted(points, key=lambda p: p.number):
        if p.baseline and p.metrics and p.host is not None:
            out.setdefault(p.host, p)
    return out


def reference(points: Sequence[TrialPoint], host: str | None = None) -> TrialPoint | None:
    """What scores are relative to: the measured baseline of this host; when vLLM's defaults
    could not be measured (refused, crashed), the first measured trial (of this host first).
    Without a host, the first baseline measured. None: nothing measured yet."""
    measured = [p for p in points if p.measured]
    if not measured:
        return None
    return min(
        measured, key=lambda p: (host is not None and p.host != host, not p.baseline, p.number)
    )


ParamsKey = tuple[tuple[str, Scalar], ...]  # a config as a comparable, hashable key


def params_key(params: Params) -> ParamsKey:
    """Parameters as a comparable key: floats from a stepped range compare as the step meant."""
    return tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in params.items()))
