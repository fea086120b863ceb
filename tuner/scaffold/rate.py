"""The request rate `tuner init` writes (SIMULATED): the highest round rate where the baseline
trial (vLLM's defaults) meets the study's SLO with a margin, simulated as `tuner plan` simulates
it (`tuner.run.cost.simulated_baseline`). Why that rate, the ladder it climbs and the note a
given `--rate` gets: docs/study-file.md, "The request rate".

Why a margin: a rate the baseline meets leaves every tuned config a feasible point to beat, and
the margin (each limit's `SLO_MARGIN`) leaves room for the live engine's own noise. The
constants by name: `ROUND_STEPS` round values per decade, down to `LOWEST_FRACTION` of the
defaults' rate with all requests sent at once; the bisection relies on the baseline's latencies
growing with the rate.

What callers may assume: a limit is judged in the direction it eases (`eases_at_lower_rates`);
the limits that ease at higher rates (a ceiling on `duration`, a floor on a throughput) are
judged once, at the rate found; counts (`completed`, `failed`) are exact and keep no margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NoReturn

from tuner.errors import UserError
from tuner.fidelity.bands import Bands, range_text
from tuner.run.cost import simulated_baseline
from tuner.spec.figures import figure
from tuner.spec.metric_keys import COUNTS, metric_words
from tuner.spec.slo import SloLimit
from tuner.spec.study import StudySpec

SLO_MARGIN = 0.8  # the baseline keeps each SLO metric within 80 % of its limit
ROUND_STEPS = (1.0, 1.2, 1.5, 1.8, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
LOWEST_FRACTION = 0.01  # of the sustained rate: the lowest rate tried


@dataclass(frozen=True)
class RateChoice:
    """The rate chosen, what vLLM's defaults sustain (req/s, every request sent at once), and
    the baseline's SIMULATED figures at the rate chosen."""

    rate: float
    sustained_rps: float
    metrics: dict[str, float]
    limits: tuple[SloLimit, ...]
    bands: Bands | None = None  # of the figures at `rate` (`tuner.fidelity.bands`)
    sustained_words: str = ""  # `sustained_rps` with its band (`sustained_words`)

    def why(self) -> str:
        """The note's reason: the rule, the figures that met it (each with its band), and the
        ceiling."""
        held = ", ".join(held_words(self.metrics, x.metric, self.bands) for x in self.limits)
        return (
            f"the highest round rate at which vLLM's defaults keep every SLO metric within "
            f"{SLO_MARGIN:.0%} of its limit, SIMULATED: {held}; they sustain "
            f"{self.sustained_words} with every request sent at once; --rate to change"
        )


def _bands(spec: StudySpec, rate: float) -> Bands:
    """The bands of the baseline's figures at `rate` (its workload's regime)."""
    return Bands.of([_at(spec, rate).workload])


def sustained_words(spec: StudySpec, rps: float) -> str:
    """`3.2 req/s (2.2-3.3, SIMULATED)`: what vLLM's defaults sustain with every request sent
    at once (`sustained_rate`), with the band of that workload's throughput."""
    return _bands(spec, math.inf).text("request_throughput", rps, "req/s")


def sustained_rate(spec: StudySpec) -> float:
    """The request rate (req/s) vLLM's defaults sustain on the simulator with every request
    sent at once. UserError: the simulator cannot run them (`simulated_baseline`)."""
    burst = simulated_baseline(_at(spec, math.inf))
    return spec.workload.num_prompts / max(burst.workload_s or 0.0, 1e-9)


def choose_rate(spec: StudySpec, sustained: float) -> RateChoice:
    """The highest round rate up to `sustained` whose simulated baseline meets `spec`'s SLOs
    with the margin. UserError: no rate tried meets them."""
    limits = [_with_margin(x) for x in spec.slo_limits()]
    latencies = [x for x in limits if eases_at_lower_rates(x)]
    ladder = round_rates(sustained, sustained * LOWEST_FRACTION)
    runs: dict[float, dict[str, float]] = {}

    def meets(rate: float, among: list[SloLimit]) -> bool:
        if rate not in runs:
            # a run that failed part-way has no figures: it meets no SLO
            runs[rate] = simulated_baseline(_at(spec, rate)).metrics or {}
        return all(x.met(runs[rate]) for x in among)

    if not ladder or not meets(ladder[-1], latencies):
        _refused(spec, ladder[-1] if ladder else sustained, runs)
    low, high = len(ladder) - 1, -1  # ladder[low] meets; every index <= high misses
    while low - high > 1:
        mid = (low + high) // 2
        if meets(ladder[mid], latencies):
            low = mid
        else:
            high = mid
    rate = ladder[low]
    if not meets(rate, limits):  # a throughput floor, a duration: no lower rate helps them
        _refused(spec, rate, runs)
    words = sustained_words(spec, sustained)
    return RateChoice(
        rate, sustained, runs[rate], tuple(spec.slo_limits()), _bands(spec, rate), words
    )


