"""The change a config makes against vLLM's defaults (the baseline trial), computed once (pure).

`against_defaults` compares the chosen trial with the measured baseline on the study's headline
metrics (`HEADLINE_METRICS`, then any other metric the objective weighs or optimises) and, in
capacity mode, on the capacity alone (the latencies at capacity were measured at different
rates, so they do not compare); a scenario mix per scenario, each against the baseline's same
scenario. `tuner best`, every `tuner export` format and the report's "What to deploy" render the
one `DefaultsComparison` (as `report.front.ParetoFrontInfo` is computed once and drawn twice):

    p99 TTFT 3184 → 3313 ms (+4 %), mean TPOT 201.7 → 159.1 ms (−21 %),
    output 87.7 → 87.2 tok/s (−1 %)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.measure.mixes import objective_of
from tuner.spec.metric_keys import direction, metric_words
from tuner.spec.study import StudySpec
from tuner.trial import CAPACITY_RPS, CapacityResult, TrialPoint
from tuner.trial.words import CAPPED_NOTE

MINUS = "\u2212"  # "−21 %": a minus sign, not a hyphen


def plain(value: float) -> str:
    """Four significant figures in plain decimals (no exponent, no trailing zeros):
    3184.2 → "3184", 201.66 → "201.7", 87.70 → "87.7", 12345.6 → "12346"."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, 3 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class Change:
    """One metric, the baseline's figure against the trial's. A capped capacity (`*_capped`)
    is a lower bound."""

    metric: str
    before: float  # the baseline's
    after: float  # the trial's
    before_capped: bool = False
    after_capped: bool = False

    @property
    def percent(self) -> float | None:
        """after / before − 1, in percent (None: the baseline's figure is 0)."""
        return (self.after / self.before - 1) * 100 if self.before else None

    @property
    def better(self) -> bool | None:
        """Whether the trial is better on this metric (None: equal, or no direction)."""
        way = "maximize" if self.metric == CAPACITY_RPS else direction(self.metric)
        if way is None or self.after == self.before:
            return None
        return (self.after > self.before) == (way == "maximize")

    def _percent_words(self) -> str:
        if self.before_capped and self.after_capped:
            return "both at the highest rate allowed"
        pct = self.percent
        if pct is None:
            return "the baseline's is 0"
        shown = f"{abs(pct):.0f}" if abs(pct) >= 1 or pct == 0 else f"{abs(pct):.1f}"
        sign = "±" if shown.strip("0.") == "" else (MINUS if pct < 0 else "+")
        more = " or more" if self.after_capped else " or less" if self.before_capped else ""
        return f"{sign}{shown} %{more}"

    def words(self) -> str:
        """`mean TPOT 201.7 → 159.1 ms (−21 %)`; `capacity 1.2 → ≥ 2 req/s (+67 % or more;
        ≥: the highest rate allowed)`."""
        label, unit = metric_words(self.metric)
        before = ("≥ " if self.before_capped else "") + plain(self.before)
        after = ("≥ " if self.after_capped else "") + plain(self.after)
        bound = self.before_capped != self.after_capped  # both: the percent words say so
        capped = f"; ≥: {CAPPED_NOTE.strip('()')}" if bound else ""
        return f"{label} {before} → {after}{unit} ({self._percent_words()}{capped})"

    def as_json(self) -> dict[str, object]:
        label, unit = metric_words(self.metric)
        return {
            "metric": self.metric,
            "label": label,
            "unit": unit.strip(),
            "baseline": self.before,
            "value": self.after,
            "change_percent": self.percent,
            "better": self.better,
            "baseline_lower_bound": self.before_capped,
            "value_lower_bound": self.after_capped,
        }


@dataclass(frozen=True)
class DefaultsComparison:
    """The chosen trial against vLLM's defaults: one row of changes for a single workload
    (scenario None), or one per scenario of a mix."""

    trial: int
    baseline: int | None  # the baseline trial; None: vLLM's defaults were not measured
    rows: tuple[tuple[str | None, tuple[Change, ...]], ...] = ()

    @property
    def is_baseline(self) -> bool:
        return self.baseline == self.trial

    def lines(self) -> list[str]:
        """In words: a head line, then one line per scenario of a mix."""
        if self.baseline is None:
            return [
                "against vLLM's defaults: not measured (the baseline trial failed or is "
                "missing), so no change can be stated"
            ]
        head = f"against vLLM's defaults (baseline trial {self.baseline})"
        if self.is_baseline:
            return [f"{head}: this is the baseline itself, no change"]
        if len(self.rows) == 1 and self.rows[0][0] is None:
            return [f"{head}: {_joined(self.rows[0][1])}"]
        return [f"{head}, per scenario:"] + [
            f"  {name}: {_joined(changes)}" for name, changes in self.rows
        ]

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"trial": self.trial, "baseline_trial": self.baseline}
        scenarios: dict[str, object] = {}
        for name, changes in self.rows:
            found = [c.as_json() for c in changes]
            if name is None:
                out["changes"] = found
            else:
                scenarios[name] = found
        if scenarios:
            out["scenarios"] = scenarios
        out["text"] = self.lines()
        return out


def _joined(changes: tuple[Change, ...]) -> str:
    return ", ".join(c.words() for c in changes) or "no figure in common"


def compared_metrics(spec: StudySpec) -> list[str]:
    """The metrics a change is stated on: capacity mode's capacity; else the headline metrics,
    then any other the objective weighs (scalar) or optimises (multi)."""
    return objective_of(spec).stated_metrics()


def _changes(
    names: list[str],
    before: dict[str, float],
    after: dict[str, float],
    caps: tuple[CapacityResult | None, CapacityResult | None],
) -> tuple[Change, ...]:
    out = []
    for name in names:
        if name == CAPACITY_RPS:
            base, mine = caps
            if base is not None and mine is not None:
                out.append(
                    Change(name, base.capacity_rps, mine.capacity_rps, base.capped, mine.capped)
                )
        elif name in before and name in after:
            out.append(Change(name, before[name], after[name]))
    return tuple(out)


def against_defaults(
    spec: StudySpec, point: TrialPoint, baseline: TrialPoint | None
) -> DefaultsComparison:
    """The change `point` makes against the baseline trial, per headline metric (per scenario
    in a mix)."""
    if baseline is None:
        return DefaultsComparison(point.number, None)
    names = compared_metrics(spec)
    if point.number == baseline.number:
        return DefaultsComparison(point.number, baseline.number)
    rows: list[tuple[str | None, tuple[Change, ...]]] = []
    for name in point.scenario_names:
        mine, theirs = point.scenario(name), baseline.scenario(name)
        if mine is None or theirs is None:
            continue
        before, after = baseline.scenario_metrics(name), point.scenario_metrics(name)
        rows.append((name, _changes(names, before, after, (theirs.capacity, mine.capacity))))
    if not rows:
        caps = (baseline.record.capacity, point.record.capacity)
        rows.append((None, _changes(names, baseline.metrics, point.metrics, caps)))
    return DefaultsComparison(point.number, baseline.number, tuple(rows))
