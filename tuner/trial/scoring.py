"""A measured trial's score, Optuna values and extra constraints, in every objective mode.

One workload in scalar or multi mode: `tuner.measure.objective` as always. Capacity mode: the score
is −ln(capacity / the reference's capacity), Optuna maximises `capacity_rps`. Scenarios:
each scenario is scored against the reference's same scenario, then the scores aggregated
(weighted mean or worst case, `objective.aggregate`), in capacity mode too (so a 14 req/s
scenario does not drown a 0.5 req/s one); SLOs are judged per scenario. docs/objective.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tuner.measure import objective as obj
from tuner.measure.measurement import Measurement
from tuner.measure.mixes import objective_of
from tuner.measure.modes import Objective, RunFigures
from tuner.measure.runs import CapacityResult, RateStep, ScenarioEntry
from tuner.spec.parts import Judging
from tuner.spec.values import Params
from tuner.trial.payloads import Constraints
from tuner.trial.point import Status, TrialPoint, stored_score
from tuner.trial.ranking import pooled
from tuner.trial.record import TrialRecord


@dataclass(frozen=True)
class Scored:
    """What scoring adds to a trial's record: its score, Optuna values, the capacity search,
    rate steps and scenarios, and constraints beyond `objective.constraints`."""

    score: float
    values: list[float]
    constraints: dict[str, float] = field(default_factory=dict)
    capacity: CapacityResult | None = None
    capacity_rps: float | None = None
    capacity_goodput_rps: float | None = None
    rate_steps: tuple[RateStep, ...] = ()
    scenarios: dict[str, ScenarioEntry] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """These figures as `TrialRecord` fields."""
        return {
            "score": self.score,
            "capacity": self.capacity,
            "capacity_rps": self.capacity_rps,
            "capacity_goodput_rps": self.capacity_goodput_rps,
            "rate_steps": self.rate_steps,
            "scenarios": self.scenarios,
        }


def _capacity_of(found: CapacityResult | None) -> float:
    return found.capacity_rps if found is not None else 0.0


@dataclass(frozen=True)
class _Run:
    """One run a trial is judged on (the objective object's `judged_runs`), from this
    package's payloads: its figures, the reference's same run's, and what its search found
    (req/s; None: no search result)."""

    mine: RunFigures
    theirs: RunFigures
    found_rps: float | None


def _whole_run(
    metrics: dict[str, float], capacity: CapacityResult | None, ref: TrialPoint | None
) -> _Run:
    """The trial's whole run against the reference trial's (None: its own reference)."""
    cap = _capacity_of(capacity)
    reference = ref.metrics if ref is not None else metrics
    ref_cap = (ref.capacity_rps or 0.0) if ref is not None else cap
    found = cap if capacity is not None else None
    return _Run(RunFigures(metrics, cap), RunFigures(reference, ref_cap), found)


def _scenario_run(name: str, entry: ScenarioEntry, ref: TrialPoint | None) -> _Run:
    """One scenario's run against the reference trial's same scenario (None: its own
    reference; a reference without the scenario: its own figures, and no capacity)."""
    theirs = ref.scenario(name) if ref is not None else entry
    ref_cap = _capacity_of(theirs.capacity if theirs is not None else None)
    mine = entry.metrics
    theirs_metrics = ref.scenario_metrics(name) if ref is not None else mine
    cap = _capacity_of(entry.capacity)
    return _Run(RunFigures(mine, cap), RunFigures(theirs_metrics or mine, ref_cap), cap)


@dataclass(frozen=True)
class Judged:
    """A measurement judged under a spec's objective and SLOs against a reference trial."""

    score: float
    slos: dict[str, float]  # the SLO constraints (scenarios: `scenario:metric<=value`)
    capacity_rps: float | None = None  # capacity mode: the trial's (a mix's: aggregated)
    scenarios: dict[str, ScenarioEntry] = field(default_factory=dict)  # each with its score
    found_rps: dict[str, float | None] = field(default_factory=dict)  # by judged run


def judge(
    spec: Judging,
    judging: Objective,
    metrics: dict[str, float],
    capacity: CapacityResult | None,
    scenarios: dict[str, ScenarioEntry],
    ref: TrialPoint | None,
) -> Judged:
    """The one place a measurement is judged: when it is measured (`score_trial`) and every
    time it is read (`rejudge`), so a stored score can never disagree with today's judging.
    `ref` None: the measurement is its own reference (the baseline). The objective object
    says which runs the trial is judged on (`judged_runs`: its one workload's, or each
    scenario's), scores each (`run_score`: its metrics, or its capacity, against the
    reference's same run) and aggregates them (`trial_figures`: its score and capacity); here each
    run is packed from the payloads, and each scenario's entry gets its score. `judging`:
    the study's objective object (built once, by the study's runner or reader)."""
    each = {name: _scenario_run(name, entry, ref) for name, entry in scenarios.items()}
    runs = judging.judged_runs(_whole_run(metrics, capacity, ref), each)
    run_scores, slos = {}, {}
    for name, run in runs.items():
        run_scores[name] = judging.run_score(run.mine, run.theirs)
        slos.update(obj.slo_constraints(spec.slo_limits(name), run.mine.metrics, name))
    weights = {s.name: s.weight for s in spec.scenarios}
    entries = {
        name: replace(entry, score=run_scores[name], weight=weights.get(name, 0.0))
        for name, entry in scenarios.items()
        if name in runs
    }
    found = {name: run.found_rps for name, run in runs.items()}
    score, capacity_rps = judging.trial_figures(run_scores, found)
    return Judged(score, slos, capacity_rps, entries, found)


def score_trial(
    spec: Judging, judging: Objective, m: Measurement, ref: TrialPoint | None
) -> Scored:
    """Score `m` against the reference trial (None: `m` is its own reference, the baseline).
    `m.capacity`, `m.rate_steps` and `m.scenarios` hold this package's payloads; what
    Optuna is told and the constraints the score adds (`score_constraints`: on what the
    search found, and a mix's SLOs per scenario) are the objective object's."""
    metrics = m.metrics or {}
    j = judge(spec, judging, metrics, m.capacity, dict(m.scenarios), ref)
    cap = j.capacity_rps or 0.0  # 0: none found, or a mode without a capacity
    ref_cap = (ref.capacity_rps or 0.0) if ref is not None else cap
    mine = RunFigures(metrics, cap)
    theirs = RunFigures(ref.metrics if ref is not None else metrics, ref_cap)
    return Scored(
        j.score,
        judging.trial_values(j.score, mine, theirs),
        judging.score_constraints(j.slos, j.found_rps),
        capacity=m.capacity,  # a mix's: None, each scenario's is in its entry
        capacity_rps=j.capacity_rps,
        capacity_goodput_rps=m.capacity.goodput_rps if m.capacity is not None else None,
        rate_steps=tuple(m.rate_steps),
        scenarios=j.scenarios,
    )


def simulated_reference(
    spec: Judging, judging: Objective, m: Measurement, params: Params
) -> TrialPoint:
    """A simulated run of the reference config as the trial the study would score against
    (robustness's perturbed baselines, prediction skips' predicted baseline)."""
    scored = score_trial(spec, judging, m, None)
    record = TrialRecord(metrics=dict(m.metrics or {}), **scored.fields())
    return TrialPoint.measured_as(-1, dict(params), record)


def rejudge(points: Sequence[TrialPoint], spec: Judging, judging: str) -> list[TrialPoint]:
    """The trials of one measurement as `spec` judges them (docs/reliability.md, "Re-judging"):
    each measured trial's score, SLO constraints and so feasibility recomputed from its stored
    metrics against its stored reference trial (`judge`), then pooled over `--confirm`
    re-runs (`pooled`); a trial stopped early under another judging (`judging`: the id of
    `spec`'s) is marked `stale_stop`, and one queued to run again by another judging
    `stale_queue`. What Optuna was told (`values`) stays as told."""
    by_number = {p.number: p for p in points}
    objective = objective_of(spec)  # once for every trial read
    out = []
    for p in points:
        raw = stored_score(p.record, p.state, p.values)
        stale = p.record.judging_id not in (None, judging)
        if p.status == "pruned":
            out.append(replace(p, score=raw, stale_stop=stale))
            continue
        if p.state == "WAITING" and stale:  # queued by another judging: `stale_queue`
            out.append(replace(p, stale_queue=True))
            continue
        if p.status not in ("feasible", "infeasible") or not p.metrics:
            out.append(p if p.score == raw else replace(p, score=raw))
            continue
        ref = by_number.get(p.reference) if p.reference is not None else None
        ref = p if p.reference == p.number else ref
        out.append(_rejudged(p, spec, objective, ref, raw))
    return pooled(out)


def _rejudged(
    p: TrialPoint,
    spec: Judging,
    judging: Objective,
    ref: TrialPoint | None,
    raw: float | None,
) -> TrialPoint:
    """One measured trial judged anew. Its score stays as stored where it cannot be
    recomputed (its reference trial is not among these, or lacks figures; a weighted metric
    it lacks); its SLOs are judged anew whenever its constraints have names."""
    rec = p.record
    scored = ref is not None and bool(ref.metrics)
    try:
        against = ref if scored and ref is not p else None
        j = judge(spec, judging, p.metrics, rec.capacity, dict(rec.scenarios), against)
    except (KeyError, ZeroDivisionError):  # a metric, or every scenario, it lacks
        return replace(p, score=raw)
    cons = p.constraints
    assert isinstance(cons, Constraints)
    if cons.named and not judging.has_capacity:  # capacity: they are the measurement
        health = {k: v for k, v in cons.named.items() if k not in cons.slos}
        cons = Constraints({**health, **j.slos})
    status: Status = "infeasible" if cons.any_broken else "feasible"
    if scored and j.scenarios:  # a mix's entries re-scored, its capacity re-aggregated
        rec = replace(rec, scenarios=j.scenarios, capacity_rps=j.capacity_rps)
    score = j.score if scored else raw
    return replace(p, score=score, constraints=cons, status=status, decoded=(p.attrs, rec))
