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

The bracket [lo, hi] follows each step's estimate (feasible or not) on the study's own
prompts. The answer's interval follows the verdicts of runs on fresh seeds: each run's
SLO figures are estimates with a 95 % interval (`step_verdict`: the SLOs hold for sure, break
for sure, or the interval straddles a limit), but a request bootstrap on one run's fixed
prompts and arrivals does not see how much the next seed's P99 differs (docs/objective.md:
it covered the median over seeds in 25-42 % of runs near the knee), so a rate is sure only
when `SURE_RUNS` runs on different seeds agree (`rate_verdict`). After the bisection, the
repeat budget (`max_repeats` extra runs) re-measures, on the next seed, the rates nearest the
estimate that could bound it (`next_to_confirm`): `low_rps` is the highest rate at or below
the estimate that held for sure, `high_rps` the lowest above it that broke for sure. A run
stopped early (an SLO broken for sure) breaks.

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
from dataclasses import dataclass, field, replace

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
    """Capacity mode's race against the incumbent: the best capacity so far, the reference
    trial's (what a score is relative to), and the incumbent's high end: the lowest rate
    above its capacity that broke an SLO for sure (its interval's), else the lowest that broke
    one on its estimate (its bracket's, `above_rps`); None: no rate above it broke one."""

    best_rps: float
    reference_rps: float
    best_high_rps: float | None = None


def race_rps(beat: Beat, resolution: float) -> float:
    """The rate a config races the incumbent at: the one that decides whether it can be
    better. The incumbent's high end when it has one: a config that breaks where the
    incumbent broke cannot be shown better than it (with the incumbent's interval: its low
    end would lie below the incumbent's high, `clearly_above`); else one resolution above
    its capacity (a config that breaks there is within the resolution of it or below: not
    better, `beats_by_resolution`). Never below that resolution step."""
    step = beat.best_rps * (1 + resolution)
    high = beat.best_high_rps
    return max(high, step) if high is not None else step


HOLDS, BREAKS, UNSURE = "holds", "breaks", "unsure"  # a run's, or a rate's, verdict on the SLOs
SURE_RUNS = 2  # runs on different seeds that must agree before a rate holds or breaks for sure
MAX_RUNS_PER_RATE = 3  # a rate's runs: the first, and at most two repeats


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

    @property
    def sure(self) -> str:
        """HOLDS, BREAKS or UNSURE; a step without a verdict is trusted as measured."""
        return self.verdict or (HOLDS if self.feasible else BREAKS)

    def could_settle(self, side: str) -> bool:
        """Another run could make this rate hold (`side` HOLDS) or break for sure: no run
        said the opposite, and it has runs left."""
        other = BREAKS if side == HOLDS else HOLDS
        return (
            bool(self.verdict)
            and self.verdict != side
            and other not in self.run_verdicts
            and self.runs < MAX_RUNS_PER_RATE
        )


@dataclass(frozen=True)
class Result:
    steps: list[Step]  # in the order run
    capacity_rps: float  # 0: no rate tried met the SLOs
    resolved: bool  # the bracket closed to the resolution (False: the run cap came first)
    capped: bool  # feasible at max_rps: the capacity is at least this
    bracket: tuple[float, float | None] = field(default=(0.0, None))  # (lo, hi) at the end
    # SLOs broken at `beat_rps` (the race against the incumbent, `race_rps`): this config
    # cannot be better, and the search stopped there: its capacity is below that rate
    # (`high_rps`), how far below is not measured (`low_rps` 0, `capacity_rps` 0)
    beaten: bool = False
    # the interval of the capacity: the highest rate that held for sure (0: none did),
    # the lowest above the estimate that broke for sure (None: none did)
    low_rps: float = 0.0
    high_rps: float | None = None

    @property
    def runs(self) -> int:
        return sum(s.runs for s in self.steps)


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


def rate_verdict(run_verdicts: Sequence[str]) -> str:
    """A rate's verdict from its runs' (each on its own seed): HOLDS when `SURE_RUNS` of them
    held and none broke, BREAKS when `SURE_RUNS` broke and none held, else UNSURE."""
    held, broke = run_verdicts.count(HOLDS), run_verdicts.count(BREAKS)
    if held >= SURE_RUNS and not broke:
        return HOLDS
    if broke >= SURE_RUNS and not held:
        return BREAKS
    return UNSURE


