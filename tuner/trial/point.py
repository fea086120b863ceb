"""A stored trial as everything after the loop reads it: `TrialPoint`, built by `read`.

A trial lives in Optuna's storage. Its parameters are Optuna's params; its meaning is in user
attrs (`TrialRecord`, names in `tuner.trial.keys`), in Optuna constraints (≤ 0 is feasible,
`Constraints`) and in two system attrs (the owner, for recovery, and the legacy constraint
list that optuna-dashboard reads). Readers build a `TrialPoint` with `read` and ask it:

- `status`: feasible, infeasible (measured, breaks a constraint), failed (refused, crashed,
  interrupted), pruned (stopped early), running;
- `record`: every attr, typed.

Pure: trials are duck-typed (`number`, `state.name`, `params`, `user_attrs`, `system_attrs`,
`values`), so this module needs neither optuna nor storage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from tuner.errors import RULE_REFUSALS, FailureKind, UserError
from tuner.measure.runs import CapacityResult, PrefixCacheRun, RateStep, ScenarioEntry
from tuner.measure.stored import is_finite
from tuner.spec.values import Params, Scalar
from tuner.trial import keys as k
from tuner.trial.payloads import Constraints, is_metric, metrics_of
from tuner.trial.record import AttrsHolder, TrialRecord

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

Status = Literal["feasible", "infeasible", "failed", "pruned", "running"]


@dataclass(frozen=True)
class TrialPoint:
    """One trial as everything after the loop needs it: what was tried, what it measured,
    and whether it counts."""

    number: int
    state: str  # Optuna's state name
    params: dict[str, Scalar]
    metrics: dict[str, float]
    status: Status
    score: float | None = None
    baseline: bool = False  # vLLM's defaults, run as this host's baseline (not interrupted)
    simulated: bool = False  # SIMULATED_FIGURES: the simulator's figures
    failure: str | None = None  # "kind: reason"
    failure_kind: str | None = None
    constraints: Mapping[str, float] = field(default_factory=Constraints)
    attrs: dict[str, object] = field(default_factory=dict)  # as stored (for `--format json`)
    values: tuple[float, ...] | None = None  # what Optuna was told
    spec_id: str | None = None  # None: stored before spec ids existed
    host: str | None = None  # its host attr, else its owner's hostname; None: unknown
    duration_s: float | None = None  # wall time, start to end (None: not ended)
    # Stopped early under a judging (objective, SLOs) the study no longer uses: its stop says
    # nothing under today's (`tuner.trial.scoring.rejudge` sets it)
    stale_stop: bool = False
    # Queued (WAITING) to measure again by a judging the study no longer uses (a stopped trial
    # queued when the SLOs were loosened, then put back): not taken while that judging is not
    # the study's (`tuner.trial.scoring.rejudge` sets it; docs/reliability.md, "Re-judging")
    stale_queue: bool = False
    # One scenario's 95 % intervals in place of the trial's, as its metrics are
    # (`for_scenario`); None: the trial's own (`record.cis`)
    scenario_cis: Mapping[str, tuple[float, float]] | None = None
    # Its `attrs` decoded (`record`), once, with the attrs it was decoded from: a field, so
    # `dataclasses.replace` carries it (the read model replaces each point several times per
    # read, and decoding is most of a read's cost) unless it replaces the attrs
    decoded: tuple[Mapping[str, object], TrialRecord] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.constraints, Constraints):
            object.__setattr__(self, "constraints", Constraints(dict(self.constraints)))

    @classmethod
    def measured_as(cls, number: int, params: Params, record: TrialRecord) -> TrialPoint:
        """A feasible trial that measured `record` (e.g. a simulated reference run)."""
        metrics = {m: v for m, v in record.metrics.items() if is_metric(m)}
        attrs = record.encode()
        return cls(
            number,
            "COMPLETE",
            dict(params),
            metrics,
            "feasible",
            record.score,
            bool(record.baseline),
            attrs=attrs,
            decoded=(attrs, record),
        )

    @property
    def record(self) -> TrialRecord:
        """Every user attr of the trial, typed."""
        if self.decoded is not None and self.decoded[0] is self.attrs:
            return self.decoded[1]
        rec = TrialRecord.decode(self.attrs)
        object.__setattr__(self, "decoded", (self.attrs, rec))
        return rec

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"

    @property
    def measured(self) -> bool:
        """Completed with figures of its own: not refused, not failed, not a reused result."""
        return self.status in ("feasible", "infeasible") and self.record.reused_from is None

    @property
    def planned(self) -> bool:
        """`tuner plan`'s virtual time: no engine process (PLANNED_VERSION)."""
        return self.record.vllm_version == k.PLANNED_VERSION

    @property
    def partial(self) -> bool:
        """Stopped early: its metrics cover only the requests done by then."""
        return bool(self.record.partial)

    @property
    def engine_measured(self) -> bool:
        """Measured in full by an engine process over HTTP (vLLM, or `tuner sim serve`, whose
        trials are also `simulated`): not `tuner plan`'s virtual time, not a stopped run.
        What calibration fits the simulator to."""
        return self.measured and bool(self.metrics) and not self.planned and not self.partial

    @property
    def healthy(self) -> bool:
        """Measured without trouble: only SLO constraints (named `metric<=value`) may be broken.
        An SLO given at export time replaces the study's own, so these trials are candidates."""
        if self.status not in ("feasible", "infeasible") or not self.metrics:
            return False
        assert isinstance(self.constraints, Constraints)
        return self.constraints.only_slos_broken

    @property
    def confirm_of(self) -> int | None:
        return self.record.confirm_of

    @property
    def reference(self) -> int | None:
        """The trial this score is relative to (its own number: the reference itself)."""
        return self.record.reference_trial

    @property
    def refused_by_rules(self) -> bool:
        """Refused before launch by vLLM's rules (`RULE_REFUSALS`): no engine time, no trial
        of the budget."""
        return bool(self.record.predicted) and self.failure_kind in RULE_REFUSALS

    @property
    def interrupted(self) -> bool:
        return self.failure_kind == FailureKind.INTERRUPTED

    @property
    def broken_constraints(self) -> list[str]:
        """Names of the constraints this trial breaks (the legacy list has no names)."""
        assert isinstance(self.constraints, Constraints)
        return self.constraints.broken

    @property
    def capacity_rps(self) -> float | None:
        value = self.record.capacity_rps
        return float(value) if is_finite(value) else None

    @property
    def capacity_capped(self) -> bool:
        """The capacity is only a lower bound: its search, or any scenario's (the mix's
        capacity is then a lower bound too), met every SLO at `capacity.max_rps`."""
        found = [self.record.capacity, *(e.capacity for e in self.record.scenarios.values())]
        return any(c is not None and c.capped for c in found)

    @property
    def capacity_interval(self) -> tuple[float, float | None] | None:
        """The capacity's interval in req/s (`CapacityResult.interval`); None: stored
        without one, or a scenario mix (each scenario's search has its own)."""
        found = self.record.capacity
        return found.interval if found is not None and not self.record.scenarios else None

    @property
    def warm_runs(self) -> tuple[PrefixCacheRun, ...]:
        """Its runs whose prefix-cache hit rate is above what their prompts imply."""
        return tuple(r for r in self.record.prefix_cache_runs if r.warm)

    @property
    def rate_steps(self) -> tuple[RateStep, ...]:
        """The latency–load curve: every rate tried, in the order run."""
        return self.record.rate_steps

    @property
    def scenario_names(self) -> list[str]:
        return list(self.record.scenarios)

    def searches(self) -> dict[str, CapacityResult]:
        """Each capacity search the trial ran, by workload (`TrialRecord.searches`)."""
        return self.record.searches()

    def scenario(self, name: str) -> ScenarioEntry | None:
        """One scenario's stored entry (None when the trial has none of that name)."""
        return self.record.scenarios.get(name)

    def scenario_metrics(self, name: str) -> dict[str, float]:
        entry = self.scenario(name)
        return metrics_of(entry.metrics) if entry is not None else {}

    @property
    def predictions(self) -> dict[str, float]:
        """The screen's `predicted_<metric>` figures, by metric name ({}: not screened)."""
        return self.record.predicted_metrics

    def ci(self, metric: str) -> tuple[float, float] | None:
        """The 95 % interval of a metric's figure (None: none stored)."""
        cis = self.record.cis if self.scenario_cis is None else self.scenario_cis
        return cis.get(metric)

    def cis(self, metrics: Iterable[str]) -> dict[str, tuple[float, float]]:
        return {m: ci for m in metrics if (ci := self.ci(m)) is not None}

    def queued_baseline_for(self, spec_id: str, host: str | None) -> bool:
        """A baseline queued for this spec (one left waiting by another spec is not: its
        defaults may differ) and, when `host` is given, for that host."""
        return self.record.queued_baseline_for(spec_id, host)


