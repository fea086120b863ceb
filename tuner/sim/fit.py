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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares
from scipy.stats import qmc

from tuner.errors import EngineRefused, UserError
from tuner.measure.metrics import compute_metrics
from tuner.sim.planner import simulate
from tuner.sim.profiles import GpuProfile, ModelProfile
from tuner.spec.metric_keys import HEADLINE_METRICS

FIT_METRICS = HEADLINE_METRICS  # what calibration fits: the headline figures
MIN_OBSERVATIONS = 4  # three folds of at least one held-out trial, each fitted on >= 3
MAX_OBSERVATIONS = 16  # fitted: the first (the baseline) and the latest; ample for 5 factors
MAX_FACTOR = 20.0  # a constant moves at most 20x either way: a loaded CPU box ran 10-20x slow
PRIOR_WEIGHT = 0.02  # per log-factor: a factor of 2 costs what a 1.4 % miss on one figure does
# The search loop's prior (`tuner.fidelity.screen`), which fits from the first real trial on: a
# factor of 2 is one standard deviation of belief (log 2), a measured figure is good to about 10 %
# (one standard deviation, in log), so each prior row weighs 0.1 / log 2 = 0.14 against a
# figure's row. With one trial's three figures the prior holds what they cannot identify; as
# trials accrue their rows outweigh it (docs/multi-fidelity.md, "Calibration from trial 1").
LOOP_PRIOR_WEIGHT = 0.1 / math.log(2.0)
START_DESIGN = 16  # Sobol points tried before the local search (a power of 2)
START_SPAN = 3.0  # the design spans 1/3x..3x around the start
ROBUST_SCALE = 0.1  # soft-L1 loss: misses past ~10 % count linearly (a queueing cliff, an outlier)
DIFF_STEP = 0.01  # finite-difference step on log-factors: the scheduler's steps are discrete


def _scale_efficiency(gpu: GpuProfile, eff: str, peak: str, f: float) -> GpuProfile:
    """Multiply efficiency x peak by f; an efficiency past 1 goes into the peak figure."""
    wanted = getattr(gpu.constants, eff) * f
    kept = min(1.0, wanted)
    gpu = replace(gpu, **{peak: getattr(gpu, peak) * wanted / kept})
    return gpu.with_constants(**{eff: kept})


def _scale_constant(name: str) -> Callable[[GpuProfile, float], GpuProfile]:
    return lambda gpu, f: gpu.with_constants(**{name: getattr(gpu.constants, name) * f})


def _scale_allreduce(gpu: GpuProfile, f: float) -> GpuProfile:
    """All-reduce f times slower: f x the per-call latency, interconnect bandwidth / f."""
    return replace(
        gpu,
        allreduce_latency_s=gpu.allreduce_latency_s * f,
        interconnect_bytes_s=gpu.interconnect_bytes_s / f,
    )


# name -> how a factor changes the profile (1 = unchanged); docs/simulator.md says what
# each one is seen in.
FACTORS: dict[str, Callable[[GpuProfile, float], GpuProfile]] = {
    "bandwidth": lambda gpu, f: _scale_efficiency(
        gpu, "bandwidth_efficiency", "bandwidth_bytes_s", f
    ),
    "flops": lambda gpu, f: _scale_efficiency(gpu, "flops_efficiency", "flops", f),
    "step_overhead": _scale_constant("step_overhead_s"),
    "per_seq_overhead": _scale_constant("per_seq_overhead_s"),
    "request_overhead": _scale_constant("request_overhead_s"),
    "allreduce": _scale_allreduce,
}
# Fitted unless told otherwise; "allreduce" is added when the trials span several TP sizes
# (at one TP its fixed cost is the step overhead's twin and cannot be told apart).
DEFAULT_FACTORS = ("bandwidth", "flops", "step_overhead", "per_seq_overhead", "request_overhead")


@dataclass(frozen=True)
class SimWorkload:
    """The requests every trial of one spec sends, as the planner takes them."""

    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrival_s: tuple[float, ...]
    max_concurrency: int | None = None

    def head(self, n: int | None) -> SimWorkload:
        """The first `n` requests (all when None): a cheaper, rougher stand-in."""
        if n is None or n >= len(self.prompt_lens):
            return self
        return replace(
            self,
            prompt_lens=self.prompt_lens[:n],
            output_lens=self.output_lens[:n],
            arrival_s=self.arrival_s[:n],
        )


@dataclass(frozen=True)
class Observation:
    """One measured trial: the flags the simulator takes (engine flags, tuned parameters and
    engine env, as `tuner plan` passes them) and the measured figures (vLLM bench keys)."""

    flags: Mapping[str, Any]
    metrics: Mapping[str, float]
    trial: int | None = None  # the trial number, for reports


