"""Pick the trial to ship: the best (or the one asked for) under the study's SLO or `--slo`
limits, judged once (its change against vLLM's defaults, what got worse, its verdicts, the
flags that carry its gain) for every output that shows it.

Pure: trial points in, a `Selection` out; a UserError names the closest trial when none
qualifies. Rendering it for production is `tuner.results.export`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tuner import trial as tr
from tuner.errors import UserError
from tuner.measure.modes import Objective
from tuner.results.change import (
    DefaultsComparison,
    Moved,
    against_defaults,
    moved_from_defaults,
    worse_lines,
)
from tuner.results.pareto import check_complete, check_stored
from tuner.results.recommend import Recommendation, recommendation
from tuner.results.smallest import shipped_params
from tuner.results.verdicts import Verdict, verdicts, zero_words
from tuner.spec.figures import figure
from tuner.spec.parts import Measuring
from tuner.spec.slo import SloLimit
from tuner.spec.values import Scalar
from tuner.trial import SmallestChange, StudyRecord, TrialPoint


@dataclass(frozen=True)
class Selection:
    """The trial to export and, in words, why it was picked."""

    point: TrialPoint
    why: str
    limits: tuple[SloLimit, ...] = ()
    scores: tuple[float, ...] = ()  # every measured score of this config when it was confirmed
    notes: tuple[str, ...] = ()  # configs `--confirm` found wanting (`tuner.trial.miss_notes`)
    ranked: tuple[TrialPoint, ...] = ()  # the candidates it was chosen among, best first
    # set by `judge`: the change against vLLM's defaults, and every verdict on the choice
    comparison: DefaultsComparison | None = None
    worse: tuple[str, ...] = ()  # every figure that moved against the defaults, in words
    moved: tuple[Moved, ...] = ()  # the same, as figures (`change.moved`)
    verdicts: tuple[Verdict, ...] = ()
    recommendation: Recommendation | None = None  # set by `judge`: the candidate held back?
    smallest: SmallestChange | None = None  # set by `judge`: the flags that carry the gain
    zero: str = "baseline = 0"  # set by `judge`: what a score of 0 is (`zero_words`)

    @property
    def params(self) -> dict[str, Scalar]:
        """The flags to ship: the trial's, less the changed ones that do not carry its gain."""
        return shipped_params(self.smallest, self.point)

    @property
    def held(self) -> bool:
        """The defaults are exported in place of the candidate (`hold`)."""
        rec = self.recommendation
        return rec is not None and rec.held and self.point.number != rec.candidate.number

    @property
    def candidate(self) -> TrialPoint | None:
        """Held: the best tuned config, shown beside the defaults exported in its place."""
        rec = self.recommendation
        return rec.candidate if self.held and rec is not None else None


def judge(
    choice: Selection,
    points: Sequence[TrialPoint],
    spec: Measuring,
    objective: Objective,
    study: StudyRecord | None,
    baseline: TrialPoint | None,
    *,
    trim: bool = True,
) -> Selection:
    """The choice with its change against vLLM's defaults, what got worse and its verdicts,
    computed once for every output that shows it (`best`, each `export` format, the report's
    deploy cards). `trim`: the command leaves out the changed flags that do not carry the gain
    (`tuner.results.smallest`; not for a trial asked for by number, nor under `--slo` limits
    beyond the study's own)."""
    ranked = choice.ranked or tuple(tr.ranked(points))
    found = verdicts(
        choice.point,
        points,
        spec,
        objective,
        study,
        ranked=ranked,
        notes=choice.notes,
        limits=choice.limits,
    )
    # the simulator's check, whose dropped flags `--confirm` re-measures (part of its cost)
    flags = study.smallest.get(choice.point.number) if study is not None else None
    rec = recommendation(choice.point, found, ranked, spec.trial, baseline, flags)
    comparison = against_defaults(objective, choice.point, baseline)
    # the check judged the study's own SLO: trimmed under `--slo` limits only when among them
    judged = {str(limit) for limit in spec.slo_limits()}
    trim = trim and {str(limit) for limit in choice.limits} <= judged
    change = study.smallest_of(choice.point) if study is not None and trim else None
    return replace(
        choice,
        zero=zero_words(choice.point, points),
        comparison=comparison,
        worse=tuple(worse_lines(choice.point, baseline)),
        moved=moved_from_defaults(choice.point, baseline),
        verdicts=found,
        recommendation=rec,
        smallest=change,
    )


def hold(choice: Selection) -> Selection:
    """The judged choice with vLLM's defaults in the candidate's place when its verdicts hold
    it back (`recommend.recommendation`); the candidate's change and verdicts stay beside
    them. Unchanged when nothing holds it back."""
    rec = choice.recommendation
    if rec is None or not rec.held or rec.defaults is None:
        return choice
    why = f"vLLM's defaults, in place of the best tuned config (trial {rec.candidate.number})"
    return replace(choice, point=rec.defaults, why=why)


def slo_violation(point: TrialPoint, limits: Sequence[SloLimit]) -> float:
    """Total relative distance from the limits (0 when all are met); for "closest trial"."""
    return sum(
        max(limit.violation(point.metrics), 0.0) for limit in limits if not limit.met(point.metrics)
    )