def _params(trial: FrozenTrial, state: str) -> dict[str, Scalar]:
    """The trial's parameters; a queued one (WAITING: a `--confirm` re-run, an enqueued
    baseline) has none of its own yet, only those it was enqueued with (Optuna's
    `fixed_params`), which it will run with."""
    params = dict(trial.params)
    if state == "WAITING" and not params:
        params = dict(trial.system_attrs.get("fixed_params") or {})
    return params


def read(trial: FrozenTrial) -> TrialPoint:
    """Read an Optuna `FrozenTrial` (duck-typed)."""
    attrs = dict(trial.user_attrs)
    rec = TrialRecord.decode(attrs)
    state = trial.state.name
    constraints = Constraints.decode(trial.system_attrs)
    kind, reason = rec.failure_kind, rec.failure_reason
    failure = ": ".join(dict.fromkeys(str(x) for x in (kind, reason) if x)) or None
    status: Status
    if state == "COMPLETE":
        if kind:
            status = "failed"
        elif constraints.any_broken:
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
    values = tuple(trial.values) if trial.values is not None else None
    score = stored_score(rec, state, values)
    owner = trial.system_attrs.get(k.OWNER) or {}
    start, end = getattr(trial, "datetime_start", None), getattr(trial, "datetime_complete", None)
    return TrialPoint(
        number=trial.number,
        state=state,
        params=_params(trial, state),
        metrics=dict(rec.metrics),
        status=status,
        score=score,
        # An interrupted baseline stays stored as it ended (its attr too), but it is not the
        # baseline: the loop queues vLLM's defaults again and that run is (docs/results.md)
        baseline=bool(rec.baseline) and kind != FailureKind.INTERRUPTED,
        simulated=bool(rec.simulated),
        failure=failure,
        failure_kind=str(kind) if kind else None,
        constraints=constraints,
        attrs=attrs,
        values=values,
        spec_id=rec.spec_id,
        host=rec.host or owner.get("host"),
        duration_s=(end - start).total_seconds() if start and end else None,
        decoded=(attrs, rec),
    )


