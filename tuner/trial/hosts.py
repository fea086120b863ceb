"""Hosts' baselines side by side, and the hosts whose baseline differs beyond the noise.

Each host measures vLLM's defaults once (`tuner.run.loop`), and its trials' scores are relative
to that baseline. Two boxes of one model can still differ (GPU clocks, PCIe, drivers): when
their baselines' 95 % intervals do not overlap on a metric, the difference is not noise, and
an operator should not compare the two hosts' raw figures (docs/scale-out.md, "Hosts").
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.trial.point import TrialPoint
from tuner.trial.ranking import host_baselines

SHOWN = (*HEADLINE_METRICS, "mean_ttft_ms")  # the headline figures, and the mean TTFT


def _cell(p: TrialPoint, metric: str) -> str:
    value = p.metrics.get(metric)
    if value is None:
        return "-"
    ci = p.ci(metric)
    return f"{figure(value)} [{figure(ci[0])}, {figure(ci[1])}]" if ci else figure(value)


def baseline_table(points: Sequence[TrialPoint]) -> list[str]:
    """A header and one line per host: its baseline trial and headline figures with CIs."""
    rows = host_baselines(points)
    if not rows:
        return []
    shown = [m for m in SHOWN if any(m in p.metrics for p in rows.values())]
    lines = ["baselines by host: host, trial, " + ", ".join(shown) + " (95 % CI)"]
    for host, p in rows.items():
        cells = "  ".join(f"{m} {_cell(p, m)}" for m in shown)
        lines.append(f"  {host}: trial {p.number}  {cells}")
    return lines


def apart(a: TrialPoint, b: TrialPoint) -> list[str]:
    """The metrics on which two baselines' 95 % intervals do not overlap."""
    out = []
    for metric in sorted(set(a.metrics) & set(b.metrics)):
        ca, cb = a.ci(metric), b.ci(metric)
        if ca is not None and cb is not None and (ca[1] < cb[0] or cb[1] < ca[0]):
            out.append(metric)
    return out


def differences(points: Sequence[TrialPoint]) -> list[str]:
    """One plain sentence per pair of hosts whose baselines differ beyond the noise."""
    rows = host_baselines(points)
    out = []
    for (ha, a), (hb, b) in combinations(rows.items(), 2):
        metrics = apart(a, b)
        if not metrics:
            continue
        shown = ", ".join(
            f"{m} {figure(a.metrics[m])} against {figure(b.metrics[m])}" for m in metrics[:3]
        )
        more = f" and {len(metrics) - 3} more" if len(metrics) > 3 else ""
        out.append(
            f"host {ha} and host {hb} measure vLLM's defaults differently beyond the noise "
            f"({shown}{more}; their 95 % intervals do not overlap): each host's scores are "
            "relative to its own baseline, but do not mix the two hosts' raw figures"
        )
    return out
