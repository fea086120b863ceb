"""Pareto fronts over stored trials (pure: no storage, no printing).

A trial is read through `TrialPoint`, one flat view of an Optuna `FrozenTrial` under the
conventions of stored studies: metrics are user attrs named like vLLM's result keys, a
failure has `failure_kind`, and infeasibility is an Optuna constraint > 0. The front is
computed on those metrics, not on `trial.values`, so that scalarised and multi-objective
studies give the same answer for the same measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tuner.errors import UserError
from tuner.slo import Direction, metric_direction, parse_slo

Objective = tuple[str, Direction]
Status = Literal["feasible", "infeasible", "failed", "pruned", "running"]

DEFAULT_OBJECTIVES = "p99_ttft_ms,mean_tpot_ms"


def is_metric(name: str) -> bool:
    """Whether a user-attr name is a vLLM result metric (as opposed to score, flags, notes)."""
    try:
        metric_direction(name)
    except UserError:
        return False
    return True


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class TrialPoint:
    """One trial as results code needs it: what was tried, what it measured, whether it counts."""

    number: int
    state: str
    params: dict[str, Any]
    metrics: dict[str, float]
    status: Status
    score: float | None = None
    baseline: bool = False
    simulated: bool = False
    failure: str | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def feasible(self) -> bool:
        return self.status == "feasible"

    @property
    def healthy(self) -> bool:
        """Measured without trouble: only SLO constraints (named `metric<=value`) may be broken.
        An SLO given at export time replaces the study's own, so these trials are candidates."""
        if self.status not in ("feasible", "infeasible") or not self.metrics:
            return False
        return all(v <= 0 or _is_slo_key(k) for k, v in self.constraints.items())


def trial_point(trial: Any) -> TrialPoint:
    """Read an Optuna `FrozenTrial` (duck-typed, so this module needs no optuna import)."""
    attrs = dict(trial.user_attrs)
    state = trial.state.name
    constraints, any_broken = _constraints(trial.system_attrs)
    metrics = {k: float(v) for k, v in attrs.items() if _finite(v) and is_metric(k)}
    kind, reason = attrs.get("failure_kind"), attrs.get("failure_reason")
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
    score = attrs.get("score")
    if not _finite(score) and state == "COMPLETE" and not kind and len(trial.values or []) == 1:
        score = float(trial.values[0])  # a study without the score attr: its single value
    return TrialPoint(
        number=trial.number,
        state=state,
        params=dict(trial.params),
        metrics=metrics,
        status=status,
        score=float(score) if _finite(score) else None,
        baseline=bool(attrs.get("baseline", False)),
        simulated=bool(attrs.get("simulated", False)),
        failure=failure,
        constraints=constraints,
        attrs=attrs,
    )


def _is_slo_key(key: str) -> bool:
    try:
        parse_slo(key)
    except UserError:
        return False
    return True


def _constraints(system_attrs: dict[str, Any]) -> tuple[dict[str, float], bool]:
    """Named constraints (`set_constraint`: system attrs `constraints:<key>`), else the legacy
    list under `constraints` (what optuna-dashboard reads); infeasible if either has a value > 0.
    """
    named = {
        k.split(":", 1)[1]: float(v)
        for k, v in system_attrs.items()
        if k.startswith("constraints:")
    }
    legacy = {str(i): float(v) for i, v in enumerate(system_attrs.get("constraints") or [])}
    broken = any(v > 0 for v in [*named.values(), *legacy.values()])
    return (named or legacy), broken


def parse_objectives(text: str) -> list[Objective]:
    """`p99_ttft_ms,output_throughput` -> names with their directions; unknown names are errors."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UserError("no objectives given: expected e.g. p99_ttft_ms,mean_tpot_ms")
    if len(set(names)) != len(names):
        raise UserError(f"an objective is named twice in {text!r}")
    return [(name, metric_direction(name)) for name in names]


def pareto_front(points: Sequence[dict[str, float]], objectives: Sequence[Objective]) -> list[int]:
    """Indices of the non-dominated points, in input order.

    A point dominates another when it is no worse on every objective and strictly better on
    at least one; so equal points never dominate each other and all stay on the front. A point
    without a finite value for every objective cannot be ranked and is left out.
    """
    if not objectives:
        raise ValueError("at least one objective is needed")
    ranked = [
        i for i, p in enumerate(points) if all(_finite(p.get(name)) for name, _ in objectives)
    ]
    if not ranked:
        return []
    sign = np.array([1.0 if d == "minimize" else -1.0 for _, d in objectives])
    cost = np.array([[points[i][name] for name, _ in objectives] for i in ranked]) * sign
    front = []
    for row, i in enumerate(ranked):
        no_worse = np.all(cost <= cost[row], axis=1)
        better = np.any(cost < cost[row], axis=1)
        if not np.any(no_worse & better):
            front.append(i)
    return front


def check_stored(points: Sequence[TrialPoint], names: Sequence[str], study_name: str) -> None:
    """A metric nobody stored is a user error (typo, or a percentile the workload did not ask)."""
    stored = {m for p in points for m in p.metrics}
    for name in names:
        if name not in stored:
            known = ", ".join(sorted(stored)) or "none"
            raise UserError(
                f"metric {name!r} is not stored in study {study_name!r} (stored: {known})"
            )


def front_of(points: Sequence[TrialPoint], objectives: Sequence[Objective]) -> list[TrialPoint]:
    """The feasible non-dominated trials, best first on the first objective."""
    feasible = [p for p in points if p.feasible]
    front = [feasible[i] for i in pareto_front([p.metrics for p in feasible], objectives)]
    name, direction = objectives[0]
    sign = 1.0 if direction == "minimize" else -1.0
    return sorted(front, key=lambda p: (sign * p.metrics[name], p.number))
