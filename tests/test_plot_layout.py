"""The report's trade-off plot reads (issue 34, item 6): axes fitted to the data with the SLO
shown without swallowing it, labels that do not collide, a colour scale that says when its
spread is noise, the capacity-mode front, latency–load curves that do not join stopped runs,
a title that wraps. Pure: hand-built trials, no storage, no engine."""

from __future__ import annotations

import io

from results_fixtures import frozen

from tuner.results.report.front import pareto_front_info
from tuner.results.report.layout import (
    _box,
    _overlap,
    colour_scale,
    fit_axis,
    place_labels,
    slo_label_position,
    tick_texts,
)
from tuner.results.report.load import curve_figure
from tuner.results.report.plots import plot_pareto
from tuner.results.report.png import TITLE_CHARS, draw_png, title_lines
from tuner.spec.slo import parse_slo
from tuner.trial import read

SLO = ("p99_ttft_ms<=20000", "mean_tpot_ms<=80")


def _point(number: int, ttft: float, tpot: float, thr: float = 100.0, **attrs):
    return read(
        frozen(
            number,
            score=attrs.pop("score", 0.0),
            p99_ttft_ms=ttft,
            mean_tpot_ms=tpot,
            output_throughput=thr,
            baseline=number == 0,
            **attrs,
        )
    )


def test_the_axes_fit_the_points_and_a_far_slo_is_noted_at_the_edge_not_drawn() -> None:
    # points at 1-3 s TTFT and 40-50 ms TPOT under a 20 s / 80 ms SLO: the old plot stretched
    # both axes to the SLO lines, so every point sat in one corner
    points = [_point(i, 1000.0 + 500 * i, 40.0 + 2 * i) for i in range(5)]
    info = pareto_front_info(points, SLO)
    assert info.x_range is not None and info.y_range is not None
    assert 800 < info.x_range.low < 1000 and 3000 < info.x_range.high < 3300
    assert 38 < info.y_range.low < 40 and 48 < info.y_range.high < 50
    fractions = [info.x_range.fraction(p.metrics["p99_ttft_ms"]) for p in points]
    assert min(fractions) < 0.1 and max(fractions) > 0.9  # spread over the plot
    edges = {line.label: line.off for line in info.slo_lines}
    assert edges["SLO p99_ttft_ms<=20000"].edge == "right"
    assert edges["SLO mean_tpot_ms<=80"].edge == "top"
    assert edges["SLO mean_tpot_ms<=80"].words("SLO mean_tpot_ms<=80") == (
        "SLO mean_tpot_ms<=80 ↑ off the plot, beyond the top edge; every point meets it"
    )


def test_an_slo_near_the_points_is_drawn_on_the_axis() -> None:
    axis, inside = fit_axis([1000.0, 1800.0], [2000.0, 9000.0], log=False)
    assert inside == (True, False)  # 2000 is within half the span; 9000 is not
    assert axis.low < 1000 and 2000 < axis.high < 2200
    log_axis, inside = fit_axis([100.0, 5000.0], [8000.0], log=True)
    assert inside == (True,) and log_axis.log and log_axis.high > 8000
    single, _ = fit_axis([52.0], [], log=False)  # one point: a span around it, not zero
    assert single.low < 52 < single.high


