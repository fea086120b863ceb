"""The report's figures: Pareto front (plotly), history, importance.

Both Pareto renderers (this one and the PNG's, tuner/results/report/png.py) draw one
`ParetoFrontInfo` (tuner/results/report/front.py) and compute nothing.
"""

from __future__ import annotations

import html
import math
import warnings
from collections.abc import Sequence

import optuna
import plotly.graph_objects as go

from tuner.results.report.front import THROUGHPUT, ParetoFrontInfo
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.trial import TrialPoint
from tuner.trial.reading import frozen_trials

# Fewest measured trials the report ranks parameters over. PED-ANOVA (Optuna's default) compares
# the best 10% of trials with all of them; up to 10 trials that "best 10%" is a single trial, so
# the bars would only say where one trial's values sit. From 11 it is at least two. Why this
# number, and what the report says below it: docs/results.md.
MIN_MEASURED_TRIALS_FOR_IMPORTANCE = 11
COLORS = {"front": "#d62728", "infeasible": "#7f7f7f", "baseline": "#111111", "flat": "#3b75af"}
COLORS |= {"noise": "#f0a0a0", "bars": "#9a9a9a", "recommended": "#2ca02c"}
NOISE_WORDS = "on the front, within noise of a trade-off on the line, by their 95% intervals"
SLO_COLOR, SLO_TEXT = "#e377c2", "#c0399a"
# d3-format of plotly's ticks: plain decimals without trailing zeros or thousands separators,
# as `tuner.spec.figures.figure` writes them (19934, 52.5; never 20k or 1e4)
PLAIN_TICKS = "~r"


def _hover(p: TrialPoint) -> str:
    lines = [f"<b>trial {p.number}</b>" + (" (baseline)" if p.baseline else "")]
    lines += [f"{k} = {v}" for k, v in p.params.items()]
    lines += [f"{m} = {figure(p.metrics[m])}" for m in HEADLINE_METRICS if m in p.metrics]
    if p.score is not None:
        lines.append(f"score = {figure(p.score, 3, sign=True)}")
    broken = [k for k, v in p.constraints.items() if v > 0]
    if broken:
        lines.append("breaks: " + ", ".join(html.escape(k) for k in broken))
    return "<br>".join(lines)


def plot_pareto(info: ParetoFrontInfo) -> go.Figure:
    """Feasible trials coloured by throughput with their 95 % intervals as error bars, the
    front's trade-offs joined and ringed (those within noise of one ringed pale), the
    recommended config marked, the baseline as a star, infeasible trials as grey crosses,
    failed trials listed (they have no point)."""
    x, y = info.x, info.y
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[p.metrics[x] for p in info.trade_offs],
            y=[p.metrics[y] for p in info.trade_offs],
            mode="lines",
            line={"color": COLORS["front"], "width": 2, "shape": "hv"},
            name=front_name(info),
            hoverinfo="skip",
        )
    )
    fig.add_trace(_feasible_trace(info))
    if info.infeasible:
        fig.add_trace(_infeasible_trace(info))
    _add_front_marks(fig, info)
    if info.baselines:
        base = info.baselines[0]
        fig.add_trace(
            go.Scatter(
                x=[base.metrics[x]],
                y=[base.metrics[y]],
                mode="markers",
                marker={"symbol": "star", "size": 22, "color": "rgba(0,0,0,0)"},
                marker_line={"color": COLORS["baseline"], "width": 2},
                name=f"baseline (trial {base.number}: vLLM defaults)",
                hoverinfo="skip",
            )
        )
    for line in info.slo_lines:
        if line.off is None:
            add = fig.add_vline if line.axis == "x" else fig.add_hline
            add(
                line.value,
                line={"dash": "dash", "color": SLO_COLOR, "width": 1.5},
                annotation_text=line.label,
                annotation_position="top left",
                annotation_font_color=SLO_TEXT,
            )
    for text in off_plot_notes(info):  # a legend entry: never over a point
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line={"dash": "dash", "color": SLO_COLOR, "width": 1.5},
                name=html.escape(text),
                hoverinfo="skip",
            )
        )
    if info.failed:
        _add_failed_note(fig, info.failed)
    _lay_out(fig, info)
    return fig


