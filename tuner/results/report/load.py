"""The report's load figures: latency–load curves, capacity per trial, the scenario table.

The latency–load curve is the seed's "P99 growth curve": every rate a capacity search ran,
P99 TTFT and mean TPOT against the offered rate, the baseline's against the best config's,
with the SLO limits drawn across. Read through `tuner.trial` (`TrialPoint`, `RateStep`);
nothing is computed here.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
from markupsafe import Markup
from plotly.subplots import make_subplots

from tuner import trial as tr
from tuner.results.report.layout import slo_axis, slo_label_position
from tuner.results.report.plots import PLAIN_TICKS
from tuner.results.report.render import macro
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_LATENCIES
from tuner.spec.slo import SloLimit
from tuner.trial import RateStep, TrialPoint, words

CURVE_METRICS = HEADLINE_LATENCIES
_STYLE = {"baseline": ("#111111", "dash"), "best": ("#d62728", "solid")}
# One panel's plot area in the report (two side by side, 440 px high with the title and the
# legend under them), where an SLO label is placed clear of the runs
PANEL_PX = (400.0, 260.0)


def _steps(p: TrialPoint, scenario: str | None) -> list[RateStep]:
    steps = [s for s in p.rate_steps if s.scenario == scenario]
    return sorted(steps, key=lambda s: s.rate_rps)


def curve_figure(
    baseline: TrialPoint | None,
    best: TrialPoint | None,
    slos: Sequence[SloLimit],
    scenario: str | None = None,
) -> go.Figure | None:
    """P99 TTFT and mean TPOT against the offered rate (two panels), one line per trial;
    hollow markers: runs that broke an SLO; × where early stopping stopped them, with the
    figures reached by then, off the line (`_curve_traces`). Dotted: each SLO limit;
    vertical: each trial's capacity."""
    shown = [(k, p) for k, p in (("baseline", baseline), ("best", best)) if p is not None]
    if best is not None and baseline is not None and best.number == baseline.number:
        shown = [("baseline", baseline)]
    shown = [(k, p) for k, p in shown if _steps(p, scenario)]
    if not shown:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"{m} against rate" for m in CURVE_METRICS])
    for kind, p in shown:
        color, dash = _STYLE[kind]
        steps = _steps(p, scenario)
        label = f"{kind} (trial {p.number})"
        for col, metric in enumerate(CURVE_METRICS, start=1):
            pts = [s for s in steps if metric in s.metrics]
            for trace in _curve_traces(pts, metric, color, dash, label, first=col == 1):
                fig.add_trace(trace, row=1, col=col)
            cap = _capacity(p, scenario)
            if cap:
                fig.add_vline(x=cap, line={"color": color, "dash": "dot"}, row=1, col=col)
    for col, metric in enumerate(CURVE_METRICS, start=1):
        runs = [s for _, p in shown for s in _steps(p, scenario) if metric in s.metrics]
        _slo_lines(fig, col, metric, runs, [limit for limit in slos if limit.metric == metric])
        fig.update_xaxes(
            title_text="offered request rate (req/s)", tickformat=PLAIN_TICKS, row=1, col=col
        )
    where = f" — scenario {scenario}" if scenario else ""
    fig.update_layout(
        title=f"Latency against load{where} (vertical dotted lines: capacity)",
        template="plotly_white",
        height=440,
        legend={"orientation": "h", "y": -0.25, "x": 0},
    )
    return fig


