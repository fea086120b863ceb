"""Presentation of a stored study: the trial table and the best command (rich, pandas).

Every figure is read through `tuner.trial` (`TrialPoint`, `StudyRecord`); nothing
here decides what a trial means.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from tuner import trial as tr
from tuner.errors import UserError
from tuner.results import capacity_words as words
from tuner.results.change import against_defaults
from tuner.results.export import shell_command
from tuner.results.verdicts import reference_words, verdicts
from tuner.spec.metric_keys import HEADLINE_LATENCIES, HEADLINE_METRICS, headline_words
from tuner.spec.study import StudySpec
from tuner.trial import StudyRecord, TrialPoint, specs
from tuner.trial.words import at_rate, scenario_parts

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
        split = r.engine_split_s  # launched: start-up and workload seconds, summing to engine_s
        row["startup_s"], row["workload_s"] = split if split is not None else (None, None)
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


def trials_records(
    points: Sequence[TrialPoint], study: StudyRecord | None = None
) -> list[dict[str, Any]]:
    """`tuner trials --format json`: the table's rows, each capacity trial's latency–load
    points (`rate_steps`) as a list of objects, every figure of each rate run (the table and
    the CSV show how many there were)."""
    rows = json.loads(trials_frame(points, study).to_json(orient="records"))
    by_number = {p.number: p for p in points}
    for row in rows:
        if "rate_steps" in row:
            row["rate_steps"] = [s.encode() for s in by_number[row["number"]].rate_steps]
    return rows


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
    """The best feasible trial as a serve command, its change against vLLM's defaults, and
    every verdict on how sure we are; the command comes from the stored spec that trial was
    measured under."""
    ranked, notes = tr.ranked(points), tr.miss_notes(points)
    if not ranked:
        held = "".join(f"; {note}" for note in notes)
        raise UserError(f"study {study_name!r} has no complete feasible trial yet{held}")
    top = ranked[0]
    spec = specs.spec_for(study, top)
    lines = [
        f"# best trial {top.number} of study {study_name}"
        + (" (SIMULATED: figures are predictions, not measurements)" if top.simulated else ""),
        *(f"# {line}" for line in headline_lines(top, points, spec)),
    ]
    comparison = against_defaults(spec, top, tr.baseline_of(points))
    lines += [f"# {line}" for line in comparison.lines()]
    found = verdicts(top, points, spec, study, ranked=ranked, notes=notes)
    lines += [f"# {v.text}" for v in found]
    lines.append(shell_command(spec, top.params))
    return "\n".join(lines)


def headline_lines(top: TrialPoint, points: Sequence[TrialPoint], spec: StudySpec) -> list[str]:
    """The score and the headline figures: capacity mode's capacity first; a mix's scenarios
    each with their own score and figures."""
    score = f"score {top.score:+.3f} ({reference_words(top, points)} = 0, lower is better)"
    found = top.record.capacity
    if top.record.scenarios:
        how = "the worst" if spec.objective.aggregate == "worst" else "the weighted mean"
        head = f"{score}: {how} of the scenarios' scores"
        if top.capacity_rps is not None:
            head = f"capacity {words.rate(top.capacity_rps, top.capacity_capped)} over the " + (
                f"scenarios within the SLOs; {head}"
            )
        return [head, *(f"  {part}" for part in scenario_parts(top.record))]
    if found is not None:
        return [
            f"capacity {words.rate(found.capacity_rps, found.capped)} within the SLOs; {score}",
            f"{at_rate(found)}: " + ", ".join(headline_words(top.metrics)),
        ]
    return [f"{score}; " + ", ".join(headline_words(top.metrics))]