def _add_front_marks(fig: go.Figure, info: ParetoFrontInfo) -> None:
    """The pale ring's legend entry (front trials within noise of a trade-off), and what
    `tuner export` ships as a diamond (only in the legend when it has no point here)."""
    x, y = info.x, info.y
    if info.bars_words is not None:
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line={"color": COLORS["bars"], "width": 1},
                name=html.escape(info.bars_words),
            )
        )
    if any(info.noisy(p) for p in info.front):  # the pale ring's legend entry
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                marker={"size": 16, "color": "rgba(0,0,0,0)"},
                marker_line={"color": COLORS["noise"], "width": 3},
                name=NOISE_WORDS,
            )
        )
    if info.recommended is not None:
        rec = info.recommended
        plotted = info.recommended_plotted
        fig.add_trace(
            go.Scatter(
                x=[rec.metrics[x] if plotted else None],
                y=[rec.metrics[y] if plotted else None],
                mode="markers",
                marker={"symbol": "diamond-open", "size": 26, "color": COLORS["recommended"]},
                marker_line={"width": 3},
                name=html.escape(info.recommended_words()),
                hoverinfo="skip",
            )
        )


def front_name(info: ParetoFrontInfo) -> str:
    """The front's legend entry: how many trade-offs the intervals tell apart among its
    trials; capacity mode: the capacity it is drawn at."""
    told = len(info.trade_offs)
    count = _trials(len(info.front))
    if told < len(info.front):
        count += f"; {told} told apart by their 95% intervals, joined"
    if info.front_capacity_rps is None:
        return f"Pareto front ({count})"
    return (
        f"Pareto front of the configs with the highest capacity, "
        f"{figure(info.front_capacity_rps)} req/s ({count})"
    )


def _trials(n: int) -> str:
    return f"{n} trial" if n == 1 else f"{n} trials"


def off_plot_notes(info: ParetoFrontInfo) -> list[str]:
    """One line for each SLO limit beyond the fitted axes; both renderers show it in the
    legend, outside the plot area, so it never covers a point."""
    return [line.off.words(line.label) for line in info.slo_lines if line.off is not None]


def _feasible_trace(info: ParetoFrontInfo) -> go.Scatter:
    """Feasible trials coloured by output throughput (one colour, with the spread in the legend,
    when it is noise), with their 95 % intervals as error bars; those on the front bigger and
    ringed (pale: within noise of a trade-off)."""
    feasible, on_front, scale = info.feasible, info.front_numbers, info.colour

    def ring(p: TrialPoint) -> str:
        if p.number not in on_front:
            return "#fff"
        return COLORS["noise"] if info.noisy(p) else COLORS["front"]

    marker: dict[str, object] = {
        "size": [16 if p.number in on_front else 11 for p in feasible],
        "line": {
            "color": [ring(p) for p in feasible],
            "width": [3 if p.number in on_front else 1 for p in feasible],
        },
    }
    name = "feasible trial (colour = output throughput)"
    if scale is None or scale.noise:
        marker["color"] = COLORS["flat"]
        name = f"feasible trial; {scale.why}" if scale is not None else "feasible trial"
    else:
        marker |= {
            "color": [p.metrics.get(THROUGHPUT, math.nan) for p in feasible],
            "colorscale": "Viridis",
            "cmin": scale.low,
            "cmax": scale.high,
            "showscale": True,
            "colorbar": {"title": {"text": "output<br>tok/s"}, "tickformat": PLAIN_TICKS},
        }
    return go.Scatter(
        **_labelled(info, feasible, info.feasible_labels, info.feasible_positions, "#333"),
        marker=marker,
        name=name,
        error_x=_error_bars(info, feasible, info.x),
        error_y=_error_bars(info, feasible, info.y),
    )


