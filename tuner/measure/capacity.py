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
prompts. The answer's interval follows the verdicts of rates measured on several seeds
(`tuner.measure.rate_verdicts`: a rate holds or breaks for sure by a 97.5 % t bound over its
runs on fresh seeds). After the bisection, the repeat budget (`max_repeats` extra runs, each
measured whole) goes where one run settles an end of the interval, else to a new rate past
the rates measured (`confirm`, `next_rate`): `low_rps` is the highest rate at or below the
estimate that held for sure, `high_rps` the lowest above it that broke for sure (a nearer
break that is not sure does not bound it).

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

from tuner.measure.rate_verdicts import BREAKS as BREAKS
from tuner.measure.rate_verdicts import HOLDS as HOLDS
from tuner.measure.rate_verdicts import UNSURE as UNSURE
from tuner.measure.rate_verdicts import Step as Step
from tuner.measure.rate_verdicts import capacity_interval as capacity_interval
from tuner.measure.rate_verdicts import judged as judged
from tuner.measure.rate_verdicts import meets as meets
from tuner.measure.rate_verdicts import next_rate as next_rate
from tuner.measure.rate_verdicts import next_to_confirm as next_to_confirm
from tuner.measure.rate_verdicts import rate_verdict as rate_verdict
from tuner.measure.rate_verdicts import run_excess as run_excess
from tuner.measure.rate_verdicts import seed_spread as seed_spread
from tuner.measure.rate_verdicts import step_verdict as step_verdict
from tuner.measure.rate_verdicts import stopped_excess as stopped_excess
from tuner.spec.slo import SloLimit

GROW_MIN = 1.25  # the first step's headroom factor is clipped to [1.25, 4]
GROW_MAX = 4.0
SHRINK_MAX = 8.0
OVERLOAD_SHARE = 0.8  # of the saturated throughput, where the first step down goes
SEND_PHASE_FACTOR = 4.0  # a rate is shown only by a send phase ≥ 4 × the queue-bearing limit
# the interval's runs a search that found a capacity gets past a step budget (`interval_runs`)
INTERVAL_RUNS = 2
KEEP_FROM = 3  # from a budget of 4 on, one of the interval's runs is the budget's own
QUEUE_METRICS = ("ttft", "e2el")  # the latencies a request's wait in the queue adds to
TAIL_SHARE = 0.9  # a percentile from here up is read at the run's last requests


@dataclass(frozen=True)
class Beat:
    """Capacity mode's race against the incumbent: the best capacity so far, the reference
    trial's (what a score is relative to), and the incumbent's high end as the race reads it
    (`race_high`); None: no rate above its capacity broke an SLO."""

    best_rps: float
    reference_rps: float
    best_high_rps: float | None = None


def race_high(high_rps: float | None, above_rps: float | None) -> float | None:
    """The incumbent's end a race runs at (`Beat.best_high_rps`): the lowest rate above its
    capacity that broke an SLO on its estimate (its bracket's top, `above_rps`), else the
    lowest that broke one for sure (its interval's `high_rps`). Not the sure end first: on a
    flat curve it lies far above (SIMULATED longdoc, vLLM's defaults 0.0943 req/s, interval
    0.05-0.2675), and a race there stopped every later config, a better one too; a config
    that breaks where the incumbent itself broke is not shown better either (its capacity
    below the incumbent's bracket top, by its own run)."""
    return above_rps if above_rps is not None else high_rps