def test_points_at_one_spot_share_a_label_and_labels_do_not_overlap() -> None:
    # trials 1, 11 and 21 a pixel apart printed "11 21 1" over each other
    points = [_point(1, 3000.0, 210.0), _point(11, 3005.0, 210.2), _point(21, 3002.0, 209.9)]
    points += [_point(2, 4000.0, 209.5), _point(3, 9000.0, 93.0), _point(4, 4050.0, 207.0)]
    info = pareto_front_info(points)
    assert info.feasible_labels[:3] == ("1,11,21", "", "")
    # every two labels drawn where `place_labels` put them leave each other alone
    xr, yr = info.x_range, info.y_range
    boxes = [
        _box(xr.fraction(p.metrics["p99_ttft_ms"]), yr.fraction(p.metrics["mean_tpot_ms"]), t, pos)
        for p, t, pos in zip(
            info.feasible, info.feasible_labels, info.feasible_positions, strict=True
        )
        if t
    ]
    assert all(_overlap(a, b) == 0 for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def test_labels_of_close_points_go_different_ways() -> None:
    near = [(0.5, 0.5), (0.53, 0.5)]  # about 24 px apart: two labels, both "top right" collide
    positions = place_labels(near, ["12", "13"])
    a, b = (
        _box(x, y, t, pos) for (x, y), t, pos in zip(near, ["12", "13"], positions, strict=True)
    )
    assert _overlap(a, b) == 0


def test_a_colour_spread_within_the_noise_says_so_and_is_not_coloured() -> None:
    noise = colour_scale([89.25, 89.4, 89.65], [2.1, 2.0, 2.3])
    assert noise is not None and noise.noise
    assert noise.why == "output 89.25–89.65 tok/s: a spread within noise (95% intervals ±2.1 tok/s)"
    real = colour_scale([70.0, 80.0, 90.0], [2.1, 2.0, 2.3])
    assert real is not None and not real.noise
    assert colour_scale([89.25, 89.3], []).noise  # no intervals stored: 1 % of the median
    assert not colour_scale([80.0, 90.0], []).noise


def test_the_plot_carries_the_noise_in_the_legend_and_draws_a_png() -> None:
    ci = [88.0, 91.0]
    points = [
        _point(i, 1000.0 + i, 40.0 + i, 89.25 + 0.1 * i, output_throughput_ci=ci) for i in range(5)
    ]
    info = pareto_front_info(points, SLO)
    assert info.colour is not None and info.colour.noise
    out = io.BytesIO()
    draw_png(info, out, "a-study-name-that-is-long-enough-to-be-clipped-by-the-old-title-" * 2)
    assert out.getvalue().startswith(b"\x89PNG")


def test_the_png_title_is_wrapped_never_cut_off() -> None:
    points = [_point(0, 1000.0, 40.0)]
    info = pareto_front_info(points, SLO, simulated=True)
    name = "deepseek-r1-distill-qwen-32b-4xa6000-longdoc-sim-simulated-and-more-words-here"
    title = title_lines(info, name)
    assert all(len(line) <= TITLE_CHARS for line in title.splitlines()), title
    assert "SIMULATED" in title and name in title.replace("\n", "")


def test_capacity_mode_front_is_the_recommended_configs() -> None:
    # the baseline serves 1 req/s at low latency; trial 1 serves 2 req/s (the study's best):
    # compared at their own capacity rates, the baseline alone made the plain front
    base = _point(0, 900.0, 40.0, capacity_rps=1.0, score=0.0)
    best = _point(1, 1500.0, 55.0, capacity_rps=2.0, score=-0.69)
    tied = _point(2, 1700.0, 60.0, capacity_rps=2.0, score=-0.69)  # same capacity, worse
    figures = [(0, 900.0, 40.0), (1, 1500.0, 55.0), (2, 1700.0, 60.0)]
    plain = pareto_front_info([_point(*f) for f in figures], SLO)  # no capacity stored
    assert [p.number for p in plain.front] == [0]
    info = pareto_front_info([base, best, tied], SLO)
    assert [p.number for p in info.front] == [1] and info.front_capacity_rps == 2.0


def test_a_stopped_run_is_not_joined_into_the_latency_load_curve() -> None:
    steps = [
        {"rate_rps": 1.0, "feasible": True, "p99_ttft_ms": 800.0, "mean_tpot_ms": 40.0},
        {"rate_rps": 2.0, "feasible": True, "p99_ttft_ms": 900.0, "mean_tpot_ms": 45.0},
        # stopped early: its figures cover the first requests only, lower than the run below
        {"rate_rps": 4.0, "feasible": False, "pruned_reason": "SLO broken",
         "p99_ttft_ms": 500.0, "mean_tpot_ms": 30.0},
    ]  # fmt: skip
    base = _point(0, 900.0, 45.0, capacity_rps=2.0, rate_steps=steps)
    fig = curve_figure(base, None, parse_slo(SLO[0]))
    assert fig is not None
    lines = [t for t in fig.data if "lines" in t.mode and t.x != (None,)]  # not SLO notes
    crosses = [t for t in fig.data if t.mode == "markers"]
    assert [list(t.x) for t in lines] == [[1.0, 2.0], [1.0, 2.0]]  # one per panel
    assert [list(t.x) for t in crosses] == [[4.0], [4.0]]


def test_the_load_curves_fit_their_runs_and_a_far_slo_is_a_note_not_a_line() -> None:
    """The latency-load panels are fitted like the trade-off axes (`layout.slo_axis`): an SLO
    of 20 s over runs at 0.8-0.9 s would flatten the curve, so it is a legend entry; one of
    940 ms, near the runs, is a dotted line the axis stretches to."""
    steps = [
        {"rate_rps": 1.0, "feasible": True, "p99_ttft_ms": 800.0, "mean_tpot_ms": 40.0},
        {"rate_rps": 2.0, "feasible": True, "p99_ttft_ms": 900.0, "mean_tpot_ms": 45.0},
    ]
    base = _point(0, 900.0, 45.0, capacity_rps=2.0, rate_steps=steps)
    far = curve_figure(base, None, parse_slo("p99_ttft_ms<=20000"))
    assert far is not None
    low, high = far.layout.yaxis.range
    assert 750 < low < 800 and 900 < high < 1000 and not _hlines(far)
    notes = [t.name for t in far.data if t.x == (None,)]
    assert notes == [
        "SLO p99_ttft_ms&lt;=20000 ↑ off the plot, beyond the top edge; every point meets it"
    ]
    near = curve_figure(base, None, parse_slo("p99_ttft_ms<=940"))
    assert near is not None
    assert _hlines(near) == [940.0] and near.layout.yaxis.range[1] > 940
    assert not [t for t in near.data if t.x == (None,)]


def _hlines(fig) -> list[float]:
    """The horizontal lines (SLO limits), not the vertical ones (capacities)."""
    return [s.y0 for s in fig.layout.shapes if s.y0 == s.y1]


def test_an_slo_a_few_percent_from_the_points_is_drawn_however_close_they_sit() -> None:
    """Capacity mode meets p99 TTFT <= 2000 ms at 1996-1998 ms: half their 2-ms span left the
    limit "off the plot" 2 ms away; within 5 % of its value it is drawn."""
    rng, inside = fit_axis([1996.3, 1998.1], [2000.0, 2400.0], False)
    assert inside == (True, False) and rng.high > 2000.0 > rng.low
    assert fit_axis([1000.0, 3000.0], [20000.0], False)[1] == (False,)  # far stays off


def test_tick_labels_take_the_decimals_it_takes_to_differ() -> None:
    # four significant digits wrote these 22.61, 22.61, 22.61, 22.61
    assert tick_texts([22.606, 22.608, 22.61, 22.612]) == ["22.606", "22.608", "22.610", "22.612"]
    assert tick_texts([1996.5, 1997.0, 1997.5]) == ["1996.5", "1997.0", "1997.5"]
    assert tick_texts([1000.0, 2000.0, 19934.0]) == ["1000", "2000", "19934"]  # as `figure`


def test_an_slo_label_sits_where_no_point_is() -> None:
    """A load curve rises to its SLO at the highest rates: plotly's default label position,
    top right, sat on those last points; the label goes to the first clear corner."""
    rising = [(0.0, 0.1), (0.25, 0.3), (0.5, 0.55), (0.75, 0.78), (1.0, 0.95)]
    assert slo_label_position(0.8, rising, "SLO p99_ttft_ms<=2000") == "top left"
    # a curve that starts high at the left: the label goes below the line there
    high_left = [(0.0, 0.85), (0.1, 0.9), (0.5, 0.3), (1.0, 0.1)]
    assert slo_label_position(0.8, high_left, "SLO p99_ttft_ms<=2000") == "bottom left"
    # a line at the top of the plot: its label is not put outside it
    assert slo_label_position(0.99, [], "SLO p99_ttft_ms<=2000").startswith("bottom")


def test_the_load_curves_slo_label_is_clear_of_the_last_runs() -> None:
    steps = [
        {"rate_rps": rate, "feasible": ttft <= 2000, "p99_ttft_ms": ttft, "mean_tpot_ms": 40.0}
        for rate, ttft in ((1.0, 800.0), (2.0, 1200.0), (3.0, 1900.0), (4.0, 2050.0))
    ]
    base = _point(0, 1900.0, 40.0, capacity_rps=3.0, rate_steps=steps)
    fig = curve_figure(base, None, parse_slo("p99_ttft_ms<=2000"))
    assert fig is not None
    label = next(a for a in fig.layout.annotations if a.text == "SLO p99_ttft_ms<=2000")
    assert (label.x, label.xanchor, label.yanchor) == (0, "left", "bottom")  # top left
    assert fig.layout.yaxis.tickformat == fig.layout.xaxis.tickformat == "~r"  # never 2k


def test_a_plot_of_only_failed_trials_says_so_in_its_middle(recwarn) -> None:
    """Every trial failed: both renderers drew empty axes at -1..6 (plotly) and ±0.04 (the
    PNG, with a "feasible" legend entry for no point); now the middle says why it is empty."""
    failed = [
        read(frozen(n, "FAIL", failure_kind="startup_timeout", failure_reason="not ready"))
        for n in range(2)
    ]
    info = pareto_front_info(failed, SLO)
    assert info.empty_words == "no measured trial to plot (2 failed)"
    fig = plot_pareto(pareto_front_info(failed, SLO))
    assert [a.text for a in fig.layout.annotations if a.x == 0.5] == [info.empty_words]
    assert fig.layout.xaxis.showticklabels is False
    out = io.BytesIO()
    draw_png(info, out, "e2e")
    assert out.getvalue().startswith(b"\x89PNG")
    assert not [w for w in recwarn if "legend" in str(w.message)]  # no empty legend drawn
    assert pareto_front_info([_point(0, 1000.0, 40.0)], SLO).empty_words is None
