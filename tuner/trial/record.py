"""Every user attr a trial can carry, typed: `TrialRecord`, with its one encoder and decoder.

Writers (the pipeline, the loop, the screen, recovery) build a `TrialRecord` (or a part of
one) and `write` it; readers get it decoded from `TrialPoint.record`. Absent attrs are None
(or empty), so `TrialRecord.decode(attrs).encode() == attrs` for every attr the tuner writes,
and an attr this version does not know is kept in `extra` and written back unchanged (a
reused result copies its origin whole). Names and units: `tuner.trial.keys`, docs/storage.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tuner.measure.runs import CapacityResult, PrefixCacheRun, RateStep, ScenarioEntry
from tuner.measure.stored import is_finite, read_interval
from tuner.trial import keys as k
from tuner.trial.payloads import ScreenInfo, SkipPrediction, StartupPhases, is_metric

# Plain attrs, stored as they are, each under its field's own name (the key is the name).
_PLAIN = (
    k.SCORE,
    k.BASELINE,
    k.REFERENCE,
    k.SPEC_OF,
    k.JUDGING_OF,
    k.HOST,
    k.SIMULATED_FIGURES,
    k.CONFIRM_OF,
    k.RETRY_OF,
    k.REUSED_FROM,
    k.WARM_START,
    k.FAILURE_KIND,
    k.FAILURE_REASON,
    k.PREDICTED,
    k.PRECHECK_WRONG,
    k.BOX_WAITS,
    k.GPU_FAULTS,
    k.VLLM_VERSION,
    k.LOG_PATH,
    k.STARTUP_S,
    k.WORKLOAD_S,
    k.ENGINE_S,
    k.ENGINE_STARTED_AT,
    k.ENGINE_FULL_S,
    k.PARTIAL,
    k.PRUNED_REASON,
    k.PRUNED_AT_S,
    k.PRUNED_QUEUE,
    k.PRUNED_KV_USAGE,
    k.PRUNED_PREEMPTIONS,
    k.PRUNED_SCORE_BOUND,
    k.PRUNED_SENT,
    k.PRUNED_BACKLOG_BOUND,
    k.PREDICTED_SCORE,
    k.PREDICTION_ERROR,
    k.CAPACITY_RPS,
    k.CAPACITY_GOODPUT,
)
_PAYLOADS = (
    k.CAPACITY,
    k.RATE_STEPS,
    k.SCENARIOS,
    k.SCREEN,
    k.SKIP_PREDICTION,
    k.PREFIX_CACHE_RUNS,
    k.STARTUP_PHASES,
)


class AttrsHolder(Protocol):
    """What this package reads and writes of an Optuna study or live trial: its user attrs
    (`optuna.Study` and `optuna.Trial` both are one)."""

    @property
    def user_attrs(self) -> Mapping[str, object]: ...

    def set_user_attr(self, key: str, value: object) -> None: ...


class ConstraintsHolder(Protocol):
    """A live trial as its constraints are told (`optuna.Trial.set_constraint`)."""

    def set_constraint(self, key: str, value: float) -> None: ...


@dataclass(frozen=True)
class TrialRecord:
    """A trial's user attrs (None: not stored). Units in the names; docs/storage.md."""

    # What it is
    score: float | None = None  # against the reference trial (lower is better)
    baseline: bool | None = None  # vLLM's defaults (False: queued as one, run as ordinary)
    reference_trial: int | None = None  # the trial the score is relative to
    spec_id: str | None = None
    judging_id: str | None = None  # None: told before judgings were tracked
    host: str | None = None
    simulated: bool | None = None  # SIMULATED_FIGURES: the simulator's figures
    confirm_of: int | None = None
    retry_of: int | None = None
    reused_from: int | None = None
    warm_start: str | None = None  # where it came from ("<study> trial N")
    # How it ended
    failure_kind: str | None = None  # a FailureKind value
    failure_reason: str | None = None
    predicted: bool | None = None  # True: refused before launch
    precheck_wrong: str | None = None
    box_waits: int | None = None  # starts that waited for a busy GPU (docs/reliability.md)
    gpu_faults: int | None = None  # GPU faults, each retried on a fresh start
    vllm_version: str | None = None  # PLANNED_VERSION: `tuner plan`'s virtual time
    log_path: str | None = None
    startup_s: float | None = None
    workload_s: float | None = None
    engine_s: float | None = None
    engine_started_at: float | None = None  # unix s: the first launch (an interruption's start)
    engine_full_s: float | None = None
    partial: bool | None = None  # stopped early: the metrics are partial
    pruned_reason: str | None = None
    pruned_at_s: float | None = None
    pruned_queue_waiting: float | None = None
    pruned_kv_cache_usage: float | None = None  # 0..1
    pruned_preemptions: float | None = None
    pruned_score_bound: float | None = None  # the score it could at best have reached
    pruned_sent_fraction: float | None = None  # 0..1 of the workload's requests
    pruned_backlog_bound_ms: float | None = None  # queue growth's bound, when it stopped it
    # What it measured (vLLM's keys, top-level attrs) and its intervals (`<metric>_ci`)
    metrics: dict[str, float] = field(default_factory=dict)
    cis: dict[str, tuple[float, float]] = field(default_factory=dict)
    capacity_rps: float | None = None
    capacity_goodput_rps: float | None = None
    capacity: CapacityResult | None = None
    rate_steps: tuple[RateStep, ...] = ()
    scenarios: dict[str, ScenarioEntry] = field(default_factory=dict)
    prefix_cache_runs: tuple[PrefixCacheRun, ...] = ()  # every run's hit rate, in order
    startup_phases: StartupPhases | None = None  # the start-up as vLLM's log told it
    # What the screen predicted before it ran (`predicted_<metric>`), and how wrong it was
    predicted_metrics: dict[str, float] = field(default_factory=dict)
    predicted_score: float | None = None
    prediction_error: dict[str, float] | None = None
    screen: ScreenInfo | None = None
    skip_prediction: SkipPrediction | None = None  # before launch ("ruled out": not launched)
    extra: dict[str, object] = field(default_factory=dict)  # attrs this version does not know

    @property
    def stopped_figures(self) -> bool:
        """Its headline figures are a stopped run's, covering the requests done by then: a
        stopped trial's, or a capacity search that held no rate and whose lowest rate's run
        was stopped with an SLO broken for sure (a lost race: docs/objective.md)."""
        if self.partial:
            return True
        found = self.capacity
        if found is None or found.capacity_rps > 0 or not self.rate_steps:
            return False
        return bool(min(self.rate_steps, key=lambda x: x.rate_rps).pruned_reason)

    def searches(self) -> dict[str, CapacityResult]:
        """Each capacity search the trial ran, by workload ("": the study's one workload,
        else each scenario's name, in the record's order); empty in a mode with no search.
        The one place a stored trial is asked whether it holds a capacity result."""
        found = {"": self.capacity} if self.capacity is not None else {}
        for name, entry in self.scenarios.items():
            if entry.capacity is not None:
                found[name] = entry.capacity
        return found

    @property
    def ruled_out(self) -> bool:
        """Never launched: skipped before launch on a prediction (docs/early-stopping.md)."""
        return self.skip_prediction is not None and self.skip_prediction.ruled_out is not None

    def encode(self) -> dict[str, object]:
        """The user attrs to store (None fields and empty payloads are left out)."""
        out: dict[str, object] = {}
        for key in _PLAIN:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out.update(self.metrics)
        out.update({m + k.CI_SUFFIX: [float(x) for x in ci] for m, ci in self.cis.items()})
        out.update({k.PREDICTED_PREFIX + m: v for m, v in self.predicted_metrics.items()})
        payloads = {
            k.CAPACITY: self.capacity.encode() if self.capacity is not None else None,
            k.RATE_STEPS: [s.encode() for s in self.rate_steps],
            k.SCENARIOS: {name: e.encode() for name, e in self.scenarios.items()},
            k.PREFIX_CACHE_RUNS: [r.encode() for r in self.prefix_cache_runs],
            k.STARTUP_PHASES: (
                self.startup_phases.encode() if self.startup_phases is not None else None
            ),
            k.SCREEN: self.screen.encode() if self.screen is not None else None,
            k.SKIP_PREDICTION: (
                self.skip_prediction.encode() if self.skip_prediction is not None else None
            ),
        }
        out.update({key: value for key, value in payloads.items() if value})  # none: not stored
        out.update(self.extra)
        return out

    @property
    def engine_split_s(self) -> tuple[float, float] | None:
        """(start-up, workload) seconds of a launched trial, summing to `engine_s`; None: never
        launched, or stored without the split. An engine that never became ready (no
        `startup_s`, `workload_s` 0) spent all its time starting."""
        if not self.engine_s or (self.startup_s is None and self.workload_s is None):
            return None
        engine_s = float(self.engine_s)
        startup_s = min(float(self.startup_s), engine_s) if self.startup_s is not None else engine_s
        return startup_s, engine_s - startup_s

    def queued_baseline_for(self, spec_id: str, host: str | None = None) -> bool:
        """Queued as the baseline of this spec (one left waiting by another spec is not: its
        defaults may differ) and, when `host` is given, of that host."""
        return (
            bool(self.baseline)
            and self.spec_id in (None, spec_id)
            and (host is None or self.host in (None, host))
        )

    def judging(self, queued: TrialRecord, metrics: Mapping[str, float] | None) -> TrialRecord:
        """This measured record with how wrong the screen's prediction (in `queued`, what the
        trial was enqueued with) was about it; unchanged when there was none."""
        miss = prediction_error(
            queued.predicted_metrics, queued.predicted_score, metrics, self.score
        )
        return replace(self, prediction_error=miss) if miss is not None else self

    @classmethod
    def decode(cls, attrs: Mapping[str, object]) -> TrialRecord:
        plain: dict[str, Any] = {}
        metrics: dict[str, float] = {}
        cis: dict[str, tuple[float, float]] = {}
        predicted: dict[str, float] = {}
        extra: dict[str, object] = {}
        for key, value in attrs.items():
            if key in _PLAIN:
                plain[key] = value
            elif key in _PAYLOADS:
                continue
            elif is_metric(key) and is_finite(value):
                metrics[key] = float(value)
            elif key.endswith(k.CI_SUFFIX) and (ci := read_interval(value)) is not None:
                cis[key.removesuffix(k.CI_SUFFIX)] = ci
            elif _is_prediction(key) and is_finite(value):
                predicted[key.removeprefix(k.PREDICTED_PREFIX)] = float(value)
            else:
                extra[key] = value  # includes figures that are not metrics (e.g. durations)
        return cls(
            **plain,
            metrics=metrics,
            cis=cis,
            predicted_metrics=predicted,
            capacity=CapacityResult.decode(attrs.get(k.CAPACITY)),
            rate_steps=RateStep.decode_list(attrs.get(k.RATE_STEPS)),
            scenarios=ScenarioEntry.decode_map(attrs.get(k.SCENARIOS)),
            prefix_cache_runs=PrefixCacheRun.decode_list(attrs.get(k.PREFIX_CACHE_RUNS)),
            startup_phases=StartupPhases.decode(attrs.get(k.STARTUP_PHASES)),
            screen=ScreenInfo.decode(attrs.get(k.SCREEN)),
            skip_prediction=SkipPrediction.decode(attrs.get(k.SKIP_PREDICTION)),
            extra=extra,
        )


