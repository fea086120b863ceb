"""`tuner report`: one self-contained HTML file that opens offline (plotly.js is inlined).

Sections, in the order a reader asks: what to deploy (best command under each SLO of the
study file), the trade-off (Pareto front of TTFT against TPOT), how the search went
(history, parameter importance), every trial with its failure reason, and what it was all
measured on (engine, hardware, workload, objective); after "What to deploy", every stored
`tuner verify` of the deployed config (docs/verify.md, "Records").
"""

from __future__ import annotations

import html
import json
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import optuna

from tuner.measure.modes import objective_of
from tuner.results.report.deploy import best_commands, verify_section
from tuner.results.report.front import pareto_front_info
from tuner.results.report.plots import history_figure, importance_figure, importances, plot_pareto
from tuner.results.report.plots import scored_points as scored
from tuner.results.shapes import shape_rows
from tuner.results.views import prediction_rows
from tuner.spec.figures import PARTIAL_NOTE, figure, partial_figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint, baseline_of, for_scenario, host_baselines
from tuner.trial import best as best_trial
from tuner.trial.hosts import SHOWN, differences
from tuner.trial.uptime import study_line

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
  color: #1d1d1f; background: #fafafa; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 28px; margin: 0 0 4px; } h2 { font-size: 21px; margin: 36px 0 8px;
  border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