@dataclass(frozen=True)
class Calibration:
    """A fit's result. Errors are per metric: the median of |predicted / measured - 1|."""

    profile: GpuProfile  # the base profile with the factors applied
    factors: dict[str, float]  # name -> multiplier on the base profile (1 = unchanged)
    held_out_error: dict[str, float]  # on trials held out of the fit (k folds)
    fit_error: dict[str, float]  # on the trials it was fitted to
    base_error: dict[str, float]  # the base profile's, on the same trials (before the fit)
    held_out_predictions: tuple[dict[str, float], ...]  # per observation, from its fold's fit
    observations: int
    folds: int  # held-out folds: the observation count for leave-one-out
    held_out_method: str  # "leave-one-out (linearised)", "k-fold refits" or "none (one trial)"
    skipped: tuple[int | None, ...] = ()  # trials the base profile refuses, or with no figure
    seconds: float = 0.0
    evaluations: int = 0
    metrics: tuple[str, ...] = field(default=FIT_METRICS)


def apply_factors(base: GpuProfile, factors: Mapping[str, float]) -> GpuProfile:
    gpu = base
    for name, f in factors.items():
        gpu = FACTORS[name](gpu, float(f))
    return gpu


def predict(
    model: ModelProfile,
    gpu: GpuProfile,
    flags: Mapping[str, Any],
    workload: SimWorkload,
    metrics: Sequence[str] = FIT_METRICS,
) -> dict[str, float] | None:
    """The simulator's figures for one config, in vLLM bench's keys; None if it refuses."""
    try:
        sim = simulate(
            model,
            gpu,
            dict(flags),
            list(workload.prompt_lens),
            list(workload.output_lens),
            list(workload.arrival_s),
            max_concurrency=workload.max_concurrency,
        )
    except EngineRefused:
        return None
    if sim.duration_s <= 0:
        return None
    stats = [m.split("_") for m in metrics if m.count("_") == 2 and m.endswith("_ms")]
    figures = compute_metrics(
        sim.records,
        sim.duration_s,
        selected_metrics=sorted({name for _, name, _ in stats}),
        percentiles=sorted({float(s[1:]) for s, _, _ in stats if s[:1] == "p"}) or [99.0],
    )
    return {m: float(figures[m]) for m in metrics if m in figures}


class _Problem:
    """Residuals of one set of observations, as a function of the log-factors."""

    def __init__(
        self, base, model, workload, observations, names, metrics, prior_weight=PRIOR_WEIGHT
    ) -> None:
        self.base, self.model, self.workload = base, model, workload
        self.observations, self.names, self.metrics = observations, names, metrics
        self.prior_weight = prior_weight
        # one row per (observation, measured metric), then one prior row per factor
        self.rows = [
            (i, m)
            for i, o in enumerate(observations)
            for m in metrics
            if is_positive(o.metrics.get(m))
        ]
        self.evaluations = 0

    def predictions(self, x: np.ndarray) -> list[dict[str, float] | None]:
        gpu = apply_factors(self.base, dict(zip(self.names, np.exp(x), strict=True)))
        self.evaluations += len(self.observations)
        return [
            predict(self.model, gpu, o.flags, self.workload, self.metrics)
            for o in self.observations
        ]

    def residuals(self, x: np.ndarray) -> np.ndarray:
        preds = self.predictions(x)
        out: list[float] = []
        for i, m in self.rows:
            p = (preds[i] or {}).get(m)
            # a config refused under these factors: a large, finite miss
            out.append(math.log(p / self.observations[i].metrics[m]) if p and p > 0 else 5.0)
        out.extend(self.prior_weight * x)
        return np.asarray(out)

    def cost(self, x: np.ndarray) -> float:
        r = self.residuals(x)
        return float(np.sum(2 * ROBUST_SCALE**2 * (np.sqrt(1 + (r / ROBUST_SCALE) ** 2) - 1)))

    def starting_points(
        self, names: Sequence[str], start: Mapping[str, float] | None
    ) -> list[np.ndarray]:
        """The given start (else the base profile) and, without a start, the best point of a
        small scrambled Sobol design within 3x of it: the scheduler's discrete events (a
        queue forms or not, the slowest request changes) leave shallow local minima, and two
        local searches from different places miss fewer of them than one."""
        bound = math.log(MAX_FACTOR) * (1 - 1e-9)
        x0 = np.clip(np.log([float((start or {}).get(n, 1.0)) for n in names]), -bound, bound)
        if start is not None:
            return [x0]  # a previous fit: already near, a second search would only cost time
        design = qmc.Sobol(len(names), scramble=True, seed=0).random(START_DESIGN)
        spread = np.clip(x0 + math.log(START_SPAN) * (2 * design - 1), -bound, bound)
        return [x0, min(spread, key=self.cost)]

    def solve(self, x0: np.ndarray, max_nfev: int):
        bound = math.log(MAX_FACTOR)
        return least_squares(
            self.residuals,
            x0,
            bounds=(-bound, bound),
            diff_step=DIFF_STEP,
            x_scale=1.0,
            loss="soft_l1",
            f_scale=ROBUST_SCALE,
            ftol=1e-4,
            xtol=1e-3,
            gtol=1e-4,
            max_nfev=max_nfev,
        )

    def left_out(self, result) -> list[dict[str, float]]:
        """Each observation's figures as a fit without it would predict them, to first order:
        the grouped leave-one-out residual e_g = (I - H_gg)^-1 r_g, H = J (J^T J)^-1 J^T."""
        jac, res = np.asarray(result.jac), np.asarray(result.fun)
        hat = jac @ np.linalg.pinv(jac.T @ jac) @ jac.T
        out: list[dict[str, float]] = [{} for _ in self.observations]
        for i, o in enumerate(self.observations):
            rows = [r for r, (j, _) in enumerate(self.rows) if j == i]
            if not rows:
                continue
            block = np.eye(len(rows)) - hat[np.ix_(rows, rows)]
            loo = np.linalg.lstsq(block, res[rows], rcond=None)[0]
            for r, e in zip(rows, loo, strict=True):
                m = self.rows[r][1]
                out[i][m] = float(o.metrics[m] * math.exp(min(e, 50.0)))
        return out


