"""`tuner report`: one self-contained HTML file that opens offline (plotly.js is inlined).

Sections, in the order a reader asks: what to deploy (best command under each SLO of the
study file), the trade-off (Pareto front of TTFT against TPOT), how the search went
(history, parameter importance), every trial with its failure reason, and what it was all
measured on (engine, hardware, workload, objective); after "What to deploy", every stored
`tuner verify` of the deployed config (docs/verify.md, "Records").
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import optuna
import plotly.graph_objects as go
from markupsafe import Markup

from tuner.measure.modes import Objective
from tuner.results.report.deploy import best_commands, verify_section
from tuner.results.report.front import ParetoFrontInfo, front_rows, pareto_front_info
from tuner.results.report.plots import history_figure, importance_figure, importances, plot_pareto
from tuner.results.report.plots import scored_points as scored
from tuner.results.report.render import macro, render
from tuner.results.section import Shown
from tuner.results.sections import SECTIONS
from tuner.results.shipped import shipped_point
from tuner.results.verifies import VerifyDoc
from tuner.spec.figures import PARTIAL_NOTE, figure, partial_figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.sections import ParameterSpec
from tuner.spec.study import StudySpec
from tuner.trial import (
    OUTCOME_WORDS,
    StudyRecord,
    TrialPoint,
    baseline_of,
    for_scenario,
    host_baselines,
    outcome,
    tally_words,
)
from tuner.trial import best as best_trial
from tuner.trial.hosts import SHOWN, differences
from tuner.trial.uptime import study_line


def _kv(rows: Sequence[tuple[str, object]]) -> list[tuple[str, str]]:
    return [(k, figure(v)) for k, v in rows]


def _status(p: TrialPoint, front: set[int]) -> str:
    """The row's class: on the front, else how it ended (`tuner.trial.outcome`): a config
    refused or ruled out before launch is not styled as a failure."""
    if p.number in front:
        return "front"
    return outcome(p)


# A row's status in words: how it ended (`tuner.trial.outcome`, the counts' words)
_ROW_WORDS = {"ruled-out": "ruled out (never launched)", "refused": "refused (never launched)"}


def trials_table(points: Sequence[TrialPoint], front: set[int]) -> Markup:
    """Every trial: number, status, parameters, headline metrics, score, engine time (its
    start-up in brackets: one column, so the table fits 1024 px), failure reason."""
    params = list(dict.fromkeys(k for p in points for k in p.params))
    metrics = list(HEADLINE_METRICS)
    head = ["trial", "status", *params, *metrics, "score", ENGINE_HEAD]
    head.append("failure / broken constraints")
    rows = []
    for p in sorted(points, key=lambda p: p.number):
        status = _status(p, front)
        ended = outcome(p)
        label = "on the front" if status == "front" else _ROW_WORDS.get(ended, OUTCOME_WORDS[ended])
        cells = [
            f"{p.number}" + (" ★ baseline" if p.baseline else ""),
            label,
            *(figure(p.params.get(k)) for k in params),
            *(partial_figure(figure(p.metrics.get(m)), p.partial) for m in metrics),
            ""
            if p.status == "failed"
            else figure(p.score, 3, sign=True),  # a penalty, not a measurement
            _engine_cell(p),
        ]
        why = p.failure or ", ".join(p.broken_constraints)
        rows.append({"status": status, "cells": cells, "why": why})
    return macro(
        "sections.html.j2",
        "trials_table",
        head=[(h, h in ("status", head[-1])) for h in head],
        rows=rows,
        note=PARTIAL_NOTE if any(p.partial for p in points) else "",
        wide=len(params) > WIDE_FLAGS,
    )


ENGINE_HEAD = "engine s (start-up s)"
WIDE_FLAGS = 5  # more flags than this: the table in a smaller font (report.css, `.wide`)


def _engine_cell(p: TrialPoint) -> str:
    """A trial's engine seconds, and its start-up's in brackets when known."""
    split = p.record.engine_split_s
    engine = figure(p.record.engine_s)
    return engine if split is None else f"{engine} ({figure(split[0])})"


def predictions_section(points: Sequence[TrialPoint]) -> Markup:
    """`search.fidelity: multi`: what the calibrated simulator predicted for each real trial
    before it ran, against what was measured; empty for a study without a screen. One row per
    real trial the screen chose and per headline metric: the simulator's error over the study
    in plain view (measured / predicted − 1)."""
    rows = []
    for p in sorted(points, key=lambda p: p.number):
        predicted, miss = p.predictions, p.record.prediction_error or {}
        for m in HEADLINE_METRICS:
            if m in predicted:
                measured = p.metrics.get(m) if p.measured else None
                error = "" if (e := miss.get(m)) is None else f"{e:+.1%}"
                rows.append([*(figure(v) for v in (p.number, m, predicted[m], measured)), error])
    if not rows:
        return Markup()
    return macro("sections.html.j2", "predictions", rows=rows)


def _context(spec: StudySpec, points: Sequence[TrialPoint]) -> Markup:
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
    space = [(name, _describe_param(p)) for name, p in spec.search_space.parameters.items()]
    return macro(
        "sections.html.j2",
        "context",
        engine=_kv(engine_rows),
        hardware=_kv(hardware_rows),
        objective=_kv(objective_rows),
        workload=_kv(workload_rows),
        space=space,
    )


def blocks_section(shown: Shown) -> Markup:
    """Every `SECTIONS` block that is in the report (`Section.report`), in its order."""
    found = [b for s in SECTIONS if (b := s.report(shown)) is not None]
    return Markup("").join(
        macro("sections.html.j2", "block", title=b.title, note=b.note, lines=b.lines) for b in found
    )


def hosts_section(points: Sequence[TrialPoint]) -> Markup:
    """Each host's baseline side by side (several hosts only), and the plain-words warning
    for hosts whose baselines differ beyond the noise."""
    rows = host_baselines(points)
    if len(rows) < 2:
        return Markup()

    def text(p: TrialPoint, m: str) -> str:
        ci = p.ci(m)
        return figure(p.metrics.get(m)) + (f" [{figure(ci[0])}, {figure(ci[1])}]" if ci else "")

    shown = [(host, p.number, [text(p, m) for m in SHOWN]) for host, p in rows.items()]
    return macro(
        "sections.html.j2", "hosts", metrics=SHOWN, rows=shown, warnings=differences(points)
    )


def _describe_param(p: ParameterSpec) -> str:
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


def _load_section(
    spec: StudySpec, points: Sequence[TrialPoint], config: Mapping[str, object]
) -> Markup:
    """Capacity mode's curves and capacities, and the scenarios' own figures (or nothing)."""
    from tuner.results.report.load import capacity_figure, curve_figure, scenario_table

    base, best = baseline_of(points), best_trial(points)
    parts = []
    names: list[str | None] = [s.name for s in spec.scenarios] or [None]
    for name in names:
        fig = curve_figure(base, best, spec.slo_limits(name), name)
        if fig is not None:
            parts.append(_div(fig, config))
    cap = capacity_figure(points)
    if cap is not None:
        parts.append(_div(cap, config))
    how = spec.objective.aggregate
    return macro(
        "sections.html.j2",
        "load",
        curves=parts,
        scenarios=scenario_table(points),
        aggregate="worst" if how == "worst" else "weighted mean",
    )


def _div(fig: go.Figure, config: Mapping[str, object], with_js: bool = False) -> Markup:
    """A plotly figure's div (with plotly.js inline: the page's first figure)."""
    return Markup(fig.to_html(full_html=False, include_plotlyjs=with_js, config=config))


def front_section(info: ParetoFrontInfo) -> Markup:
    """The front under its plot: figures with their 95 % intervals, the noise groups, the
    recommended config marked (`front.front_rows`)."""
    rows = front_rows(info)
    if not rows:
        return Markup()
    head = ["trial", f"{info.x} [95% CI]", f"{info.y} [95% CI]", "on the front", "note"]
    return macro("sections.html.j2", "front_table", head=head, rows=rows)


def _scenario_fronts(
    spec: StudySpec,
    points: Sequence[TrialPoint],
    simulated: bool,
    config: Mapping[str, object],
    shipped: TrialPoint | None = None,
) -> Markup:
    """A scenario mix: one front per scenario, on that scenario's own figures (the trials'
    figures pool every scenario's requests, a mix no one serves); `shipped` marked on each."""
    parts = []
    for s in spec.scenarios:
        texts = [*spec.objective.slo, *s.slo]
        seen = for_scenario(points, s.name)
        rec = next((p for p in seen if shipped is not None and p.number == shipped.number), None)
        info = pareto_front_info(seen, texts, simulated, s.name, recommended=rec)
        if info.feasible or info.infeasible:
            parts.append(_div(plot_pareto(info), config))
    return macro("sections.html.j2", "scenario_fronts", divs=parts) if parts else Markup()