.sub { color: #555; margin: 0 0 16px; }
.banner { background: #fff3cd; border: 1px solid #e0b400; padding: 10px 14px; border-radius: 6px;
  font-weight: 600; margin: 12px 0; }
.counts span { display: inline-block; margin-right: 18px; font-size: 15px; }
.card { background: #fff; border: 1px solid #e3e3e3; border-radius: 8px; padding: 12px 16px;
  margin: 10px 0; }
pre { background: #f3f4f6; padding: 10px 12px; border-radius: 6px; overflow-x: auto;
  font-size: 13px; line-height: 1.45; white-space: pre; }
pre.notes { white-space: pre-wrap; overflow-wrap: anywhere; }
td.words { text-align: left; min-width: 280px; max-width: 520px; }
.doubt { color: #a11; }
pre.cmd { background: #0f172a; color: #e2e8f0; }
table { border-collapse: collapse; font-size: 13px; background: #fff; }
th, td { border: 1px solid #e1e1e1; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.l, th.l { text-align: left; }
.wrap { overflow-x: auto; max-height: 640px; overflow-y: auto; }
tr.feasible td:first-child { border-left: 4px solid #2ca02c; }
tr.front td:first-child { border-left: 4px solid #d62728; font-weight: 700; }
tr.infeasible { color: #666; } tr.infeasible td:first-child { border-left: 4px solid #999; }
tr.failed { color: #a11; background: #fff5f5; }
tr.failed td:first-child { border-left: 4px solid #a11; }
.err { color: #a11; font-weight: 600; }
details { margin: 6px 0 12px; } summary { cursor: pointer; font-size: 15px; padding: 4px 0; }
.kv th { text-align: left; width: 220px; } .kv td { text-align: left; }
.grid { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
@media (max-width: 900px) { .grid { grid-template-columns: 1fr; } }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _kv(rows: Sequence[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{_e(k)}</th><td>{_e(figure(v))}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def _status(p: TrialPoint, front: set[int]) -> str:
    if p.number in front:
        return "front"
    return p.status


def trials_table(points: Sequence[TrialPoint], front: set[int]) -> str:
    """Every trial: number, status, parameters, headline metrics, score, failure reason."""
    params = list(dict.fromkeys(k for p in points for k in p.params))
    metrics = list(HEADLINE_METRICS)
    head = ["trial", "status", *params, *metrics, "score", "engine s", "start-up s"]
    head.append("failure / broken constraints")
    rows = []
    for p in sorted(points, key=lambda p: p.number):
        status = _status(p, front)
        label = {"front": "on the front", "feasible": "feasible"}.get(status, status)
        why = p.failure or ", ".join(p.broken_constraints)
        cells = [
            f"{p.number}" + (" ★ baseline" if p.baseline else ""),
            label,
            *(figure(p.params.get(k)) for k in params),
            *(partial_figure(figure(p.metrics.get(m)), p.partial) for m in metrics),
            ""
            if p.status == "failed"
            else figure(p.score, 3, sign=True),  # a penalty, not a measurement
            figure(p.record.engine_s),
            figure(split[0] if (split := p.record.engine_split_s) is not None else None),
        ]
        tds = "".join(f"<td>{_e(c)}</td>" for c in cells[:1])
        tds += "".join(f'<td class="l">{_e(c)}</td>' for c in cells[1:2])
        tds += "".join(f"<td>{_e(c)}</td>" for c in cells[2:])
        tds += f'<td class="l">{_e(why)}</td>'
        rows.append(f'<tr class="{status}">{tds}</tr>')
    ths = "".join(
        f'<th class="{"l" if h in ("status", head[-1]) else ""}">{_e(h)}</th>' for h in head
    )
    note = f"<p>{_e(PARTIAL_NOTE)}</p>" if any(p.partial for p in points) else ""
    return (
        f'<div class="wrap"><table><thead><tr>{ths}</tr></thead>{"".join(rows)}</table></div>'
        + note
    )


def predictions_section(points: Sequence[TrialPoint]) -> str:
    """`search.fidelity: multi`: what the calibrated simulator predicted for each real trial
    before it ran, against what was measured; empty for a study without a screen."""
    rows = prediction_rows(points)
    if not rows:
        return ""

    def cells(r: dict[str, Any]) -> str:
        error = "" if r["error"] is None else f"{r['error']:+.1%}"
        shown = [figure(r[k]) for k in ("trial", "metric", "predicted", "measured")] + [error]
        return "".join(f"<td>{_e(c)}</td>" for c in shown)

    body = "".join(f"<tr>{cells(r)}</tr>" for r in rows)
    head = "".join(
        f"<th>{h}</th>"
        for h in ("trial", "metric", "predicted", "measured", "measured/predicted−1")
    )
    return (
        "<h2>Simulator against measurement</h2>"
        '<p class="sub">Each real trial was chosen by the simulator, calibrated on the trials '
        "before it (search.fidelity: multi); its prediction was stored before it ran. "
        "Predictions are never results: only measured figures rank trials.</p>"
        f'<div class="wrap"><table><thead><tr>{head}</tr></thead>{body}</table></div>'
    )


def _context(spec: StudySpec, points: Sequence[TrialPoint]) -> str:
    eng = spec.engine
    versions = sorted({str(v) for p in points if (v := p.record.vllm_version)})
    engine_rows = [
        ("model", eng.model),
        ("served model name", eng.served_model_name),
        ("launch command (study)", shlex.join(eng.command)),
        ("fixed flags", " ".join(f"--{k} {v}" for k, v in eng.flags.items())),
        ("environment", " ".join(f"{k}={v}" for k, v in eng.env.items())),
        ("vLLM version(s) seen", ", ".join(versions) or "not recorded"),
    ]
    hw = spec.hardware
    hardware_rows = [("GPU", hw.gpu or "not given"), ("count", hw.count)]
    if hw.gpu_memory_gib:
        hardware_rows.append(("memory per GPU (GiB)", hw.gpu_memory_gib))
    workload = json.loads(spec.workload.model_dump_json())
    workload_rows = [
        (k, "inf" if v is None and k == "request_rate" else v) for k, v in workload.items()
    ]
    obj = spec.objective
    objective_rows = [
        ("mode", obj.mode),
        ("weights", ", ".join(f"{k}: {v:g}" for k, v in obj.weights.items())),
        ("objectives (multi mode)", ", ".join(obj.objectives)),
        ("SLO", "; ".join(obj.slo) or "none"),
        ("sampler", f"{spec.sampler.name} (seed {spec.sampler.seed})"),
        (
            "budget",
            f"{spec.budget.n_trials} trials"
            + (f", {spec.budget.timeout}" if spec.budget.timeout else ""),
        ),
    ]
    space = "".join(
        f"<tr><th>{_e(name)}</th><td>{_e(_describe_param(p))}</td></tr>"
        for name, p in spec.search_space.parameters.items()
    )
    return (
        '<div class="grid">'
        f'<div class="card"><h3>Engine</h3>{_kv(engine_rows)}</div>'
        f'<div class="card"><h3>Hardware</h3>{_kv(hardware_rows)}'
        f"<h3>Objective</h3>{_kv(objective_rows)}</div>"
        f'<div class="card"><h3>Workload</h3>{_kv(workload_rows)}</div>'
        f'<div class="card"><h3>Search space</h3><table class="kv">{space}</table></div>'
        "</div>"
    )


def shapes_section(spec: StudySpec, points: Sequence[TrialPoint]) -> str:
    """The deployment shapes tried, best first; nothing when one shape was."""
    rows = shape_rows(spec, points)
    if not rows:
        return ""
    items = "".join(f"<li>{_e(row.line())}</li>" for row in rows)
    return f"<h2>Deployment shapes</h2><p class='sub'>Replicas x TP, best first</p><ul>{items}</ul>"


def hosts_section(points: Sequence[TrialPoint]) -> str:
    """Each host's baseline side by side (several hosts only), and the plain-words warning
    for hosts whose baselines differ beyond the noise."""
    rows = host_baselines(points)
    if len(rows) < 2:
        return ""
    head = "".join(f"<th>{_e(m)} (95 % CI)</th>" for m in SHOWN)
    body = ""
    for host, p in rows.items():
        cells = ""
        for m in SHOWN:
            ci = p.ci(m)
            text = figure(p.metrics.get(m)) + (f" [{figure(ci[0])}, {figure(ci[1])}]" if ci else "")
            cells += f"<td>{_e(text)}</td>"
        body += f'<tr><td class="l">{_e(host)}</td><td>{p.number}</td>{cells}</tr>'
    warnings = "".join(f'<p class="err">{_e(w)}</p>' for w in differences(points))
    return (
        '<div class="card"><h3>Baselines by host</h3><p class="sub">Each host measured '
        "vLLM's defaults once; its trials' scores are relative to its own baseline.</p>"
        f'<table><tr><th class="l">host</th><th>trial</th>{head}</tr>{body}</table>'
        f"{warnings}</div>"
    )


def _describe_param(p: Any) -> str:
    where = f"env {p.env}" if p.env else (p.flag or "flag")
    if p.type in ("int", "float"):
        rng = (
            f"{p.low:g}…{p.high:g}"
            + (" log" if p.log else "")
            + (f" step {p.step:g}" if p.step else "")
        )
    elif p.type == "categorical":
        rng = ", ".join(str(c) for c in p.choices or [])
    else:
        rng = "true / false"
    default = f"; default {p.default}" if p.default is not None else ""
    return f"{p.type} {rng} ({where}{default})"


def _load_section(spec: StudySpec, points: Sequence[TrialPoint], config: dict[str, Any]) -> str:
    """Capacity mode's curves and capacities, and the scenarios' own figures (or nothing)."""
    from tuner.results.report.load import capacity_figure, curve_figure, scenario_table

    base, best = baseline_of(points), best_trial(points)
    parts = []
    names: list[str | None] = [s.name for s in spec.scenarios] or [None]
    for name in names:
        fig = curve_figure(base, best, spec.slo_limits(name), name)
        if fig is not None:
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False, config=config))
    cap = capacity_figure(points)
    if cap is not None:
        parts.append(cap.to_html(full_html=False, include_plotlyjs=False, config=config))
    html_parts = []
    if parts:
        html_parts.append(
            "<h2>Capacity: latency against load</h2><p class='sub'>Every rate the capacity "
            "search ran on the baseline and on the best config: filled markers met every SLO, "
            "hollow ones broke one, crosses were stopped early (above capacity).</p>"
            + "".join(parts)
        )
    table = scenario_table(points)
    if table:
        how = spec.objective.aggregate
        html_parts.append(
            f"<h2>Scenarios</h2><p class='sub'>Each scenario against the same engine start; "
            f"the trial's score is the {'worst' if how == 'worst' else 'weighted mean'} of "
            f"theirs.</p>{table}"
        )
    return "".join(html_parts)


def _scenario_fronts(
    spec: StudySpec, points: Sequence[TrialPoint], simulated: bool, config: dict[str, Any]
) -> str:
    """A scenario mix: one front per scenario, on that scenario's own figures (the trials'
    figures pool every scenario's requests, a mix no one serves)."""
    parts = []
    for s in spec.scenarios:
        texts = [*spec.objective.slo, *s.slo]
        capacity = objective_of(spec).has_capacity
        info = pareto_front_info(
            for_scenario(points, s.name), texts, simulated, s.name, capacity=capacity
        )
        if info.feasible or info.infeasible:
            fig = plot_pareto(info)
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False, config=config))
    if not parts:
        return ""
    return (
        "<h3>Per scenario</h3><p class='sub'>Each scenario's own figures: the front above pools "
        "every scenario's requests.</p>" + "".join(parts)
    )


_STATUSES = ("feasible", "infeasible", "failed", "pruned")


def _counts_html(points: Sequence[TrialPoint]) -> str:
    """The trials counted by status (the first three always shown), and the study's time."""
    counts = {s: sum(p.status == s for p in points) for s in _STATUSES}
    counts["stopped early (pruned)"] = counts.pop("pruned")
    counts["other (running)"] = len(points) - sum(counts.values())
    if any(p.stale_stop for p in points):  # docs/reliability.md, "Re-judging"
        counts["of them stopped under the previous SLOs/objective"] = sum(
            p.stale_stop for p in points
        )
    if warm := sum(bool(p.warm_runs) for p in points):  # docs/metrics.md, "Every run cold"
        counts["of them measured with a warm prefix cache"] = warm
    shown = "".join(
        f"<span><b>{n}</b> {_e(s)}</span>" for s, n in counts.items() if n or s in _STATUSES[:3]
    )
    return shown + f"<span>{_e(study_line(points))}</span>"


def build_report(
    study: optuna.Study,
    spec: StudySpec,
    points: Sequence[TrialPoint],
    *,
    simulated: bool,
    verifies: Sequence[dict[str, Any]] = (),
) -> str:
    """The whole report as one HTML string; the first figure carries plotly.js inline.
    `verifies`: the study's stored `tuner verify` documents (`tuner.store.verifies`)."""
    capacity = objective_of(spec).has_capacity
    pareto = pareto_front_info(points, spec.objective.slo, simulated, capacity=capacity)
    x, front_numbers = pareto.x, set(pareto.front_numbers)
    capacity_note = (
        "Capacity study: each trial's figures are at its own capacity rate, so the front is "
        "drawn among the configs that serve the most. "
        if pareto.front_capacity_rps is not None
        else ""
    )
    figures = [plot_pareto(pareto), history_figure(points)]
    imp = importances(study, points)
    if isinstance(imp, dict):
        figures.append(importance_figure(imp))
    config = {"displaylogo": False, "responsive": True}
    divs = [
        fig.to_html(full_html=False, include_plotlyjs=(i == 0), config=config)
        for i, fig in enumerate(figures)
    ]
    imp_html = divs[2] if isinstance(imp, dict) else f"<p class='sub'>{_e(imp)}</p>"
    no_history = "<p class='sub'>No trial was measured yet: no score to plot.</p>"
    history_html = divs[1] if scored(points) else no_history
    scenario_fronts = _scenario_fronts(spec, points, simulated, config)
    load_html = _load_section(spec, points, config)
    banner = (
        '<div class="banner">SIMULATED study: every figure in this report is a prediction of '
        "the tuner's simulator, not a measurement on a real engine.</div>"
        if simulated
        else ""
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = " · ".join(filter(None, [spec.description, f"{len(points)} trials", generated]))
    count_html = _counts_html(points)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tuner report: {_e(study.study_name)}</title><style>{_CSS}</style></head>
<body><main>
<h1>tuner report: {_e(study.study_name)}</h1>
<p class="sub">{_e(subtitle)}</p>
{banner}
<div class="counts">{count_html}</div>
<h2>What to deploy</h2>
{best_commands(spec, points, study.study_name, simulated, StudyRecord.of(study))}
{verify_section(verifies)}
<h2>Trade-off: {_e(x)} against mean TPOT</h2>
<p class="sub">Red ring and red step line: the Pareto front (no other feasible trial is at least
as good on both axes and better on one). Colour: output throughput. Star: the baseline.
Grey crosses: measured but breaking an SLO. Failed trials have no measurement and are listed
under the plot. Axes fit the points: an SLO far from them is named in the legend, not drawn.
{capacity_note}Hover a point for its flags.</p>
{divs[0]}
{scenario_fronts}
{load_html}
{shapes_section(spec, points)}
<h2>Search</h2>
{history_html}
{imp_html}
<h2>Every trial</h2>
{trials_table(points, front_numbers)}
{predictions_section(points)}
<h2>Measured on</h2>
{hosts_section(points)}
{_context(spec, points)}
</main></body></html>
"""
