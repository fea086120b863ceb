"""One trial as a pipeline: the gates before a launch (`tuner.run.gates.GATES`: reuse, vLLM's
rules, the memory precheck, the prediction skip), then measure, then score. It returns an
`Outcome` value; the loop (`tuner.run.loop`) tells Optuna.

The pipeline reads the study so far as `TrialPoint`s (what was measured, the baseline's
figures) and writes only our own tables (the trial's argv and request records, the engine's
identity for recovery). It never asks whether the engine is simulated.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import replace
from typing import TYPE_CHECKING

from tuner import trial as tr
from tuner.errors import BOX_FAULTS
from tuner.fidelity.predict_skip import capacity_bracket
from tuner.measure.measurement import Measurement
from tuner.run.box_faults import GpuFaults, busy_stop
from tuner.run.gate import GateSetup, Launch
from tuner.run.gates import GATES
from tuner.run.outcome import Outcome, TrialInput, no_measurement, penalty
from tuner.runners.load_runs import capacity_to_beat
from tuner.runners.plan import study_platform
from tuner.runners.precheck import precheck_wrong
from tuner.runners.trial_runner import Checkpoint, TrialContext, TrialRunner
from tuner.spec.space import effective_flags, engine_env
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import FailureKind, TrialPoint, TrialRecord, params_key, scoring
from tuner.trial.payloads import StartupPhases

if TYPE_CHECKING:
    from tuner.engine.process import EngineIdentity

# An engine's words for a flag it does not know: argparse's (vLLM), click's (tuner sim serve).
_UNKNOWN_FLAG = re.compile(r"unrecognized arguments|No such option: --")


class TrialPipeline:
    """Evaluate one parameter set of a study, from reuse to score."""

    def __init__(
        self,
        spec: StudySpec,
        store: Store,
        runner: TrialRunner,
        *,
        precheck: bool = True,
        pruning: bool = True,
        prediction_skip: bool = True,
    ) -> None:
        self.spec, self.store, self.runner = spec, store, runner
        self.objective = runner.objective  # the study's, built once by its runner
        self.pruning = pruning and spec.pruning.enabled
        platform = study_platform(spec)  # whose block sizes vLLM's rules check
        setup = GateSetup(spec, store, runner, platform, precheck, pruning, prediction_skip)
        self.gates = [make(setup) for make in GATES]
        self.gpu_faults = GpuFaults()  # this run's configs a GPU fault hit

    def evaluate(self, t: TrialInput) -> Outcome:
        launch = Launch(effective_flags(self.spec, t.params), engine_env(self.spec, t.params))
        for gate in self.gates:  # the first gate that refuses ends the trial
            refusal = gate.judge(t, launch)
            if refusal is not None:
                return refusal
        forecast = launch.forecast  # kept: its miss calibrates; where a capacity search starts
        outcome = self._launch(
            t, launch.predicted, capacity_bracket(self.spec, self.objective, forecast)
        )
        return replace(outcome, record=replace(outcome.record, skip_prediction=forecast))

    def _launch(
        self,
        t: TrialInput,
        predicted: tuple[str, str] | None,
        bracket: tuple[float, float] | None = None,
    ) -> Outcome:
        m = self.runner.measure(self._context(t, bracket))
        wrong = precheck_wrong(predicted, m)
        if m.pruned_reason:
            return self._pruned(t, m)
        if m.metrics is None:
            return self._failed(t, m, wrong)
        return self._measured(t, m, wrong)

    def _context(self, t: TrialInput, bracket: tuple[float, float] | None = None) -> TrialContext:
        name, number = t.study_name, t.number
        # measured whole: a reference (the baseline, a `--confirm` re-run), or no early stopping
        whole = t.baseline or t.confirm_of is not None or not self.pruning

        def started(ident: EngineIdentity, log: str) -> None:
            self.store.engine_started(name, number, ident, log)
            t.on_launch()

        return TrialContext(
            name,
            number,
            t.params,
            t.phase,
            on_engine_started=started,
            on_engine_stopped=lambda: self.store.engine_stopped(name, number),
            checkpoint=self._stop_rule(t),
            checkpoints={name: self._stop_rule(t, name) for name in self.spec.workloads},
            check_every_s=self.spec.pruning.check_every_s,
            check_every_requests=self.spec.pruning.check_every_requests,
            beat=None if whole else capacity_to_beat(self.objective, t.points, t.host),
            bracket=bracket,
        )

    def _stop_rule(self, t: TrialInput, scenario: str = "") -> Checkpoint | None:
        """Early stopping for this trial (never the baseline or a `--confirm` re-run: they are
        references, measured whole), or for one scenario's run. None: never stop. A
        scenario's run or a capacity step has only the SLO rule: no incumbent compares."""
        from tuner.measure import pruning

        o = self.spec.objective
        stop = self.objective.early_stop(t.baseline or t.confirm_of is not None)
        if not self.pruning or stop is None:
            return None
        ref, top = tr.reference(t.points, t.host), tr.best(t.points)
        one_run = stop == "incumbent"
        compared = (ref, top) if one_run and ref is not None and top is not None else None
        rule = pruning.study_rule(
            self.spec.pruning,
            self.spec.slo_limits(scenario or None),
            weights=o.weights if compared else None,
            reference=compared[0].metrics if compared else None,
            incumbent=_unpooled(compared[1], compared[0]) if compared else None,
            expected_s=_workload_s(t.points) if one_run else None,
        )
        return lambda snap: pruning.decide(snap, rule)

    # Endings ------------------------------------------------------------------------------

    def _save(self, t: TrialInput, outcome: str, m: Measurement, result: dict[str, object]) -> None:
        """The trial's row and request records (one transaction), before Optuna is told."""
        self.store.save_trial(
            t.study_name,
            t.number,
            outcome,
            argv=m.argv,
            env=m.env,
            vllm_version=m.vllm_version,
            log_path=m.log_path,
            startup_s=m.startup_s,
            workload_s=m.workload_s,
            result=result,
            records=m.records,
        )

    def _failed(self, t: TrialInput, m: Measurement, wrong: str | None) -> Outcome:
        key = params_key(t.params)
        result = {tr.FAILURE_KIND: m.failure_kind, "reason": m.failure_reason}
        self._save(t, "failed", m, {**result, "log_tail": m.log_tail})
        record = TrialRecord(
            failure_kind=m.failure_kind,
            failure_reason=m.failure_reason,
            log_path=m.log_path,
            startup_s=m.startup_s,  # None: the engine never became ready
            workload_s=m.workload_s if m.engine_s else None,
            engine_s=m.engine_s,
            simulated=m.simulated or self.runner.planned,
            predicted=False,
            vllm_version=m.vllm_version or None,
            precheck_wrong=wrong or None,
            box_waits=m.box_waits or None,
            gpu_faults=m.gpu_faults or None,
        )
        # the box's state (docs/reliability.md): told as nothing, and the run stops
        box = busy_stop(m, self.spec.trial.busy_wait_s) or self.gpu_faults.stop(key, m)
        if box is not None and m.failure_kind in BOX_FAULTS:
            return Outcome(
                "failed", None, no_measurement(self.spec.objective), record, stop_study=box
            )
        stop = None  # a GPU fault on this config alone: the config's failure, told as one
        if m.failure_kind == FailureKind.INVALID_ARGUMENT and _UNKNOWN_FLAG.search(
            m.failure_reason or ""
        ):
            # No tuned value can fix a flag the engine does not know: every trial would fail.
            stop = f"the engine does not accept its command line: {m.failure_reason}"
        values, cons = penalty(self.objective, t), no_measurement(self.spec.objective)
        return Outcome("failed", values, cons, record, stop_study=stop)

    def _pruned(self, t: TrialInput, m: Measurement) -> Outcome:
        """Stopped early: the partial figures, labelled partial; never a candidate."""
        metrics = {k: float(v) for k, v in (m.metrics or {}).items() if tr.is_finite(v)}
        self._save(t, "pruned", m, {**metrics, "reason": m.pruned_reason})
        gauges, decision = m.pruned_engine, m.pruned_decision
        bound = getattr(decision, "score_bound", None)
        record = replace(
            self._run_record(m),
            metrics=metrics,
            partial=True,
            pruned_reason=m.pruned_reason,
            pruned_at_s=m.pruned_at_s,
            engine_full_s=m.engine_full_s,
            pruned_queue_waiting=gauges.waiting if gauges is not None else None,
            pruned_kv_cache_usage=gauges.kv_cache_usage if gauges is not None else None,
            pruned_preemptions=gauges.preemptions if gauges is not None else None,
            pruned_score_bound=bound,
            pruned_sent_fraction=getattr(decision, "sent_fraction", None),
            pruned_backlog_bound_ms=getattr(decision, "backlog_bound_ms", None),
        )
        return Outcome("pruned", None, _censored(decision), record, metrics=metrics)

    def _run_record(self, m: Measurement) -> TrialRecord:
        """What every trial with a workload run records about its engine and timings."""
        return TrialRecord(
            simulated=m.simulated or self.runner.planned,
            vllm_version=m.vllm_version or "unknown",
            log_path=m.log_path,
            startup_s=m.startup_s,
            workload_s=m.workload_s,
            engine_s=m.engine_s,
            prefix_cache_runs=tuple(m.prefix_cache_runs),
            box_waits=m.box_waits or None,
            gpu_faults=m.gpu_faults or None,
            startup_phases=StartupPhases.of(m.startup_phases) if m.startup_phases else None,
        )

    def _measured(self, t: TrialInput, m: Measurement, wrong: str | None) -> Outcome:
        assert m.metrics is not None
        metrics = m.metrics
        ref = tr.reference(t.points, t.host)
        total = metrics.get("completed", 0) + metrics.get("failed", 0)
        failed_fraction = metrics.get("failed", 0) / total if total else 1.0
        s = scoring.score_trial(self.spec, self.objective, m, ref)
        cons = self.objective.trial_constraints(metrics, failed_fraction)
        cons.update(s.constraints)
        record = replace(
            self._run_record(m),
            **s.fields(),
            metrics={k: float(v) for k, v in metrics.items() if tr.is_finite(v)},
            cis={k: (float(lo), float(hi)) for k, (lo, hi) in m.ci.items()},
            precheck_wrong=wrong or None,
            baseline=True if t.baseline else None,
            reference_trial=ref.number if ref is not None else t.number,
        )
        self._save(t, "measured", m, {**metrics, "score": s.score})
        stop = self.gpu_faults.stop(params_key(t.params), m)  # measured on its retry: it stands
        return Outcome("measured", s.values, cons, record, metrics=metrics, stop_study=stop)


