"""The Pareto plot's data, computed once for both renderers (plotly and the matplotlib PNG).

As Optuna's `visualization/_pareto_front.py` builds one `_ParetoFrontInfo` and hands it to
either backend, `pareto_front_info` chooses the axes, the plotted trials, the front, the point
labels, the SLO lines and the log scales; tuner/results/report/plots.py only draws them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.results.pareto import front_of
from tuner.spec.slo import parse_slo
from tuner.trial import TrialPoint

TPOT = "mean_tpot_ms"
LOG_SPAN = 10.0


def ttft_axis(points: Sequence[TrialPoint]) -> str:
    """P99 TTFT, or mean TTFT for a workload that did not ask for the 99th percentile."""
    stored = {m for p in points for m in p.metrics}
    return "p99_ttft_ms" if "p99_ttft_ms" in stored else "mean_ttft_ms"


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


@dataclass(frozen=True)
class SloLine:
    """One SLO limit on an axis of the Pareto plot."""

    axis: str  # "x" or "y"
    value: float
    label: str  # "SLO p99_ttft_ms<=2000"


@dataclass(frozen=True)
class ParetoFrontInfo:
    """Everything the Pareto plot shows, computed once; the plotly and PNG renderers read only
    this (as Optuna's `_ParetoFrontInfo` in `visualization/_pareto_front.py`)."""

    x: str  # metric on the x axis (P99 or mean TTFT)
    y: str  # metric on the y axis (mean TPOT)
    feasible: tuple[TrialPoint, ...]  # feasible trials with both metrics, in trial order
    infeasible: tuple[TrialPoint, ...]  # measured but breaking a constraint
    front: tuple[TrialPoint, ...]  # the feasible front, best first on x
    feasible_labels: tuple[str, ...]  # one per feasible trial ("" when sharing a spot)
    infeasible_labels: tuple[str, ...]
    baselines: tuple[TrialPoint, ...]  # plotted trials marked baseline (normally one)
    slo_lines: tuple[SloLine, ...]
    failed: tuple[TrialPoint, ...]  # no measurement: listed, not plotted
    log_x: bool
    log_y: bool
    simulated: bool
    scenario: str | None = None  # one scenario's figures (a mix), None: the trials' own

    @property
    def front_numbers(self) -> frozenset[int]:
        return frozenset(p.number for p in self.front)

    def xy(self, p: TrialPoint) -> tuple[float, float]:
        return p.metrics[self.x], p.metrics[self.y]


def pareto_front_info(
    points: Sequence[TrialPoint],
    slo_lines: Sequence[str] = (),
    simulated: bool = False,
    scenario: str | None = None,
) -> ParetoFrontInfo:
    """The Pareto plot's data: axes, plotted trials, front, labels, SLO lines, log scales;
    `scenario`: the points are that scenario's (`tuner.trial.for_scenario`), the title says so."""
    x, y = ttft_axis(points), TPOT

    def plotted(status: str) -> tuple[TrialPoint, ...]:
        return tuple(p for p in points if p.status == status and x in p.metrics and y in p.metrics)

    feasible, infeasible = plotted("feasible"), plotted("infeasible")
    shown = (*feasible, *infeasible)
    limits = tuple(
        SloLine("x" if limit.metric == x else "y", limit.value, f"SLO {limit}")
        for text in slo_lines
        for limit in parse_slo(text)
        if limit.metric in (x, y)
    )
    return ParetoFrontInfo(
        x=x,
        y=y,
        feasible=feasible,
        infeasible=infeasible,
        front=tuple(front_of(feasible, [(x, "minimize"), (y, "minimize")])),
        feasible_labels=tuple(_labels(feasible, x, y)),
        infeasible_labels=tuple(_labels(infeasible, x, y)),
        baselines=tuple(p for p in shown if p.baseline),
        slo_lines=limits,
        failed=tuple(p for p in points if p.status == "failed"),
        log_x=_log_scale([p.metrics[x] for p in shown]),
        log_y=_log_scale([p.metrics[y] for p in shown]),
        simulated=simulated,
        scenario=scenario,
    )
