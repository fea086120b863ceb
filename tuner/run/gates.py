"""The gates a trial passes before its launch, in order (`GATES`), each a `tuner.run.gate.Gate`:
an identical config measured before (reuse), vLLM's own rules, the memory precheck, the
prediction skip. A new gate is one module implementing `Gate` and one line in `GATES`.

The order is the cheapest and surest first: reuse reads the study, the rules are arithmetic,
the precheck asks the simulator's memory model, the skip simulates the whole workload.
"""

from __future__ import annotations

from dataclasses import replace

from tuner import trial as tr
from tuner.errors import RULE_REFUSALS
from tuner.fidelity.predict_skip import prediction_skip, ruled_out_record
from tuner.run.gate import GateMaker, GateSetup, Launch, refused
from tuner.run.outcome import Outcome, SavedBy, TrialInput
from tuner.runners.precheck import predict_refusal, refusal_kind
from tuner.spec.space import spec_rules
from tuner.trial import FailureKind, TrialPoint, params_key


class Reuse:
    """An earlier trial with the same parameters whose result stands for this one
    (`_is_result`): its outcome, whole, as this trial's (never for the baseline, a `--confirm`
    re-run, or a study that repeats measured configs, `trial.repeat_measured`)."""

    name: SavedBy = "reuse"

    def __init__(self, setup: GateSetup) -> None:
        self.off = setup.spec.trial.repeat_measured
        self.pruning = setup.pruning and setup.spec.pruning.enabled

    def judge(self, t: TrialInput, launch: Launch) -> Outcome | None:
        if self.off or t.confirm_of is not None or t.baseline:
            return None
        prev = _measured_before(t, pruning=self.pruning)
        return _reuse(prev) if prev is not None else None


class VllmRules:
    """vLLM's own refusals of the config's flags, on the study's platform (`spec_rules`)."""

    name: SavedBy = "rules"

    def __init__(self, setup: GateSetup) -> None:
        self.setup = setup

    def judge(self, t: TrialInput, launch: Launch) -> Outcome | None:
        why = spec_rules(self.setup.spec, launch.flags, self.setup.platform)
        return None if why is None else refused(self.setup, t, refusal_kind(why), why, self.name)


class MemoryPrecheck:
    """The simulator's prediction that the config cannot start (out of memory, or a rule the
    study cannot check: a built-in model's length); kept on `launch` even when `--no-precheck`
    launches it, so that a wrong prediction is recorded."""

    name: SavedBy = "precheck"

    def __init__(self, setup: GateSetup) -> None:
        self.setup = setup

    def judge(self, t: TrialInput, launch: Launch) -> Outcome | None:
        spec = self.setup.spec
        flags, env = launch.flags, launch.env
        launch.predicted = predict_refusal(spec.engine.model, spec.hardware, flags, env)
        if launch.predicted is None or not self.setup.precheck:
            return None
        kind, why = launch.predicted
        # the simulator also applies vLLM's rules where the study cannot (a built-in model's
        # length): such a refusal is a rule's, not a memory prediction's
        return refused(self.setup, t, kind, why, "rules" if kind in RULE_REFUSALS else self.name)


class PredictionSkip:
    """Never launch what the calibrated simulator rules out (`tuner.fidelity.predict_skip`);
    its prediction is kept on `launch` for every launched config. A queued trial (the baseline,
    a warm start, the screen's, a `--confirm` re-run) is predicted, never ruled out."""

    name: SavedBy = "prediction"

    def __init__(self, setup: GateSetup) -> None:
        self.setup = setup
        self.skip = prediction_skip(setup.spec, setup.runner, setup.prediction_skip)

    def judge(self, t: TrialInput, launch: Launch) -> Outcome | None:
        if self.skip is None:
            return None
        queued = t.baseline or t.queued or t.confirm_of is not None
        launch.forecast = self.skip.judge(t.params, t.points, t.host, may_skip=not queued)
        if launch.forecast is None or not launch.forecast.ruled_out:
            return None
        record, cons = ruled_out_record(launch.forecast, self.setup.runner.planned)
        result: dict[str, object] = {"reason": record.pruned_reason}
        self.setup.store.save_trial(t.study_name, t.number, "ruled_out", result=result)
        return Outcome("pruned", None, cons, record, saved_by=self.name)


# Every gate, in the order they are asked: a new gate is one line here.
GATES: tuple[GateMaker, ...] = (Reuse, VllmRules, MemoryPrecheck, PredictionSkip)


def _reuse(prev: TrialPoint) -> Outcome:
    """The earlier trial's result, whole (its constraints by name), as this trial's."""
    record = replace(
        prev.record,
        baseline=None,
        reused_from=prev.number,
        engine_s=0.0,  # not launched: the earlier trial's engine time is its own
        startup_s=None,
        workload_s=None,
        engine_started_at=None,
    )
    assert isinstance(prev.constraints, tr.Constraints)
    named = dict(prev.constraints.named)
    values = list(prev.values) if prev.values is not None else None
    return Outcome("reused", values, named, record, metrics=prev.metrics, saved_by="reuse")


def _measured_before(t: TrialInput, *, pruning: bool = True) -> TrialPoint | None:
    """An earlier trial with the same parameters whose result stands for this one
    (`_is_result`)."""
    key = params_key(t.params)
    for p in t.points:
        if p.number != t.number and params_key(p.params) == key and _is_result(p, pruning):
            return p
    return None


# What the engine itself says of a config at start, the same every time it is launched.
_CONFIG_REFUSALS = tr.PREDICTABLE | {FailureKind.INVALID_ARGUMENT}


def _is_result(p: TrialPoint, pruning: bool) -> bool:
    """Whether a trial's outcome may be reused for the same config: a measurement, or the
    engine's own refusal of the config at start. Never a prediction (vLLM's rules, the
    memory precheck: they are checked again, and `--no-precheck` launches), nor a crash or
    hang a re-run may not repeat; a trial stopped early only while this run stops trials
    too (`--no-pruning` measures it whole) and under the judging it was stopped under (a
    looser SLO may not have stopped it: `TrialPoint.stale_stop`)."""
    if p.status == "pruned":  # a launch ruled out on a prediction measured nothing
        return pruning and not p.stale_stop and not p.record.ruled_out
    if p.state != "COMPLETE":
        return False
    if not p.failure_kind:
        return bool(p.metrics) and not p.partial
    observed = not p.record.predicted and p.record.startup_s is None
    return observed and p.failure_kind in _CONFIG_REFUSALS