def _error_bars(
    info: ParetoFrontInfo, points: Sequence[TrialPoint], metric: str
) -> dict[str, object]:
    """Each point's 95 % interval on `metric` (none drawn where none is stored)."""
    bars = [info.error_bars(p, metric) for p in points]
    return {
        "type": "data",
        "symmetric": False,
        "array": [None if b is None else b[1] for b in bars],
        "arrayminus": [None if b is None else b[0] for b in bars],
        "color": COLORS["bars"],
        "thickness": 1,
        "width": 3,
        "visible": any(b is not None for b in bars),
    }


def _infeasible_trace(info: ParetoFrontInfo) -> go.Scatter:
    return go.Scatter(
        **_labelled(
            info,
            info.infeasible,
            info.infeasible_labels,
            info.infeasible_positions,
            COLORS["infeasible"],
        ),
        marker={"symbol": "x", "size": 11, "color": COLORS["infeasible"]},
        name="infeasible (breaks an SLO)",
    )


def _labelled(
    info: ParetoFrontInfo,
    points: Sequence[TrialPoint],
    labels: Sequence[str],
    positions: Sequence[str],
    color: str,
) -> dict[str, object]:
    """Trials as points on the plot's axes, each with its label where it collides with no
    other (`layout.place_labels`) and its hover text."""
    return {
        "x": [p.metrics[info.x] for p in points],
        "y": [p.metrics[info.y] for p in points],
        "mode": "markers+text",
        "text": list(labels),
        "textposition": list(positions),
        "textfont": {"size": 11, "color": color},
        "hovertext": [_hover(p) for p in points],
        "hoverinfo": "text",
    }


def _add_failed_note(fig: go.Figure, failed: Sequence[TrialPoint]) -> None:
    """Failed trials have no point: a note under the plot names the first ones."""
    shown = ", ".join(f"#{p.number} {(p.failure or '').split(':')[0]}" for p in failed[:8])
    more = f" … and {len(failed) - 8} more" if len(failed) > 8 else ""
    fig.add_annotation(
        text=f"failed, not plotted ({len(failed)}): {html.escape(shown)}{more}",
        xref="paper",
        yref="paper",
        x=0,
        y=-0.2,
        showarrow=False,
        xanchor="left",
        font={"color": "#b22222", "size": 12},
    )


def _lay_out(fig: go.Figure, info: ParetoFrontInfo) -> None:
    """Title (SIMULATED when predicted), log axes where `info` asks for them, legend."""
    title = f"{info.x} against {info.y} (both lower is better)"
    if info.scenario is not None:
        title = f"Scenario {info.scenario}: {title}"
    if info.front_capacity_rps is not None:
        title += "<br>each trial at its own capacity rate"
    if info.simulated:
        title += "<br>SIMULATED: predicted, not measured"
    for update, rng in ((fig.update_xaxes, info.x_range), (fig.update_yaxes, info.y_range)):
        update(tickformat=PLAIN_TICKS, showticklabels=info.empty_words is None)
        if rng is not None:
            update(type="log" if rng.log else "linear", range=rng.plotly_range())
    if info.empty_words is not None:  # not axes at -1..6 around nothing
        fig.add_annotation(text=info.empty_words, xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False, font={"size": 16})  # fmt: skip
    fig.update_layout(
        title={"text": title},
        xaxis_title=f"{info.x} (ms)",
        yaxis_title=f"{info.y} (ms)",
        template="plotly_white",
        height=680,
        margin={"b": 120},
        legend={"orientation": "h", "y": -0.28, "x": 0},
    )