def _figures(point: TrialPoint, names: Sequence[str]) -> str:
    return ", ".join(f"{n}={figure(point.metrics[n])}" for n in names if n in point.metrics)


def select_trial(
    points: Sequence[TrialPoint],
    study_name: str,
    *,
    trial: int | None = None,
    limits: Sequence[SloLimit] = (),
) -> Selection:
    """`--trial N`; else the best-scoring healthy trial that meets every limit given (they
    replace the study file's SLO); else, with no limits, the best feasible trial. Lowest
    `score` wins (it is stored in multi-objective studies too), ties go to the earlier trial.
    When no trial qualifies, the UserError names the closest: the smallest total relative
    SLO violation. The order is `tuner.trial.ranked`'s, shared with `tuner best`: configs
    that `--confirm` re-measured rank by their mean score."""
    limits = tuple(limits)
    if limits and tr.have_capacities(points):
        # `tuner plan`'s study is re-planned by `tuner plan`, not `tuner run` (a real night)
        command = "tuner plan" if study_name.endswith(tr.PLAN_STUDY_SUFFIX) else "tuner run"
        raise UserError(
            "--slo: a capacity study's SLO chose the rates each config's search ran, so no "
            "capacity under another SLO was measured; change the study file's SLO and run "
            f"`{command} --accept-changes` (as `{command}` itself refuses the change)"
        )
    check_complete(points, study_name)
    check_stored(points, [limit.metric for limit in limits], study_name)
    if trial is not None:
        return _given(points, study_name, trial, limits)
    # With limits given, they replace the study's SLO; health constraints still hold.
    pool = [p for p in points if (p.healthy if limits else p.feasible) and p.confirm_of is None]
    in_pool = {p.number for p in pool}
    ok = tr.ranked(
        points, eligible=lambda p: p.number in in_pool and all(lim.met(p.metrics) for lim in limits)
    )
    text = ",".join(str(limit) for limit in limits)
    kind = "measured" if limits else "feasible"
    if ok:
        best = ok[0]
        why = f"best score among the {len(pool)} {kind} trials"
        if limits:
            why = f"best score among the {len(ok)} of {len(pool)} {kind} trials meeting {text}"
        runs = tuple(tr.confirmation_runs(points).get(best.number, ()))
        return Selection(best, why, limits, runs, tuple(tr.miss_notes(points)), tuple(ok))
    if pool:
        near = min(pool, key=lambda p: (slo_violation(p, limits), p.number))
        figures = _figures(near, [limit.metric for limit in limits])
        raise UserError(
            f"no {kind} trial of study {study_name!r} meets {text}; "
            f"closest is trial {near.number} ({figures})"
        )
    notes = "".join(f"; {note}" for note in tr.miss_notes(points))
    if notes and not limits:
        raise UserError(f"no feasible trial of study {study_name!r} held up{notes}")
    closest = closest_miss(points)
    if closest is None:
        raise UserError(f"no trial of study {study_name!r} was measured: nothing to export")
    raise UserError(f"no feasible trial in study {study_name!r}; {closest}")


def closest_miss(points: Sequence[TrialPoint]) -> str | None:
    """The measured trial that breaks the study's constraints least, in words: "closest is
    trial 0 (breaks p99_ttft_ms<=1: p99_ttft_ms=107.3)"; None when no trial was measured.
    `export`, `best` and the end of `tuner run` say it when no trial is feasible."""
    measured = [p for p in points if p.status == "infeasible"]
    if not measured:
        return None
    near = min(measured, key=lambda p: (sum(max(v, 0) for v in p.constraints.values()), p.number))
    broken = near.broken_constraints
    shown = _figures(near, [re.split(r"[<>]=", name)[0] for name in broken])
    return (
        f"closest is trial {near.number} (breaks {', '.join(broken)}{': ' if shown else ''}{shown})"
    )


def _given(
    points: Sequence[TrialPoint], study_name: str, number: int, limits: tuple[SloLimit, ...]
) -> Selection:
    by_number = {p.number: p for p in points}
    point = tr.config_figures(points).get(number, by_number.get(number))  # pooled if confirmed
    if point is None:
        span = f"0–{max(by_number)}" if by_number else "none"
        raise UserError(f"study {study_name!r} has no trial {number} (trials: {span})")
    if point.status == "failed":
        raise UserError(f"trial {number} failed ({point.failure}): there is no config to export")
    if point.state != "COMPLETE" or not point.metrics:
        raise UserError(f"trial {number} is {point.state.lower()}: it has no measurement")
    missed = [limit for limit in limits if not limit.met(point.metrics)]
    if missed:
        text = ", ".join(f"{_figures(point, [m.metric])} vs {m}" for m in missed)
        raise UserError(f"trial {number} does not meet the SLO: {text}")
    why = f"trial {number}, as asked"
    if point.status == "infeasible":
        broken = ", ".join(point.broken_constraints)
        why += f" (WARNING: it breaks the study's constraints: {broken})"
    notes = [n for n in tr.miss_notes(points) if n.startswith(f"trial {number} ")]
    return Selection(point, why, limits, notes=tuple(f"WARNING: {n}" for n in notes))
