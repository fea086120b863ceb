"""Presentation of a stored study: the trial table and the best command (rich, pandas).

Every figure is read through `tuner.trial` (`TrialPoint`, `StudyRecord`); nothing
here decides what a trial means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from tuner import trial as tr
from tuner.errors import UserError
from tuner.measure.objective import clearly_better
from tuner.results import capacity_words as words
from tuner.results.export import shell_command
from tuner.spec.metric_keys import HEADLINE_LATENCIES, HEADLINE_METRICS, headline_words
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint, specs

FAILURE_CHARS = 60


def trials_frame(points: Sequence[TrialPoint], study: StudyRecord | None = None) -> pd.DataFrame:
    """One row per trial: number, state, parameters, headline metrics, score, failure; and
    the spec it ran under, when the study has run under more than one."""
    study = study or StudyRecord()
    spec_ids = {specs.trial_spec_id(study, p) for p in points}
    capacity = any(p.capacity_rps is not None for p in points)
    scenarios = list(dict.fromkeys(n for p in points for n in p.scenario_names))
    # `search.fidelity: multi`: the screen's prediction beside each measured figure
    screened = any(p.predictions for p in points)
    rows: list[dict[str, Any]] = []
    for p in points:
        state = "INFEASIBLE" if p.status == "infeasible" else p.state
        row: dict[str, Any] = {"number": p.number, "state": state}
        row.update({f"param_{k}": v for k, v in p.params.items()})
        predicted, r = p.predictions, p.record
        for m in HEADLINE_METRICS:
            row[m] = p.metrics.get(m)
            if screened:
                row[tr.PREDICTED_PREFIX + m] = predicted.get(m)
        if capacity:
            row[tr.CAPACITY_RPS] = p.capacity_rps
            row["capacity_capped"] = p.capacity_capped  # at least that: met the SLOs at max_rps
            row["rate_steps"] = len(p.rate_steps) or None
        for name in scenarios:  # each scenario's own score and headline figures
            entry = p.scenario(name)
            row[f"{name}:score"] = entry.score if entry is not None else None
            found = p.scenario_metrics(name)
            row.update({f"{name}:{m}": found.get(m) for m in HEADLINE_LATENCIES})
            if entry is not None and entry.capacity is not None:
                row[f"{name}:{tr.CAPACITY_RPS}"] = entry.capacity.capacity_rps
                row[f"{name}:capacity_capped"] = entry.capacity.capped
        row["score"] = p.score
        if screened:
            row[tr.PREDICTED_SCORE] = r.predicted_score
        row["engine_s"] = r.engine_s
        row["baseline"] = p.baseline
        row["reused_from"] = r.reused_from
        if p.status == "pruned":
            row["failure"] = f"stopped early: {r.pruned_reason or ''}"
        elif p.failure_kind:
            row["failure"] = p.failure
        else:
            broken = p.broken_constraints
            row["failure"] = f"breaks {', '.join(broken)}" if broken else ""
        if len(spec_ids) > 1:
            row["spec"] = specs.trial_spec_id(study, p)
        rows.append(row)
    return pd.DataFrame(rows)


def prediction_rows(points: Sequence[TrialPoint]) -> list[dict[str, Any]]:
    """Predicted against measured, per real trial the screen chose and per headline metric:
    the simulator's error over the study in plain view (measured / predicted − 1)."""
    rows = []
    for p in sorted(points, key=lambda p: p.number):
        predicted = p.predictions
        if not predicted:
            continue
        miss = p.record.prediction_error or {}
        for m in HEADLINE_METRICS:
            if m in predicted:
                rows.append(
                    {
                        "trial": p.number,
                        "metric": m,
                        "predicted": predicted[m],
                        "measured": p.metrics.get(m) if p.measured else None,
                        "error": miss.get(m),
                    }
                )
    return rows


def _capped_cell(row: Any, col: str) -> bool:
    """Whether a capacity cell is a lower bound (its search met the SLOs at max_rps)."""
    flag = row.get(col.removesuffix(tr.CAPACITY_RPS) + "capacity_capped")
    return bool(flag) and not pd.isna(flag)


