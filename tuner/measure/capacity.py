"""The capacity search: the highest request rate at which every SLO holds (pure).

Given `measure(rate_rps) -> Step` (one workload run against an engine that is already up),
`search` places a bracket [lo feasible, hi infeasible] and bisects it geometrically until
hi / lo ≤ 1 + resolution, or the run cap is reached. The first run's figures place the
bracket (docs/objective.md, "Capacity mode"):

- feasible at r: the next rate is r × the smallest SLO headroom (limit / value) of that run,
  clipped to [GROW_MIN, GROW_MAX] (so every feasible run places the next);
- infeasible at r: an overloaded engine serves about its saturation throughput, so the next
  rate is 0.8 × the request throughput it reached, clipped to [r / SHRINK_MAX, r / GROW_MIN]
  (halving when the run has no throughput, e.g. stopped before any request finished).

Each step is trusted as measured: noise can make a curve non-monotone, and the search keeps
the invariant "lo was feasible, hi was not" with lo < hi, so its answer is a rate that met
every SLO when it was run. A step stopped early (an SLO broken for sure) is infeasible.

A run of N prompts at rate r sends for N / r seconds; above the engine's capacity its backlog
grows only while requests arrive, so a short send phase can end before the queue pushes a
TTFT or E2EL percentile past its limit. `shown_rps` is the highest rate a workload can show
to be sustained: its send phase lasts at least `SEND_PHASE_FACTOR` × the tightest such limit
(the search's ceiling, beside `max_rps`), counted over the share of requests the limit
reads: a median or mean limit needs twice the send phase of a P99 one (`queue_limit_s`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tuner.spec.slo import SloLimit

GROW_MIN = 1.25  # the first step's headroom factor is clipped to [1.25, 4]
GROW_MAX = 4.0
SHRINK_MAX = 8.0
OVERLOAD_SHARE = 0.8  # of the saturated throughput, where the first step down goes
SEND_PHASE_FACTOR = 4.0  # a rate is shown only by a send phase ≥ 4 × the queue-bearing limit
QUEUE_METRICS = ("ttft", "e2el")  # the latencies a request's wait in the queue adds to
TAIL_SHARE = 0.9  # a percentile from here up is read at the run's last requests


@dataclass(frozen=True)
class Beat:
    """Capacity mode's "cannot beat the best": the best capacity so far, and the reference
    trial's (what a score is relative to)."""

    best_rps: float
    reference_rps: float


@dataclass(frozen=True)
class Step:
    """One workload run at one offered rate."""

    rate_rps: float
    metrics: Mapping[str, float]
    feasible: bool
    pruned_reason: str | None = None  # stopped early: above capacity


@dataclass(frozen=True)
class Result:
    steps: list[Step]  # in the order run
    capacity_rps: float  # 0: no rate tried met the SLOs
    resolved: bool  # the bracket closed to the resolution (False: the run cap came first)
    capped: bool  # feasible at max_rps: the capacity is at least this
    bracket: tuple[float, float | None] = field(default=(0.0, None))  # (lo, hi) at the end
    # SLOs broken at `beat_rps` (the best capacity so far): this config cannot beat it, and
    # the search stopped there (its capacity is below that rate, how far is not measured)
    beaten: bool = False

    @property
    def runs(self) -> int:
        return len(self.steps)


def meets(
    metrics: Mapping[str, float], slos: Sequence[SloLimit], *, failed_fraction_max: float = 1.0
) -> bool:
    """Whether one run met every SLO and kept its failed requests within bounds."""
    done, failed = metrics.get("completed", 0.0), metrics.get("failed", 0.0)
    if not done or failed / (done + failed) > failed_fraction_max:
        return False
    return all(limit.met(dict(metrics)) for limit in slos)


def headroom(metrics: Mapping[str, float], slos: Sequence[SloLimit]) -> float:
    """The smallest limit / value over the upper-bound SLOs (∞ when none applies)."""
    ratios = [
        limit.value / metrics[limit.metric]
        for limit in slos
        if limit.upper and metrics.get(limit.metric, 0) > 0
    ]
    return min(ratios, default=math.inf)


def queue_limit_s(slos: Sequence[SloLimit]) -> float | None:
    """The tightest upper limit on a TTFT or E2EL figure (mean, median or a percentile), in
    seconds, over the share of requests that must wait past it: what a growing queue must push
    past to break an SLO. Past capacity the wait grows about linearly with a request's place in
    the send order, so a P99 limit L breaks once the last requests wait L, and a median or a
    mean limit only once the middle one does: 2 L of queue (`limit_quantile`). None: no such
    limit."""
    limits = [
        limit.value / 1000 / limit_quantile(limit.metric)
        for limit in slos
        if limit.upper
        and limit.metric.endswith("_ms")
        and limit.metric.rsplit("_", 2)[-2] in QUEUE_METRICS
    ]
    return min(limits, default=None)


