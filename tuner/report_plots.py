"""The report's figures: Pareto front (plotly and a matplotlib PNG), history, importance."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path

import optuna
import plotly.graph_objects as go

from tuner.objective import HEADLINE_METRICS
from tuner.pareto import Objective, front_of
from tuner.slo import parse_slo
from tuner.trials import TrialPoint

TPOT = "mean_tpot_ms"
THROUGHPUT = "output_throughput"
MIN_TRIALS_FOR_IMPORTANCE = 4
LOG_SPAN = 10.0
COLORS = {"front": "#d62728", "infeasible": "#7f7f7f", "baseline": "#111111"}


def ttft_axis(points: Sequence[TrialPoint]) -> str:
    """P99 TTFT, or mean TTFT for a workload that did not ask for the 99th percentile."""
    stored = {m for p in points for m in p.metrics}
    return "p99_ttft_ms" if "p99_ttft_ms" in stored else "mean_ttft_ms"


def _axes(points: Sequence[TrialPoint]) -> list[Objective]:
    return [(ttft_axis(points), "minimize"), (TPOT, "minimize")]


def _plotted(points: Sequence[TrialPoint], status: str) -> list[TrialPoint]:
    x, y = (name for name, _ in _axes(points))
    return [p for p in points if p.status == status and x in p.metrics and y in p.metrics]


def _labels(points: Sequence[TrialPoint], x: str, y: str) -> list[str]:
    """Trial numbers as point labels; trials at the same spot share one label ("1,2")."""
    at: dict[tuple[float, float], list[int]] = {}
    for p in points:
        at.setdefault((p.metrics[x], p.metrics[y]), []).append(p.number)
    first = {numbers[0] for numbers in at.values()}
    return [_shared(at[(p.metrics[x], p.metrics[y])]) if p.number in first else "" for p in points]


def _shared(numbers: list[int], most: int = 3) -> str:
    """ "1,2" for a few trials at one spot; "1,2,3 +41" when many would run across the plot."""
    shown = ",".join(map(str, numbers[:most]))
    return shown if len(numbers) <= most else f"{shown} +{len(numbers) - most}"


def _log_scale(values: Sequence[float]) -> bool:
    """A log axis when the values span more than 10×, e.g. an overloaded config's 20 s TTFT
    beside good ones at 0.5 s: on a linear axis the good ones would be squeezed into a corner."""
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) > 1 and max(positive) / min(positive) > LOG_SPAN


def _hover(p: TrialPoint) -> str:
    lines = [f"<b>trial {p.number}</b>" + (" (baseline)" if p.baseline else "")]
    lines += [f"{k} = {v}" for k, v in p.params.items()]
    lines += [f"{m} = {p.metrics[m]:.4g}" for m in HEADLINE_METRICS if m in p.metrics]
    if p.score is not None:
        lines.append(f"score = {p.score:.3f}")
    broken = [k for k, v in p.constraints.items() if v > 0]
    if broken:
        lines.append("breaks: " + ", ".join(html.escape(k) for k in broken))
    return "<br>".join(lines)


def pareto_figure(
    points: Sequence[TrialPoint], slo_lines: Sequence[str] = (), simulated: bool = False
) -> go.Figure:
    """Feasible trials coloured by throughput, the front joined and ringed, the baseline as a
    star, infeasible trials as grey crosses, failed trials listed (they have no point)."""
    (x, _), (y, _) = _axes(points)
    feasible = _plotted(points, "feasible")
    front = front_of(feasible, _axes(points))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=[p.metrics[x] for p in front],
            y=[p.metrics[y] for p in front],
            mode="lines",
            line={"color": COLORS["front"], "width": 2, "shape": "hv"},
            name=f"Pareto front ({len(front)} trials)",
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[p.metrics[x] for p in feasible],
            y=[p.metrics[y] for p in feasible],
            mode="markers+text",
            text=_labels(feasible, x, y),
            textposition="top right",
            textfont={"size": 11, "color": "#333"},
            marker={
                "size": [16 if p in front else 11 for p in feasible],
                "color": [p.metrics.get(THROUGHPUT, math.nan) for p in feasible],
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "output<br>tok/s"}},
                "line": {
                    "color": [COLORS["front"] if p in front else "#fff" for p in feasible],
                    "width": [3 if p in front else 1 for p in feasible],
                },
            },
            name="feasible trial (colour = output throughput)",
            hovertext=[_hover(p) for p in feasible],
            hoverinfo="text",
        )
    )
    infeasible = _plotted(points, "infeasible")
    if infeasible:
        fig.add_trace(
            go.Scatter(
                x=[p.metrics[x] for p in infeasible],
                y=[p.metrics[y] for p in infeasible],
                mode="markers+text",
                text=_labels(infeasible, x, y),
                textposition="top right",
                textfont={"size": 11, "color": COLORS["infeasible"]},
                marker={"symbol": "x", "size": 11, "color": COLORS["infeasible"]},
                name="infeasible (breaks an SLO)",
                hovertext=[_hover(p) for p in infeasible],
                hoverinfo="text",
            )
        )
    base = [p for p in (*feasible, *infeasible) if p.baseline]
    if base:
        fig.add_trace(
            go.Scatter(
                x=[base[0].metrics[x]],
                y=[base[0].metrics[y]],
                mode="markers",
                marker={"symbol": "star", "size": 22, "color": "rgba(0,0,0,0)"},
                marker_line={"color": COLORS["baseline"], "width": 2},
                name=f"baseline (trial {base[0].number}: vLLM defaults)",
                hoverinfo="skip",
            )
        )
    for text in slo_lines:
        for limit in parse_slo(text):
            if limit.metric in (x, y):
                add = fig.add_vline if limit.metric == x else fig.add_hline
                add(
                    limit.value,
                    line={"dash": "dash", "color": "#e377c2", "width": 1.5},
                    annotation_text=f"SLO {limit}",
                    annotation_position="bottom right" if limit.metric == x else "top left",
                    annotation_font_color="#c0399a",
                )
    failed = [p for p in points if p.status == "failed"]
    if failed:
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
    title = f"{x} against {y} (both lower is better)"
    if simulated:
        title += " — SIMULATED: predicted, not measured"
    shown = [*feasible, *infeasible]
    for name, axis in ((x, fig.update_xaxes), (y, fig.update_yaxes)):
        if _log_scale([p.metrics[name] for p in shown]):
            axis(type="log")
    fig.update_layout(
        title={"text": title},
        xaxis_title=f"{x} (ms)",
        yaxis_title=f"{y} (ms)",
        template="plotly_white",
        height=620,
        margin={"b": 120},
        legend={"orientation": "h", "y": -0.28, "x": 0},
    )
    return fig


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
    trials; or the reason there is none (too few trials, nothing varied)."""
    scored = [p for p in points if p.score is not None and p.status in ("feasible", "infeasible")]
    if len(scored) < MIN_TRIALS_FOR_IMPORTANCE:
        return (
            f"needs at least {MIN_TRIALS_FOR_IMPORTANCE} measured trials; "
            f"this study has {len(scored)}"
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
        return f"cannot be computed: {exc}"


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
    path: Path,
    study_name: str,
    *,
    slo_lines: Sequence[str] = (),
    simulated: bool = False,
) -> None:
    """The Pareto plot as a static image, for tickets and chat."""
    # Imported here: matplotlib is slow to import and only `--png` needs it; Agg first.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (x, _), (y, _) = _axes(points)
    feasible = _plotted(points, "feasible")
    front = front_of(feasible, _axes(points))
    fig, ax = plt.subplots(figsize=(9, 6), dpi=120)
    if front:
        ax.step(
            [p.metrics[x] for p in front],
            [p.metrics[y] for p in front],
            where="post",
            color=COLORS["front"],
            label=f"Pareto front ({len(front)})",
        )
    sc = ax.scatter(
        [p.metrics[x] for p in feasible],
        [p.metrics[y] for p in feasible],
        c=[p.metrics.get(THROUGHPUT, math.nan) for p in feasible],
        cmap="viridis",
        s=[110 if p in front else 50 for p in feasible],
        edgecolors=[COLORS["front"] if p in front else "white" for p in feasible],
        linewidths=[2 if p in front else 0.5 for p in feasible],
        label="feasible",
        zorder=3,
    )
    if feasible:
        fig.colorbar(sc, ax=ax, label="output throughput (tok/s)")
    infeasible = _plotted(points, "infeasible")
    if infeasible:
        ax.scatter(
            [p.metrics[x] for p in infeasible],
            [p.metrics[y] for p in infeasible],
            marker="x",
            color=COLORS["infeasible"],
            label="infeasible (breaks an SLO)",
        )
    for group in (feasible, infeasible):
        for p, label in zip(group, _labels(group, x, y), strict=True):
            xy = (p.metrics[x], p.metrics[y])
            ax.annotate(label, xy, xytext=(5, 5), textcoords="offset points", fontsize=9)
            if p.baseline:
                ax.scatter(*xy, marker="*", s=320, facecolors="none", edgecolors="black",
                           zorder=4, label=f"baseline (trial {p.number})")  # fmt: skip
    for text in slo_lines:
        for limit in parse_slo(text):
            if limit.metric in (x, y):
                line = ax.axvline if limit.metric == x else ax.axhline
                line(limit.value, color="#e377c2", linestyle="--", linewidth=1.2,
                     label=f"SLO {limit}")  # fmt: skip
    failed = sum(p.status == "failed" for p in points)
    title = f"{study_name}: {x} vs {y}" + (f" — {failed} failed trials not shown" if failed else "")
    if simulated:
        title += "\nSIMULATED: predicted figures, not measurements"
    shown = [*feasible, *infeasible]
    for name, scale in ((x, ax.set_xscale), (y, ax.set_yscale)):
        if _log_scale([p.metrics[name] for p in shown]):
            scale("log")
    ax.set(title=title, xlabel=f"{x} (ms)", ylabel=f"{y} (ms)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