def scored_points(points: Sequence[TrialPoint]) -> list[TrialPoint]:
    """The trials the history plots, by number: measured ones with a score."""
    return sorted(
        (p for p in points if p.score is not None and p.status in ("feasible", "infeasible")),
        key=lambda p: p.number,
    )


def history_figure(points: Sequence[TrialPoint]) -> go.Figure:
    """Score per trial (lower is better) with the best feasible score so far."""
    scored = scored_points(points)
    fig = go.Figure()
    for status, symbol, color in (("feasible", "circle", "#1f77b4"), ("infeasible", "x", "#888")):
        chosen = [p for p in scored if p.status == status]
        fig.add_trace(
            go.Scatter(
                x=[p.number for p in chosen],
                y=[p.score for p in chosen],
                mode="markers",
                marker={"symbol": symbol, "size": 10, "color": color},
                name=f"{status} trial",
                hovertext=[_hover(p) for p in chosen],
                hoverinfo="text",
            )
        )
    best, xs, ys = math.inf, [], []
    for p in scored:
        if p.status == "feasible":
            best = min(best, p.score if p.score is not None else math.inf)
        if math.isfinite(best):
            xs.append(p.number)
            ys.append(best)
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line={"shape": "hv"}, name="best so far"))
    fig.update_layout(
        title="Optimisation history: score (lower is better; baseline = 0; failed trials left out)",
        xaxis_title="trial",
        yaxis_title="score",
        template="plotly_white",
        height=420,
    )
    # whole trial numbers, about ten ticks: plotly's own put 0.2, 0.4 … between trials 0 and 1
    span = scored[-1].number - scored[0].number if scored else 0
    fig.update_xaxes(dtick=max(1, math.ceil(span / 10)))
    return fig


def importances(study: optuna.Study, points: Sequence[TrialPoint]) -> dict[str, float] | str:
    """PED-ANOVA importance (Optuna's default) of each parameter for the score, over measured
    trials (not reused results: a copy's score would count twice); or a sentence saying why
    the trials cannot rank the parameters (too few, nothing varied, all ranked equal)."""
    scored = [p for p in points if p.score is not None and p.measured]
    if len(scored) < MIN_MEASURED_TRIALS_FOR_IMPORTANCE:
        return (
            f"Too few measured trials to rank parameters by importance: {len(scored)} measured, "
            f"at least {MIN_MEASURED_TRIALS_FOR_IMPORTANCE} needed."
        )
    by_number = {t.number: t for t in frozen_trials(study)}
    proxy = optuna.create_study(direction="minimize")
    for p in scored:
        t = by_number[p.number]
        proxy.add_trial(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=p.score)
        )
    # Optuna says on stderr what it cannot rank ("Parameter importances will be equal"): kept
    # here, and said in the report's words in place of bars that would all be equal
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            found = optuna.importance.get_param_importances(proxy)  # PED-ANOVA: no sklearn
        except (ValueError, RuntimeError) as exc:
            return f"Parameter importance cannot be computed: {str(exc).rstrip('.')}."
    if len(found) == 1:
        return f"One parameter varied ({next(iter(found))}): there is nothing to rank it against."
    if len(set(found.values())) <= 1 or any("will be equal" in str(w.message) for w in said):
        return (
            f"The {len(scored)} measured trials cannot rank the parameters: their best scores "
            "do not set any parameter's values apart from the others' (every importance "
            "would be equal)."
        )
    return found


def importance_figure(values: dict[str, float]) -> go.Figure:
    names = list(values)[::-1]
    fig = go.Figure(
        go.Bar(
            x=[values[n] for n in names],
            y=names,
            orientation="h",
            text=[f"{values[n]:.2f}" for n in names],
            textposition="auto",
        )
    )
    fig.update_layout(
        title="Parameter importance for the score (Optuna PED-ANOVA over measured trials)",
        xaxis_title="importance (sums to 1)",
        template="plotly_white",
        height=120 + 40 * len(names),
        margin={"l": 220},
    )
    return fig
