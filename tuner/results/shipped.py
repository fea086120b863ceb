"""The config a study ships: the one `tuner export` writes, judged, with its spec and baseline.

The choice has this one home, so the trial `tuner export` writes is the trial `tuner verify`
re-measures on a running engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tuner.errors import UserError
from tuner.measure.mixes import objective_of
from tuner.results.selection import Selection, hold, judge, select_trial
from tuner.spec.slo import SloLimit
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint, baseline_of
from tuner.trial.reading import read_study
from tuner.trial.specs import spec_for, trial_spec_id

if TYPE_CHECKING:
    import optuna


def study_points(study: optuna.Study, *, every_spec: bool = False) -> list[TrialPoint]:
    """The trials of the study's current spec (results never compare across specs), or of
    every spec it ran under."""
    read = read_study(study)
    return read.judged_all() if every_spec else read.current()


def shipped(
    study: optuna.Study,
    points: Sequence[TrialPoint],
    *,
    trial: int | None = None,
    limits: Sequence[SloLimit] = (),
    candidate: bool = False,
) -> tuple[Selection, StudySpec, TrialPoint | None]:
    """The judged choice (`--trial N`, else the best under `limits`; vLLM's defaults in its
    place when the evidence holds it back, unless `candidate`), the spec it ran under (its
    command and figures come from that spec) and that spec's baseline."""
    choice = select_trial(points, study.study_name, trial=trial, limits=limits)
    record = StudyRecord.of(study)
    spec = spec_for(record, choice.point)
    sid = trial_spec_id(record, choice.point)
    same_spec = [p for p in points if trial_spec_id(record, p) == sid]
    baseline = baseline_of(same_spec)
    # the flags that carry the gain only, unless a trial was asked for by number
    choice = judge(
        choice, same_spec, spec, objective_of(spec), record, baseline, trim=trial is None
    )
    if trial is None and not candidate:  # `--trial N` and `--candidate` ask for that config
        choice = hold(choice)
    return choice, spec, baseline


def shipped_point(study: optuna.Study, points: Sequence[TrialPoint]) -> TrialPoint | None:
    """The config `tuner export` (no options) ships, as the report's front marks it; None when
    it would ship none (no feasible trial: it says why, the report's deploy section too)."""
    try:
        return shipped(study, points)[0].point
    except UserError:
        return None