def print_trials_table(frame: pd.DataFrame, console: Console | None = None) -> None:
    console = console or Console(width=200)
    table = Table(show_lines=False)
    for col in frame.columns:
        if col in ("baseline", "reused_from") or col.endswith("capacity_capped"):
            continue
        if col == "failure":
            table.add_column(col, min_width=30, no_wrap=True, overflow="ellipsis")
        elif col in ("number", "state"):
            table.add_column(col, no_wrap=True)
        else:
            table.add_column(col.removeprefix("param_"), overflow="fold")
    for _, row in frame.iterrows():
        cells = []
        for col in frame.columns:
            if col in ("baseline", "reused_from") or col.endswith("capacity_capped"):
                continue
            v = row[col]
            if col == "number" and row["baseline"]:
                cells.append(f"{v} (baseline)")
            elif col == "failure" and len(v) > FAILURE_CHARS:
                cells.append(v[: FAILURE_CHARS - 1] + "…")  # the whole reason: --format csv
            elif col.endswith(tr.CAPACITY_RPS) and _capped_cell(row, col):
                cells.append(words.rate(v, True).removesuffix(f" {words.CAPPED_NOTE}"))
            elif isinstance(v, float):
                cells.append("" if pd.isna(v) else f"{v:.4g}")
            else:
                cells.append("" if v is None else str(v))
        table.add_row(*cells)
    console.print(table)


def best_report(points: Sequence[TrialPoint], study_name: str, study: StudyRecord) -> str:
    """The best feasible trial as a serve command, with a plain word on how sure we are; the
    command comes from the stored spec that trial was measured under."""
    ranked, notes = tr.ranked(points), tr.miss_notes(points)
    if not ranked:
        held = "".join(f"; {note}" for note in notes)
        raise UserError(f"study {study_name!r} has no complete feasible trial yet{held}")
    top = ranked[0]
    spec = specs.spec_for(study, top)
    m = top.metrics
    lines = [
        f"# best trial {top.number} of study {study_name}"
        + (" (SIMULATED: figures are predictions, not measurements)" if top.simulated else ""),
        f"# score {top.score:+.3f} ({_reference_words(top, points)} = 0, lower is better); "
        + ", ".join(headline_words(m)),
    ]
    if top.capacity_rps is not None:
        base = tr.baseline_of(points)
        vs = (
            f" (baseline trial {base.number}: "
            f"{words.rate(base.capacity_rps, base.capacity_capped)})"
            if base is not None and base.capacity_rps is not None and base is not top
            else ""
        )
        top_rate = words.rate(top.capacity_rps, top.capacity_capped)
        lines.append(f"# capacity {top_rate} within the SLOs{vs}")
    lines += [f"# {note}" for note in notes]
    runs = tr.confirmation_runs(points).get(top.number)
    if runs:
        mean = sum(runs) / len(runs)
        spread = (sum((x - mean) ** 2 for x in runs) / max(len(runs) - 1, 1)) ** 0.5
        lines.append(f"# confirmed over {len(runs)} runs: score {mean:+.3f} ± {spread:.3f} (std)")
    lines += [f"# {line}" for line in _confidence(top, ranked, spec)]
    robust = study.robustness_of(top)
    if robust is not None:
        lines.append(f"# {robust.verdict}")
    lines.append(shell_command(spec, top.params))
    return "\n".join(lines)


def _reference_words(top: TrialPoint, points: Sequence[TrialPoint]) -> str:
    ref = top.record.reference_trial
    if ref is None or any(p.number == ref and p.baseline for p in points):
        return "baseline"
    return f"trial {ref}, the first measured: vLLM's defaults were not measured,"


def _confidence(top: TrialPoint, ranked: list[TrialPoint], spec: StudySpec) -> list[str]:
    weights = spec.objective.weights
    out = []
    base = [p for p in ranked if p.baseline]
    if top.baseline:
        out.append("the baseline (vLLM's defaults) is the best trial: no tuned config beat it")
    elif base and not clearly_better(
        top.cis(HEADLINE_METRICS), base[0].cis(HEADLINE_METRICS), weights
    ):
        out.append(
            f"NOT clearly better than the baseline (trial {base[0].number}): "
            "the 95% confidence intervals overlap on every weighted metric"
        )
    runner_up = next((p for p in ranked if p.number != top.number), None)
    if runner_up is not None and not clearly_better(
        top.cis(HEADLINE_METRICS), runner_up.cis(HEADLINE_METRICS), weights
    ):
        out.append(
            f"not clearly better than the runner-up (trial {runner_up.number}): "
            "re-measure both (tuner run --confirm K) before trusting the order"
        )
    return out