def _slo_lines(
    fig: go.Figure, col: int, metric: str, runs: list[RateStep], limits: list[SloLimit]
) -> None:
    """The panel's latency axis fitted to its runs as the trade-off plot's are
    (`layout.slo_axis`: padded, log over 10x): an SLO near them is a dotted line, its label
    at the end and side of it clear of the runs (`layout.slo_label_position`); a far one
    (P99 TTFT <= 20 s over runs at 0.2-2 s) a legend entry saying which edge it lies past,
    so it does not squeeze the curves flat."""
    values = [s.metrics[metric] for s in runs]
    rng, lines = slo_axis("y", values, limits, [s.metrics for s in runs])
    kind = "log" if rng.log else "linear"
    fig.update_yaxes(
        title_text="ms",
        type=kind,
        range=rng.plotly_range(),
        tickformat=PLAIN_TICKS,
        row=1,
        col=col,
    )
    rates = [s.rate_rps for s in runs]
    low, high = min(rates, default=0.0), max(rates, default=1.0)
    at = [
        ((r - low) / (high - low) if high > low else 0.5, rng.fraction(v))
        for r, v in zip(rates, values, strict=True)
    ]
    for line in lines:
        if line.off is None:
            fig.add_hline(
                y=line.value,
                line={"color": "#2ca02c", "dash": "dot"},
                annotation_text=line.label,
                annotation_position=slo_label_position(
                    rng.fraction(line.value), at, line.label, PANEL_PX
                ),
                row=1,
                col=col,
            )
            continue
        fig.add_trace(  # a legend entry, under the panels: never over a run
            go.Scatter(
                x=[None],
                y=[None],
                mode="lines",
                line={"color": "#2ca02c", "dash": "dot"},
                name=html.escape(line.off.words(line.label)),
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )


def _curve_traces(
    steps: Sequence[RateStep], metric: str, color: str, dash: str, label: str, *, first: bool
) -> list[go.Scatter]:
    """One trial's curve: the runs that ran to the end joined by a line (filled: met every
    SLO, hollow: broke one); the runs early stopping cut short as crosses on their own, never
    joined: their figures cover only the requests done by then, so a line through them
    would show latency falling with load."""
    done = [s for s in steps if not s.pruned_reason]
    stopped = [s for s in steps if s.pruned_reason]
    common = {"hoverinfo": "text", "name": label, "legendgroup": label}
    traces = [
        go.Scatter(
            x=[s.rate_rps for s in done],
            y=[s.metrics[metric] for s in done],
            mode="lines+markers",
            line={"color": color, "dash": dash},
            marker={"symbol": ["circle" if s.feasible else "circle-open" for s in done], "size": 9},
            hovertext=[_hover(s) for s in done],
            showlegend=first,
            **common,
        )
    ]
    if stopped:
        traces.append(
            go.Scatter(
                x=[s.rate_rps for s in stopped],
                y=[s.metrics[metric] for s in stopped],
                mode="markers",
                marker={"symbol": "x", "size": 9, "color": color},
                hovertext=[_hover(s) for s in stopped],
                showlegend=False,
                **common,
            )
        )
    return traces


def _capacity(p: TrialPoint, scenario: str | None) -> float | None:
    if scenario is None:
        return p.capacity_rps
    entry = p.scenario(scenario)
    return entry.capacity.capacity_rps if entry is not None and entry.capacity else None


def _hover(step: RateStep) -> str:
    figures = step.metrics
    lines = [f"{figure(step.rate_rps)} req/s offered"]
    lines += [f"{m} = {figure(figures[m])}" for m in CURVE_METRICS if m in figures]
    if "request_goodput" in figures:
        lines.append(words.goodput(figures["request_goodput"]))
    lines.append("met every SLO" if step.feasible else "broke an SLO")
    if step.pruned_reason:
        lines.append("stopped early: " + html.escape(str(step.pruned_reason))[:200])
    return "<br>".join(lines)


def capacity_figure(points: Sequence[TrialPoint]) -> go.Figure | None:
    """The capacity of every measured trial (req/s), the baseline's in black."""
    shown = [p for p in points if p.capacity_rps is not None and p.measured]
    if not shown:
        return None
    fig = go.Figure(
        go.Bar(
            x=[str(p.number) for p in shown],
            y=[p.capacity_rps for p in shown],
            marker={"color": ["#111111" if p.baseline else "#1f77b4" for p in shown]},
            hovertext=[
                f"trial {p.number}: "
                f"{words.rate(p.capacity_rps or 0.0, p.capacity_capped, p.capacity_interval)}, "
                f"{len(p.rate_steps)} rates, {sum(s.runs for s in p.rate_steps)} runs"
                for p in shown
            ],
            hoverinfo="text",
        )
    )
    fig.update_layout(
        title="Capacity within the SLOs, per trial (black: the baseline)",
        xaxis_title="trial",
        yaxis_title="capacity (req/s)",
        template="plotly_white",
        height=380,
    )
    return fig


def scenario_table(points: Sequence[TrialPoint]) -> Markup:
    """Per trial and scenario: its score, headline figures and capacity (HTML)."""
    names = list(dict.fromkeys(n for p in points for n in p.scenario_names))
    if not names:
        return Markup()
    cols = ["score", *CURVE_METRICS, "output_throughput", tr.CAPACITY_RPS]
    rows = []
    for p in points:
        if not p.scenario_names:
            continue
        cells = []
        for n in names:
            entry, found = p.scenario(n), p.scenario_metrics(n)
            cap = entry.capacity if entry is not None else None
            score = entry.score if entry is not None else None
            cells += [figure(v) for v in [score, *(found.get(m) for m in cols[1:4])]]
            cells.append("" if cap is None else words.capacity_rate(cap))
        rows.append((f"{p.number}{' (baseline)' if p.baseline else ''}", cells))
    head = [f"{n}: {c}" for n in names for c in cols]
    return macro("sections.html.j2", "scenario_table", head=head, rows=rows)
