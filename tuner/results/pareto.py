"""Pareto fronts over stored trials (pure: no storage, no printing).

Trials are `tuner.trial.TrialPoint`s. The front is computed on their stored metrics, not on
`trial.values`, so that scalarised and multi-objective studies give the same answer for the
same measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tuner.errors import UserError
from tuner.spec.slo import Direction, metric_direction
from tuner.trial import TrialPoint, is_finite

Objective = tuple[str, Direction]


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
        i for i, p in enumerate(points) if all(is_finite(p.get(name)) for name, _ in objectives)
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


def check_complete(points: Sequence[TrialPoint], study_name: str) -> None:
    """A study with no complete trial has nothing to pick, plot or report: a user error."""
    if not any(p.state == "COMPLETE" for p in points):
        raise UserError(f"study {study_name!r} has no complete trial yet")


def check_stored(points: Sequence[TrialPoint], names: Sequence[str], study_name: str) -> None:
    """A metric nobody stored is a user error (typo, or a percentile the workload did not ask)."""
    stored = {m for p in points for m in p.metrics}
    if not stored:  # not a typo: nothing was measured (it read "... (stored: none)")
        raise UserError(f"no trial of study {study_name!r} was measured (`tuner trials` says why)")
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


def mode_front(
    points: Sequence[TrialPoint], objectives: Sequence[Objective], *, capacity: bool
) -> tuple[list[TrialPoint], float | None]:
    """The front of the study's mode, and the capacity it is drawn at: not `capacity`, the
    plain front and None. Capacity mode's: each trial's latencies were measured at its own
    capacity rate, so a config that serves less traffic sits lower and would make the plain
    front alone (the baseline, while the study recommends a config that serves more). The
    front is of the feasible configs that serve the highest capacity (the recommended
    config's). No capacity stored: the plain front, and None. `tuner pareto` and the report's
    plot both draw this one (issue 34)."""
    rated = [p for p in points if p.feasible and p.capacity_rps is not None]
    if not capacity or not rated:
        return front_of(points, objectives), None
    top = max(p.capacity_rps for p in rated if p.capacity_rps is not None)
    return front_of([p for p in rated if p.capacity_rps == top], objectives), top