def next_to_confirm(steps: Sequence[Step], capacity_rps: float, side: str) -> Step | None:
    """The rate to re-measure on `side` of the estimate (HOLDS: at or below it, BREAKS: above
    it): of the rates nearer than the nearest already sure on that side, the nearest whose
    runs all said `side` (one more agreeing run settles it), else the nearest that could still
    settle (a straddling run rarely does); None when none could."""
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
    agreeing = [s for s in open_ if set(s.run_verdicts) == {side}]
    return next(iter(agreeing or open_), None)


def _rate(step: Step) -> float:
    return step.rate_rps


def capacity_interval(steps: Sequence[Step], capacity_rps: float) -> tuple[float, float | None]:
    """The capacity's interval from the steps' verdicts: the highest rate at or below the
    estimate `capacity_rps` that held for sure (0: none), and the lowest rate above it that
    broke for sure (None: none did)."""
    held = [s.rate_rps for s in steps if s.sure == HOLDS and s.rate_rps <= capacity_rps]
    broke = [s.rate_rps for s in steps if s.sure == BREAKS and s.rate_rps > capacity_rps]
    return max(held, default=0.0), min(broke, default=None)


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


def step_prompts(slos: Sequence[SloLimit]) -> int:
    """The fewest requests one rate step needs for each percentile SLO to be read inside its
    sample: N ≥ 1 / (1 − q) for a percentile q (100 for a P99; 0 when no SLO is a
    percentile), so that on average one request lies beyond it. vLLM's percentile is numpy's
    linear interpolation at rank q (N − 1) (0-based): from that N on, the slowest request
    weighs at most 1 − q in it (0.01 in a P99 of 100), below it more (0.37 in a P99 of 64:
    the figure leans on the sample's maximum, one request's luck). docs/objective.md, "The
    race", "The step's size"."""
    need = 0
    for limit in slos:
        stat = limit.metric.split("_", 1)[0]
        if not (limit.upper and stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit()):
            continue
        share = float(stat[1:]) / 100
        if 0 < share < 1:
            need = max(need, math.ceil(round(1 / (1 - share), 6)))
    return need


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
    measure: Callable[[float, int], Step],
    start_rps: float,
    slos: Sequence[SloLimit],
    *,
    resolution: float = 0.05,
    max_runs: int = 8,
    max_repeats: int = 0,
    min_rps: float = 0.01,
    max_rps: float = 1000.0,
    beat_rps: float | None = None,
    bracket: tuple[float, float] | None = None,
    max_steps: int | None = None,
) -> Result:
    """Find the highest feasible rate within `resolution` (relative) in at most `max_runs`
    rates, and its interval with at most `max_repeats` extra runs (`confirm`).
    `bracket`: (below, above), a rate predicted to hold and one predicted to break
    (`predicted_bracket`): the first run is at `above` (the shorter run: a higher rate sends
    its prompts sooner, and may be stopped early), and when it breaks the next at `below`;
    from there on as from any run. None: from `start_rps`, placed by the runs' figures.
    `measure(rate, k)`: the step at `rate` after its k-th repeat (0: the first run; k ≥ 1: a
    fresh seed, pooled with the k runs before). With `beat_rps` (early stopping's race
    against the incumbent: the rate that decides whether this config can be better,
    `race_rps`) the first run is there, and the search stops after it when it breaks an SLO:
    its capacity is below that rate (`Result.beaten`, the interval (0, that rate)); when it
    meets them, the config is searched as if it had not been raced (`raced`: its own
    capacity, never a step up from another config's). `max_steps`: the config's budget of
    runs, the bracket's, the bisection's and the repeats together (None: `max_runs` +
    `max_repeats`; a race's run counts in a budget given); once spent the search stops with
    the interval it has (`step_budget`)."""
    if not (resolution > 0 and max_runs >= 1 and max_repeats >= 0 and 0 < min_rps <= max_rps):
        raise ValueError(
            "capacity search: resolution > 0, max_runs ≥ 1, max_repeats ≥ 0, 0 < min ≤ max rate"
        )
    if beat_rps is not None:
        return raced(
            measure,
            min(max(beat_rps, min_rps), max_rps),
            lambda own: search(
                own,
                start_rps,
                slos,
                resolution=resolution,
                max_runs=max_runs,
                max_repeats=max_repeats,
                min_rps=min_rps,
                max_rps=max_rps,
                bracket=bracket,
                max_steps=None if max_steps is None else max(max_steps - 1, 1),
            ),
            (max_rps, resolution),
        )
    budget = step_budget(max_runs, max_repeats, max_steps)
    max_runs = min(max_runs, budget)
    steps: list[Step] = []

    def run(rate: float) -> Step:
        step = measure(rate, 0)
        steps.append(step)
        return step

    def result(lo: float, hi: float, resolved: bool) -> Result:
        repeats = min(max_repeats, budget - len(steps))  # what the budget leaves
        return _finish(measure, steps, (lo, hi), resolved, (max_rps, resolution), repeats)

    lo, hi = 0.0, math.inf
    rate = min(max((bracket or (0.0, start_rps))[1], min_rps), max_rps)
    first = run(rate)
    if first.feasible:
        lo = rate
    else:
        hi = rate
    factor = _first_factor(first, slos, resolution, bracket)
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
    while (
        len(steps) < max_runs and lo > 0 and not math.isinf(hi) and not narrow(lo, hi, resolution)
    ):
        rate = math.sqrt(lo * hi)
        if run(rate).feasible:
            lo = rate
        else:
            hi = rate
    resolved = lo > 0 and narrow(lo, hi, resolution)
    if lo == 0.0 and hi <= min_rps:
        resolved = True  # infeasible even at the lowest rate allowed: capacity 0 for sure
    return result(lo, hi, resolved)


