"""A study's side of calibration: its measured trials as observations, its workload as the
simulator takes it, its hardware profile as the starting point. The fit itself is pure and
lives in `tuner.sim.fit`; `tuner calibrate` and the multi-fidelity loop call this.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner import trial as tr
from tuner.runners.plan import study_profile, study_workload
from tuner.sim.fit import Calibration, Observation, fit
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


def calibrate_study(
    spec: StudySpec,
    study: tr.StudyRecord,
    points: Sequence[tr.TrialPoint],
    requests: Sequence[Any],
    **fit_options: Any,
) -> Calibration:
    """Fit the study's profile to its measured trials (`tuner.sim.fit.fit`'s options)."""
    return fit(
        study_profile(spec),
        observations(spec, study, points),
        model=load_model(spec.engine.model),
        workload=study_workload(spec, requests),
        **fit_options,
    )