def _counts(points: Sequence[TrialPoint]) -> list[tuple[str, int]]:
    """The trials counted by how they ended, `tuner trials`' counts (`tuner.trial.tally`)."""
    counts = tally_words(points)
    stale = [p for p in points if p.stale_stop]  # docs/reliability.md, "Re-judging"
    if stopped := sum(not p.record.ruled_out for p in stale):
        counts.append(("of them stopped under the previous SLOs/objective", stopped))
    if ruled := sum(bool(p.record.ruled_out) for p in stale):
        counts.append(("of them ruled out under the previous SLOs/objective", ruled))
    if warm := sum(bool(p.warm_runs) for p in points):  # docs/metrics.md, "Every run cold"
        counts.append(("of them measured with a warm prefix cache", warm))
    return counts


def build_report(
    study: optuna.Study,
    spec: StudySpec,
    objective: Objective,
    points: Sequence[TrialPoint],
    *,
    simulated: bool,
    verifies: Sequence[VerifyDoc] = (),
) -> str:
    """The whole report as one HTML string; the first figure carries plotly.js inline.
    `verifies`: the study's stored `tuner verify` documents (`tuner.store.verifies`)."""
    shipped = shipped_point(study, points)
    pareto = pareto_front_info(points, spec.objective.slo, simulated, recommended=shipped)
    imp = importances(study, points)
    record = StudyRecord.of(study)
    config = {"displaylogo": False, "responsive": True}
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return render(
        "report.html.j2",
        study_name=study.study_name,
        subtitle=" · ".join(filter(None, [spec.description, f"{len(points)} trials", generated])),
        simulated=simulated,
        counts=_counts(points),
        study_line=study_line(points),
        deploy=best_commands(spec, objective, points, study.study_name, simulated, record),
        verifies=verify_section(verifies),
        x=pareto.x,
        capacity_front=pareto.front_capacity_rps is not None,
        pareto_div=_div(plot_pareto(pareto), config, with_js=True),
        front_table=front_section(pareto),
        scenario_fronts=_scenario_fronts(spec, points, simulated, config, shipped),
        load=_load_section(spec, points, config),
        sections=blocks_section(Shown(points, spec, objective, record)),
        history_div=_div(history_figure(points), config) if scored(points) else None,
        importance_div=_div(importance_figure(imp), config) if isinstance(imp, dict) else None,
        importance_words=imp,
        trials=trials_table(points, set(pareto.front_numbers)),
        predictions=predictions_section(points),
        hosts=hosts_section(points),
        context=_context(spec, points),
    )
