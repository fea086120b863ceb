"""Fit an accelerator profile's constants to measured trials (pure: no I/O, no study).

The fit moves a few multiplicative factors on the constants that the measured figures can
tell apart (`FACTORS`), from a base profile, so that the simulator's TTFT, TPOT and
throughput match the measured ones per configuration:

    minimise  sum over trials and metrics of log(predicted / measured)^2
              + sum over factors of (PRIOR_WEIGHT * log factor)^2

with `scipy.optimize.least_squares` over the log-factors, bounded to [1/MAX_FACTOR,
MAX_FACTOR]. Log-ratios make a 10 % miss cost the same on a 5 ms TPOT and a 2 s TTFT, and
the weak prior keeps a factor that the trials cannot see (e.g. the compute roofline when no
trial is compute bound) at the base profile's value instead of wandering. The error that
`Calibration` reports is measured on trials held out of the fit (k folds), not on the
trials it was fitted to. The choice is explained in docs/simulator.md ("Calibration").
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tuner.errors import UserError
from tuner.sim.fit_problem import (
    FACTORS,
    FIT_METRICS,
    MAX_FACTOR,
    PRIOR_WEIGHT,
    Observation,
    Problem,
    SimWorkload,
    apply_factors,
    is_positive,
    predict,
    speed_factors,
)
from tuner.sim.profiles import GpuProfile, ModelProfile

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

# The fit's inputs and pieces, used with it (`from tuner.sim.fit import ...`).
__all__ = [
    "FACTORS",
    "FIGURE_NOISE",
    "FIT_METRICS",
    "LOOP_PRIOR_WEIGHT",
    "MAX_FACTOR",
    "MAX_OBSERVATIONS",
    "MIN_OBSERVATIONS",
    "PRIOR_WEIGHT",
    "Calibration",
    "Observation",
    "SimWorkload",
    "apply_factors",
    "fit",
    "is_positive",
    "median_errors",
    "predict",
    "speed_factors",
]

MIN_OBSERVATIONS = 4  # three folds of at least one held-out trial, each fitted on >= 3
MAX_OBSERVATIONS = 16  # fitted: the first (the baseline) and the latest; ample for 5 factors
# The search loop's prior (`tuner.fidelity.screen`), which fits from the first real trial on: a
# factor of 2 is one standard deviation of belief (log 2), a measured figure is good to about 10 %
# (one standard deviation, in log), so each prior row weighs 0.1 / log 2 = 0.14 against a
# figure's row. With one trial's three figures the prior holds what they cannot identify; as
# trials accrue their rows outweigh it (docs/multi-fidelity.md, "Calibration from trial 1").
LOOP_PRIOR_WEIGHT = 0.1 / math.log(2.0)
# The figure noise that prior assumes (one standard deviation of a measured figure, in log):
# the scale of the fit's posterior covariance (`Calibration.covariance`).
FIGURE_NOISE = 0.1


# Fitted unless told otherwise; "allreduce" is added when the trials span several TP sizes
# (at one TP its fixed cost is the step overhead's twin and cannot be told apart).
DEFAULT_FACTORS = ("bandwidth", "flops", "step_overhead", "per_seq_overhead", "request_overhead")


@dataclass(frozen=True)
class Calibration:
    """A fit's result (`Calibration(base)`: none yet, the base profile as it is). Errors are
    per metric: the median of |predicted / measured - 1| (`median_errors`)."""

    profile: GpuProfile  # the base profile with the factors applied
    factors: dict[str, float] = field(default_factory=dict)  # name -> multiplier (1: unchanged)
    held_out_error: dict[str, float] = field(default_factory=dict)  # on trials held out (k folds)
    fit_error: dict[str, float] = field(default_factory=dict)  # on the trials it was fitted to
    base_error: dict[str, float] = field(default_factory=dict)  # the base profile's, before
    held_out_predictions: tuple[dict[str, float], ...] = ()  # per observation, its fold's fit
    observations: int = 0
    folds: int = 0  # held-out folds: the observation count for leave-one-out
    held_out_method: str = (
        "none"  # "leave-one-out (linearised)", "k-fold refits", "none (one trial)"
    )
    skipped: tuple[int | None, ...] = ()  # trials the base profile refuses, or with no figure
    trials: tuple[int | None, ...] = ()  # the trials it was fitted to (`Observation.trial`)
    seconds: float = 0.0
    evaluations: int = 0
    metrics: tuple[str, ...] = field(default=FIT_METRICS)
    # of the log-factors (in `factors`' order), to first order around the fit (Laplace):
    # FIGURE_NOISE^2 (J^T J)^-1 with J the Jacobian of its rows, prior rows included. Wide
    # along what the trials cannot tell apart (e.g. step overhead against bandwidth).
    covariance: tuple[tuple[float, ...], ...] = ()


def _usable(o: Observation, metrics: Sequence[str]) -> bool:
    return any(is_positive(o.metrics.get(m)) for m in metrics)


def _tp(flags: Mapping[str, object]) -> int:
    value = flags.get("tensor-parallel-size", 1)
    try:
        return int(value) if isinstance(value, int | float | str) else 1
    except ValueError:
        return 1


def median_errors(
    observations: Sequence[Observation],
    predictions: Sequence[dict[str, float] | None],
    metrics: Sequence[str] = FIT_METRICS,
) -> dict[str, float]:
    """How far `predictions` (one per observation, None: refused) are off the measured
    figures: the median of |predicted / measured - 1| per metric with one pair at least (the
    fit's errors, the plan notes' accuracy: `tuner.fidelity.calibration.Trust`)."""
    errors: dict[str, float] = {}
    for m in metrics:
        misses = [
            abs(pred[m] / o.metrics[m] - 1.0)
            for o, pred in zip(observations, predictions, strict=True)
            if pred and m in pred and is_positive(o.metrics.get(m))
        ]
        if misses:
            errors[m] = float(np.median(misses))
    return errors


def fit(
    base: GpuProfile,
    observations: Sequence[Observation],
    *,
    model: ModelProfile,
    workload: SimWorkload,
    factors: Sequence[str] | None = None,
    folds: int | None = None,
    max_requests: int | None = None,
    max_nfev: int = 60,
    max_observations: int | None = MAX_OBSERVATIONS,
    start: Mapping[str, float] | None = None,
    metrics: Sequence[str] = FIT_METRICS,
    prior_weight: float = PRIOR_WEIGHT,
    min_observations: int = MIN_OBSERVATIONS,
) -> Calibration:
    """Fit `factors` (default: `DEFAULT_FACTORS`, plus "allreduce" when the trials span
    several TP sizes) of `base` to `observations`, all measured under one workload.

    `max_requests` simulates only the workload's first requests (faster, rougher). The
    held-out error is leave-one-trial-out: to first order from the fit's Jacobian when
    `folds` is None (no extra simulation: for a fit after every trial), else exactly, from
    `folds` refits (at most one per observation) each started from the full fit and
    predicting the observations it did not see (for `tuner calibrate`).

    Speed: a fit simulates each observation about (1 + len(factors)) times per iteration.
    `max_observations` keeps the first observation (a study's baseline) and the latest
    others, and `start` (e.g. the previous fit's `factors`) starts the search there, which
    cuts the iterations when the loop refits after each new trial. `prior_weight` is the
    weight of each factor's prior row (`LOOP_PRIOR_WEIGHT`: a fit from a single trial). Raises
    `UserError` when fewer than `min_observations` observations have a measured figure the
    base profile can simulate. Below two observations nothing can be held out: the held-out
    error is then empty.
    """
    started = time.perf_counter()
    metrics = tuple(metrics)
    sim_workload = workload.head(max_requests)
    base_preds = [
        predict(model, base, o.flags, sim_workload, metrics) if _usable(o, metrics) else None
        for o in observations
    ]
    usable = _kept(observations, base_preds, max_observations)
    base_of = {id(o): p for o, p in zip(observations, base_preds, strict=True)}
    skipped = tuple(o.trial for o, p in zip(observations, base_preds, strict=True) if not p)
    if len(usable) < max(min_observations, 1):
        raise UserError(
            f"calibration needs at least {max(min_observations, 1)} measured trials that the "
            f"simulator can run; {len(usable)} given"
        )
    names = _factor_names(factors, usable)
    full = Problem(base, model, sim_workload, usable, names, metrics, prior_weight)
    results = [full.solve(x0, max_nfev) for x0 in full.starting_points(names, start)]
    result = min(results, key=lambda r: r.cost)
    x = result.x
    fitted = full.predictions(x)
    held_out, k, method = _held_out(full, result, folds, max_nfev)

    factor_values = {n: float(v) for n, v in zip(names, np.exp(x), strict=True)}
    return Calibration(
        profile=apply_factors(base, factor_values),
        factors=factor_values,
        held_out_error=median_errors(usable, held_out, metrics),
        fit_error=median_errors(usable, fitted, metrics),
        base_error=median_errors(usable, [base_of[id(o)] for o in usable], metrics),
        held_out_predictions=tuple(p or {} for p in held_out),
        observations=len(usable),
        folds=k,
        held_out_method=method,
        skipped=skipped,
        trials=tuple(o.trial for o in usable),
        seconds=time.perf_counter() - started,
        evaluations=full.evaluations,
        metrics=metrics,
        covariance=_covariance(result),
    )


def _covariance(result: OptimizeResult) -> tuple[tuple[float, ...], ...]:
    """The log-factors' covariance to first order: FIGURE_NOISE^2 (J^T J)^-1."""
    jac = np.asarray(result.jac, dtype=float)
    cov = FIGURE_NOISE**2 * np.linalg.pinv(jac.T @ jac)
    return tuple(tuple(float(v) for v in row) for row in cov)


def _kept(
    observations: Sequence[Observation],
    base_preds: Sequence[dict[str, float] | None],
    max_observations: int | None,
) -> list[Observation]:
    """The observations the base profile can simulate; past `max_observations`, the first
    (a study's baseline) and the latest others."""
    usable = [o for o, p in zip(observations, base_preds, strict=True) if p]
    if max_observations is not None and len(usable) > max_observations > 1:
        usable = [usable[0], *usable[len(usable) - max_observations + 1 :]]
    return usable


def _held_out(
    full: Problem, result: OptimizeResult, folds: int | None, max_nfev: int
) -> tuple[list[dict[str, float] | None], int, str]:
    """Each observation as predicted without it, the folds and how: none from one
    observation, to first order (leave-one-out) without `folds`, else from `folds` refits."""
    n = len(full.observations)
    if n < 2:
        return [None] * n, 0, "none (one trial)"
    if folds is None:
        return list(full.left_out(result)), n, "leave-one-out (linearised)"
    return *_k_fold(full, result.x, folds, max_nfev), "k-fold refits"


def _factor_names(factors: Sequence[str] | None, usable: Sequence[Observation]) -> tuple[str, ...]:
    names = tuple(factors) if factors is not None else _default_factors(usable)
    unknown = [n for n in names if n not in FACTORS]
    if unknown:
        raise UserError(f"unknown calibration factors {unknown}; known: {', '.join(FACTORS)}")
    return names


def _k_fold(
    full: Problem, x: np.ndarray, folds: int, max_nfev: int
) -> tuple[list[dict[str, float] | None], int]:
    """Predictions of each observation by a refit on the other folds (fold = index mod k)."""
    usable = full.observations
    k = max(2, min(folds, len(usable)))
    held_out: list[dict[str, float] | None] = [None] * len(usable)
    for fold in range(k):
        train = [o for i, o in enumerate(usable) if i % k != fold]
        problem = Problem(
            full.base, full.model, full.workload, train, full.names, full.metrics, full.prior_weight
        )
        x_fold = problem.solve(x, max(len(x) + 2, max_nfev // 3)).x
        gpu = apply_factors(full.base, dict(zip(full.names, np.exp(x_fold), strict=True)))
        for i in range(fold, len(usable), k):
            held_out[i] = predict(full.model, gpu, usable[i].flags, full.workload, full.metrics)
        full.evaluations += problem.evaluations + len(range(fold, len(usable), k))
    return held_out, k


def _default_factors(observations: Sequence[Observation]) -> tuple[str, ...]:
    sizes = {_tp(o.flags) for o in observations}
    return DEFAULT_FACTORS + (("allreduce",) if len(sizes) > 1 and max(sizes) > 1 else ())
