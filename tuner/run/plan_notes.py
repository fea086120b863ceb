"""How far to trust `tuner plan`: whether its profile was ever fitted to this box, and how far
its predictions are off the study's measured trials (docs/preflight.md).

`tuner plan`, `tuner run --from-plan` and `tuner check` print these lines.
"""

from __future__ import annotations

from tuner.errors import UserError
from tuner.fidelity.calibration import Trust
from tuner.measure.mixes import objective_of
from tuner.run.cost import length_only_runner
from tuner.runners.plan import study_profile
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint

CALIBRATED_MARK = "calibrated on"  # in the description `tuner calibrate` writes
_WORDS = {"p99_ttft_ms": "P99 TTFT", "mean_tpot_ms": "mean TPOT", "output_throughput": "throughput"}


def calibration_note(spec: StudySpec) -> str | None:
    """A line when the plan's profile is a built-in one never fitted to this box, else None."""
    try:
        gpu = study_profile(spec)
    except UserError:
        return None
    if spec.hardware.profile is not None and CALIBRATED_MARK in gpu.description:
        return None
    return (
        f"the plan's predictions come from the built-in {gpu.name} profile, never fitted to "
        "this box (uncalibrated): SIMULATED figures that may be off by a factor; once real "
        "trials exist, `tuner calibrate` fits one (docs/simulator.md)"
    )


def accuracy_note(spec: StudySpec, record: StudyRecord, points: list[TrialPoint]) -> str | None:
    """How far the plan's predictions are off the study's measured trials
    (`Trust.profile_errors`), or None when there are none to compare. Capacity mode and
    scenario mixes measure at several rates or workloads: not compared
    (`Objective.one_run_figures`)."""
    trust = Trust(spec, points, record)
    seen = trust.observations() if objective_of(spec).one_run_figures else []
    try:
        errors = trust.profile_errors(lambda: length_only_runner(spec).requests) if seen else {}
    except UserError:
        return None
    parts = [f"{_WORDS[m]} {100 * e:.0f} %" for m, e in errors.items()]
    if not parts:
        return None
    return (
        f"the plan's predictions against the {len(seen)} measured trial(s) of study "
        f"{spec.name!r} are off by (median): {', '.join(parts)}"
    )


def plan_notes(spec: StudySpec, real: tuple[StudyRecord, list[TrialPoint]] | None) -> list[str]:
    """The lines to print before a plan is used: uncalibrated, and how far off. `real`: the
    study's stored real trials, None when it has none."""
    notes = [n for n in [calibration_note(spec)] if n]
    if real is not None:
        note = accuracy_note(spec, *real)
        if note:
            notes.append(note)
    return notes
