"""A measured trial's score, Optuna values and extra constraints, in every objective mode.

One workload in scalar or multi mode: `tuner.measure.objective` as always. Capacity mode: the score
is −ln(capacity / the reference's capacity), Optuna maximises `capacity_rps`. Scenarios:
each scenario is scored against the reference's same scenario, then aggregated (weighted
mean or worst case, `objective.aggregate`); SLOs are judged per scenario. docs/objective.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner.measure import objective as obj
from tuner.measure.measurement import Measurement
from tuner.spec.study import StudySpec
from tuner.trial import point as tr
from tuner.trial.point import TrialPoint


@dataclass(frozen=True)
class Scored:
    score: float
    values: list[float]
    attrs: dict[str, Any] = field(default_factory=dict)  # capacity, steps, scenarios
    constraints: dict[str, float] = field(default_factory=dict)  # beyond objective.constraints


def _capacity_of(entry: Mapping[str, Any] | None) -> float:
    cap = (entry or {}).get("capacity_rps")
    return float(cap) if tr.is_finite(cap) else 0.0


def score_trial(spec: StudySpec, m: Measurement, ref: TrialPoint | None) -> Scored:
    """Score `m` against the reference trial (None: `m` is its own reference, the baseline)."""
    o = spec.objective
    capacity_mode = o.mode == "capacity"
    floor = o.search.min_rps / 2
    steps = {tr.RATE_STEPS: m.rate_steps} if m.rate_steps else {}
    if not spec.scenarios:
        metrics = m.metrics or {}
        reference = ref.metrics if ref is not None else metrics
        if not capacity_mode:
            values = obj.objective_values(o, metrics, reference)
            return Scored(obj.score(metrics, reference, o.weights), values)
        cap = _capacity_of(m.capacity)
        ref_cap = (ref.capacity_rps or 0.0) if ref is not None else cap
        return Scored(
            obj.capacity_score(cap, ref_cap, floor),
            [cap],
            {**_capacity_attrs(m.capacity), **steps},
            {"capacity": 0.0 if cap > 0 else 1.0},
        )
    weights = {s.name: s.weight for s in spec.scenarios}
    per_score: dict[str, float] = {}
    caps: dict[str, float] = {}
    cons: dict[str, float] = {}
    entries = {}
    for name, entry in m.scenarios.items():
        mine = entry["metrics"]
        theirs = ref.scenario_metrics(name) if ref is not None else mine
        if capacity_mode:
            caps[name] = _capacity_of(entry.get("capacity"))
            ref_cap = _capacity_of(ref.scenario(name).get("capacity")) if ref else caps[name]
            per_score[name] = obj.capacity_score(caps[name], ref_cap, floor)
            cons[f"{name}:capacity"] = 0.0 if caps[name] > 0 else 1.0
        else:
            per_score[name] = obj.score(mine, theirs or mine, o.weights)
        cons.update(obj.slo_constraints(spec.slo_limits(name), mine, name))
        entries[name] = {**entry, tr.SCORE: per_score[name]}
    attrs: dict[str, Any] = {tr.SCENARIOS: entries, **steps}
    if capacity_mode:
        cap = obj.aggregate_capacity(caps, weights, o.aggregate)
        ref_cap = (ref.capacity_rps or 0.0) if ref is not None else cap
        attrs[tr.CAPACITY_RPS] = cap
        return Scored(obj.capacity_score(cap, ref_cap, floor), [cap], attrs, cons)
    score = obj.aggregate(per_score, weights, o.aggregate)
    return Scored(score, [score], attrs, cons)


def _capacity_attrs(found: Mapping[str, Any] | None) -> dict[str, Any]:
    if not found:
        return {}
    out: dict[str, Any] = {tr.CAPACITY: dict(found), tr.CAPACITY_RPS: _capacity_of(found)}
    if tr.is_finite(found.get("goodput_rps")):
        out[tr.CAPACITY_GOODPUT] = float(found["goodput_rps"])
    return out
