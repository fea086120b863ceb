"""A config against vLLM's defaults (the baseline trial), computed once (pure): the change a
config makes on the headline metrics, and everything that got worse.

What each says and how a move is judged clear: docs/results.md, "The answer in plain figures".
`against_defaults` gives the one `DefaultsComparison` (headline metrics: `HEADLINE_METRICS`,
then any other the objective weighs or optimises; capacity mode compares the capacity alone; a
scenario mix, each scenario against the baseline's); `moved` lists the `vllm bench serve`
figures that moved by `MOVED` or more, or got clearly worse, each with its clearness
(`objective.clearly_better`, the rule every verdict uses; `measure.metrics.CI_METRICS` names the
figures with an interval).

What callers may assume: both are computed once and only rendered per output (as
`report.front.ParetoFrontInfo` is computed once and drawn twice), so the comparison and the
lines of `moved_lines` read alike in `tuner best`, all of `tuner export`'s formats and the
report's deploy card.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tuner.measure.modes import Objective
from tuner.measure.objective import clearly_better
from tuner.spec.metric_keys import THROUGHPUTS, direction, metric_words, parse_latency_key
from tuner.trial import CAPACITY_RPS, CapacityResult, TrialPoint, have_capacities
from tuner.trial.words import CAPPED_NOTE

MINUS = "\u2212"  # "−21 %": a minus sign, not a hyphen
# A figure is listed when it moved this much either way (25 %: beyond the run-to-run spread
# of 2-core boxes, up to 25 % on identical runs, docs/objective.md "Noise"), clear or not.
MOVED = 0.25


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
        if pct != 0 and shown.strip("0.") == "":  # a change too small to round: never "±0.0"
            shown = "<0.1"  # beside a "clearly worse" it read as no change at all
        sign = "±" if pct == 0 else (MINUS if pct < 0 else "+")
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
    objective: Objective, point: TrialPoint, baseline: TrialPoint | None
) -> DefaultsComparison:
    """The change `point` makes against the baseline trial, per headline metric (per scenario
    in a mix)."""
    if baseline is None:
        return DefaultsComparison(point.number, None)
    names = objective.stated_metrics()
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


def _factor_words(change: Change) -> str:
    """`×6.7` for a figure that at least doubled (a percent reads badly there: +583 %), else the
    change's percent words."""
    pct = change.percent
    if pct is not None and pct >= 100 and not (change.before_capped or change.after_capped):
        return f"×{change.after / change.before:.1f}"
    return change._percent_words()


@dataclass(frozen=True)
class Moved:
    """One metric that moved against the defaults, with the two intervals if stored and whether
    the move is clear (the 95 % interval of the difference wholly on its side)."""

    change: Change
    ci: tuple[float, float] | None  # the trial's
    base_ci: tuple[float, float] | None  # the defaults'
    clearly: bool  # False also where no interval is stored

    @property
    def worse(self) -> bool:
        return self.change.better is False

    def words(self) -> str:
        """`median ITL 36.93 → 246.8 ms (×6.7; not clearly: CI 35.2–247.6 against
        36.92–37.53)`, `p99 ITL 483.5 → 251.5 ms (−48 %; no interval stored)`."""
        label, unit = metric_words(self.change.metric)
        c = self.change
        text = f"{label} {plain(c.before)} → {plain(c.after)}{unit} ({_factor_words(c)}; "
        if self.ci is None or self.base_ci is None:
            return text + "no interval stored)"
        (lo, hi), (blo, bhi) = self.ci, self.base_ci
        how = "clearly" if self.clearly else "not clearly"
        return text + f"{how}: CI {plain(lo)}–{plain(hi)} against {plain(blo)}–{plain(bhi)})"

    def as_json(self) -> dict[str, object]:
        return {
            **self.change.as_json(),
            "clearly": self.clearly,
            "ci": list(self.ci) if self.ci is not None else None,
            "baseline_ci": list(self.base_ci) if self.base_ci is not None else None,
        }


def moved_metric(name: str) -> bool:
    """A `vllm bench serve` figure `moved_from_defaults` weighs: a latency statistic (mean,
    median, a percentile; not a spread) or a throughput (request, output, total, goodput)."""
    parsed = parse_latency_key(name)
    if parsed is not None:
        return parsed.statistic != "std"
    return name in (*THROUGHPUTS, "request_goodput")


def moved(
    before: Mapping[str, float],
    after: Mapping[str, float],
    before_ci: Mapping[str, tuple[float, float]],
    after_ci: Mapping[str, tuple[float, float]],
) -> tuple[Moved, ...]:
    """Every `vllm bench serve` figure (`moved_metric`) that moved by `MOVED` or more either
    way, or clearly got worse by any amount, with whether the move is clear by the intervals
    (`objective.clearly_better`, the one rule every verdict uses). Pure: the two trials'
    figures and intervals in; worse first, then better, each by metric name."""
    out = []
    for name, value in after.items():
        base = before.get(name)
        if base is None or not moved_metric(name):
            continue
        change = Change(name, base, value)
        if change.better is None:
            continue
        ci, base_ci = after_ci.get(name), before_ci.get(name)
        clear = False
        if ci is not None and base_ci is not None:
            won, lost = ({name: ci}, after), ({name: base_ci}, before)
            first, second = (won, lost) if change.better else (lost, won)
            clear = clearly_better(first[0], second[0], {name: 1.0}, first[1], second[1])
        big = change.percent is not None and abs(change.percent) >= MOVED * 100
        if big or (clear and not change.better):
            out.append(Moved(change, ci, base_ci, clear))
    return tuple(sorted(out, key=lambda m: (not m.worse, not m.clearly, m.change.metric)))


def moved_from_defaults(point: TrialPoint, baseline: TrialPoint | None) -> tuple[Moved, ...]:
    """`moved` for `point` against the baseline trial; nothing where no comparison is made (no
    baseline, the baseline itself, capacity mode: each config's latencies at its own rate)."""
    if baseline is None or baseline.number == point.number:
        return ()
    if have_capacities((point, baseline)):  # each trial's figures at its own rate
        return ()
    names = [n for n in point.metrics if moved_metric(n)]
    return moved(baseline.metrics, point.metrics, baseline.cis(names), point.cis(names))


def moved_lines(found: Sequence[Moved], baseline: int) -> list[str]:
    """In words: one line for what got worse (or that nothing did), one for what got better
    by `MOVED` or more (when any did). One line each: an indented line would read as a wrapped
    comment's continuation (`best`)."""
    ref = f"vLLM's defaults (baseline trial {baseline})"
    share = f"{MOVED:.0%}".replace("%", " %")
    worse = [m.words() for m in found if m.worse]
    better = [m.words() for m in found if not m.worse]
    lines = [
        f"WORSE than {ref}: " + "; ".join(worse)
        if worse
        else f"nothing stored got worse than {ref}, neither by {share} or more nor clearly"
    ]
    if better:
        lines.append(f"better than {ref} by {share} or more: " + "; ".join(better))
    return lines


def worse_lines(point: TrialPoint, baseline: TrialPoint | None) -> list[str]:
    """`moved_lines` for `point` against the baseline trial; nothing where no comparison is
    made (no baseline, the baseline itself, capacity mode)."""
    if baseline is None or baseline.number == point.number:
        return []
    if have_capacities((point, baseline)):  # each trial's figures at its own rate
        return []
    return moved_lines(moved_from_defaults(point, baseline), baseline.number)
