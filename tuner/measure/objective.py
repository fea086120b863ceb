"""The objective: weighted log-ratios against the baseline trial, SLO constraints, noise checks.

Pure functions: metrics in, numbers out. docs/objective.md has the formula and an example.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from tuner.spec.sections import ObjectiveSpec
from tuner.spec.slo import SloLimit, metric_direction, parse_slo

# A trial that did not produce a measurement (refused, crashed) scores this: e^10 ≈ 22000×
# worse than the baseline on a weight-1 metric, far beyond any measured trial.
PENALTY_SCORE = 10.0
_FLOOR = 1e-9
# The smallest gain called clear, relative to the figure it is against, however narrow the
# intervals: a figure's 95 % interval covers the sampling of requests within one run, not the
# drift between two runs or two engine starts (verify's `MIN_MOVE_PCT`, the same 5 %), and a
# simulated run's intervals are nearly zero wide (+0.1 % output throughput was "CLEARLY
# better" before; docs/objective.md, "Clearly better").
MIN_CLEAR_GAIN = 0.05


def score(
    metrics: Mapping[str, float], reference: Mapping[str, float], weights: Mapping[str, float]
) -> float:
    """Σ w·s·ln(m / m_ref), with s = +1 for metrics to minimise and −1 to maximise.

    Lower is better; the reference (baseline) scores 0; a score of −0.1 is roughly "10 %
    better on a weight-1 metric". Log-ratios make ms and tokens/s commensurable.
    """
    total = 0.0
    for name, weight in weights.items():
        if weight == 0:
            continue
        sign = 1.0 if metric_direction(name) == "minimize" else -1.0
        ratio = max(metrics[name], _FLOOR) / max(reference[name], _FLOOR)
        total += weight * sign * math.log(ratio)
    return total


def capacity_score(capacity_rps: float, reference_rps: float, floor_rps: float) -> float:
    """Capacity mode's score: −ln(capacity / the reference's), lower is better like every
    score; a capacity of 0 counts as `floor_rps` (below the lowest rate the search tries)."""
    ratio = max(capacity_rps, floor_rps) / max(reference_rps, floor_rps)
    return max(min(-math.log(ratio), PENALTY_SCORE), -PENALTY_SCORE) + 0.0  # never −0.0


def equivalent_capacity(score: float, reference_rps: float, floor_rps: float) -> float:
    """What Optuna maximises for a capacity-mode scenario mix: the reference's capacity scaled
    by e^(−score), the aggregated per-scenario log-ratios (req/s, in the score's order)."""
    return max(reference_rps, floor_rps) * math.exp(-score)


def aggregate(values: Mapping[str, float], weights: Mapping[str, float], how: str) -> float:
    """Scenario scores as one: their weighted mean, or the worst (the highest: lower is better)."""
    if how == "worst":
        return max(values.values())
    total = sum(weights[k] for k in values)
    return sum(weights[k] * v for k, v in values.items()) / total


def aggregate_capacity(
    values: Mapping[str, float], weights: Mapping[str, float], how: str
) -> float:
    """Scenario capacities as one (req/s): their weighted mean, or the lowest. Shown as the
    mix's capacity; never scored (a busy scenario's rate would drown a slow one's: the score
    aggregates each scenario's own score)."""
    if how == "worst":
        return min(values.values())
    total = sum(weights[k] for k in values)
    return sum(weights[k] * v for k, v in values.items()) / total


def constraints(
    spec: ObjectiveSpec, metrics: Mapping[str, float] | None, *, failed_fraction: float = 0.0
) -> dict[str, float]:
    """Optuna constraints (≤ 0 feasible): the engine produced a healthy run, and every SLO.

    A missing measurement violates everything by 1; an SLO miss is its relative distance.
    """
    out = health_constraints(spec, metrics, failed_fraction=failed_fraction)
    limits = [limit for text in spec.slo for limit in parse_slo(text)]
    out.update(slo_constraints(limits, metrics))
    return out


def health_constraints(
    spec: ObjectiveSpec, metrics: Mapping[str, float] | None, *, failed_fraction: float = 0.0
) -> dict[str, float]:
    """The engine produced a run (`measured`) and few enough requests failed."""
    out = {"measured": 0.0 if metrics is not None else 1.0}
    out["failed_requests"] = failed_fraction - spec.max_failed_fraction
    return out


def slo_constraints(
    limits: Sequence[SloLimit], metrics: Mapping[str, float] | None, scenario: str = ""
) -> dict[str, float]:
    """One constraint per SLO, named `metric<=value` (`scenario:metric<=value` for one
    scenario's figures): 0 when met, else its relative distance (1 with no measurement)."""
    out = {}
    for limit in limits:
        key = limit.constraint_key(scenario)
        if metrics is None:
            out[key] = 1.0
        else:
            m = dict(metrics)
            out[key] = 0.0 if limit.met(m) else max(limit.violation(m), 1e-6)
    return out


def clearly_better(
    a_ci: Mapping[str, tuple[float, float]],
    b_ci: Mapping[str, tuple[float, float]],
    weights: Mapping[str, float],
    a: Mapping[str, float] | None = None,
    b: Mapping[str, float] | None = None,
) -> bool:
    """True when, on some weighted metric, the 95 % interval of the difference a − b lies
    wholly on a's better side: the difference is not luck at that level.

    The difference's interval comes from each figure's own (MOVER, Zou & Donner 2008: the
    near side of each interval, combined in quadrature), so it needs the estimates `a` and
    `b` (the midpoints of the intervals where a figure is missing). Two intervals that do not
    overlap always pass; two that overlap a little may pass too: demanding disjoint intervals
    is a test at about the 0.5 % level, not 5 %. And never by less than `MIN_CLEAR_GAIN` of
    b's figure."""
    for name, weight in weights.items():
        if weight <= 0 or name not in a_ci or name not in b_ci:
            continue
        (a_lo, a_hi), (b_lo, b_hi) = a_ci[name], b_ci[name]
        a_est = _estimate(a, name, a_lo, a_hi)
        b_est = _estimate(b, name, b_lo, b_hi)
        if metric_direction(name) == "minimize":  # a better: a below b
            gain, a_side, b_side = b_est - a_est, a_hi - a_est, b_est - b_lo
        else:
            gain, a_side, b_side = a_est - b_est, a_est - a_lo, b_hi - b_est
        noise = math.hypot(max(a_side, 0.0), max(b_side, 0.0))
        if gain > noise and gain >= MIN_CLEAR_GAIN * abs(b_est):
            return True
    return False


def _estimate(figures: Mapping[str, float] | None, name: str, lo: float, hi: float) -> float:
    value = (figures or {}).get(name)
    if value is None or not math.isfinite(value) or not lo <= value <= hi:
        return (lo + hi) / 2
    return float(value)