def _refused(spec: StudySpec, rate: float, runs: dict[float, dict[str, float]]) -> NoReturn:
    """No rate tried meets the SLO: name each limit missed, with the figure at `rate`."""
    figures = runs.get(rate, {})
    missed = [
        f"{limit} ({held_words(figures, limit.metric, _bands(spec, rate))})"
        for limit in spec.slo_limits()
        if not _with_margin(limit).met(figures)
    ]
    raise UserError(
        f"vLLM's defaults miss {', '.join(missed) or 'the SLO'} at {rate:g} req/s on the "
        f"simulator, with the {1 - SLO_MARGIN:.0%} margin `tuner init` keeps (SIMULATED): "
        "give a looser --slo, or --rate R to write the study anyway"
    )


def missed_at(spec: StudySpec, rate: float) -> str | None:
    """The SLO limits vLLM's defaults miss at `rate` on the simulator (no margin), each with
    its SIMULATED figure, in words; None when they meet them all, or the simulator cannot run
    them (a rate given with `--rate`: `tuner init` writes it all the same)."""
    try:
        figures = simulated_baseline(_at(spec, rate)).metrics or {}
    except UserError:
        return None
    missed = [
        f"{limit} ({held_words(figures, limit.metric, _bands(spec, rate))})"
        for limit in spec.slo_limits()
        if not limit.met(figures)
    ]
    return ", ".join(missed) or None


def round_rates(top: float, bottom: float) -> list[float]:
    """The round rates (`ROUND_STEPS` × a power of ten) in [bottom, top], highest first."""
    if not 0 < bottom <= top < math.inf:
        return []
    rates = []
    for exponent in range(math.floor(math.log10(bottom)), math.floor(math.log10(top)) + 1):
        for step in ROUND_STEPS:
            rate = float(f"{step * 10.0**exponent:.3g}")
            if bottom <= rate <= top:
                rates.append(rate)
    return sorted(set(rates), reverse=True)


def _at(spec: StudySpec, rate: float) -> StudySpec:
    workload = spec.workload.model_copy(update={"request_rate": rate})
    return spec.model_copy(update={"workload": workload})


def eases_at_lower_rates(limit: SloLimit) -> bool:
    """Whether a limit is met more easily at a lower request rate: a ceiling on a latency or
    on `failed`, a floor on `completed` (an overloaded engine times requests out). A ceiling
    on `duration` (the run of the same prompts ends sooner at a higher rate) and a floor on a
    throughput are met more easily at higher rates."""
    upper = limit.upper
    if limit.metric == "completed":
        return not upper
    return upper and limit.metric != "duration"


def _with_margin(limit: SloLimit) -> SloLimit:
    """`limit` tightened by the margin: an upper limit × SLO_MARGIN, a lower one ÷ it; a
    count's limit as it is (a count is exact)."""
    if limit.metric in COUNTS:
        return limit
    upper = limit.upper
    value = limit.value * SLO_MARGIN if upper else limit.value / SLO_MARGIN
    return SloLimit(limit.metric, limit.op, value)


def held_words(metrics: dict[str, float], metric: str, bands: Bands | None = None) -> str:
    """`p99 TTFT 1450 ms`: one SLO metric's simulated figure, in words; with `bands`, its
    band: `p99 TTFT 1450 ms (1420-2280)` (the line says SIMULATED once)."""
    label, unit = metric_words(metric)
    value = metrics.get(metric)
    if value is None:
        return f"{label} not measured"
    around = bands.around(metric, value) if bands is not None else None
    band = f" ({range_text(around)})" if around is not None else ""
    return f"{label} {figure(value)}{unit}{band}"
