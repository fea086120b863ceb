"""The trial schema: what a stored trial means, written once and read through here.

A trial lives in Optuna's storage. Its parameters are Optuna's params; its meaning is in
user attrs named below (metrics use vLLM's result keys), in Optuna constraints (≤ 0 is
feasible) and in two system attrs (the owner, for recovery, and the legacy constraint list
that optuna-dashboard reads). Every writer uses these names; every reader builds a
`TrialPoint` with `read` and asks it, never the raw attrs:

- `status`: feasible, infeasible (measured, breaks a constraint), failed (refused, crashed,
  interrupted), pruned (stopped early), running;
- `ranked`: the one order that `tuner best`, `tuner export`, the report and `--confirm` share.

Pure: trials are duck-typed (`number`, `state.name`, `params`, `user_attrs`, `system_attrs`,
`values`), so this module needs neither optuna nor storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tuner.errors import PREDICTABLE, FailureKind, UserError  # noqa: F401 (a trial's failure kinds)
from tuner.spec.slo import metric_direction, parse_slo

# Study attrs ------------------------------------------------------------------------------
SPEC = "tuner_spec"  # the current StudySpec (Python-mode dump): what `tuner run` last ran
SPEC_ID = "tuner_spec_id"  # its id (`tuner.trial.specs.spec_id`)
SPEC_BY_ID = "tuner_spec:"  # `tuner_spec:<id>`: every spec the study has run under
LEGACY_SPEC_ID = "tuner_spec_legacy_id"  # the spec of trials stored before ids existed
STUDY_SIMULATED = "simulated"  # the study measured the simulator: every figure is predicted
CALIBRATION = "calibration"  # `search.fidelity: multi`: the screen's latest calibrated profile
# `tuner_robustness:<trial>`: whether that config's gain over the baseline survives small
# workload changes (`tuner.fidelity.robustness`; a dict, keys below), per spec it was checked under.
ROBUSTNESS = "tuner_robustness:"
ROBUST_FRAGILE = "fragile"  # True, False, or None: not checked (see "verdict")
ROBUST_VERDICT = "verdict"  # the finding in plain words
ROBUST_GAIN = "gain"  # the config's simulated gain (−score) over the baseline, nominal workload
ROBUST_GAINS = "gains"  # {perturbation name: gain under it}
ROBUST_SPEC = "spec_id"  # the spec the check ran under
# `tuner_robustness_measured:<trial>`: the same check measured on the engine by `tuner run
# --confirm` (`tuner.fidelity.robustness_measured`); where both exist, the measured one is shown.
ROBUSTNESS_MEASURED = "tuner_robustness_measured:"
ROBUST_RUNS = "runs"  # measured only: {perturbation: {"config": metrics, "baseline": metrics}}

# Trial user attrs -------------------------------------------------------------------------
SCORE = "score"  # weighted log-ratio against the baseline (docs/objective.md); both modes
BASELINE = "baseline"  # vLLM's defaults, measured first: the reference of every score
REFERENCE = "reference_trial"  # the trial this score is relative to (the baseline if measured)
SPEC_OF = "spec_id"  # the spec this trial ran under
HOST = "host"  # the host it was measured on (`$TUNER_HOST_ID` or the hostname)
SIMULATED = "simulated"  # figures are the simulator's predictions
CONFIRM_OF = "confirm_of"  # a `--confirm` re-measurement of trial N
RETRY_OF = "retry_of"  # a re-run of trial N, which an interruption ended
REUSED_FROM = "reused_from"  # same parameters as trial N: its result, not launched
FAILURE_KIND = "failure_kind"  # a FailureKind value: present on every trial without metrics
FAILURE_REASON = "failure_reason"  # in words, usually the engine's own log line
PREDICTED = "predicted"  # refused before launch (vLLM's rules or the memory precheck)
# `search.fidelity: multi` (docs/multi-fidelity.md): what the calibrated simulator predicted
# for a trial before it ran, as `predicted_<metric>` (vLLM's keys) beside each measured one,
# and the predicted score; never a measurement, never read as one (`is_metric` refuses them).
PREDICTED_PREFIX = "predicted_"
PREDICTED_SCORE = "predicted_score"
PREDICTION_ERROR = "prediction_error"  # {metric: measured / predicted - 1, score: difference}
SCREEN = "screen"  # how the screen chose it: candidates, seconds, rank, calibration
WARM_START = "warm_start"  # enqueued from another study's best (`--from-plan`, `--warm-start`)
PRECHECK_WRONG = "precheck_wrong"  # what the memory precheck said, against what happened
VLLM_VERSION = "vllm_version"
PLANNED_VERSION = "simulated"  # the VLLM_VERSION of a `tuner plan` trial: virtual time, no engine
LOG_PATH = "log_path"
STARTUP_S = "startup_s"  # launch until ready
WORKLOAD_S = "workload_s"  # warm-ups and workload
ENGINE_S = "engine_s"  # seconds the engine was up, launch until stopped (0: never launched)
ENGINE_FULL_S = "engine_full_s"  # `tuner plan`, a pruned trial: its engine time had it run on
PARTIAL = "partial"  # True: the metrics cover only the requests done when it was stopped
PRUNED_REASON = "pruned_reason"  # why early stopping stopped it, in words
PRUNED_AT_S = "pruned_at_s"  # seconds into the workload when it was stopped
PRUNED_QUEUE = "pruned_queue_waiting"  # the engine's vllm:num_requests_waiting then
PRUNED_KV_USAGE = "pruned_kv_cache_usage"  # its vllm:kv_cache_usage_perc then (0..1)
PRUNED_PREEMPTIONS = "pruned_preemptions"  # its vllm:num_preemptions_total then
CI_SUFFIX = "_ci"  # `<metric>_ci`: [low, high] of its 95 % bootstrap interval
# Capacity mode (docs/objective.md): the highest offered rate that met every SLO; the trial's
# metrics are those of the run at that rate (when none met them, of the lowest-rate run).
CAPACITY_RPS = "capacity_rps"  # req/s; 0: no rate tried met the SLOs
CAPACITY_GOODPUT = "capacity_goodput_rps"  # request_goodput of the run at that rate
CAPACITY = "capacity"  # the search: {capacity_rps, goodput_rps, resolved, capped, runs, above_rps}
RATE_STEPS = "rate_steps"  # every run: [{scenario, rate_rps, feasible, pruned_reason, metrics…}]
# Scenario mixes: {name: {weight, score, metrics, ci, capacity}}; the trial's own metrics
# then pool every scenario's requests, and its score aggregates the scenarios' scores.
SCENARIOS = "scenarios"

# Trial system attrs -----------------------------------------------------------------------
OWNER = "tuner:owner"  # host, boot id, pid and its start time of the tuner running the trial
LEGACY_CONSTRAINTS = "constraints"  # the list optuna-dashboard reads to grey a trial out
NAMED_CONSTRAINT_PREFIX = "constraints:"  # where Optuna's `set_constraint` stores key=value


Status = Literal["feasible", "infeasible", "failed", "pruned", "running"]


def is_finite(value: Any) -> bool:
    """A real number (not a bool) that is finite: what a stored figure must be."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_metric(name: str) -> bool:
    """Whether a user-attr name is a vLLM result metric (as opposed to score, flags, notes)."""
    try:
        metric_direction(name)
    except UserError:
        return False
    return True


