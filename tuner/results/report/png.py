"""The Pareto plot as a static PNG (matplotlib, Agg), for tickets and chat: the same
`ParetoFrontInfo` as the report's plotly figure (tuner/results/report/plots.py), drawn on the
same fitted axes, with the same labels where they sit, and every number through `figure`
(no offset notation, no `1e4`)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from tuner.results.report.front import THROUGHPUT, ParetoFrontInfo, pareto_front_info
from tuner.results.report.layout import tick_texts
from tuner.results.report.plots import (
    COLORS,
    NOISE_WORDS,
    SLO_COLOR,
    front_name,
    off_plot_notes,
)
from tuner.spec.figures import figure
from tuner.trial import TrialPoint

if TYPE_CHECKING:  # matplotlib is imported where a PNG is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import Formatter

TITLE_CHARS = 78  # a title line at 11 pt across the 9-inch figure: wrapped, never cut off
# (dx, dy) in points and the text's alignment for each `layout.POSITIONS` entry
_OFFSETS = {
    "top right": (5, 5, "left", "bottom"),
    "bottom right": (5, -5, "left", "top"),
    "top left": (-5, 5, "right", "bottom"),
    "bottom left": (-5, -5, "right", "top"),
    "middle right": (7, 0, "left", "center"),
    "middle left": (-7, 0, "right", "center"),
    "top center": (0, 7, "center", "bottom"),
    "bottom center": (0, -7, "center", "top"),
}


def write_png(
    points: Sequence[TrialPoint],
    path: Path | BinaryIO,
    study_name: str,
    *,
    slo_lines: Sequence[str] = (),
    simulated: bool = False,
    recommended: TrialPoint | None = None,
) -> None:
    """The Pareto plot as a static image (see `draw_png`); `recommended`: what `tuner export`
    ships, marked."""
    info = pareto_front_info(points, slo_lines, simulated, recommended=recommended)
    draw_png(info, path, study_name)


def title_lines(info: ParetoFrontInfo, study_name: str) -> str:
    """The title, each part wrapped to TITLE_CHARS a line (never cut off): the study, the axes,
    what is left out, capacity mode's rates, SIMULATED."""
    extra = [f"{len(info.failed)} failed trial(s) not shown"] if info.failed else []
    if info.front_capacity_rps is not None:
        extra.append("each trial at its own capacity rate")
    parts = [f"{study_name}:", f"{info.x} against {info.y} (both lower is better)"]
    parts += ["; ".join(extra)] if extra else []
    parts += ["SIMULATED: predicted figures, not measurements"] if info.simulated else []
    return "\n".join(textwrap.fill(part, TITLE_CHARS) for part in parts)


