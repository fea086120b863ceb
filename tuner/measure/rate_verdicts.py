"""The evidence of the capacity search's rates: each run's verdict and excess over the SLOs,
each rate's verdict from its runs on fresh seeds, the capacity's interval, and where its next
run goes (pure; `tuner.measure.capacity` runs the search).

A P99 of one run's fixed prompts and arrivals is one draw: its request bootstrap is narrower
than the spread between seeds (docs/objective.md, "Capacity mode"), so the unit of evidence
is a run on its own seed. Each run's worst SLO figure against its limit is its excess
(`run_excess`: log of value / limit, > 0 broken; a run stopped early or failed: a lower
bound). A rate holds (breaks) for sure when the one-sided 97.5 % Student t bound of its runs'
mean excess lies below (above) 0, the seeds' spread pooled over every rate measured more than
once with a prior worth two degrees of freedom (`seed_spread`, `rate_verdict`): each end of
the interval at 97.5 %, the two a 95 % interval for the rate where the seeds' typical figure
crosses the limit. The interval's runs go where one run settles an end, else past the rates
measured, where the curve's slope says one should (`next_rate`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from tuner.spec.slo import SloLimit

HOLDS, BREAKS, UNSURE = "holds", "breaks", "unsure"  # a run's, or a rate's, verdict on the SLOs
END_CONFIDENCE = 0.975  # each end of the interval one-sided: the two ends a 95 % interval
MAX_RUNS_PER_RATE = 4  # a rate's runs: the first, and at most three repeats
EXCESS_CLIP = 10.0  # |log(value / limit)| beyond this (×22,000) counts as this
REACH = 1.25  # a new rate past the others aims at 1.25 × the excess two runs need to settle
STEP_MIN = 1.1  # and lies at least 10 % past them
# the seeds' spread of a run's excess before runs tell it, worth 2 degrees of freedom
# (SIMULATED, issue 46's study: P99 TTFT 1,012-1,502 ms over 12 seeds at one rate, a log
# range of 0.39; 588-1,066 ms over 9 at 16 req/s on another, sd 0.22; docs/objective.md)
PRIOR_SPREAD, PRIOR_DF = 0.15, 2


@dataclass(frozen=True)
class Step:
    """The runs at one offered rate (pooled when the rate was measured more than once)."""

    rate_rps: float
    metrics: Mapping[str, float]
    feasible: bool  # the estimate meets every SLO
    pruned_reason: str | None = None  # stopped early: above capacity
    verdict: str = ""  # the rate's (`rate_verdict`); "": trusted as measured (`feasible`)
    runs: int = 1  # workload runs pooled at this rate
    ci: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # the SLO figures'
    run_verdicts: tuple[str, ...] = ()  # each run's own (`step_verdict`), in order
    # each run's worst SLO figure against its limit (`run_excess`), and whether it ran whole
    # (False: stopped early or failed, its excess a lower bound), in order
    run_excess: tuple[float, ...] = ()
    run_whole: tuple[bool, ...] = ()

    @property
    def sure(self) -> str:
        """HOLDS, BREAKS or UNSURE; a step without a verdict is trusted as measured."""
        return self.verdict or (HOLDS if self.feasible else BREAKS)

    @property
    def mean_excess(self) -> float:
        return sum(self.run_excess) / len(self.run_excess) if self.run_excess else math.nan

    def could_settle(self, side: str) -> bool:
        """Another run could make this rate hold (`side` HOLDS) or break for sure: its runs'
        mean excess lies on that side of the limit (a rate with a run stopped early or
        failed never holds), and it has runs left."""
        if not self.run_excess or self.verdict == side or self.runs >= MAX_RUNS_PER_RATE:
            return False
        if side == HOLDS:
            return self.mean_excess < 0 and all(self.run_whole)
        return self.mean_excess > 0


def meets(
    metrics: Mapping[str, float], slos: Sequence[SloLimit], *, failed_fraction_max: float = 1.0
) -> bool:
    """Whether one run met every SLO and kept its failed requests within bounds."""
    done, failed = metrics.get("completed", 0.0), metrics.get("failed", 0.0)
    if not done or failed / (done + failed) > failed_fraction_max:
        return False
    return all(limit.met(dict(metrics)) for limit in slos)


def step_verdict(
    metrics: Mapping[str, float],
    ci: Mapping[str, tuple[float, float]],
    slos: Sequence[SloLimit],
    *,
    failed_fraction_max: float = 1.0,
    pruned: bool = False,
) -> str:
    """HOLDS when every SLO's 95 % interval (`ci`; a figure without one: its value) lies on
    the kept side of its limit, BREAKS when one lies wholly past it, UNSURE when one straddles
    it (`SloLimit.straddled_by`). A run stopped early, or with too many failed requests or
    none completed, BREAKS."""
    if pruned or not meets(metrics, (), failed_fraction_max=failed_fraction_max):
        return BREAKS
    unsure = False
    for limit in slos:
        if limit.metric not in metrics:
            return BREAKS
        value = metrics[limit.metric]
        low, high = ci.get(limit.metric, (value, value))
        low, high = min(low, value), max(high, value)  # the estimate lies in its interval
        if limit.straddled_by(low, high):
            unsure = True
        elif not limit.met({limit.metric: value}):
            return BREAKS
    return UNSURE if unsure else HOLDS


def run_excess(
    metrics: Mapping[str, float],
    slos: Sequence[SloLimit],
    *,
    failed_fraction_max: float = 1.0,
    pruned: bool = False,
    at_least: float = 0.0,
) -> tuple[float, bool]:
    """One run's evidence on the SLOs: (excess, whole). The excess is the largest, over the
    SLOs, of log(value / limit) (log(limit / value) for a lower limit): > 0 when one is
    broken, its size how far. A run stopped early (an SLO broken for sure), with too many
    failed requests, none completed or an SLO's figure missing broke, but its figures are
    partial: whole is False and its excess a lower bound, at least `at_least` (what the stop
    proved: `stopped_excess`) and 0."""
    whole = not pruned and meets(metrics, (), failed_fraction_max=failed_fraction_max)
    worst = -EXCESS_CLIP
    for limit in slos:
        value = metrics.get(limit.metric)
        if value is None:
            whole = False
            continue
        value, bound = max(value, 1e-12), max(abs(limit.value), 1e-12)
        ratio = math.log(value / bound) if limit.upper else math.log(bound / value)
        worst = max(worst, min(max(ratio, -EXCESS_CLIP), EXCESS_CLIP))
    return (worst if whole else max(worst, at_least, 0.0)), whole


def stopped_excess(censored: Mapping[str, float]) -> float:
    """The excess a run stopped early is proved to have: the largest of the SLOs' violations
    its stop found (`Decision.censored`: relative distance past the limit) as log(1 + it)."""
    return max((math.log1p(v) for v in censored.values() if v > 0), default=0.0)


def seed_spread(steps: Sequence[Step]) -> tuple[float, int, int]:
    """The spread of a run's excess between seeds at one rate: (standard deviation, its
    degrees of freedom, those measured). Pooled over every rate with two or more whole runs,
    with `PRIOR_SPREAD` worth `PRIOR_DF` degrees of freedom (a scaled inverse-χ² prior: one
    lucky pair of close seeds does not make every rate sure)."""
    squares, df = PRIOR_DF * PRIOR_SPREAD**2, 0
    for step in steps:
        whole = [e for e, w in zip(step.run_excess, step.run_whole, strict=True) if w]
        if len(whole) >= 2:
            mean = sum(whole) / len(whole)
            squares += sum((e - mean) ** 2 for e in whole)
            df += len(whole) - 1
    return math.sqrt(squares / (PRIOR_DF + df)), PRIOR_DF + df, df


def rate_verdict(step: Step, spread: float, df: int, measured: int = 1) -> str:
    """A rate's verdict from its runs' excess (each run on its own seed): BREAKS when the
    one-sided `END_CONFIDENCE` t bound of their mean lies above 0 (the seeds' typical figure
    breaks an SLO), HOLDS when the other bound lies below 0 and every run ran whole, else
    UNSURE; UNSURE while no rate has two whole runs (`measured` 0: no spread between seeds
    seen). A step without runs' excess keeps its verdict."""
    if not step.run_excess:
        return step.verdict
    if not measured:
        return UNSURE
    margin = _t(df) * spread / math.sqrt(len(step.run_excess))
    if step.mean_excess - margin > 0:
        return BREAKS
    if step.mean_excess + margin < 0 and all(step.run_whole):
        return HOLDS
    return UNSURE