def _workload_s(points: list[TrialPoint]) -> float | None:
    """The median workload length (`duration`, first send to last answer) of the study's
    full runs so far: what the stop rule expects a run to take (None: none measured)."""
    found = [p.metrics["duration"] for p in points if p.measured and "duration" in p.metrics]
    return statistics.median(found) if found else None


def _censored(decision: object) -> dict[str, float]:
    """What a stopped trial tells the sampler through its constraints (TPE reads a trial with
    a constraint > 0 as infeasible: the worst group, whatever its state; optuna/samplers/_tpe/
    sampler.py, `_split_trials`). An SLO broken for sure: infeasible, by the lower bound of the
    violation. "Cannot beat the best": feasible as far as is known, `pruned` 0; its score bound
    goes to Optuna as the PRUNED trial's intermediate value (`StudyLoop._tell`). Neither
    (a stop without a decision, e.g. stored before this): `pruned` 1, infeasible."""
    censored = dict(getattr(decision, "censored", None) or {})
    if censored:
        return {"pruned": 0.0, **censored}
    if getattr(decision, "score_bound", None) is not None:
        return {"pruned": 0.0}
    return {"pruned": 1.0}


def _unpooled(top: TrialPoint, ref: TrialPoint) -> float | None:
    """The best score as a new trial is scored: against the reference's first run, not its
    pooled `--confirm` runs (`tuner.trial.pooled` moved both by the reference's own score,
    which is 0 against its first run)."""
    if top.score is None:
        return None
    return top.score - (ref.score or 0.0) if ref.reference == ref.number else top.score