def predictions(attrs: Mapping[str, Any]) -> dict[str, float]:
    """The screen's `predicted_<metric>` figures of a trial, by metric name."""
    return {
        k.removeprefix(PREDICTED_PREFIX): float(v)
        for k, v in attrs.items()
        if k.startswith(PREDICTED_PREFIX) and is_finite(v) and is_metric(k[len(PREDICTED_PREFIX) :])
    }


def prediction_attrs(metrics: Mapping[str, float], score: float | None) -> dict[str, float]:
    """A prediction as trial attrs: `predicted_<metric>` and `predicted_score`."""
    out = {PREDICTED_PREFIX + k: float(v) for k, v in metrics.items() if is_finite(v)}
    if is_finite(score):
        out[PREDICTED_SCORE] = float(score)
    return out


def prediction_error(
    attrs: Mapping[str, Any], metrics: Mapping[str, float] | None, score: float | None
) -> dict[str, float] | None:
    """How wrong the screen was about a trial: measured / predicted − 1 per metric (0.1: the
    engine measured 10 % more), and measured minus predicted score; None without both."""
    predicted = predictions(attrs)
    if not predicted or not metrics:
        return None
    out = {
        m: float(metrics[m]) / p - 1.0
        for m, p in predicted.items()
        if m in metrics and is_finite(metrics[m]) and p > 0
    }
    if is_finite(score) and is_finite(attrs.get(PREDICTED_SCORE)):
        out["score"] = float(score) - float(attrs[PREDICTED_SCORE])
    return out or None


def _is_slo_key(key: str) -> bool:
    """`metric<=value`, or `scenario:metric<=value` (one scenario's SLO)."""
    try:
        parse_slo(key.split(":", 1)[1] if ":" in key else key)
    except UserError:
        return False
    return True


