"""The pipeline's side of prediction skips (`tuner.fidelity.predict_skip`): whether a trial
may be ruled out, the outcome of one that is, and its prediction on one that is launched.

A ruled-out trial ends PRUNED (never launched, `engine_s` 0), and the sampler is told what was
predicted: under "cannot beat the best", the calibrated predicted score as the PRUNED trial's
intermediate value and constraint `pruned` 0 (feasible as far as is known, ranked by that
score, after every measured trial); under "breaks an SLO", constraint `pruned` 1 (TPE reads
it infeasible). Why, in docs/early-stopping.md ("Prediction skips").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from tuner.fidelity.predict_skip import PredictionSkip
from tuner.runners.engine_runner import TrialRunner
from tuner.sim.model_names import known_model
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import SkipPrediction, TrialRecord

OutcomeT = TypeVar("OutcomeT")  # the pipeline's Outcome (this module is below it)

RULED_OUT = "ruled out by prediction"


def make(spec: StudySpec, runner: TrialRunner, wanted: bool) -> PredictionSkip | None:
    """The study's predictor, unless turned off (`--no-prediction-skip`,
    `pruning.prediction_skip: false`), or the study names no accelerator profile to predict
    on, or a model the simulator does not know (`tuner.sim.model_names`)."""
    if not wanted or not spec.pruning.prediction_skip:
        return None
    if not (spec.hardware.accelerator or spec.engine.flags.get("gpu")):
        return None
    if known_model(spec.engine.model) is None:
        return None
    return PredictionSkip(spec, lambda: runner.requests)


def forecast(skip: PredictionSkip | None, t: Any) -> SkipPrediction | None:
    """The trial's prediction before launch (None: off, or the simulator refuses it); never a
    reason to skip the baseline, a `--confirm` re-run or a queued config."""
    if skip is None:
        return None
    may_skip = not (t.baseline or t.queued or t.confirm_of is not None)
    return skip.judge(t.params, t.points, t.host, may_skip=may_skip)


def ruled_out(
    store: Store, t: Any, p: SkipPrediction, planned: bool
) -> tuple[TrialRecord, dict[str, float]]:
    """A launch skipped on its prediction (`t`, a TrialInput): stored, and the record and
    constraints the pipeline's outcome tells the sampler."""
    reason = f"{RULED_OUT}: {p.ruled_out}"
    store.save_trial(t.study_name, t.number, "ruled_out", result={"reason": reason})
    on_score = p.incumbent is not None
    record = TrialRecord(
        skip_prediction=p,
        pruned_reason=reason,
        pruned_score_bound=p.score if on_score else None,
        simulated=planned or None,
        engine_s=0.0,  # never launched
    )
    return record, {"pruned": 0.0 if on_score else 1.0}


def attach(outcome: OutcomeT, p: SkipPrediction | None) -> OutcomeT:
    """A launched trial keeps the prediction made before it ran (its miss calibrates the next)."""
    if p is None:
        return outcome
    record = replace(outcome.record, skip_prediction=p)  # type: ignore[attr-defined]
    return replace(outcome, record=record)  # type: ignore[type-var]
