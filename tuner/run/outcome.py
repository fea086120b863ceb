"""What one trial is and how it ended: `TrialInput` (the trial to evaluate, the study as it
stood), `Outcome` (what Optuna is told, what the run summary counts), and the endings every
pre-launch gate (`tuner.run.gate`) and the pipeline share: a refusal's penalty and its
constraints when nothing was measured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tuner.measure import objective as obj
from tuner.measure.modes import Objective
from tuner.runners.trial_runner import PhaseFn
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.values import Scalar
from tuner.trial import TrialPoint, TrialRecord

OutcomeKind = Literal["measured", "reused", "refused", "failed", "pruned"]
SavedBy = Literal["rules", "precheck", "reuse", "prediction"]  # a launch saved, and by what


@dataclass(frozen=True)
class Outcome:
    """How one trial ended: what Optuna is told, and what the run summary counts.

    `values` is None when there is nothing to tell (the trial then ends FAIL); `stop_study`
    says why no trial of this study can succeed (the loop stops after recording this one).
    """

    kind: OutcomeKind
    values: list[float] | None
    constraints: dict[str, float]
    record: TrialRecord  # the trial's attrs to store
    metrics: dict[str, float] | None = None
    saved_by: SavedBy | None = None
    stop_study: str | None = None

    @property
    def feasible(self) -> bool:
        return self.kind == "measured" and all(v <= 0 for v in self.constraints.values())


@dataclass(frozen=True)
class TrialInput:
    """The trial to evaluate, and the study as it stood when it was asked for."""

    study_name: str
    number: int
    params: dict[str, Scalar]
    points: list[TrialPoint]  # the trials of this spec as the trial started
    confirm_of: int | None = None
    baseline: bool = False  # vLLM's defaults, enqueued until one is measured
    queued: bool = False  # enqueued (warm start, screen, re-queue): never ruled out on a prediction
    host: str | None = None  # where it is measured: scores compare to this host's baseline
    phase: PhaseFn = field(default=lambda text: None)
    on_launch: Callable[[], None] = field(default=lambda: None)  # each engine launch


def penalty(objective: Objective, t: TrialInput) -> list[float] | None:
    """What Optuna is told of a config that measured nothing (refused, failed)."""
    measured = [p.metrics for p in t.points if p.measured]
    return objective.penalty_values(measured)


def no_measurement(objective: ObjectiveSpec) -> dict[str, float]:
    """The constraints of a trial with no measurement: every one broken."""
    return obj.constraints(objective, None)