@dataclass(frozen=True)
class TrialPoint:
    """One trial as everything after the loop needs it: what was tried, what it measured,
    and whether it counts."""

    number: int
    state: str  # Optuna's state name
    params: dict[str, Any]
    metrics: dict[str, float]
    status: Status
    score: float | None = None
    baseline: bool = False
    simulated: bool = False
    failure: str | None = None  # "kind: reason"
    failure_kind: str | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)
    values: tuple[float, ...] | None = None  # what Optuna was told
    spec_id: str | None = None  # None: stored before spec ids existed
    host: str | None = None  # its host attr, else its owner's hostname; None: unknown

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"

    @property
    def measured(self) -> bool:
        """Completed with figures of its own: not refused, not failed, not a reused result."""
        return self.status in ("feasible", "infeasible") and REUSED_FROM not in self.attrs

    @property
    def engine_measured(self) -> bool:
        """Measured in full by an engine process over HTTP (vLLM, or `tuner sim serve`, whose
        trials are also `simulated`): not `tuner plan`'s virtual time, not a stopped run.
        What calibration fits the simulator to."""
        return (
            self.measured
            and bool(self.metrics)
            and self.attrs.get(VLLM_VERSION) != PLANNED_VERSION
            and not self.attrs.get(PARTIAL)
        )

    @property
    def healthy(self) -> bool:
        """Measured without trouble: only SLO constraints (named `metric<=value`) may be broken.
        An SLO given at export time replaces the study's own, so these trials are candidates."""
        if self.status not in ("feasible", "infeasible") or not self.metrics:
            return False
        return all(v <= 0 or _is_slo_key(k) for k, v in self.constraints.items())

    @property
    def confirm_of(self) -> int | None:
        return self.attrs.get(CONFIRM_OF)

    @property
    def interrupted(self) -> bool:
        return self.failure_kind == FailureKind.INTERRUPTED

    @property
    def broken_constraints(self) -> list[str]:
        """Names of the constraints this trial breaks (the legacy list has no names)."""
        return [k for k, v in self.constraints.items() if v > 0 and not k.isdigit()]

    @property
    def capacity_rps(self) -> float | None:
        value = self.attrs.get(CAPACITY_RPS)
        return float(value) if is_finite(value) else None

    @property
    def rate_steps(self) -> list[dict[str, Any]]:
        """The latency–load curve: every rate tried, in the order run."""
        steps = self.attrs.get(RATE_STEPS)
        return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else []

    @property
    def scenario_names(self) -> list[str]:
        found = self.attrs.get(SCENARIOS)
        return list(found) if isinstance(found, dict) else []

    def scenario(self, name: str) -> dict[str, Any]:
        """One scenario's stored entry ({} when the trial has none of that name)."""
        found = self.attrs.get(SCENARIOS)
        entry = found.get(name) if isinstance(found, dict) else None
        return entry if isinstance(entry, dict) else {}

    def scenario_metrics(self, name: str) -> dict[str, float]:
        metrics = self.scenario(name).get("metrics") or {}
        return {k: float(v) for k, v in metrics.items() if is_finite(v) and is_metric(k)}

    def ci(self, metric: str) -> tuple[float, float] | None:
        value = self.attrs.get(metric + CI_SUFFIX)
        if isinstance(value, list | tuple) and len(value) == 2:
            return float(value[0]), float(value[1])
        return None

    def cis(self, metrics: Iterable[str]) -> dict[str, tuple[float, float]]:
        return {m: ci for m in metrics if (ci := self.ci(m)) is not None}


def read(trial: Any) -> TrialPoint:
    """Read an Optuna `FrozenTrial` (duck-typed)."""
    attrs = dict(trial.user_attrs)
    state = trial.state.name
    constraints, any_broken = _constraints(trial.system_attrs)
    metrics = {k: float(v) for k, v in attrs.items() if is_finite(v) and is_metric(k)}
    kind, reason = attrs.get(FAILURE_KIND), attrs.get(FAILURE_REASON)
    failure = ": ".join(dict.fromkeys(str(x) for x in (kind, reason) if x)) or None
    status: Status
    if state == "COMPLETE":
        if kind:
            status = "failed"
        elif any_broken:
            status = "infeasible"
        else:
            status = "feasible"
    elif state == "FAIL":
        status = "failed"
        failure = failure or "trial failed (interrupted or crashed tuner)"
    elif state == "PRUNED":
        status = "pruned"
    else:
        status = "running"
    score = attrs.get(SCORE)
    if not is_finite(score) and state == "COMPLETE" and not kind and len(trial.values or []) == 1:
        score = float(trial.values[0])  # a study without the score attr: its single value
    return TrialPoint(
        number=trial.number,
        state=state,
        params=dict(trial.params),
        metrics=metrics,
        status=status,
        score=float(score) if is_finite(score) else None,
        baseline=bool(attrs.get(BASELINE, False)),
        simulated=bool(attrs.get(SIMULATED, False)),
        failure=failure,
        failure_kind=str(kind) if kind else None,
        constraints=constraints,
        attrs=attrs,
        values=tuple(trial.values) if trial.values is not None else None,
        spec_id=attrs.get(SPEC_OF),
        host=attrs.get(HOST) or (trial.system_attrs.get(OWNER) or {}).get("host"),
    )


