"""The report's figures: Pareto front (plotly and a matplotlib PNG), history, importance.

Both Pareto renderers draw one `ParetoFrontInfo` (tuner/results/report/front.py) and compute
nothing.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import optuna
import plotly.graph_objects as go

from tuner.results.report.front import ParetoFrontInfo, pareto_front_info
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.trial import TrialPoint

THROUGHPUT = "output_throughput"
# Fewest measured trials the report ranks parameters over. PED-ANOVA (Optuna's default) compares
# the best 10% of trials with all of them; up to 10 trials that "best 10%" is a single trial, so
# the bars would only say where one trial's values sit. From 11 it is at least two. Why this
# number, and what the report says below it: docs/results.md.
MIN_MEASURED_TRIALS_FOR_IMPORTANCE = 11
COLORS = {"front": "#d62728", "infeasible": "#7f7f7f", "baseline": "#111111"}


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


def pareto_figure(
    points: Sequence[TrialPoint], slo_lines: Sequence[str] = (), simulated: bool = False
) -> go.Figure:
    """The interactive Pareto plot of `points` (see `plot_pareto`)."""
    return plot_pareto(pareto_front_info(points, slo_lines, simulated))


def plot_pareto(info: ParetoFrontInfo) -> go.Figure:
    """Feasible trials coloured by throughput, the front joined and ringed, the baseline as a
    star, infeasible trials as grey crosses, failed trials listed (they have no point)."""
    x, y = info.x, info.y
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[p.metrics[x] for p in info.front],
            y=[p.metrics[y] for p in info.front],
            mode="lines",
            line={"color": COLORS["front"], "width": 2, "shape": "hv"},
            name=f"Pareto front ({len(info.front)} trials)",
            hoverinfo="skip",
        )
    )
    fig.add_trace(_feasible_trace(info))
    if info.infeasible:
        fig.add_trace(_infeasible_trace(info))
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
        add = fig.add_vline if line.axis == "x" else fig.add_hline
        add(
            line.value,
            line={"dash": "dash", "color": "#e377c2", "width": 1.5},
            annotation_text=line.label,
            annotation_position="bottom right" if line.axis == "x" else "top left",
            annotation_font_color="#c0399a",
        )
    if info.failed:
        _add_failed_note(fig, info.failed)
    _lay_out(fig, info)
    return fig


def _feasible_trace(info: ParetoFrontInfo) -> go.Scatter:
    """Feasible trials coloured by output throughput; those on the front bigger and ringed."""
    feasible, on_front = info.feasible, info.front_numbers
    return go.Scatter(
        **_labelled(info, feasible, info.feasible_labels, "#333"),
        marker={
            "size": [16 if p.number in on_front else 11 for p in feasible],
            "color": [p.metrics.get(THROUGHPUT, math.nan) for p in feasible],
            "colorscale": "Viridis",
            "showscale": True,
            "colorbar": {"title": {"text": "output<br>tok/s"}},
            "line": {
                "color": [COLORS["front"] if p.number in on_front else "#fff" for p in feasible],
                "width": [3 if p.number in on_front else 1 for p in feasible],
            },
        },
        name="feasible trial (colour = output throughput)",
    )


def _infeasible_trace(info: ParetoFrontInfo) -> go.Scatter:
    return go.Scatter(
        **_labelled(info, info.infeasible, info.infeasible_labels, COLORS["infeasible"]),
        marker={"symbol": "x", "size": 11, "color": COLORS["infeasible"]},
        name="infeasible (breaks an SLO)",
    )


def _labelled(
    info: ParetoFrontInfo, points: Sequence[TrialPoint], labels: Sequence[str], color: str
) -> dict[str, Any]:
    """Trials as points on the plot's axes, each with its label beside it and its hover text."""
    return {
        "x": [p.metrics[info.x] for p in points],
        "y": [p.metrics[info.y] for p in points],
        "mode": "markers+text",
        "text": list(labels),
        "textposition": "top right",
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
    if info.simulated:
        title += " — SIMULATED: predicted, not measured"
    if info.log_x:
        fig.update_xaxes(type="log")
    if info.log_y:
        fig.update_yaxes(type="log")
    fig.update_layout(
        title={"text": title},
        xaxis_title=f"{info.x} (ms)",
        yaxis_title=f"{info.y} (ms)",
        template="plotly_white",
        height=620,
        margin={"b": 120},
        legend={"orientation": "h", "y": -0.28, "x": 0},
    )


def history_figure(points: Sequence[TrialPoint]) -> go.Figure:
    """Score per trial (lower is better) with the best feasible score so far."""
    scored = sorted(
        (p for p in points if p.score is not None and p.status in ("feasible", "infeasible")),
        key=lambda p: p.number,
    )
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
    return fig


def importances(study: optuna.Study, points: Sequence[TrialPoint]) -> dict[str, float] | str:
    """PED-ANOVA importance (Optuna's default) of each parameter for the score, over measured
    trials; or a sentence saying why there is none (too few trials, nothing varied)."""
    scored = [p for p in points if p.score is not None and p.status in ("feasible", "infeasible")]
    if len(scored) < MIN_MEASURED_TRIALS_FOR_IMPORTANCE:
        return (
            f"Too few measured trials to rank parameters by importance: {len(scored)} measured, "
            f"at least {MIN_MEASURED_TRIALS_FOR_IMPORTANCE} needed."
        )
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    proxy = optuna.create_study(direction="minimize")
    for p in scored:
        t = by_number[p.number]
        proxy.add_trial(
            optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=p.score)
        )
    try:
        return optuna.importance.get_param_importances(proxy)  # PED-ANOVA: no sklearn needed
    except (ValueError, RuntimeError) as exc:
        return f"Parameter importance cannot be computed: {str(exc).rstrip('.')}."


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


