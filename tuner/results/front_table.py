"""The Pareto front as `tuner pareto` prints it: a table that fits the terminal, or JSON or
CSV text, one row per config (its `--confirm` re-runs pooled into it), each metric with its
95 % interval and each config's noise group. The front itself is
`tuner.results.pareto.noise_front`'s (pure)."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console

from tuner.fidelity.bands import Bands, with_bands
from tuner.results.pareto import NoiseFront
from tuner.results.table import Column, flag_alias, print_table
from tuner.spec.figures import exact, exact_all, figure
from tuner.spec.metric_keys import HEADLINE_METRICS, Direction, metric_label
from tuner.trial import Config, words
from tuner.trial.keys import CI_SUFFIX


def json_row(c: Config, front: NoiseFront, bands: Bands | None = None) -> dict[str, object]:
    """One config of the front as `--format json` writes it: each metric followed by its
    `<metric>_ci` ([low, high] of its 95 % interval; null: none stored) and, in a simulated
    study (`bands`), its `<metric>_band`; and the trial whose noise group it joined
    (`within_noise_of`; null: it leads its own, a trade-off)."""
    p = c.point
    metrics: dict[str, object] = {}
    for name, value in p.metrics.items():
        ci = p.ci(name)
        metrics |= {name: value, name + CI_SUFFIX: list(ci) if ci is not None else None}
    return {
        "trial": p.number,
        "runs": len(c.runs),
        "pooled_trials": list(c.runs),
        "params": p.params,
        "metrics": with_bands(metrics, bands),
        "within_noise_of": front.within_noise_of(p),
    }


def front_text(
    configs: list[Config], front: NoiseFront, fmt: str, bands: Bands | None = None
) -> str:
    """JSON: a list of `json_row`s. CSV: one row per config, its trial, runs and noise group,
    params, then each metric and its interval's `<metric>_ci_low`, `<metric>_ci_high`.
    `runs`: the measurements pooled."""
    if fmt == "json":
        rows = [json_row(c, front, bands) for c in configs]
        return json.dumps(exact_all(rows), indent=2) + "\n"
    params = list(dict.fromkeys(k for c in configs for k in c.point.params))
    metrics = sorted({k for c in configs for k in c.point.metrics})
    heads = [[m, m + CI_SUFFIX + "_low", m + CI_SUFFIX + "_high"] for m in metrics]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["trial", "runs", "within_noise_of", *params, *(h for m in heads for h in m)])
    for c in configs:
        p = c.point
        cells = []
        for m in metrics:
            ci = p.ci(m)
            cells += [p.metrics.get(m, ""), *(ci if ci is not None else ("", ""))]
        noise = front.within_noise_of(p)
        writer.writerow(
            [
                p.number,
                len(c.runs),
                "" if noise is None else noise,
                *(exact(p.params.get(k, "")) for k in params),
                *(exact(v) for v in cells),
            ]
        )
    return buf.getvalue()


def _interval(c: Config, metric: str) -> str:
    ci = c.point.ci(metric)
    return "" if ci is None else f"{figure(ci[0])}–{figure(ci[1])}"


def print_front(
    front: list[Config],
    noise: NoiseFront,
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
    if len(front) > 1:
        title.append(_groups_line(noise.groups, len(front)))
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
    on_axes = {n for n, _ in objs}
    for m in metrics:
        cols.append(Column(metric_label(m), [figure(p.metrics.get(m)) for p in points]))
        if m in on_axes:
            cells = [_interval(c, m) for c in front]
            cols.append(Column("95% CI", cells))  # of the column to its left
    near = [noise.within_noise_of(p) for p in points]
    cols.append(Column("within noise of", ["" if n is None else f"trial {n}" for n in near]))
    cols.append(Column("score", [figure(p.score, 3, sign=True) for p in points]))
    marked = any(p.baseline for p in points) and not wide
    notes = ["* the baseline: vLLM's defaults"] if marked else []
    if any(len(c.runs) > 1 for c in front):
        notes.append(
            "runs: the config's measurements pooled in its row (--confirm re-runs): "
            "mean score, geometric-mean figures"
        )
    notes.append(
        "95% CI: the interval of each figure on the front's axes; within noise of: no axis's "
        "difference from that trial's figures is clear at 95%, so it is not a trade-off of "
        "its own (docs/results.md, `tuner pareto`)"
    )
    if noise.near:
        shown = ", ".join(str(p.number) for p in noise.near[:8])
        more = f" and {len(noise.near) - 8} more" if len(noise.near) > 8 else ""
        notes.append(f"off the front but within noise of a config on it: trial(s) {shown}{more}")
    print_table(Console(), cols, wide=wide, title=title, notes=notes)


def _groups_line(groups: int, n: int) -> str:
    """How many trade-offs the 95 % intervals tell apart among the front's `n` configs."""
    if groups == n:
        return "by their 95% intervals, every config here is a trade-off of its own"
    rest = "the other is" if n - groups == 1 else f"the other {n - groups} are"
    return (
        f"by their 95% intervals, {groups} of these {n} configs "
        f"{'is a trade-off' if groups == 1 else 'are trade-offs'} of their own; "
        f"{rest} within noise of one"
    )
