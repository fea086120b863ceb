"""The `Gate` protocol: one step before a trial's launch that refuses its config or passes it.

The pipeline (`tuner.run.pipeline`) asks every gate of `tuner.run.gates.GATES`, in order, before
it starts an engine, as Optuna's study asks its `BasePruner` after each report and GuideLLM's
benchmark its `Constraint`s: the first gate that returns an `Outcome` ends the trial (nothing
is launched), and a config every gate passes is launched with what they learned (`Launch`).
A new gate is one module with a class that implements `Gate` and one line in `GATES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tuner import trial as tr
from tuner.run.outcome import Outcome, SavedBy, TrialInput, no_measurement, penalty
from tuner.runners.trial_runner import TrialRunner
from tuner.spec.parts import Measuring
from tuner.spec.values import Scalar
from tuner.store.storage import Store
from tuner.trial import SkipPrediction, TrialRecord


@dataclass(frozen=True)
class GateSetup:
    """What every gate is made with, once per pipeline: the study, its storage (a refusal
    writes the trial's row), the runner the launch would use, and the run's switches."""

    spec: Measuring
    store: Store
    runner: TrialRunner
    platform: str | None  # whose block sizes vLLM's rules check (`runners.plan.study_platform`)
    precheck: bool = True  # `--no-precheck`: the memory prediction is kept, never refuses
    pruning: bool = True  # early stopping on: a trial stopped early may be reused
    prediction_skip: bool = True  # `--no-prediction-skip`: never rule a launch out


@dataclass
class Launch:
    """What the gates learned of a config they passed, for its launch and its record: its
    engine flags and environment (as vLLM's rules read them), the memory precheck's
    prediction (kept: a wrong one is recorded, `precheck_wrong`), the prediction skip's
    (kept: its miss calibrates the next, and capacity mode starts its search around it)."""

    flags: dict[str, Scalar | None]
    env: dict[str, str]
    predicted: tuple[str, str] | None = None  # (FailureKind, reason) the simulator foresees
    forecast: SkipPrediction | None = None


class Gate(Protocol):
    """One step before a launch. Contract:

    - `name`: what a launch it saves is counted under in the run summary (`Outcome.saved_by`);
    - `judge(t, launch)`: None passes the config to the next gate (it may note what it learned
      on `launch`); an `Outcome` refuses it: the trial ends with it, no engine starts, and no
      later gate is asked. A gate that refuses stores the trial's row itself (`refused` does);
      it never starts an engine, and it judges the study as it stood when the trial started
      (`t.points`), so two workers judge alike;
    - made once per pipeline by its class called with the `GateSetup` (`GATES`); a gate a run
      turns off passes every config (it may still note what it learned).
    """

    name: SavedBy

    def judge(self, t: TrialInput, launch: Launch) -> Outcome | None: ...


GateMaker = Callable[[GateSetup], Gate]  # a gate's class, or a function that makes one


def refused(setup: GateSetup, t: TrialInput, kind: str, reason: str, by: SavedBy) -> Outcome:
    """A config refused before launch on a prediction (vLLM's rules, the memory precheck):
    its row stored, the penalty told, every constraint broken."""
    setup.store.save_trial(
        t.study_name,
        t.number,
        "predicted_infeasible",
        result={tr.FAILURE_KIND: kind, "reason": reason},
    )
    record = TrialRecord(
        failure_kind=str(kind),
        failure_reason=reason,
        predicted=True,
        simulated=setup.runner.planned,
        engine_s=0.0,  # never launched
    )
    values, cons = penalty(setup.runner.objective, t), no_measurement(setup.spec.objective)
    return Outcome("refused", values, cons, record, saved_by=by)