def judged(steps: Sequence[Step]) -> list[Step]:
    """The steps with each rate's verdict from the evidence of all of them (`rate_verdict`:
    the seeds' spread pooled over the rates)."""
    spread, df, measured = seed_spread(steps)
    return [
        replace(s, verdict=rate_verdict(s, spread, df, measured)) if s.run_excess else s
        for s in steps
    ]


@functools.cache
def _t(df: int) -> float:
    """Student's t quantile at `END_CONFIDENCE` with `df` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(END_CONFIDENCE, df))


def next_to_confirm(steps: Sequence[Step], capacity_rps: float, side: str) -> Step | None:
    """The rate to re-measure on `side` of the estimate (HOLDS: at or below it, BREAKS: above
    it), of the rates nearer than the nearest already sure on that side that could still
    settle (`Step.could_settle`): the nearest that one more run would settle if its mean and
    the seeds' spread stayed as they are, else the one nearest to settling (the largest mean
    excess in units of its standard error after one more run); None when none could."""
    if side == HOLDS:
        near = sorted((s for s in steps if 0 < s.rate_rps <= capacity_rps), key=_rate, reverse=True)
    else:
        near = sorted((s for s in steps if s.rate_rps > capacity_rps), key=_rate)
    open_ = []
    for s in near:
        if s.sure == side:
            break
        if s.could_settle(side):
            open_.append(s)
    if not open_:
        return None
    settling = [s for s in open_ if _would_settle(s, steps)]
    return settling[0] if settling else max(open_, key=lambda s: _reach(s, steps)[0])


def _rate(step: Step) -> float:
    return step.rate_rps


def capacity_interval(steps: Sequence[Step], capacity_rps: float) -> tuple[float, float | None]:
    """The capacity's interval from the steps' verdicts: the highest rate at or below the
    estimate `capacity_rps` that held for sure (0: none), and the lowest rate above it that
    broke for sure (None: none did)."""
    held = [s.rate_rps for s in steps if s.sure == HOLDS and s.rate_rps <= capacity_rps]
    broke = [s.rate_rps for s in steps if s.sure == BREAKS and s.rate_rps > capacity_rps]
    return max(held, default=0.0), min(broke, default=None)


def next_rate(
    steps: Sequence[Step],
    estimate: float,
    side: str,
    rate_range: tuple[float, float],
    extend: bool = True,
    narrow: bool = False,
) -> float | None:
    """The next rate to measure on `side` of the estimate: the rate `next_to_confirm` names
    when one more run would settle it; else, while that side has no sure rate and with
    `extend` (a side gets one new rate: where the curve flattens, as a TTFT or E2EL floored
    by the prompt's own service time, further out is no further from the limit, and a repeat
    is what narrows it), a new rate past the rates measured (`beyond`), where two runs
    should settle; else the rate `next_to_confirm` names when that side has no sure rate yet,
    or with `narrow` (a run that could narrow a bounded side, when no run has a better use).
    None: nothing to measure there."""
    target = next_to_confirm(steps, estimate, side)
    low, high = capacity_interval(steps, estimate)
    bounded = low > 0 if side == HOLDS else high is not None
    if target is not None and _would_settle(target, steps):
        return target.rate_rps
    if extend and not bounded and estimate > 0:  # capacity 0: nothing above to bound
        new = beyond(steps, estimate, side, rate_range)
        if new is not None:
            return new
    return target.rate_rps if target is not None and (narrow or not bounded) else None


def beyond(
    steps: Sequence[Step], estimate: float, side: str, rate_range: tuple[float, float]
) -> float | None:
    """A new rate past the farthest rate measured on `side` of the estimate (above: from the
    estimate itself when no rate above it was measured), where the seeds'
    excess should be `REACH` × what two runs there need to settle it (`END_CONFIDENCE`, the
    seeds' spread), from that rate's mean excess and the curve's slope (`excess_slope`); at
    least `STEP_MIN` further, within `rate_range`. None: there is no room."""
    ours = [s for s in steps if s.run_excess and (s.rate_rps > estimate) == (side == BREAKS)]
    if not ours and side == BREAKS:  # no rate above broke yet: from the estimate's own
        ours = [s for s in steps if s.run_excess and s.rate_rps == estimate]
    if not ours or (side == HOLDS and estimate <= 0):
        return None
    spread, df, _ = seed_spread(steps)
    sign = 1.0 if side == BREAKS else -1.0
    far = max(ours, key=lambda s: sign * s.rate_rps)
    need = sign * REACH * _t(df + 2) * spread / math.sqrt(2)
    step = math.exp((need - far.mean_excess) / excess_slope(steps))
    if side == BREAKS:
        rate = min(far.rate_rps * max(step, STEP_MIN), rate_range[1])
        return rate if rate > far.rate_rps else None
    rate = max(far.rate_rps * min(step, 1 / STEP_MIN), rate_range[0])
    return rate if 0 < rate < far.rate_rps else None


def excess_slope(steps: Sequence[Step]) -> float:
    """How fast the seeds' excess grows with the rate: the least-squares slope of the mean
    excess on log rate over the rates whose runs all ran whole, clipped to [0.5, 8]; 1 (a
    latency about proportional to the rate) when fewer than two rates tell."""
    points = [
        (math.log(s.rate_rps), s.mean_excess, s.runs)
        for s in steps
        if s.run_excess and all(s.run_whole) and abs(s.mean_excess) < EXCESS_CLIP
    ]
    if len({x for x, _, _ in points}) < 2:
        return 1.0
    n = sum(w for _, _, w in points)
    mx = sum(x * w for x, _, w in points) / n
    my = sum(y * w for _, y, w in points) / n
    sxx = sum(w * (x - mx) ** 2 for x, _, w in points)
    sxy = sum(w * (x - mx) * (y - my) for x, y, w in points)
    return min(max(sxy / sxx, 0.5), 8.0)


def _would_settle(step: Step, steps: Sequence[Step]) -> bool:
    """One more run would likely settle `step`: its mean excess, in units of its standard
    error after that run, past the t quantile it would be judged by (`_reach`)."""
    reach, t = _reach(step, steps)
    return reach > t


def _reach(step: Step, steps: Sequence[Step]) -> tuple[float, float]:
    """(|mean excess| / its standard error after one more run, the t quantile it would then
    need), the seeds' spread as it stands (`seed_spread`)."""
    spread, df, _ = seed_spread(steps)
    return abs(step.mean_excess) * math.sqrt(step.runs + 1) / spread, _t(df + 1)