def for_scenario(points: Iterable[TrialPoint], name: str) -> list[TrialPoint]:
    """The trials as one scenario saw them: its metrics and its score in place of the
    trial's (pooled, aggregated) ones; feasibility stays the trial's. Unknown name: a user
    error naming the scenarios there are."""
    points = list(points)
    known = list(dict.fromkeys(n for p in points for n in p.scenario_names))
    if name not in known:
        there = ", ".join(known) if known else "none: the study has a single workload"
        raise UserError(f"no scenario {name!r} in this study (scenarios: {there})")
    out = []
    for p in points:
        entry = p.scenario(name)
        score = entry.get(SCORE)
        out.append(
            replace(
                p,
                metrics=p.scenario_metrics(name),
                score=float(score) if is_finite(score) else None,
            )
        )
    return out


def read_all(trials: Iterable[Any]) -> list[TrialPoint]:
    return [read(t) for t in trials]


def _constraints(system_attrs: Mapping[str, Any]) -> tuple[dict[str, float], bool]:
    """Named constraints (`set_constraint`: system attrs `constraints:<key>`), else the legacy
    list under `constraints` (what optuna-dashboard reads); infeasible if either has a value > 0.
    """
    named = {
        k.removeprefix(NAMED_CONSTRAINT_PREFIX): float(v)
        for k, v in system_attrs.items()
        if k.startswith(NAMED_CONSTRAINT_PREFIX)
    }
    legacy = {str(i): float(v) for i, v in enumerate(system_attrs.get(LEGACY_CONSTRAINTS) or [])}
    broken = any(v > 0 for v in [*named.values(), *legacy.values()])
    return (named or legacy), broken


# "Best" -----------------------------------------------------------------------------------


def confirmation_runs(points: Sequence[TrialPoint]) -> dict[int, list[float]]:
    """Every measured score of each config that `--confirm` re-measured, the original first."""
    by_number = {p.number: p for p in points}
    runs: dict[int, list[float]] = {}
    for p in points:
        origin = by_number.get(p.confirm_of) if p.confirm_of is not None else None
        if origin is None or not p.feasible or p.score is None or origin.score is None:
            continue
        runs.setdefault(origin.number, [origin.score]).append(p.score)
    return runs


def ranked(
    points: Sequence[TrialPoint], eligible: Callable[[TrialPoint], bool] | None = None
) -> list[TrialPoint]:
    """Candidates best first: by the mean score over `--confirm` runs where there are some (so
    one lucky run does not win), else by the single score; ties go to the earlier trial.

    Candidates are feasible trials with a score (`eligible` replaces "feasible", e.g. with an
    export-time SLO); re-measurements are never candidates themselves.
    """
    runs = confirmation_runs(points)
    keep = eligible or (lambda p: p.feasible)
    pool = [p for p in points if keep(p) and p.score is not None and p.confirm_of is None]

    def key(p: TrialPoint) -> tuple[float, int]:
        scores = runs.get(p.number) or [p.score]
        return (sum(scores) / len(scores), p.number)

    return sorted(pool, key=key)


def best(points: Sequence[TrialPoint]) -> TrialPoint | None:
    top = ranked(points)
    return top[0] if top else None


def baseline_of(points: Sequence[TrialPoint], host: str | None = None) -> TrialPoint | None:
    """The measured baseline trial (of `host`, when given), if any."""
    return next((p for p in points if p.baseline and p.metrics and host in (None, p.host)), None)


def host_baselines(points: Sequence[TrialPoint]) -> dict[str, TrialPoint]:
    """Each host's measured baseline (its first), in the order the hosts first measured one."""
    out: dict[str, TrialPoint] = {}
    for p in sorted(points, key=lambda p: p.number):
        if p.baseline and p.metrics and p.host is not None:
            out.setdefault(p.host, p)
    return out


def robustness_of(study_attrs: Mapping[str, Any], point: TrialPoint) -> dict[str, Any] | None:
    """The stored robustness check of this trial's config under the spec it ran under: the one
    measured on the engine (`--confirm`) if any, else the simulator's."""
    for prefix in (ROBUSTNESS_MEASURED, ROBUSTNESS):
        found = study_attrs.get(f"{prefix}{point.number}")
        if isinstance(found, dict) and found.get(ROBUST_SPEC) == point.spec_id:
            return found
    return None


def is_simulated(study_attrs: Mapping[str, Any], points: Sequence[TrialPoint]) -> bool:
    return bool(study_attrs.get(STUDY_SIMULATED)) or any(p.simulated for p in points)


def params_key(params: Mapping[str, Any]) -> tuple:
    """Parameters as a comparable key: floats from a stepped range compare as the step meant."""
    return tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in params.items()))