def _usable(o: Observation, metrics: Sequence[str]) -> bool:
    return any(is_positive(o.metrics.get(m)) for m in metrics)


def is_positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _tp(flags: Mapping[str, Any]) -> int:
    value = flags.get("tensor-parallel-size", 1)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1


def _errors(
    observations: Sequence[Observation],
    predictions: Sequence[dict[str, float] | None],
    metrics: Sequence[str],
) -> dict[str, float]:
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
    usable = [o for o, p in zip(observations, base_preds, strict=True) if p]
    base_of = {id(o): p for o, p in zip(observations, base_preds, strict=True)}
    if max_observations is not None and len(usable) > max_observations > 1:
        usable = [usable[0], *usable[len(usable) - max_observations + 1 :]]
    skipped = tuple(o.trial for o, p in zip(observations, base_preds, strict=True) if not p)
    if len(usable) < max(min_observations, 1):
        raise UserError(
            f"calibration needs at least {max(min_observations, 1)} measured trials that the "
            f"simulator can run; {len(usable)} given"
        )
    names = tuple(factors) if factors is not None else _default_factors(usable)
    unknown = [n for n in names if n not in FACTORS]
    if unknown:
        raise UserError(f"unknown calibration factors {unknown}; known: {', '.join(FACTORS)}")
    full = _Problem(base, model, sim_workload, usable, names, metrics, prior_weight)
    results = [full.solve(x0, max_nfev) for x0 in full.starting_points(names, start)]
    result = min(results, key=lambda r: r.cost)
    x = result.x
    fitted = full.predictions(x)
    held_out: list[dict[str, float] | None]
    if len(usable) < 2:
        held_out, k = [None] * len(usable), 0
    elif folds is None:
        held_out, k = list(full.left_out(result)), len(usable)
    else:
        held_out, k = _k_fold(full, x, folds, max_nfev)
    evaluations = full.evaluations

    factor_values = {n: float(v) for n, v in zip(names, np.exp(x), strict=True)}
    return Calibration(
        profile=apply_factors(base, factor_values),
        factors=factor_values,
        held_out_error=_errors(usable, held_out, metrics),
        fit_error=_errors(usable, fitted, metrics),
        base_error=_errors(usable, [base_of[id(o)] for o in usable], metrics),
        held_out_predictions=tuple(p or {} for p in held_out),
        observations=len(usable),
        folds=k,
        held_out_method=(
            "none (one trial)"
            if k == 0
            else "leave-one-out (linearised)"
            if folds is None
            else "k-fold refits"
        ),
        skipped=skipped,
        seconds=time.perf_counter() - started,
        evaluations=evaluations,
        metrics=metrics,
    )


def _k_fold(
    full: _Problem, x: np.ndarray, folds: int, max_nfev: int
) -> tuple[list[dict[str, float] | None], int]:
    """Predictions of each observation by a refit on the other folds (fold = index mod k)."""
    usable = full.observations
    k = max(2, min(folds, len(usable)))
    held_out: list[dict[str, float] | None] = [None] * len(usable)
    for fold in range(k):
        train = [o for i, o in enumerate(usable) if i % k != fold]
        problem = _Problem(
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
