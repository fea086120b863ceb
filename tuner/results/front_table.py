"""The Pareto front as `tuner pareto` prints it: a table that fits the terminal, or JSON or
CSV text, one row per config (its `--confirm` re-runs pooled into it). The front itself is
`tuner.results.pareto`'s (pure)."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console

from tuner.results.table import Column, flag_alias, print_table
from tuner.spec.figures import exact, exact_all, figure
from tuner.spec.metric_keys import HEADLINE_METRICS, Direction, metric_label
from tuner.trial import Config, words


def front_text(front: list[Config], fmt: str) -> str:
    """JSON: a list of {trial, runs, pooled_trials, params, metrics}. CSV: one row per
    config, its trial and runs, params then metrics. `runs`: the measurements pooled."""
    rows = [
        {
            "trial": c.point.number,
            "runs": len(c.runs),
            "pooled_trials": list(c.runs),
            "params": c.point.params,
            "metrics": c.point.metrics,
        }
        for c in front
    ]
    if fmt == "json":
        return json.dumps(exact_all(rows), indent=2) + "\n"
    params = list(dict.fromkeys(k for c in front for k in c.point.params))
    metrics = sorted({k for c in front for k in c.point.metrics})
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["trial", "runs", *params, *metrics])
    for c in front:
        p = c.point
        writer.writerow(
            [
                p.number,
                len(c.runs),
                *(exact(p.params.get(k, "")) for k in params),
                *(exact(p.metrics.get(k, "")) for k in metrics),
            ]
        )
    return buf.getvalue()


def print_front(
    front: list[Config],
    objs: list[tuple[str, Direction]],
    study_name: str,
    n_feasible: int,
    simulated: bool,
    scenario: str | None = None,
    *,
    wide: bool = False,
    at: float | None = None,
) -> None:
    """`at`: capacity mode, the front is of the configs that serve this capacity (req/s)."""
    axes = "; ".join(
        f"{metric_label(n)}, {'lower' if d == 'minimize' else 'higher'} is better" for n, d in objs
    )
    of = study_name if scenario is None else f"{study_name}, scenario {scenario} (its own figures)"
    title = [f"Pareto front of {of}: {len(front)} of {n_feasible} feasible configs"]
    if at is not None:  # with its interval when the front's configs share one
        shared = {c.point.capacity_interval for c in front}
        bounds = shared.pop() if len(shared) == 1 else None
        title[0] += f", among those with the highest capacity, {words.rate(at, False, bounds)}"
    title.append(f"objectives: {axes}")
    if at is not None:
        title.append("each trial's latencies are at its own capacity rate (capacity mode)")
    if simulated:
        title.append("SIMULATED study: figures are predictions, not measurements")
    mark = " (baseline)" if wide else "*"
    points = [c.point for c in front]
    params = list(dict.fromkeys(k for p in points for k in p.params))
    metrics = list(dict.fromkeys([*(n for n, _ in objs), *HEADLINE_METRICS]))
    cols = [Column("trial", [f"{p.number}{mark if p.baseline else ''}" for p in points], text=True)]
    cols.append(Column("runs", [str(len(c.runs)) for c in front]))
    cols += [
        Column(k, [figure(p.params.get(k)) for p in points], short=flag_alias(k), spare=True)
        for k in params
    ]
    cols += [Column(metric_label(m), [figure(p.metrics.get(m)) for p in points]) for m in metrics]
    cols.append(Column("score", [figure(p.score, 3, sign=True) for p in points]))
    marked = any(p.baseline for p in points) and not wide
    notes = ["* the baseline: vLLM's defaults"] if marked else []
    if any(len(c.runs) > 1 for c in front):
        notes.append(
            "runs: the config's measurements pooled in its row (--confirm re-runs): "
            "mean score, geometric-mean figures"
        )
    print_table(Console(), cols, wide=wide, title=title, notes=notes)
