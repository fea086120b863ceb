"""A config against vLLM's defaults (the baseline trial), computed once (pure): the change a
config makes on the headline metrics, and everything that got worse.

`against_defaults` compares the chosen trial with the measured baseline on the study's headline
metrics (`HEADLINE_METRICS`, then any other metric the objective weighs or optimises) and, in
capacity mode, on the capacity alone (the latencies at capacity were measured at different
rates, so they do not compare); a scenario mix per scenario, each against the baseline's same
scenario. `tuner best`, every `tuner export` format and the report's "What to deploy" render the
one `DefaultsComparison` (as `report.front.ParetoFrontInfo` is computed once and drawn twice):

    p99 TTFT 3184 → 3313 ms (+4 %), mean TPOT 201.7 → 159.1 ms (−21 %),
    output 87.7 → 87.2 tok/s (−1 %)

Everything that got worse against vLLM's defaults, not only the weighted metrics: the change
above states the headline metrics; a config can win on them and lose elsewhere (the demo's
best: mean TPOT −21 %, median ITL 41 → 241 ms, because every decode step now carries a
prefill chunk). `worse_than_defaults` lists every stored metric of the chosen trial that moved
the wrong way:

- **clearly worse**: both trials carry a 95 % bootstrap interval for it and the interval of the
  difference lies wholly on the worse side: `objective.clearly_better` with the roles swapped
  (the defaults clearly better than the trial), the one rule every verdict uses;
- **worse, no interval stored**: a metric the run measured without an interval
  (`measure.metrics.CI_METRICS` names the ones with one) that moved the wrong way by
  `NO_INTERVAL_WORSE` or more; nothing can say whether that is luck, so it is labelled so.

Spread figures (`std_*`) are left out (no direction is better), and so is capacity mode (each
config's latencies were measured at its own rate, so they do not compare).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.measure.mixes import objective_of
from tuner.measure.objective import clearly_better
from tuner.spec.metric_keys import direction, metric_words
from tuner.spec.study import StudySpec
from tuner.trial import CAPACITY_RPS, CapacityResult, TrialPoint
from tuner.trial.words import CAPPED_NOTE

MINUS = "\u2212"  # "−21 %": a minus sign, not a hyphen
# A figure with no interval is listed when it got this much worse (25 %: beyond the run-to-run
# spread of 2-core boxes, up to 25 % on identical runs, docs/objective.md "Noise").
NO_INTERVAL_WORSE = 0.25


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
    names = objective_of(spec).stated_metrics()
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


@dataclass(frozen=True)
class Worse:
    """One metric the trial is worse on than the defaults, with the two intervals if stored."""

    change: Change
    ci: tuple[float, float] | None  # the trial's
    base_ci: tuple[float, float] | None  # the defaults'

    @property
    def clearly(self) -> bool:
        return self.ci is not None and self.base_ci is not None

    def words(self) -> str:
        """`median ITL 41 → 241 ms (+488 %; CI 220–260 against 38–44)`."""
        text = self.change.words()
        if self.ci is not None and self.base_ci is not None:
            lo, hi = self.ci
            blo, bhi = self.base_ci
            note = f"; CI {plain(lo)}–{plain(hi)} against {plain(blo)}–{plain(bhi)}"
        else:
            note = "; no interval stored"
        return text[:-1] + note + ")"


def worse_than_defaults(
    spec: StudySpec, point: TrialPoint, baseline: TrialPoint | None
) -> tuple[Worse, ...]:
    """Every stored metric on which `point` is worse than the baseline: clearly (by the
    intervals), or by `NO_INTERVAL_WORSE` or more where no interval was stored."""
    if baseline is None or baseline.number == point.number:
        return ()
    if not objective_of(spec).figures_against_baseline:
        return ()
    out = []
    for name, after in point.metrics.items():
        before = baseline.metrics.get(name)
        if before is None or direction(name) is None or name.startswith("std_"):
            continue
        change = Change(name, before, after)
        if change.better is not False:
            continue
        ci, base_ci = point.ci(name), baseline.ci(name)
        if ci is not None and base_ci is not None:
            clear = clearly_better(
                {name: base_ci}, {name: ci}, {name: 1.0}, baseline.metrics, point.metrics
            )
            if clear:
                out.append(Worse(change, ci, base_ci))
        elif change.percent is not None and abs(change.percent) >= NO_INTERVAL_WORSE * 100:
            out.append(Worse(change, None, None))
    return tuple(sorted(out, key=lambda w: (not w.clearly, w.change.metric)))


def worse_lines(spec: StudySpec, point: TrialPoint, baseline: TrialPoint | None) -> list[str]:
    """In words, one line; or a line saying nothing got clearly worse;
    nothing where no comparison is made (no baseline, the baseline itself, capacity mode)."""
    found = worse_than_defaults(spec, point, baseline)
    if baseline is None or baseline.number == point.number:
        return []
    if not objective_of(spec).figures_against_baseline:
        return []
    if not found:
        return [
            f"nothing stored got clearly worse than vLLM's defaults (baseline trial "
            f"{baseline.number})"
        ]
    # one line: an indented line would read as a wrapped comment's continuation (`best`)
    each = "; ".join(w.words() for w in found)
    return [f"WORSE than vLLM's defaults (baseline trial {baseline.number}): {each}"]