def raced(
    measure: Callable[[float, int], Step],
    beat_rps: float,
    own_search: Callable[[Callable[[float, int], Step]], Result],
    limits: tuple[float, float],
) -> Result:
    """Early stopping's race against the incumbent (`race_rps`, from another config's result):
    one run at `beat_rps`; broken there, the config cannot be better and stops (`beaten`: its
    capacity below that rate, the interval (0, `beat_rps`)).
    Met there, the config is searched as if it had not been raced (`own_search`, from its own
    prediction or start; the race's run re-used where that search runs the same rate), and its
    capacity is the higher of what that search found and the race's rate (a rate its own run
    held, none of its runs at or below it broken), its interval from all its runs. A search
    that went on from the best's rate took another config's result as its own lower bound and
    stepped up from it: unresolved, every config after an unresolved best read a step above
    it (issue 50 item 1, capacities that ratchet). `limits`: (max_rps, resolution)."""
    gate = measure(beat_rps, 0)
    if not gate.feasible:  # below the rate it broke at, how far not measured (docs/objective.md)
        return Result([gate], 0.0, False, False, (0.0, beat_rps), True, 0.0, beat_rps)

    def own(rate: float, repeat: int) -> Step:
        return gate if rate == beat_rps and repeat == 0 else measure(rate, repeat)

    found = own_search(own)
    ran = [s.rate_rps for s in found.steps]
    steps = found.steps if beat_rps in ran else [gate, *found.steps]
    if beat_rps <= found.capacity_rps or any(
        not s.feasible and s.rate_rps <= beat_rps for s in steps
    ):
        return replace(found, steps=steps)
    max_rps, resolution = limits
    above = min(
        (s.rate_rps for s in steps if not s.feasible and s.rate_rps > beat_rps), default=None
    )
    low, high = capacity_interval(steps, beat_rps)
    return Result(
        steps,
        beat_rps,
        above is not None and narrow(beat_rps, above, resolution),
        beat_rps >= max_rps,
        (beat_rps, above),
        low_rps=low,
        high_rps=high,
    )


def _first_factor(
    first: Step, slos: Sequence[SloLimit], resolution: float, predicted: tuple[float, float] | None
) -> float:
    """How far from the first run the second goes (up when it held, down when it broke):
    to the rate predicted to hold when the one predicted to break broke; else placed by its
    figures (`_grow`, `_shrink`)."""
    if first.feasible:
        return _grow(first, slos)
    if predicted is not None:
        return max(first.rate_rps / predicted[0], 1 + resolution)
    return _shrink(first)


def step_budget(max_runs: int, max_repeats: int, max_steps: int | None) -> int:
    """A config's budget of runs (`capacity.max_steps`): the bracket's, the bisection's and
    the repeats together; None: `max_runs` + `max_repeats`, each spent in full."""
    whole = max_runs + max_repeats
    return whole if max_steps is None else max(min(max_steps, whole), 1)


