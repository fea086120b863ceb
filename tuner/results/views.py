"""Presentation of a stored study: the trial table (`tuner trials`; rich, pandas).

Every figure is read through `tuner.trial` (`TrialPoint`, `StudyRecord`); nothing
here decides what a trial means. `tuner best`'s words are `tuner.results.best`'s.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.console import Console

from tuner import trial as tr
from tuner.fidelity.bands import Bands, with_bands
from tuner.results.table import Column, flag_alias, print_table
from tuner.spec.figures import PARTIAL_NOTE, figure, partial_figure
from tuner.spec.metric_keys import (
    HEADLINE_LATENCIES,
    HEADLINE_METRICS,
    headline_words,
    metric_label,
)
from tuner.trial import StudyRecord, TrialPoint, specs, words


def trials_frame(points: Sequence[TrialPoint], study: StudyRecord | None = None) -> pd.DataFrame:
    """One row per trial: number, state, parameters, headline metrics, score, failure; and
    the spec it ran under, when the study has run under more than one."""
    study = study or StudyRecord()
    spec_ids = {specs.trial_spec_id(study, p) for p in points}
    capacity = tr.have_capacities(points)
    scenarios = list(dict.fromkeys(n for p in points for n in p.scenario_names))
    # `search.fidelity: multi`: the screen's prediction beside each measured figure
    screened = any(p.predictions for p in points)
    # a config `--confirm` re-measured: each row its own run's figures, and the config's first
    # trial its figures pooled over its runs too, as every result gives them (`config_figures`)
    confirmed = tr.config_figures(points)
    rows: list[dict[str, object]] = []
    for p in points:
        row: dict[str, object] = {"number": p.number, "state": _state(p)}
        row.update({f"param_{k}": v for k, v in p.params.items()})
        predicted, r = p.predictions, p.record
        for m in HEADLINE_METRICS:
            row[m] = p.metrics.get(m)
            if screened:
                row[tr.PREDICTED_PREFIX + m] = predicted.get(m)
        if capacity:
            row[tr.CAPACITY_RPS] = p.capacity_rps
            row["capacity_capped"] = p.capacity_capped  # at least that: met the SLOs at max_rps
            row.update(_interval_row("", p.capacity_interval))
            row["rate_steps"] = len(p.rate_steps) or None
        for name in scenarios:  # each scenario's own score and headline figures
            entry = p.scenario(name)
            row[f"{name}:score"] = entry.score if entry is not None else None
            found = p.scenario_metrics(name)
            row.update({f"{name}:{m}": found.get(m) for m in HEADLINE_LATENCIES})
            if (search := p.searches().get(name)) is not None:
                row[f"{name}:{tr.CAPACITY_RPS}"] = search.capacity_rps
                row[f"{name}:capacity_capped"] = search.capped
                row.update(_interval_row(f"{name}:", search.interval))
        row["score"] = p.score
        if confirmed:
            pooled = confirmed.get(p.number)
            row["pooled_score"] = pooled.score if pooled is not None else None
            for m in HEADLINE_METRICS:
                row[POOLED + m] = pooled.metrics.get(m) if pooled is not None else None
            row["rerun_of"] = p.confirm_of
        if screened:
            row[tr.PREDICTED_SCORE] = r.predicted_score
        row["engine_s"] = r.engine_s
        split = r.engine_split_s  # launched: start-up and workload seconds, summing to engine_s
        row["startup_s"], row["workload_s"] = split if split is not None else (None, None)
        if r.startup_phases is not None:  # as the engine's log told it (a column when any)
            row[tr.STARTUP_PHASES] = r.startup_phases.words()
        row["baseline"] = p.baseline
        row["reused_from"] = r.reused_from
        row["partial"] = r.stopped_figures  # the figures cover the requests done by a stop
        if r.ruled_out and r.skip_prediction is not None:  # never launched: what it saved
            row["saved_engine_s"] = r.skip_prediction.engine_s
        row["failure"] = _failure(p)
        if len(spec_ids) > 1:
            row["spec"] = specs.trial_spec_id(study, p)
        rows.append(row)
    return pd.DataFrame(rows)


def _failure(p: TrialPoint) -> str | None:
    """What stopped a trial, or what it broke, in words (its row's `failure`): ruled out by a
    prediction, queued or stopped under another judging, failed, its broken constraints; and
    a measurement with a warm prefix cache."""
    r = p.record
    failure: str | None
    if r.ruled_out:  # on a prediction judged as the study judged then (the fourth round)
        under = "ruled out under the previous SLOs/objective: " if p.stale_stop else ""
        failure = f"{under}{r.pruned_reason or ''}" if under else r.pruned_reason
    elif p.stale_queue:
        failure = (
            "queued to run again under SLOs/objective the study file no longer has: not "
            "run unless they come back"
        )
    elif p.status == "pruned":
        under = " under the previous SLOs/objective" if p.stale_stop else ""
        failure = f"stopped early{under}: {r.pruned_reason or ''}"
    elif p.failure_kind:
        failure = p.failure
    else:
        broken = p.broken_constraints
        failure = f"breaks {', '.join(broken)}" if broken else ""
    if p.warm_runs:  # docs/metrics.md, "Every run cold"
        failure = "; ".join(filter(None, [failure, warm_words(p)]))
    return failure


def warm_words(p: TrialPoint) -> str:
    """A trial measured with a warm prefix cache, in words: how many runs, the first one."""
    runs = p.warm_runs
    more = f" ({len(runs)} runs)" if len(runs) > 1 else ""
    return f"warm prefix cache{more}: {runs[0].words()}"


def trials_records(
    points: Sequence[TrialPoint], study: StudyRecord | None = None, bands: Bands | None = None
) -> list[dict[str, object]]:
    """`tuner trials --format json`: the table's rows, each capacity trial's latency–load
    points (`rate_steps`) as a list of objects, every figure of each rate run (the table and
    the CSV show how many there were). `bands`: a simulated study's, each figure `m` with
    `m_band: [low, high]` beside it."""
    rows: list[dict[str, object]] = json.loads(
        trials_frame(points, study).to_json(orient="records")
    )
    for p, row in zip(points, rows, strict=True):  # the frame has one row per point, in order
        if "rate_steps" in row:
            row["rate_steps"] = [s.encode() for s in p.rate_steps]
        if tr.STARTUP_PHASES in row:  # each phase's figure, as stored
            phases = p.record.startup_phases
            row[tr.STARTUP_PHASES] = phases.encode() if phases is not None else None
    return [with_bands(row, bands) for row in rows]


def _state(p: TrialPoint) -> str:
    """Optuna's state, in words that match the row and the counts (`tuner.trial.outcome`): a
    completed trial that measured nothing is not COMPLETE (refused before launch on a
    prediction, or failed), nor is one that broke a constraint, nor one never launched."""
    found = tr.outcome(p)
    if found == "infeasible":
        return "INFEASIBLE"
    if p.stale_queue:
        return "WAITING (not taken)"
    if found == "ruled-out":
        return "RULED OUT (predicted)"
    if found == "refused":
        return "REFUSED (predicted)"
    if p.state == "COMPLETE" and found == "failed":
        return "FAILED"
    return p.state


def _interval_row(prefix: str, bounds: tuple[float, float | None] | None) -> dict[str, object]:
    """A capacity's interval as a row's `capacity_rps_low` / `capacity_rps_high` (None:
    stored without one; high None: no rate broke an SLO for sure)."""
    low, high = bounds if bounds is not None else (None, None)
    return {f"{prefix}{CAPACITY_LOW}": low, f"{prefix}{CAPACITY_HIGH}": high}


def _bounds(row: pd.Series, col: str) -> tuple[float, float | None] | None:
    """The interval of a row's capacity cell, as `words.rate` reads it."""
    low = row.get(col + "_low")
    high = row.get(col + "_high")
    if low is None or pd.isna(low):
        return None
    return float(low), None if high is None or pd.isna(high) else float(high)


def _capped_cell(row: pd.Series, col: str) -> bool:
    """Whether a capacity cell is a lower bound (its search met the SLOs at max_rps)."""
    flag = row.get(col.removesuffix(tr.CAPACITY_RPS) + "capacity_capped")
    return bool(flag) and not pd.isna(flag)


# shown otherwise: a mark, a note
CAPACITY_LOW = tr.CAPACITY_RPS + "_low"  # a capacity's interval, req/s (`_interval_row`)
CAPACITY_HIGH = tr.CAPACITY_RPS + "_high"
_HIDDEN = ("baseline", "reused_from", "failure", "partial", "rerun_of", "pooled_score")
POOLED = "pooled_"  # a confirmed config's figures pooled over its runs (a note under the table)


# The time a trial took or saved: left out first on a narrow table (with the screen's predictions)
_TIME_SPENT = (
    "engine_s",
    "startup_s",
    "workload_s",
    "saved_engine_s",
    "rate_steps",
    tr.STARTUP_PHASES,
)


def _header(col: str) -> tuple[str, str, bool]:
    """A frame column's header, its short alias, and whether a narrow table may leave it out
    (the figures a screen predicted, the time spent, each scenario's own figures)."""
    if col.startswith("param_"):
        name = col.removeprefix("param_")
        return name, flag_alias(name), False
    scenario, _, key = col.rpartition(":")
    predicted = key.startswith(tr.PREDICTED_PREFIX)
    label = metric_label(key.removeprefix(tr.PREDICTED_PREFIX))
    label = f"predicted {label}" if predicted else label
    if scenario:
        return f"{scenario}: {label}", "", True
    return label.replace("_", " "), "", predicted or key in _TIME_SPENT


def _cell(row: pd.Series, col: str) -> str:
    text = _figure_cell(row, col)
    return partial_figure(text, bool(row.get("partial")) and tr.is_metric(col.rpartition(":")[2]))


def _figure_cell(row: pd.Series, col: str) -> str:
    v = row[col]
    if col.endswith(tr.CAPACITY_RPS) and _capped_cell(row, col):
        return words.rate(v, True).removesuffix(f" {words.CAPPED_NOTE}")
    if col.endswith(tr.CAPACITY_RPS) and not pd.isna(v):
        return figure(v) + words.interval(_bounds(row, col))
    if col.endswith("score"):
        return figure(None if pd.isna(v) else v, 3, sign=True)
    if col == "engine_s":
        return figure(None if pd.isna(v) else v, 0)
    if isinstance(v, float) and pd.isna(v):
        return ""
    return figure(v)


def print_trials_table(
    frame: pd.DataFrame,
    console: Console | None = None,
    *,
    wide: bool = False,
    counts: str | None = None,
) -> None:
    """The trials as a table that fits the console (`tuner.results.table`); each failure
    reason whole under it (`wide`: in a last column); `counts`: the trials counted by how
    they ended (`tuner.trial.tally_line`), the last note."""
    console = console or Console()
    rows = [row for _, row in frame.iterrows()]
    mark = " (baseline)" if wide else "*"
    states = [str(r["state"]) for r in rows]
    cols = [
        Column("#", [f"{r['number']}{mark if r['baseline'] else ''}" for r in rows], text=True),
        Column("state", states, text=True, short_cells=[_short_state(x) for x in states]),
    ]
    for col in frame.columns:
        hidden = col in ("number", "state", "spec", *_HIDDEN) or col.startswith(POOLED)
        if hidden or col.endswith(("capacity_capped", CAPACITY_LOW, CAPACITY_HIGH)):
            continue
        header, short, optional = _header(col)
        cells = [_cell(r, col) for r in rows]
        spare = col.startswith("param_")  # left out after the optional ones, rightmost first
        cols.append(Column(header, cells, short=short, optional=optional, spare=spare))
    if "spec" in frame.columns:
        cols.append(Column("spec", [str(r["spec"]) for r in rows], text=True))
    notes = []
    if any(r["baseline"] for r in rows) and not wide:
        notes.append("* the baseline: vLLM's defaults")
    notes += _pooled_notes(frame, rows) + interval_notes(frame)
    if any(r.get("partial") for r in rows):
        notes.append(PARTIAL_NOTE)
    failures = [(r["number"], r["failure"]) for r in rows if r["failure"]]
    if wide:
        cols.append(Column("reused from", [figure(_int(r["reused_from"])) for r in rows]))
        cols.append(Column("failure", [str(r["failure"] or "") for r in rows], text=True))
    else:
        notes += [f"trial {number}: {why}" for number, why in failures]
    print_table(console, cols, wide=wide, notes=[*notes, *([counts] if counts else [])])


def interval_notes(frame: pd.DataFrame) -> list[str]:
    """What a capacity cell's `(0.8-?)` means, once, when a cell shows one (the walk of issue
    49/50: `tuner trials` printed `0.07125 (0-?)` with no word on it)."""
    lows = [c for c in frame.columns if str(c).endswith(CAPACITY_LOW)]
    return [words.INTERVAL_NOTE] if any(frame[c].notna().any() for c in lows) else []


def _pooled_notes(frame: pd.DataFrame, rows: list[pd.Series]) -> list[str]:
    """Each config `--confirm` re-measured: its re-runs, and its figures pooled over them,
    the ones `tuner best`, `export` and `pareto` give it (`tuner.trial.config_figures`)."""
    if "rerun_of" not in frame.columns:
        return []
    again: dict[int, list[pd.Series]] = {}
    for r in rows:
        of = _int(r["rerun_of"])
        if of is not None:
            again.setdefault(of, []).append(r)
    out = []
    for r in rows:
        if r["number"] in again and not pd.isna(r["pooled_score"]):
            numbers = ", ".join(str(x["number"]) for x in again[r["number"]])
            figures = {m: r[POOLED + m] for m in HEADLINE_METRICS if not pd.isna(r[POOLED + m])}
            out.append(
                f"trial {r['number']}, re-run by --confirm as {numbers}: its figures pooled "
                "over its runs, as best, export and pareto give them: score "
                f"{figure(r['pooled_score'], 3, sign=True)}, {', '.join(headline_words(figures))}"
            )
    return out


def _short_state(state: str) -> str:
    """A state without its qualifier (`RULED OUT (predicted)` -> `RULED OUT`), for a narrow
    table: the legend spells it out, and the note under the table says why."""
    return state.split(" (")[0]


def _int(value: Any) -> int | None:
    return None if value is None or pd.isna(value) else int(value)
