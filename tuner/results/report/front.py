"""The Pareto plot's data, computed once for both renderers (plotly and the matplotlib PNG).

As Optuna's `visualization/_pareto_front.py` builds one `_ParetoFrontInfo` and hands it to
either backend, `pareto_front_info` chooses the axes (fitted to the points,
`tuner.results.report.layout`), the plotted trials, the front (capacity mode: among the configs
that serve the most), the point labels and where they sit, the SLO lines (or a note at the
edge), the colour scale and the log scales; tuner/results/report/plots.py only draws them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.results.pareto import NoiseFront, noise_front, off_front_words
from tuner.results.report.layout import (
    MARKER_PX,
    AxisRange,
    ColourScale,
    SloLine,
    clusters,
    colour_scale,
    place_labels,
    slo_axis,
)
from tuner.spec.figures import figure
from tuner.spec.slo import parse_slo
from tuner.trial import TrialPoint

TPOT = "mean_tpot_ms"
THROUGHPUT = "output_throughput"
BASELINE_HALF_PX = 12.0  # half the baseline's star (plotly's size 22, the PNG's s=320)


def ttft_axis(points: Sequence[TrialPoint]) -> str:
    """P99 TTFT, or mean TTFT for a workload that did not ask for the 99th percentile."""
    stored = {m for p in points for m in p.metrics}
    return "p99_ttft_ms" if "p99_ttft_ms" in stored else "mean_ttft_ms"


def _labels(points: Sequence[TrialPoint], fractions: Sequence[tuple[float, float]]) -> list[str]:
    """Trial numbers as point labels; trials at (or within a few pixels of) one spot share one
    label ("1,2", on the first of them), so numbers never print over each other."""
    heads = clusters(fractions)
    members: dict[int, list[int]] = {}
    for p, head in zip(points, heads, strict=True):
        members.setdefault(head, []).append(p.number)
    return [_shared(members[i]) if head == i else "" for i, head in enumerate(heads)]


def _shared(numbers: list[int], most: int = 3) -> str:
    """ "1,2" for a few trials at one spot; "1,2,3 +41" when many would run across the plot."""
    shown = ",".join(map(str, numbers[:most]))
    return shown if len(numbers) <= most else f"{shown} +{len(numbers) - most}"


@dataclass(frozen=True)
class ParetoFrontInfo:
    """Everything the Pareto plot shows, computed once; the plotly and PNG renderers read only
    this (as Optuna's `_ParetoFrontInfo` in `visualization/_pareto_front.py`)."""

    x: str  # metric on the x axis (P99 or mean TTFT)
    y: str  # metric on the y axis (mean TPOT)
    feasible: tuple[TrialPoint, ...]  # feasible trials with both metrics, in trial order
    infeasible: tuple[TrialPoint, ...]  # measured but breaking a constraint
    front: tuple[TrialPoint, ...]  # the feasible front, best first on x
    feasible_labels: tuple[str, ...]  # one per feasible trial ("" when sharing a spot)
    infeasible_labels: tuple[str, ...]
    baselines: tuple[TrialPoint, ...]  # plotted trials marked baseline (normally one)
    slo_lines: tuple[SloLine, ...]
    failed: tuple[TrialPoint, ...]  # no measurement: listed, not plotted
    log_x: bool
    log_y: bool
    simulated: bool
    scenario: str | None = None  # one scenario's figures (a mix), None: the trials' own
    x_range: AxisRange | None = None  # fitted to the plotted points (None: nothing plotted)
    y_range: AxisRange | None = None
    feasible_positions: tuple[str, ...] = ()  # where each label sits (`layout.POSITIONS`)
    infeasible_positions: tuple[str, ...] = ()
    colour: ColourScale | None = None  # the feasible points' throughput colours
    front_capacity_rps: float | None = None  # capacity mode: the front is of this capacity
    noise: NoiseFront | None = None  # the front's noise groups (`results.pareto.noise_front`)
    recommended: TrialPoint | None = None  # what `tuner export` ships (None: nothing)
    recommended_why: str | None = None  # why it is off the front (None: on it, or none)

    @property
    def front_numbers(self) -> frozenset[int]:
        return frozenset(p.number for p in self.front)

    @property
    def trade_offs(self) -> tuple[TrialPoint, ...]:
        """The front's configs the 95 % intervals tell apart (each group's first): the step
        line joins these; the others are within noise of one."""
        noise = self.noise
        return tuple(p for p in self.front if noise is None or noise.within_noise_of(p) is None)

    def noisy(self, p: TrialPoint) -> bool:
        """On the front, but within noise of a config the step line joins."""
        return self.noise is not None and self.noise.within_noise_of(p) is not None

    def error_bars(self, p: TrialPoint, metric: str) -> tuple[float, float] | None:
        """How far the point's 95 % interval on `metric` reaches below and above it."""
        ci, value = p.ci(metric), p.metrics[metric]
        return None if ci is None else (max(value - ci[0], 0.0), max(ci[1] - value, 0.0))

    @property
    def bars_words(self) -> str | None:
        """The error bars' legend entry (None: no interval stored); it says when some run past
        the axes, which are fitted to the points: the points' spread is then within noise."""
        beyond = False
        shown = False
        for metric, rng in ((self.x, self.x_range), (self.y, self.y_range)):
            for p in self.feasible:
                ci = p.ci(metric)
                if ci is None or rng is None:
                    continue
                shown = True
                beyond = beyond or ci[0] < rng.low or ci[1] > rng.high
        if not shown:
            return None
        text = "grey bars: each trial's 95% intervals"
        return text + ("; some run past the axes, fitted to the points" if beyond else "")

    @property
    def recommended_plotted(self) -> bool:
        rec = self.recommended
        return rec is not None and self.x in rec.metrics and self.y in rec.metrics

    def recommended_words(self) -> str:
        """The legend's entry for the config `tuner export` ships."""
        rec = self.recommended
        if rec is None:
            return ""
        text = f"recommended: trial {rec.number} (what tuner export ships)"
        return text + (f"; {self.recommended_why}" if self.recommended_why else "")

    @property
    def empty_words(self) -> str | None:
        """What an empty plot says in its middle (both renderers); None: there are points."""
        if self.feasible or self.infeasible:
            return None
        failed = f" ({len(self.failed)} failed)" if self.failed else ""
        return f"no measured trial to plot{failed}"

    def xy(self, p: TrialPoint) -> tuple[float, float]:
        return p.metrics[self.x], p.metrics[self.y]


def pareto_front_info(
    points: Sequence[TrialPoint],
    slo_lines: Sequence[str] = (),
    simulated: bool = False,
    scenario: str | None = None,
    *,
    recommended: TrialPoint | None = None,
) -> ParetoFrontInfo:
    """The Pareto plot's data: axes, plotted trials, front, labels, SLO lines, log scales;
    `scenario`: the points are that scenario's (`tuner.trial.for_scenario`), the title says so;
    trials with capacities (a capacity study's): the front is drawn among the configs that
    serve the highest capacity (`results.pareto.noise_front`, which `tuner pareto` prints too);
    `recommended`: the config `tuner export` ships, marked, with why when it is off the front."""
    x, y = ttft_axis(points), TPOT

    def plotted(status: str) -> tuple[TrialPoint, ...]:
        return tuple(p for p in points if p.status == status and x in p.metrics and y in p.metrics)

    feasible, infeasible = plotted("feasible"), plotted("infeasible")
    shown = (*feasible, *infeasible)
    xr, yr, lines = _axes(shown, x, y, slo_lines)

    def fractions(group: Sequence[TrialPoint]) -> list[tuple[float, float]]:
        return [(xr.fraction(p.metrics[x]), yr.fraction(p.metrics[y])) for p in group]

    feasible_labels = _labels(feasible, fractions(feasible))
    infeasible_labels = _labels(infeasible, fractions(infeasible))
    # the baseline's star and the front's ringed points are bigger than a plain point
    halves = [BASELINE_HALF_PX if p.baseline else MARKER_PX for p in shown]
    positions = place_labels(fractions(shown), [*feasible_labels, *infeasible_labels], halves)
    noise = noise_front(feasible, [(x, "minimize"), (y, "minimize")])
    return ParetoFrontInfo(
        x=x,
        y=y,
        feasible=feasible,
        infeasible=infeasible,
        front=noise.points,
        feasible_labels=tuple(feasible_labels),
        infeasible_labels=tuple(infeasible_labels),
        baselines=tuple(p for p in shown if p.baseline),
        slo_lines=tuple(lines),
        failed=tuple(p for p in points if p.status == "failed"),
        log_x=xr.log,
        log_y=yr.log,
        simulated=simulated,
        scenario=scenario,
        x_range=xr if shown else None,
        y_range=yr if shown else None,
        feasible_positions=positions[: len(feasible)],
        infeasible_positions=positions[len(feasible) :],
        colour=_colours(feasible),
        front_capacity_rps=noise.capacity_rps,
        noise=noise,
        recommended=recommended,
        recommended_why=None if recommended is None else off_front_words(recommended, noise),
    )


def _axes(
    shown: Sequence[TrialPoint], x: str, y: str, slo_lines: Sequence[str]
) -> tuple[AxisRange, AxisRange, list[SloLine]]:
    """Both axes fitted to the plotted trials and each SLO limit on them (`layout.slo_axis`)."""
    limits = [limit for text in slo_lines for limit in parse_slo(text)]
    figures = [p.metrics for p in shown]
    ranges, lines = {}, []
    for axis, metric in (("x", x), ("y", y)):
        on_axis = [limit for limit in limits if limit.metric == metric]
        values = [p.metrics[metric] for p in shown]
        ranges[metric], found = slo_axis(axis, values, on_axis, figures)
        lines += found
    return ranges[x], ranges[y], lines


def _colours(feasible: Sequence[TrialPoint]) -> ColourScale | None:
    values = [p.metrics.get(THROUGHPUT, math.nan) for p in feasible]
    half = [(ci[1] - ci[0]) / 2 for p in feasible if (ci := p.ci(THROUGHPUT)) is not None]
    return colour_scale(values, half)


def _with_interval(p: TrialPoint, metric: str) -> str:
    ci = p.ci(metric)
    shown = figure(p.metrics.get(metric))
    return shown if ci is None else f"{shown} [{figure(ci[0])}–{figure(ci[1])}]"


def front_rows(info: ParetoFrontInfo) -> list[list[str]]:
    """The front under the plot, in words: each config best first on x, its figures on both
    axes with their 95 % intervals, whether the intervals tell it apart (a trade-off) or it is
    within noise of one, and the recommended config marked (a row of its own, with why, when
    it is off the front)."""
    rec = info.recommended
    shown = list(info.front)
    if rec is not None and rec.number not in info.front_numbers:
        shown.append(rec)
    rows = []
    for p in shown:
        noise = info.noise.within_noise_of(p) if info.noise is not None else None
        where = (
            "off the front"
            if p.number not in info.front_numbers
            else "trade-off"
            if noise is None
            else f"within noise of trial {noise}"
        )
        marks = []
        if rec is not None and p.number == rec.number:
            marks.append("recommended: what tuner export ships")
            marks += [info.recommended_why] if info.recommended_why else []
        number = f"{p.number}" + (" ★ baseline" if p.baseline else "")
        values = [_with_interval(p, m) if m in p.metrics else "" for m in (info.x, info.y)]
        rows.append([number, *values, where, "; ".join(marks)])
    return rows