def _finish(
    measure: Callable[[float, int], Step],
    steps: list[Step],
    bracket: tuple[float, float],
    resolved: bool,
    limits: tuple[float, float],
    max_repeats: int,
) -> Result:
    """The search's answer once the bisection ended: the repeats spent (`confirm`), the
    capacity and its interval. `limits`: (max_rps, resolution)."""
    lo, hi = bracket
    max_rps, resolution = limits
    lo = confirm(measure, steps, lo, max_repeats, resolution)
    hi = min((s.rate_rps for s in steps if not s.feasible and s.rate_rps > lo), default=hi)
    low, high = capacity_interval(steps, lo)
    return Result(
        steps=steps,
        capacity_rps=lo,
        resolved=resolved,
        capped=lo >= max_rps,
        bracket=(lo, None if math.isinf(hi) else hi),
        low_rps=low,
        high_rps=high,
    )


def confirm(
    measure: Callable[[float, int], Step],
    steps: list[Step],
    estimate: float,
    budget: int,
    resolution: float = 0.0,
) -> float:
    """Spend at most `budget` repeats on the rates that could bound the estimate (the nearest
    below it that could hold for sure, the nearest above that could break for sure, in turn),
    each on its next seed, replacing its step in `steps`, until the capacity's interval is
    within `resolution` (`capacity_interval`: nothing left to settle). Returns the estimate,
    lowered to the highest rate still feasible when a repeat made its pooled figures break an
    SLO."""
    sides = [HOLDS, BREAKS]
    while budget > 0 and not _settled(steps, estimate, resolution):
        target = next((t for side in sides if (t := next_to_confirm(steps, estimate, side))), None)
        if target is None:
            break
        i = steps.index(target)
        steps[i] = measure(target.rate_rps, target.runs)
        budget -= 1
        sides.reverse()  # the other side next
        if not steps[i].feasible and steps[i].rate_rps <= estimate:
            below = (s.rate_rps for s in steps if s.feasible and s.rate_rps < estimate)
            estimate = max(below, default=0.0)
    return estimate


def _settled(steps: Sequence[Step], estimate: float, resolution: float) -> bool:
    """The capacity's interval is within the resolution: a repeat cannot narrow it further."""
    low, high = capacity_interval(steps, estimate)
    return high is not None and narrow(low, high, resolution)


def predicted_bracket(
    predicted_rps: float, band: tuple[float, float], resolution: float
) -> tuple[float, float]:
    """Where a search starts from a predicted capacity: (below, above), the rate that should
    hold and the one that should break. `band`: the prediction's ratio interval true /
    predicted (`tuner.fidelity.bands`, the throughput family: a capacity is a throughput); the
    bracket is that interval around the prediction, at least one resolution wide."""
    low, high = band
    below, above = predicted_rps * min(low, 1.0), predicted_rps * max(high, 1.0)
    if above / below < 1 + resolution:  # never narrower than the search resolves
        mid = math.sqrt(below * above)
        half = math.sqrt(1 + resolution)
        below, above = mid / half, mid * half
    return below, above


def narrow(lo: float, hi: float, resolution: float) -> bool:
    """The bisection's stop: the bracket [lo, hi] within the resolution (hi / lo ≤ 1 + it)."""
    return lo > 0 and not math.isinf(hi) and hi / lo <= 1 + resolution


def clearly_above(
    rps: float,
    bounds: tuple[float, float | None] | None,
    other_rps: float,
    other_bounds: tuple[float, float | None] | None,
    resolution: float,
) -> bool:
    """One capacity clearly above another. With both intervals (`low`, `high`): the first
    held every SLO for sure at a rate no lower than one where the other broke one for sure
    (its low end ≥ the other's high end; the other with no such rate: never). A capacity stored
    without its interval: above by more than the search's resolution (`beats_by_resolution`)."""
    if bounds is None or other_bounds is None:
        return beats_by_resolution(rps, other_rps, resolution)
    other_high = other_bounds[1]
    return other_high is not None and bounds[0] >= other_high


def beats_by_resolution(rps: float, other_rps: float, resolution: float) -> bool:
    """A capacity above another by more than the search's resolution: within it, the two are
    a tie (what `search` with `beat_rps` resolves, and what the verdicts and benchmarks read)."""
    return rps > other_rps * (1 + resolution)