def draw_png(info: ParetoFrontInfo, path: Path | BinaryIO, study_name: str) -> None:
    """The same Pareto plot as `plot_pareto`, drawn with matplotlib (Agg) into a PNG."""
    # Imported here: matplotlib is slow to import and only `--png` needs it; Agg first.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 7.5), dpi=120)
    _points(fig, ax, info)
    for line in info.slo_lines:
        if line.off is None:
            draw = ax.axvline if line.axis == "x" else ax.axhline
            draw(line.value, color=SLO_COLOR, linestyle="--", linewidth=1.2, label=line.label)
    for text in off_plot_notes(info):  # a legend entry: never over a point
        ax.plot([], [], color=SLO_COLOR, linestyle="--", linewidth=1.2, label=text)
    for axis, rng in ((ax.xaxis, info.x_range), (ax.yaxis, info.y_range)):
        if rng is not None:
            (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log" if rng.log else "linear")
            (ax.set_xlim if axis is ax.xaxis else ax.set_ylim)(rng.low, rng.high)
        axis.set_major_formatter(_plain_ticks())
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    if info.empty_words is not None:  # not axes at ±0.04 around nothing
        ax.text(0.5, 0.5, info.empty_words, transform=ax.transAxes, ha="center", fontsize=14)
        ax.set_xticks([])
        ax.set_yticks([])
    ax.set_title(title_lines(info, study_name), fontsize=11)
    ax.set(xlabel=f"{info.x} (ms)", ylabel=f"{info.y} (ms)")
    ax.grid(alpha=0.3)
    # under the plot, never over a point
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.1), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def _plain_ticks() -> Formatter:
    """matplotlib's tick formatter: `layout.tick_texts` (plain decimals, as many as it takes
    for neighbouring ticks to differ); one value alone (the cursor): `figure`."""
    from matplotlib.ticker import Formatter

    class PlainTicks(Formatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return figure(x)

        def format_ticks(self, values: Any) -> list[str]:
            return tick_texts(list(values))

    return PlainTicks()


def _points(fig: Figure, ax: Axes, info: ParetoFrontInfo) -> None:
    """The front's trade-offs joined, the trials (coloured by throughput unless its spread is
    noise) with their 95 % intervals as error bars, their labels where `layout.place_labels`
    put them, the recommended config's diamond, the baseline's star."""
    from matplotlib.ticker import FuncFormatter

    x, y, feasible, on_front, scale = info.x, info.y, info.feasible, info.front_numbers, info.colour
    if info.trade_offs:
        xs, ys = zip(*(info.xy(p) for p in info.trade_offs), strict=True)
        ax.step(xs, ys, where="post", color=COLORS["front"], label=front_name(info))
    _error_bars(ax, info)
    coloured = scale is not None and not scale.noise

    def ring(p: TrialPoint) -> str:
        if p.number not in on_front:
            return "white"
        return COLORS["noise"] if info.noisy(p) else COLORS["front"]

    sc = ax.scatter(
        [p.metrics[x] for p in feasible],
        [p.metrics[y] for p in feasible],
        c=[p.metrics.get(THROUGHPUT, math.nan) for p in feasible] if coloured else COLORS["flat"],
        cmap="viridis" if coloured else None,
        vmin=scale.low if coloured and scale else None,
        vmax=scale.high if coloured and scale else None,
        s=[110 if p.number in on_front else 50 for p in feasible],
        edgecolors=[ring(p) for p in feasible],
        linewidths=[2 if p.number in on_front else 0.5 for p in feasible],
        label=None
        if not feasible
        else "feasible"
        if coloured or scale is None
        else f"feasible; {scale.why}",
        zorder=3,
    )
    if feasible and coloured:
        bar = fig.colorbar(sc, ax=ax, label="output throughput (tok/s)")
        bar.formatter = FuncFormatter(lambda v, _: figure(v))
        bar.update_ticks()
    if info.infeasible:
        bad_xs = [p.metrics[x] for p in info.infeasible]
        bad_ys = [p.metrics[y] for p in info.infeasible]
        label = "infeasible (breaks an SLO)"
        ax.scatter(bad_xs, bad_ys, marker="x", color=COLORS["infeasible"], label=label)
    groups = (
        (feasible, info.feasible_labels, info.feasible_positions),
        (info.infeasible, info.infeasible_labels, info.infeasible_positions),
    )
    for group, labels, positions in groups:
        for p, label, position in zip(group, labels, positions, strict=True):
            dx, dy, ha, va = _OFFSETS[position]
            ax.annotate(label, info.xy(p), xytext=(dx, dy), textcoords="offset points",
                        fontsize=9, ha=ha, va=va)  # fmt: skip
    if any(info.noisy(p) for p in info.front):
        ax.scatter([], [], s=110, facecolors="none", edgecolors=COLORS["noise"], linewidths=2,
                   label=NOISE_WORDS)  # fmt: skip
    _recommended(ax, info)
    for p in info.baselines:
        ax.scatter(*info.xy(p), marker="*", s=320, facecolors="none", edgecolors="black",
                   zorder=4, label=f"baseline (trial {p.number})")  # fmt: skip


def _recommended(ax: Axes, info: ParetoFrontInfo) -> None:
    """What `tuner export` ships: a diamond around its point, and in the legend (with why
    when it is off the front; only there when it has no point on these axes)."""
    rec = info.recommended
    if rec is None:
        return
    x, y = info.xy(rec) if info.recommended_plotted else (None, None)
    xs, ys = ([] if x is None else [x]), ([] if y is None else [y])
    label = textwrap.fill(info.recommended_words(), 110)
    ax.scatter(xs, ys, marker="D", s=260, facecolors="none", edgecolors=COLORS["recommended"],
               linewidths=2, zorder=5, label=label)  # fmt: skip


def _error_bars(ax: Axes, info: ParetoFrontInfo) -> None:
    """Each feasible trial's 95 % intervals on both axes (none where none is stored), and
    their legend entry."""
    if info.bars_words is not None:
        ax.plot([], [], color=COLORS["bars"], linewidth=0.8, label=info.bars_words)
    for p in info.feasible:
        bars = [info.error_bars(p, metric) for metric in (info.x, info.y)]
        if any(b is not None for b in bars):
            xerr, yerr = ([[b[0]], [b[1]]] if b is not None else None for b in bars)
            ax.errorbar(*info.xy(p), xerr=xerr, yerr=yerr, fmt="none", ecolor=COLORS["bars"],
                        elinewidth=0.8, capsize=2, zorder=2)  # fmt: skip
