"""Where things sit on the trade-off plot (pure): axes fitted to the data, SLO limits that are
drawn or noted at the edge, point labels that do not collide, a colour scale that says when
its spread is noise. `front.pareto_front_info` computes them once; both renderers draw them.

Why these rules: docs/results.md, "The trade-off plot".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.spec.figures import figure
from tuner.spec.slo import SloLimit

PAD = 0.06  # of the data's span, each side of the axis
SLO_REACH = 0.5  # an SLO within half the data's span of it is drawn on the axis (stretched)
# ... or within 5 % of its own value: capacity mode meets p99 TTFT <= 2000 ms at 1996-1998 ms,
# a span of 2 ms that would put the limit "off the plot" 2 ms away
SLO_NEAR_SHARE = 0.05
MAX_TICK_PLACES = 9  # decimals a tick label may take to differ from its neighbours
MIN_SPAN = 0.1  # a single value (or all equal): the axis spans 10 % of it (log: 0.1 decade)
# The plot area the labels are placed for, the smaller of the two renderers' on each side (the
# PNG's 9x7.5 in at 120 dpi leaves about 780 px across inside the axes, plotly's 680-px figure
# about 420 px high at the report's width), and a label's size in it.
PLOT_W_PX, PLOT_H_PX = 780.0, 420.0
CHAR_W_PX, LINE_H_PX, OFFSET_PX = 7.0, 14.0, 6.0
MARKER_PX = 8.0  # half a plain point; the callers give bigger ones (the baseline's star)
CLUSTER_PX = 14.0  # points closer than this share one label ("1,11,21")
# plotly's `textposition` names, tried in this order; the PNG maps each to an offset
POSITIONS = (
    "top right",
    "bottom right",
    "top left",
    "bottom left",
    "middle right",
    "middle left",
    "top center",
    "bottom center",
)
LOG_SPAN = 10.0  # an axis whose values span more than this factor is logarithmic
# Without stored intervals: a spread under 1 % of the median reads as noise (a run-to-run
# difference of output throughput on one config is about that on the simulator, more on GPUs).
NOISE_WITHOUT_INTERVALS = 0.01


@dataclass(frozen=True)
class AxisRange:
    """An axis's limits in data units; `log`: drawn on a log scale."""

    low: float
    high: float
    log: bool = False

    def _t(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def fraction(self, v: float) -> float:
        """Where `v` sits along the axis: 0 at `low`, 1 at `high`."""
        lo, hi = self._t(self.low), self._t(self.high)
        return (self._t(v) - lo) / (hi - lo) if hi > lo else 0.5

    def plotly_range(self) -> list[float]:
        """plotly's `range`: log10 of the limits on a log axis."""
        return [self._t(self.low), self._t(self.high)]


@dataclass(frozen=True)
class Edge:
    """An SLO limit beyond the fitted axis: which edge it lies past, and whether every plotted
    point meets it (then the plot leaves it out rather than squeeze the points)."""

    edge: str  # "right", "left", "top", "bottom"
    all_met: bool

    def words(self, label: str) -> str:
        arrow = {"right": "→", "left": "←", "top": "↑", "bottom": "↓"}[self.edge]
        met = "; every point meets it" if self.all_met else ""
        return f"{label} {arrow} off the plot, beyond the {self.edge} edge{met}"


def fit_axis(
    values: Sequence[float], limits: Sequence[float], log: bool
) -> tuple[AxisRange, tuple[bool, ...]]:
    """The axis for `values`: their span padded by PAD each side, stretched to take in each
    limit within SLO_REACH of the span; the others stay off it (False in the second item).

    So an SLO far from the data (P99 TTFT ≤ 20 s over points at 1-3 s) no longer squeezes the
    points into a corner; one near them is drawn where it is."""

    def t(v: float) -> float:
        return math.log10(v) if log else v

    def back(v: float) -> float:
        return 10.0**v if log else v

    data = [t(v) for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not data:
        data = [t(v) for v in limits if v > 0 or not log] or [0.0]
    lo, hi = min(data), max(data)
    span = hi - lo
    if span <= 0:
        span = MIN_SPAN if log else (MIN_SPAN * abs(lo) or 1.0)
        lo, hi = lo - span / 2, hi + span / 2
    inside = []
    low_data, high_data = back(lo), back(hi)
    for limit in limits:
        near = (limit > 0 or not log) and lo - SLO_REACH * span <= t(limit) <= hi + SLO_REACH * span
        gap = max(low_data - limit, limit - high_data, 0.0)  # from the nearest point, data units
        near = near or ((limit > 0 or not log) and gap <= SLO_NEAR_SHARE * abs(limit))
        inside.append(near)
        if near:
            lo, hi = min(lo, t(limit)), max(hi, t(limit))
    pad = PAD * (hi - lo)
    return AxisRange(back(lo - pad), back(hi + pad), log), tuple(inside)


def log_scale(values: Sequence[float]) -> bool:
    """A log axis when the values span more than LOG_SPAN, e.g. an overloaded config's 20 s
    TTFT beside good ones at 0.5 s: on a linear axis the good ones would be squeezed into a
    corner."""
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) > 1 and max(positive) / min(positive) > LOG_SPAN


@dataclass(frozen=True)
class SloLine:
    """One SLO limit on a plot's axis; `off`: it lies beyond the fitted axis (None: drawn as a
    line), and the plot says so at that edge instead."""

    axis: str  # "x" or "y"
    value: float
    label: str  # "SLO p99_ttft_ms<=2000"
    off: Edge | None = None


def slo_axis(
    axis: str,
    values: Sequence[float],
    limits: Sequence[SloLimit],
    plotted: Sequence[dict[str, float]],
) -> tuple[AxisRange, list[SloLine]]:
    """An axis fitted to `values` (`fit_axis`, log when they span over LOG_SPAN) and each SLO
    limit on it: a line, or noted beyond the edge it lies past (`plotted`: the figures of
    every plotted point, to say whether they all meet it). The trade-off plot's axes and the
    latency-load curves' both."""
    rng, inside = fit_axis(values, [limit.value for limit in limits], log_scale(values))
    lines = []
    for limit, near in zip(limits, inside, strict=True):
        met = all(limit.met(m) for m in plotted)
        off = None if near else edge_of(axis, limit.value, rng, met)
        lines.append(SloLine(axis, limit.value, f"SLO {limit}", off))
    return rng, lines


def tick_texts(values: Sequence[float]) -> list[str]:
    """Tick labels as plain decimals (never an exponent or an offset), each with the fewest
    decimals that write every tick exactly, the same for all, so neighbours always differ and
    no label rounds its tick away: `figure`'s four significant digits wrote the ticks of
    points at 22.606-22.612 ms as 22.61, 22.61, 22.61, and 1996.5 as 1996."""
    places = 0
    while places < MAX_TICK_PLACES and any(
        abs(v - round(v, places)) > 1e-9 * max(abs(v), 1.0) for v in values
    ):
        places += 1
    return [figure(v, places) for v in values]


def edge_of(axis: str, limit: float, rng: AxisRange, all_met: bool) -> Edge:
    """Which edge an off-axis limit lies beyond."""
    high = limit > rng.high
    if axis == "x":
        return Edge("right" if high else "left", all_met)
    return Edge("top" if high else "bottom", all_met)


def clusters(fractions: Sequence[tuple[float, float]]) -> list[int]:
    """For each point, the index of the first point of its cluster: points within CLUSTER_PX
    of a cluster's first point (on the plot, at PLOT_W_PX x PLOT_H_PX) share its label."""
    heads: list[int] = []
    out = []
    for i, (fx, fy) in enumerate(fractions):
        near = next(
            (
                h
                for h in heads
                if math.hypot(
                    (fx - fractions[h][0]) * PLOT_W_PX, (fy - fractions[h][1]) * PLOT_H_PX
                )
                < CLUSTER_PX
            ),
            None,
        )
        if near is None:
            heads.append(i)
        out.append(i if near is None else near)
    return out


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in plot fractions


def _box(x: float, y: float, text: str, position: str) -> Box:
    w, h = len(text) * CHAR_W_PX / PLOT_W_PX, LINE_H_PX / PLOT_H_PX
    ox, oy = OFFSET_PX / PLOT_W_PX, OFFSET_PX / PLOT_H_PX
    vertical, horizontal = position.split()
    x0 = {"right": x + ox, "left": x - ox - w, "center": x - w / 2}[horizontal]
    y0 = {"top": y + oy, "bottom": y - oy - h, "middle": y - h / 2}[vertical]
    return x0, y0, x0 + w, y0 + h


def _overlap(a: Box, b: Box) -> float:
    dx = min(a[2], b[2]) - max(a[0], b[0])
    dy = min(a[3], b[3]) - max(a[1], b[1])
    return dx * dy if dx > 0 and dy > 0 else 0.0


def place_labels(
    fractions: Sequence[tuple[float, float]],
    texts: Sequence[str],
    half_sizes_px: Sequence[float] | None = None,
) -> tuple[str, ...]:
    """A `POSITIONS` entry for each label: the first that overlaps no label placed before it,
    no other point (each `half_sizes_px` across from its centre, MARKER_PX when not given) and
    stays inside the plot; where none does, the one that overlaps least. An empty label keeps
    the first position (nothing is drawn)."""
    halves = half_sizes_px or [MARKER_PX] * len(fractions)
    markers = [
        (fx - h / PLOT_W_PX, fy - h / PLOT_H_PX, fx + h / PLOT_W_PX, fy + h / PLOT_H_PX)
        for (fx, fy), h in zip(fractions, halves, strict=True)
    ]
    placed: list[Box] = []
    out = []
    for i, ((fx, fy), text) in enumerate(zip(fractions, texts, strict=True)):
        if not text:
            out.append(POSITIONS[0])
            continue
        best, best_cost = POSITIONS[0], math.inf
        for position in POSITIONS:
            box = _box(fx, fy, text, position)
            cost = sum(_overlap(box, b) for b in placed)
            cost += sum(_overlap(box, m) for j, m in enumerate(markers) if j != i)
            outside = max(0.0, -box[0]) + max(0.0, box[2] - 1) + max(0.0, -box[1])
            cost += outside + max(0.0, box[3] - 1)
            if cost < best_cost:
                best, best_cost = position, cost
            if cost == 0:
                break
        placed.append(_box(fx, fy, text, best))
        out.append(best)
    return tuple(out)


# Where an SLO line's label may sit (plotly's `annotation_position` of a line), in the order
# tried: at the low end first, where a latency-load curve starts well under its SLO
SLO_LABEL_POSITIONS = ("top left", "bottom left", "top right", "bottom right")


def slo_label_position(
    limit: float,
    points: Sequence[tuple[float, float]],
    text: str,
    size_px: tuple[float, float] = (PLOT_W_PX, PLOT_H_PX),
) -> str:
    """An `SLO_LABEL_POSITIONS` entry for the label `text` of a horizontal SLO line at plot
    fraction `limit`: the first whose box covers no plotted point (`points` as plot fractions,
    each MARKER_PX across from its centre) and stays inside the plot; else the one that covers
    least. plotly's own choice, top right, sat on a load curve's last points: the highest
    rates, near the SLO by construction (the capacity is where the curve crosses it)."""
    width_px, height_px = size_px
    w, h = len(text) * CHAR_W_PX / width_px, LINE_H_PX / height_px
    mx, my = MARKER_PX / width_px, MARKER_PX / height_px
    markers = [(x - mx, y - my, x + mx, y + my) for x, y in points]
    best, best_cost = SLO_LABEL_POSITIONS[0], math.inf
    for position in SLO_LABEL_POSITIONS:
        vertical, horizontal = position.split()
        x0 = 0.0 if horizontal == "left" else 1.0 - w
        y0 = limit if vertical == "top" else limit - h
        box = (x0, y0, x0 + w, y0 + h)
        cost = sum(_overlap(box, m) for m in markers)
        cost += max(0.0, box[3] - 1.0) + max(0.0, -box[1])
        if cost < best_cost:
            best, best_cost = position, cost
    return best


@dataclass(frozen=True)
class ColourScale:
    """Output throughput as the points' colour, or one colour when its spread is noise."""

    low: float
    high: float
    noise: bool  # the spread is within the figures' own uncertainty: not coloured
    why: str  # the words the legend or the colour bar carries


def colour_scale(values: Sequence[float], half_widths: Sequence[float]) -> ColourScale | None:
    """The colour scale of throughputs `values`; `half_widths`: the half-widths of their 95 %
    intervals (those stored). A spread no wider than their median half-width is noise: two
    measurements of one config differ that much, so colours would rank noise. Without
    intervals: a spread under NOISE_WITHOUT_INTERVALS of the median. None: nothing to colour."""
    shown = [v for v in values if math.isfinite(v)]
    if not shown:
        return None
    low, high = min(shown), max(shown)
    spread = f"{figure(low)}–{figure(high)} tok/s"
    if half_widths:
        noise_width = statistics.median(half_widths)
        noise = high - low <= noise_width
        why = f"95% intervals ±{figure(noise_width)} tok/s"
    else:
        noise = high - low < NOISE_WITHOUT_INTERVALS * abs(statistics.median(shown))
        why = f"under {NOISE_WITHOUT_INTERVALS:.0%} of it, no intervals stored"
    if noise:
        return ColourScale(low, high, True, f"output {spread}: a spread within noise ({why})")
    return ColourScale(low, high, False, "output tok/s")