def stored_score(rec: TrialRecord, state: str, values: tuple[float, ...] | None) -> float | None:
    """The score as stored when the trial was told (a study without the score attr: its
    single Optuna value), before any pooling or re-judging."""
    score = rec.score
    if (
        not is_finite(score)
        and state == "COMPLETE"
        and not rec.failure_kind
        and len(values or ()) == 1
    ):
        assert values is not None
        score = float(values[0])
    return float(score) if is_finite(score) else None


def owner_of(trial: FrozenTrial) -> dict[str, Any] | None:
    """The OWNER system attr of a stored trial: who runs it (`tuner.run.lock.Worker.owner`)."""
    owner: dict[str, Any] | None = trial.system_attrs.get(k.OWNER)
    return owner


def have_capacities(points: Iterable[TrialPoint]) -> bool:
    """Whether the trials' figures are capacities, by what they stored (a capacity study's:
    each trial's latencies at the rate its own search set, never compared with another's)."""
    return any(p.capacity_rps is not None for p in points)


def for_scenario(points: Iterable[TrialPoint], name: str) -> list[TrialPoint]:
    """The trials as one scenario saw them: its metrics, their intervals and its score in place
    of the trial's (pooled, aggregated) ones; feasibility stays the trial's. Unknown name: a user
    error naming the scenarios there are."""
    points = list(points)
    known = list(dict.fromkeys(n for p in points for n in p.scenario_names))
    if name not in known:
        there = ", ".join(known) if known else "none: the study has a single workload"
        raise UserError(f"no scenario {name!r} in this study (scenarios: {there})")
    out = []
    for p in points:
        entry = p.scenario(name)
        out.append(
            replace(
                p,
                metrics=p.scenario_metrics(name),
                score=entry.score if entry is not None else None,
                scenario_cis=dict(entry.ci) if entry is not None else {},
            )
        )
    return out


def record_of(trial: AttrsHolder) -> TrialRecord:
    """The user attrs of a live trial (`optuna.Trial`) or a stored one, typed."""
    return TrialRecord.decode(trial.user_attrs)