def _is_prediction(key: str) -> bool:
    return key.startswith(k.PREDICTED_PREFIX) and is_metric(key[len(k.PREDICTED_PREFIX) :])


def prediction_error(
    predicted: Mapping[str, float],
    predicted_score: float | None,
    metrics: Mapping[str, float] | None,
    score: float | None,
) -> dict[str, float] | None:
    """How wrong the screen was about a trial: measured / predicted − 1 per metric (0.1: the
    engine measured 10 % more), and measured minus predicted score; None without both."""
    if not predicted or not metrics:
        return None
    out = {
        m: float(metrics[m]) / p - 1.0
        for m, p in predicted.items()
        if m in metrics and is_finite(metrics[m]) and p > 0
    }
    if is_finite(score) and is_finite(predicted_score):
        out["score"] = float(score) - float(predicted_score)
    return out or None


def write(trial: AttrsHolder, record: TrialRecord) -> None:
    """Store a record's attrs on a live trial (`optuna.Trial`, duck-typed)."""
    for key, value in record.encode().items():
        trial.set_user_attr(key, value)


def write_constraints(trial: ConstraintsHolder, constraints: Mapping[str, float]) -> list[float]:
    """Tell a live trial its constraints by name (`set_constraint`); return the same values as
    the legacy list optuna-dashboard reads, for the caller to store as a system attr."""
    for key, value in constraints.items():
        trial.set_constraint(key, value)
    return list(constraints.values())
