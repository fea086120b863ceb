"""A study's side of calibration: its measured trials as observations, its workload as the
simulator takes it, its hardware profile as the starting point. The fit itself is pure and
lives in `tuner.sim.fit`; `tuner calibrate` and the multi-fidelity loop call this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner import trial as tr
from tuner.runners.plan import study_profile, study_workload
from tuner.sim.fit import LOOP_PRIOR_WEIGHT, Calibration, Observation, fit
from tuner.sim.profiles import load_model
from tuner.spec.space import simulator_flags
from tuner.spec.study import StudySpec
from tuner.trial.specs import of_current


def observations(
    spec: StudySpec, study: tr.StudyRecord, points: Sequence[tr.TrialPoint]
) -> list[Observation]:
    """The trials an engine measured in full under the study's current spec, in trial order
    (`TrialPoint.engine_measured`: never `tuner plan`'s predictions or a stopped run)."""
    current = of_current(study, list(points))
    return [
        Observation(flags=simulator_flags(spec, p.params), metrics=dict(p.metrics), trial=p.number)
        for p in sorted(current, key=lambda p: p.number)
        if p.engine_measured
    ]


def left_out(study: tr.StudyRecord, points: Sequence[tr.TrialPoint]) -> dict[int, str]:
    """Trials of the current spec that ran on an engine but are not observations, with why."""
    out: dict[int, str] = {}
    for p in of_current(study, list(points)):
        if p.planned or p.record.reused_from is not None or p.engine_measured:
            continue
        if p.record.skip_prediction is not None and p.record.skip_prediction.ruled_out:
            out[p.number] = "never launched: ruled out by prediction"
        elif p.status == "pruned":
            out[p.number] = (
                "stopped early: its figures cover only the requests finished by the stop, "
                "and the simulator predicts the whole workload"
            )
    return out


def calibrate_study(
    spec: StudySpec,
    study: tr.StudyRecord,
    points: Sequence[tr.TrialPoint],
    requests: Sequence[Any],
    **fit_options: Any,
) -> Calibration:
    """Fit the study's profile to its measured trials (`tuner.sim.fit.fit`'s options), with
    the search loop's prior (`LOOP_PRIOR_WEIGHT`), so from one trial on, as the loop does."""
    options = {"prior_weight": LOOP_PRIOR_WEIGHT, "min_observations": 1, **fit_options}
    return fit(
        study_profile(spec),
        observations(spec, study, points),
        model=load_model(spec.engine.model),
        workload=study_workload(spec, requests),
        **options,
    )