def race_rps(beat: Beat, resolution: float) -> float:
    """The rate a config races the incumbent at: the one that decides whether it can be
    better. The incumbent's high end when it has one (`race_high`): a config that breaks
    where the incumbent broke cannot be shown better than it; else one resolution above its
    capacity (a config that breaks there is within the resolution of it or below: not
    better, `beats_by_resolution`). Never below that resolution step."""
    step = beat.best_rps * (1 + resolution)
    high = beat.best_high_rps
    return max(high, step) if high is not None else step


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
    measure: Callable[..., Step],
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
    `measure(rate, k[, whole])`: the step at `rate` after its k-th repeat (0: the first run;
    k ≥ 1: a fresh seed, pooled with the k runs before; `whole`: never stopped early). With
    `beat_rps` (early stopping's race against the incumbent: the rate that decides whether
    this config can be better, `race_rps`) the first run is there, and the search stops after
    it when it breaks an SLO: its capacity is below that rate (`Result.beaten`, the interval
    (0, that rate)); when it meets them, the config is searched as if it had not been raced
    (`raced`: its own capacity, never a step up from another config's). `max_steps`: the
    config's budget of runs, the bracket's, the bisection's and the repeats together (None:
    `max_runs` + `max_repeats`; a race's run counts in a budget given); once spent the search
    stops with the interval it has (`step_budget`)."""
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
    whole = budget >= max_runs + max_repeats  # the budget cuts nothing
    # a budget that cuts the search keeps one run for the interval once the bracket and a
    # bisection fit (`interval_runs`)
    max_runs = min(max_runs, budget - (not whole and budget > KEEP_FROM))
    steps: list[Step] = []

    def run(rate: float) -> Step:
        step = measure(rate, 0)
        steps.append(step)
        return step

    def result(lo: float, hi: float, resolved: bool) -> Result:
        left = budget - len(steps)
        repeats = interval_runs(left, max_repeats, not whole and lo > 0)
        limits = (min_rps, max_rps, resolution)
        # runs past the budget close the interval, they do not narrow it
        return _finish(measure, steps, (lo, hi), resolved, limits, repeats, repeats > left)

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
    measure: Callable[..., Step],
    beat_rps: float,
    own_search: Callable[[Callable[..., Step]], Result],
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

    def own(rate: float, repeat: int, whole: bool = False) -> Step:
        return gate if rate == beat_rps and repeat == 0 else measure(rate, repeat, whole)

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
    steps = judged(steps)  # the race's run is evidence too (`rate_verdicts`)
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


def interval_runs(left: int, max_repeats: int, cut: bool) -> int:
    """The interval's runs (`confirm`) after the bisection: what the budget leaves (`left`),
    at most `max_repeats`. A search that found a capacity where a step budget cut the search
    (`cut`) still gets `INTERVAL_RUNS` of them (from a budget above `KEEP_FROM` one is the
    budget's own, kept from the bisection; the rest past the budget): no rate is sure before
    one spread between seeds is measured (`rate_verdicts.rate_verdict`), so a budget the
    bisection spent left every such search, the best config's too, with the interval (0, ?).
    Such a search is the incumbent once it ends (the first config, or one that held the
    race: above the incumbent's capacity); a lost race stops before (`raced`). One run
    measures the spread (`_spread_first`), the other settles the nearer open end; runs past
    the budget stop once the interval has both ends (`confirm`'s `closing`): they close it,
    not narrow it."""
    return min(max_repeats, max(left, INTERVAL_RUNS) if cut else left)


def _finish(
    measure: Callable[..., Step],
    steps: list[Step],
    bracket: tuple[float, float],
    resolved: bool,
    limits: tuple[float, float, float],
    max_repeats: int,
    closing: bool = False,
) -> Result:
    """The search's answer once the bisection ended: the repeats spent (`confirm`; `closing`:
    only until the interval has both ends), the capacity and its interval. `limits`:
    (min_rps, max_rps, resolution)."""
    lo, hi = bracket
    min_rps, max_rps, resolution = limits
    lo = confirm(measure, steps, lo, max_repeats, resolution, (min_rps, max_rps), closing)
    hi = min((s.rate_rps for s in steps if not s.feasible and s.rate_rps > lo), default=hi)
    steps[:] = judged(steps)
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
    measure: Callable[..., Step],
    steps: list[Step],
    estimate: float,
    budget: int,
    resolution: float = 0.0,
    rate_range: tuple[float, float] = (0.0, math.inf),
    closing: bool = False,
) -> float:
    """Spend at most `budget` runs bounding the estimate, below and above it in turn
    (`next_rate`: a repeat of the rate nearest to settling, or a new rate past the rates that
    cannot, one per side), each on its next seed and measured whole (`measure(rate, k,
    True)`), until the capacity's interval is within `resolution` (`capacity_interval`:
    nothing left to settle), or with `closing` until it has both ends.
    `rate_range`: (min_rps, max_rps), where a new rate may go. Returns the estimate, lowered
    to the highest feasible rate below it when a repeat made its own pooled figures break an
    SLO (a rate below it that breaks pooled leaves it, and the interval says the doubt)."""
    sides = [HOLDS, BREAKS]
    extended: set[str] = set()  # the sides given a new rate
    steps[:] = judged(steps)
    while budget > 0 and not _settled(steps, estimate, resolution, closing):
        side, rate = _spread_first(steps, estimate, rate_range)
        if rate is None:
            side, rate = next(
                (
                    (side, r)
                    for narrow in (False, True)  # a bounded side's narrowing last
                    for side in sides
                    if (
                        r := next_rate(
                            steps, estimate, side, rate_range, side not in extended, narrow
                        )
                    )
                ),
                ("", None),
            )
        if rate is None:
            break
        i = next((i for i, s in enumerate(steps) if s.rate_rps == rate), len(steps))
        if i == len(steps):
            extended.add(side)
        step = measure(rate, steps[i].runs if i < len(steps) else 0, True)
        steps[i : i + 1] = [step]
        steps[:] = judged(steps)
        budget -= 1
        sides.reverse()  # the other side next
        if not step.feasible and rate == estimate:  # the capacity's own rate broke, pooled
            below = (s.rate_rps for s in steps if s.feasible and s.rate_rps < estimate)
            estimate = max(below, default=0.0)
    return estimate


def _spread_first(
    steps: Sequence[Step], estimate: float, rate_range: tuple[float, float]
) -> tuple[str, float | None]:
    """While no spread between seeds is measured (no rate is sure before: `rate_verdict`),
    the interval's first run repeats the held rate nearest to settling (`next_to_confirm`: its
    runs whole, so the pair measures the spread), not a new rate that could not be judged
    without one. (HOLDS, None) when the spread is measured or no held rate ran whole."""
    if seed_spread(steps)[2]:
        return HOLDS, None
    return HOLDS, next_rate(steps, estimate, HOLDS, rate_range, extend=False, narrow=True)


def _settled(
    steps: Sequence[Step], estimate: float, resolution: float, closing: bool = False
) -> bool:
    """The capacity's interval is within the resolution: a repeat cannot narrow it further.
    `closing`: it has both ends."""
    low, high = capacity_interval(steps, estimate)
    if closing and low > 0 and high is not None:
        return True
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
