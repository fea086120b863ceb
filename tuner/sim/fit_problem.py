"""The least-squares problem behind `tuner.sim.fit`: the factors a fit may move, the
simulator's predictions under them, and the residuals `log(predicted / measured)` of a set of
measured trials (plus one prior row per factor). Pure: no I/O, no study."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tuner.errors import EngineRefused
from tuner.measure.metrics import compute_metrics
from tuner.sim.planner import simulate
from tuner.sim.profiles import GpuProfile, ModelProfile
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.values import Flags

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

FIT_METRICS = HEADLINE_METRICS  # what calibration fits: the headline figures
MAX_FACTOR = 20.0  # a constant moves at most 20x either way: a loaded CPU box ran 10-20x slow
PRIOR_WEIGHT = 0.02  # per log-factor: a factor of 2 costs what a 1.4 % miss on one figure does
START_DESIGN = 16  # Sobol points tried before the local search (a power of 2)
START_SPAN = 3.0  # the design spans 1/3x..3x around the start
ROBUST_SCALE = 0.1  # soft-L1 loss: misses past ~10 % count linearly (a queueing cliff, an outlier)
DIFF_STEP = 0.01  # finite-difference step on log-factors: the scheduler's steps are discrete


def _scale_bandwidth(gpu: GpuProfile, f: float) -> GpuProfile:
    """Multiply bandwidth efficiency x peak by f; an efficiency past 1 goes into the peak figure."""
    wanted = gpu.constants.bandwidth_efficiency * f
    kept = min(1.0, wanted)
    gpu = replace(gpu, bandwidth_bytes_s=gpu.bandwidth_bytes_s * wanted / kept)
    return gpu.with_constants(bandwidth_efficiency=kept)


def _scale_compute(gpu: GpuProfile, f: float) -> GpuProfile:
    """GEMMs and attention both f x faster; an efficiency past 1 goes into the peak."""
    c = gpu.constants
    wanted = (c.flops_efficiency * f, c.attention_efficiency * f)
    peak = max(1.0, *wanted)
    gpu = replace(gpu, flops=gpu.flops * peak)
    return gpu.with_constants(
        flops_efficiency=wanted[0] / peak, attention_efficiency=wanted[1] / peak
    )


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
    "bandwidth": _scale_bandwidth,
    "flops": _scale_compute,
    "step_overhead": _scale_constant("step_overhead_s"),
    "per_seq_overhead": _scale_constant("per_seq_overhead_s"),
    "request_overhead": _scale_constant("request_overhead_s"),
    "allreduce": _scale_allreduce,
}


@dataclass(frozen=True)
class SimWorkload:
    """The requests every trial of one spec sends, as the planner takes them."""

    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    arrival_s: tuple[float, ...]
    max_concurrency: int | None = None
    # each prompt's token ids where the workload shares prefixes on purpose (the prefix cache);
    # None for a prompt without, or for all
    prompt_ids: tuple[tuple[int, ...] | None, ...] | None = None

    def prompt_id_lists(self) -> list[list[int] | None] | None:
        """`prompt_ids` as `tuner.sim.planner.simulate` takes them."""
        if self.prompt_ids is None:
            return None
        return [None if ids is None else list(ids) for ids in self.prompt_ids]

    def head(self, n: int | None) -> SimWorkload:
        """The first `n` requests (all when None): a cheaper, rougher stand-in."""
        if n is None or n >= len(self.prompt_lens):
            return self
        return replace(
            self,
            prompt_lens=self.prompt_lens[:n],
            output_lens=self.output_lens[:n],
            arrival_s=self.arrival_s[:n],
            prompt_ids=None if self.prompt_ids is None else self.prompt_ids[:n],
        )


@dataclass(frozen=True)
class Observation:
    """One measured trial: the flags the simulator takes (engine flags, tuned parameters and
    engine env, as `tuner plan` passes them) and the measured figures (vLLM bench keys)."""

    flags: Flags
    metrics: Mapping[str, float]
    trial: int | None = None  # the trial number, for reports


def apply_factors(base: GpuProfile, factors: Mapping[str, float]) -> GpuProfile:
    gpu = base
    for name, f in factors.items():
        gpu = FACTORS[name](gpu, float(f))
    return gpu


def speed_factors(speed: float) -> dict[str, float]:
    """The factors of an engine `speed` times faster on every constant (below 1: slower):
    compute and bandwidth × `speed`, all-reduce and every overhead ÷ `speed`. Every step then
    takes 1/`speed` of its time; what arrives when does not change, so queues do."""
    out = {"flops": speed, "bandwidth": speed, "allreduce": 1 / speed}
    return out | {k: 1 / speed for k in ("step_overhead", "per_seq_overhead", "request_overhead")}


def predict(
    model: ModelProfile,
    gpu: GpuProfile,
    flags: Flags,
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
            prompt_ids=workload.prompt_id_lists(),
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


class Problem:
    """Residuals of one set of observations, as a function of the log-factors."""

    def __init__(
        self,
        base: GpuProfile,
        model: ModelProfile,
        workload: SimWorkload,
        observations: Sequence[Observation],
        names: Sequence[str],
        metrics: Sequence[str],
        prior_weight: float = PRIOR_WEIGHT,
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
        from scipy.stats import qmc  # scipy on first use: the CLI's start stays quick

        design = qmc.Sobol(len(names), scramble=True, seed=0).random(START_DESIGN)
        spread = np.clip(x0 + math.log(START_SPAN) * (2 * design - 1), -bound, bound)
        return [x0, min(spread, key=self.cost)]

    def solve(self, x0: np.ndarray, max_nfev: int) -> OptimizeResult:
        from scipy.optimize import least_squares

        bound = math.log(MAX_FACTOR)
        return least_squares(
            self.residuals,
            x0,
            bounds=(-bound, bound),
            diff_step=np.full(len(x0), DIFF_STEP),  # one relative step per parameter
            x_scale=1.0,
            loss="soft_l1",
            f_scale=ROBUST_SCALE,
            ftol=1e-4,
            xtol=1e-3,
            gtol=1e-4,
            max_nfev=max_nfev,
        )

    def left_out(self, result: OptimizeResult) -> list[dict[str, float]]:
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


def is_positive(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0