def limit_quantile(metric: str) -> float:
    """The share of a run's requests whose wait a figure's limit must be passed by: 1 for a
    tail percentile (p90 and up: its last requests, the rule as calibrated), the percentile's
    share below that, 0.5 for a median or a mean (a queue growing linearly in send order has
    its mean at the middle request)."""
    stat = metric.rsplit("_", 2)[0]
    if stat.startswith("p"):
        try:
            share = float(stat[1:]) / 100
        except ValueError:
            return 0.5
        return 1.0 if share >= TAIL_SHARE else max(share, 0.01)
    return 0.5


def shown_rps(num_prompts: int, slos: Sequence[SloLimit]) -> float:
    """The highest rate (req/s) at which `num_prompts` prompts send for at least
    `SEND_PHASE_FACTOR` × the tightest TTFT/E2EL limit (∞ when there is none). Above it, an
    engine past its capacity can end the run before its backlog breaks the limit."""
    limit_s = queue_limit_s(slos)
    if not limit_s:
        return math.inf
    return num_prompts / (SEND_PHASE_FACTOR * limit_s)


def _grow(step: Step, slos: Sequence[SloLimit]) -> float:
    """How far above a feasible step the next one goes: its SLO headroom, clipped."""
    return min(max(headroom(step.metrics, slos), GROW_MIN), GROW_MAX)


def _shrink(step: Step) -> float:
    """How far below an infeasible rate to try next: to 0.8 × the throughput it served (an
    overloaded engine serves about its saturation rate), within [1.25, 8]× below; 2× when
    the run has no throughput (stopped before any request finished)."""
    served = step.metrics.get("request_throughput", 0.0)
    if not served > 0:
        return 2.0
    return min(max(step.rate_rps / (OVERLOAD_SHARE * served), GROW_MIN), SHRINK_MAX)


def search(
    measure: Callable[[float], Step],
    start_rps: float,
    slos: Sequence[SloLimit],
    *,
    resolution: float = 0.05,
    max_runs: int = 8,
    min_rps: float = 0.01,
    max_rps: float = 1000.0,
    beat_rps: float | None = None,
) -> Result:
    """Find the highest feasible rate within `resolution` (relative) in at most `max_runs`.
    With `beat_rps` (early stopping: the best capacity so far) the search starts there, and
    stops after that first run when it breaks an SLO: the config cannot beat the best; when it
    meets them, the next run is one resolution above (a tie with the best resolves there)."""
    if not (resolution > 0 and max_runs >= 1 and 0 < min_rps <= max_rps):
        raise ValueError("capacity search: resolution > 0, max_runs ≥ 1, 0 < min ≤ max rate")
    steps: list[Step] = []

    def run(rate: float) -> Step:
        step = measure(rate)
        steps.append(step)
        return step

    lo, hi = 0.0, math.inf
    rate = min(max(beat_rps or start_rps, min_rps), max_rps)
    first = run(rate)
    if beat_rps is not None and not first.feasible:
        return Result(steps, 0.0, False, False, (0.0, rate), beaten=True)
    if first.feasible:
        lo = rate
        factor = _grow(first, slos)
        if beat_rps is not None:  # next, the lowest rate that beats the best by a resolution
            factor = (1 + resolution) * (1 - 1e-9)  # infeasible there: a tie, resolved
    else:
        hi = rate
        factor = _shrink(first)
    # Bracket: grow while feasible, shrink while not.
    while len(steps) < max_runs and math.isinf(hi) and lo < max_rps:
        rate = min(lo * factor, max_rps)
        step = run(rate)
        if step.feasible:
            lo = rate
            factor = _grow(step, slos)
        else:
            hi = rate
    while len(steps) < max_runs and lo == 0.0 and hi > min_rps:
        rate = max(hi / factor, min_rps)
        step = run(rate)
        if step.feasible:
            lo = rate
        else:
            hi = rate
            factor = _shrink(step)
    # Bisect geometrically.
    while len(steps) < max_runs and lo > 0 and not math.isinf(hi) and hi / lo > 1 + resolution:
        rate = math.sqrt(lo * hi)
        if run(rate).feasible:
            lo = rate
        else:
            hi = rate
    resolved = lo > 0 and not math.isinf(hi) and hi / lo <= 1 + resolution
    if lo == 0.0 and hi <= min_rps:
        resolved = True  # infeasible even at the lowest rate allowed: capacity 0 for sure
    return Result(
        steps=steps,
        capacity_rps=lo,
        resolved=resolved,
        capped=lo >= max_rps,
        bracket=(lo, None if math.isinf(hi) else hi),
    )


def beats_by_resolution(rps: float, other_rps: float, resolution: float) -> bool:
    """A capacity above another by more than the search's resolution: within it, the two are
    a tie (what `search` with `beat_rps` resolves, and what the verdicts and benchmarks read)."""
    return rps > other_rps * (1 + resolution)
