"""Pareto fronts over stored trials (pure: no storage, no printing).

Trials are `tuner.trial.TrialPoint`s. The front is computed on their stored metrics, not on
`trial.values`, so that scalarised and multi-objective studies give the same answer for the
same measurements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tuner.errors import UserError
from tuner.spec.figures import figure
from tuner.spec.metric_keys import metric_words
from tuner.spec.slo import Direction, metric_direction
from tuner.trial import TrialPoint, is_finite
from tuner.trial.clearly import clearly_better_on, within_noise

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


def _mode_pool(
    points: Sequence[TrialPoint],
) -> tuple[list[TrialPoint], float | None]:
    """The configs the study's front is drawn among, and the capacity they serve (below):
    the trials' own figures say whether they are capacities (a capacity study's)."""
    rated = [p for p in points if p.feasible and p.capacity_rps is not None]
    if not rated:
        return list(points), None
    top = max(p.capacity_rps for p in rated if p.capacity_rps is not None)
    return [p for p in rated if p.capacity_rps == top], top


def mode_front(
    points: Sequence[TrialPoint], objectives: Sequence[Objective]
) -> tuple[list[TrialPoint], float | None]:
    """The front of the study's mode, and the capacity it is drawn at. Capacity mode's: each
    trial's latencies were measured at its own capacity rate, so a config that serves less
    traffic sits lower and would make the plain front alone (the baseline, while the study
    recommends a config that serves more). The front is of the feasible configs that serve the
    highest capacity (the recommended config's). No capacity stored (the trials' own figures
    say): the plain front, and None. `tuner pareto` and the report's plot both draw this one
    (issue 34)."""
    pool, top = _mode_pool(points)
    return front_of(pool, objectives), top


@dataclass(frozen=True)
class NoiseFront:
    """The front with what the 95 % intervals can tell apart (`noise_front`)."""

    points: tuple[TrialPoint, ...]  # on the front, best first on the first objective
    names: tuple[str, ...]  # the front's axes (its objectives' metrics)
    # each front trial's group, by the number of its first trial (the group's "leader")
    leaders: Mapping[int, int] = field(default_factory=dict)
    near: tuple[TrialPoint, ...] = ()  # off the front, within noise of a config on it
    capacity_rps: float | None = None  # capacity mode: the front is of this capacity

    def within_noise_of(self, p: TrialPoint) -> int | None:
        """The trial whose group `p` joined (within noise of it); None: it leads its own."""
        leader = self.leaders.get(p.number)
        return None if leader is None or leader == p.number else leader

    @property
    def groups(self) -> int:
        """How many trade-offs the intervals tell apart: the groups on the front."""
        return len(set(self.leaders.values()))


def noise_front(points: Sequence[TrialPoint], objectives: Sequence[Objective]) -> NoiseFront:
    """The study's front (`mode_front`: dominance on the figures themselves, so a config that
    another is clearly better than on every axis is never on it), grouped by noise: walking
    the front best first on the first objective, a config within noise of an earlier group's
    first config (`tuner.trial.clearly.within_noise` on every axis: no difference's 95 %
    interval excludes zero) joins that group, else it starts one. Each group is one
    trade-off the measurements tell apart; its other configs are "within noise" of its first.
    `near`: the configs the front leaves out (dominated on the figures) that are within noise
    of one on it. The one rule `tuner pareto` and the report's plot draw (docs/results.md)."""
    pool, top = _mode_pool(points)
    front = front_of(pool, objectives)
    names = [name for name, _ in objectives]
    leaders: dict[int, int] = {}
    heads: list[TrialPoint] = []
    for p in front:
        head = next((h for h in heads if within_noise(h, p, names)), None)
        if head is None:
            heads.append(p)
        leaders[p.number] = p.number if head is None else head.number
    on = {p.number for p in front}
    near = [
        p
        for p in pool
        if p.feasible
        and p.number not in on
        and all(is_finite(p.metrics.get(n)) for n in names)
        and any(within_noise(q, p, names) for q in front)
    ]
    return NoiseFront(tuple(front), tuple(names), leaders, tuple(near), top)


def off_front_words(p: TrialPoint, front: NoiseFront) -> str | None:
    """Why the config `tuner best` / `tuner export` ships is not on `front`, in words; None
    when it is. It is chosen by the study's score, which the front's axes need not follow."""
    if p.number in front.leaders:
        return None
    names = front.names
    missing = [n for n in names if not is_finite(p.metrics.get(n))]
    if missing:
        return f"off the front: it has no {', '.join(missing)} figure"
    if front.capacity_rps is not None and p.capacity_rps != front.capacity_rps:
        return (
            f"off the front: it serves {figure(p.capacity_rps)} req/s, and the front is of the "
            f"configs that serve the most, {figure(front.capacity_rps)} req/s"
        )
    if not p.feasible:
        return "off the front: it breaks a constraint"
    objectives = [(n, metric_direction(n)) for n in names]
    beats = [q for q in front.points if pareto_front([p.metrics, q.metrics], objectives) == [1]]
    if not beats:
        return None
    q = beats[0]
    clear = [metric_words(n)[0] for n in names if clearly_better_on(q, p, n)]
    how = (
        f"clearly better on {', '.join(clear)}"
        if clear
        else "within noise"
        if within_noise(q, p, names)
        else "no interval to tell"
    )
    return (
        f"off the front: trial {q.number} is at least as good on every axis ({how}); "
        "the study's score, which picks the config, is not these axes alone"
    )
