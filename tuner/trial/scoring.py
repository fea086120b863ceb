"""A measured trial's score, Optuna values and extra constraints, in every objective mode.

One workload in scalar or multi mode: `tuner.measure.objective` as always. Capacity mode: the score
is −ln(capacity / the reference's capacity), Optuna maximises `capacity_rps`. Scenarios:
each scenario is scored against the reference's same scenario, then the scores aggregated
(weighted mean or worst case, `objective.aggregate`), in capacity mode too (so a 14 req/s
scenario does not drown a 0.5 req/s one); SLOs are judged per scenario. docs/objective.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tuner.measure import objective as obj
from tuner.measure.measurement import Measurement
from tuner.spec.study import StudySpec
from tuner.trial.payloads import CapacityResult, RateStep, ScenarioEntry
from tuner.trial.point import TrialPoint


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


def score_trial(spec: StudySpec, m: Measurement, ref: TrialPoint | None) -> Scored:
    """Score `m` against the reference trial (None: `m` is its own reference, the baseline).
    `m.capacity`, `m.rate_steps` and `m.scenarios` hold this package's payloads."""
    o = spec.objective
    capacity_mode = o.mode == "capacity"
    floor = o.search.min_rps / 2
    steps = tuple(m.rate_steps)
    if not spec.scenarios:
        metrics = m.metrics or {}
        reference = ref.metrics if ref is not None else metrics
        if not capacity_mode:
            values = obj.objective_values(o, metrics, reference)
            return Scored(obj.score(metrics, reference, o.weights), values, rate_steps=steps)
        cap = _capacity_of(m.capacity)
        ref_cap = (ref.capacity_rps or 0.0) if ref is not None else cap
        return Scored(
            obj.capacity_score(cap, ref_cap, floor),
            [cap],
            {"capacity": 0.0 if cap > 0 else 1.0},
            capacity=m.capacity,
            capacity_rps=cap if m.capacity is not None else None,
            capacity_goodput_rps=m.capacity.goodput_rps if m.capacity is not None else None,
            rate_steps=steps,
        )
    weights = {s.name: s.weight for s in spec.scenarios}
    per_score: dict[str, float] = {}
    caps: dict[str, float] = {}
    cons: dict[str, float] = {}
    entries: dict[str, ScenarioEntry] = {}
    for name, entry in m.scenarios.items():
        mine = entry.metrics
        theirs = ref.scenario_metrics(name) if ref is not None else mine
        if capacity_mode:
            caps[name] = _capacity_of(entry.capacity)
            theirs_entry = ref.scenario(name) if ref is not None else None
            ref_cap = (
                _capacity_of(theirs_entry.capacity if theirs_entry else None)
                if ref is not None
                else caps[name]
            )
            per_score[name] = obj.capacity_score(caps[name], ref_cap, floor)
            cons[f"{name}:capacity"] = 0.0 if caps[name] > 0 else 1.0
        else:
            per_score[name] = obj.score(mine, theirs or mine, o.weights)
        cons.update(obj.slo_constraints(spec.slo_limits(name), mine, name))
        entries[name] = replace(entry, score=per_score[name])
    score = obj.aggregate(per_score, weights, o.aggregate)
    if capacity_mode:
        cap = obj.aggregate_capacity(caps, weights, o.aggregate)
        ref_cap = (ref.capacity_rps or 0.0) if ref is not None else cap
        value = obj.equivalent_capacity(score, ref_cap, floor) if cap > 0 else 0.0
        return Scored(score, [value], cons, capacity_rps=cap, rate_steps=steps, scenarios=entries)
    return Scored(score, [score], cons, rate_steps=steps, scenarios=entries)