def write_png(
    points: Sequence[TrialPoint],
    path: Path | BinaryIO,
    study_name: str,
    *,
    slo_lines: Sequence[str] = (),
    simulated: bool = False,
) -> None:
    """The Pareto plot as a static image, for tickets and chat (see `draw_png`)."""
    draw_png(pareto_front_info(points, slo_lines, simulated), path, study_name)


def draw_png(info: ParetoFrontInfo, path: Path | BinaryIO, study_name: str) -> None:
    """The same Pareto plot as `plot_pareto`, drawn with matplotlib (Agg) into a PNG."""
    # Imported here: matplotlib is slow to import and only `--png` needs it; Agg first.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, y, feasible, infeasible = info.x, info.y, info.feasible, info.infeasible
    on_front = info.front_numbers
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    if info.front:
        ax.step(
            [p.metrics[x] for p in info.front],
            [p.metrics[y] for p in info.front],
            where="post",
            color=COLORS["front"],
            label=f"Pareto front ({len(info.front)})",
        )
    sc = ax.scatter(
        [p.metrics[x] for p in feasible],
        [p.metrics[y] for p in feasible],
        c=[p.metrics.get(THROUGHPUT, math.nan) for p in feasible],
        cmap="viridis",
        s=[110 if p.number in on_front else 50 for p in feasible],
        edgecolors=[COLORS["front"] if p.number in on_front else "white" for p in feasible],
        linewidths=[2 if p.number in on_front else 0.5 for p in feasible],
        label="feasible",
        zorder=3,
    )
    if feasible:
        fig.colorbar(sc, ax=ax, label="output throughput (tok/s)")
    if infeasible:
        ax.scatter(
            [p.metrics[x] for p in infeasible],
            [p.metrics[y] for p in infeasible],
            marker="x",
            color=COLORS["infeasible"],
            label="infeasible (breaks an SLO)",
        )
    for group, labels in ((feasible, info.feasible_labels), (infeasible, info.infeasible_labels)):
        for p, label in zip(group, labels, strict=True):
            ax.annotate(label, info.xy(p), xytext=(5, 5), textcoords="offset points", fontsize=9)
    for p in info.baselines:
        ax.scatter(*info.xy(p), marker="*", s=320, facecolors="none", edgecolors="black",
                   zorder=4, label=f"baseline (trial {p.number})")  # fmt: skip
    for line in info.slo_lines:
        draw = ax.axvline if line.axis == "x" else ax.axhline
        draw(line.value, color="#e377c2", linestyle="--", linewidth=1.2, label=line.label)
    failed = len(info.failed)
    title = f"{study_name}: {x} vs {y}" + (f" — {failed} failed trials not shown" if failed else "")
    if info.simulated:
        title += "\nSIMULATED: predicted figures, not measurements"
    if info.log_x:
        ax.set_xscale("log")
    if info.log_y:
        ax.set_yscale("log")
    ax.set(title=title, xlabel=f"{x} (ms)", ylabel=f"{y} (ms)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
