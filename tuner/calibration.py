"""A study's side of calibration: its measured trials as observations, its workload as the
simulator takes it, its hardware profile as the starting point. The fit itself is pure and
lives in `tuner.sim.calibrate`; `tuner calibrate` and the multi-fidelity loop call this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tuner import trials as tr
from tuner.config import StudySpec
from tuner.errors import UserError
from tuner.sim.calibrate import Calibration, Observation, SimWorkload, fit
from tuner.sim.profile_file import load_gpu
from tuner.sim.profiles import GpuProfile, load_model
from tuner.space import simulator_flags
from tuner.specs import of_current
from tuner.workload.schedule import arrival_times


def study_workload(spec: StudySpec, requests: Sequence[Any]) -> SimWorkload:
    """The study's requests and send times, as `vllm bench serve` would send them."""
    w = spec.workload
    arrivals = arrival_times(len(requests), w.request_rate, w.burstiness, w.seed)
    return SimWorkload(
        prompt_lens=tuple(r.prompt_len for r in requests),
        output_lens=tuple(r.output_len or w.random_output_len for r in requests),
        arrival_s=tuple(float(t) for t in arrivals),
        max_concurrency=w.max_concurrency,
    )


def study_profile(spec: StudySpec) -> GpuProfile:
    """The profile the study's simulator starts from: `hardware.profile`, else `hardware.gpu`."""
    if spec.hardware.accelerator is None:
        raise UserError(
            "hardware.gpu (or hardware.profile) is not set in the study file: "
            "calibration needs a profile to start from"
        )
    return load_gpu(spec.hardware.accelerator)


def observations(
    spec: StudySpec, study_attrs: Mapping[str, Any], points: Sequence[tr.TrialPoint]
) -> list[Observation]:
    """The trials an engine measured in full under the study's current spec, in trial order
    (`TrialPoint.engine_measured`: never `tuner plan`'s predictions or a stopped run)."""
    current = of_current(study_attrs, list(points))
    return [
        Observation(flags=simulator_flags(spec, p.params), metrics=dict(p.metrics), trial=p.number)
        for p in sorted(current, key=lambda p: p.number)
        if p.engine_measured
    ]


def calibrate_study(
    spec: StudySpec,
    study_attrs: Mapping[str, Any],
    points: Sequence[tr.TrialPoint],
    requests: Sequence[Any],
    **fit_options: Any,
) -> Calibration:
    """Fit the study's profile to its measured trials (`tuner.sim.calibrate.fit`'s options)."""
    return fit(
        study_profile(spec),
        observations(spec, study_attrs, points),
        model=load_model(spec.engine.model),
        workload=study_workload(spec, requests),
        **fit_options,
    )
