"""The blocks of `tuner best` and the report, in the order they are shown (`SECTIONS`), each a
`tuner.results.section.Section`: the chosen config's score and headline figures, their
intervals, the setting it was measured in, its change against vLLM's defaults, what got
worse, the flags that carry its gain, every verdict, the deployment shapes tried. A new block
is one module implementing `Section` and one line in `SECTIONS`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.measure.mode_words import ModeWords
from tuner.results.section import Block, Section, Shown
from tuner.results.setting import setting_lines
from tuner.results.shapes import shape_lines, shape_rows
from tuner.results.smallest import smallest_lines
from tuner.results.verdicts import zero_words
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS, headline_words, metric_words
from tuner.spec.slo import SloLimit, straddle_words
from tuner.trial import TrialPoint, words
from tuner.trial.words import at_rate, scenario_parts


class _BestOnly:
    """A block of `tuner best` alone: not in the report."""

    def report(self, shown: Shown) -> Block | None:
        return None


class Headline(_BestOnly):
    """The score and the headline figures (`headline_lines`)."""

    name = "headline"

    def lines(self, shown: Shown) -> list[str]:
        top = shown.choice.point if shown.choice is not None else None
        return headline_lines(top, shown.points, shown.mode_words()) if top is not None else []


class Intervals(_BestOnly):
    """The headline figures' 95 % intervals (`interval_lines`)."""

    name = "intervals"

    def lines(self, shown: Shown) -> list[str]:
        if shown.choice is None:
            return []
        return interval_lines(shown.choice.point, shown.spec.slo_limits())


class Setting(_BestOnly):
    """The hardware, the workload and the SLO the choice was made under."""

    name = "setting"

    def lines(self, shown: Shown) -> list[str]:
        return setting_lines(shown.spec) if shown.choice is not None else []


class Change(_BestOnly):
    """The change against vLLM's defaults on the headline metrics, then every figure that
    moved against them (`tuner.results.change`)."""

    name = "change"

    def lines(self, shown: Shown) -> list[str]:
        choice = shown.choice
        if choice is None:
            return []
        found = choice.comparison.lines() if choice.comparison is not None else []
        return [*found, *choice.worse]


class Smallest(_BestOnly):
    """What was dropped from the command and why, what carries the gain (the checks
    `tuner.fidelity.smallest_check` and `smallest_measured` stored)."""

    name = "smallest"

    def lines(self, shown: Shown) -> list[str]:
        choice = shown.choice
        return smallest_lines(choice.smallest, choice.point) if choice is not None else []


class Verdicts(_BestOnly):
    """Every verdict on the choice (`tuner.results.verdicts`), the robustness check's among
    them."""

    name = "verdicts"

    def lines(self, shown: Shown) -> list[str]:
        return [v.text for v in shown.choice.verdicts] if shown.choice is not None else []


class Shapes:
    """The deployment shapes tried, best first (several shapes only)."""

    name = "shapes"

    def lines(self, shown: Shown) -> list[str]:
        return shape_lines(shown.spec, shown.points) if shown.choice is not None else []

    def report(self, shown: Shown) -> Block | None:
        rows = shape_rows(shown.spec, shown.points)
        lines = tuple(row.line() for row in rows)
        return Block("Deployment shapes", "Replicas x TP, best first", lines) if rows else None


# Every block, in the order `tuner best` and the report show them: a new block is one line here.
SECTIONS: tuple[Section, ...] = (
    Headline(),
    Intervals(),
    Setting(),
    Change(),
    Smallest(),
    Verdicts(),
    Shapes(),
)


def interval_lines(top: TrialPoint, limits: Sequence[SloLimit] = ()) -> list[str]:
    """The headline figures' 95 % bootstrap intervals, in words (none stored: nothing); one
    with an SLO of `limits` inside it says so (it may keep the limit or break it)."""
    found = []
    for m in HEADLINE_METRICS:
        if (ci := top.ci(m)) is not None:
            label, unit = metric_words(m)
            straddle = straddle_words(m, ci, list(limits))
            found.append(f"{label} {figure(ci[0])}–{figure(ci[1])}{unit}")
            found[-1] += f" ({straddle})" if straddle else ""
    return [f"95% intervals: {', '.join(found)}"] if found else []


def headline_lines(
    top: TrialPoint, points: Sequence[TrialPoint], mode_words: ModeWords
) -> list[str]:
    """The score and the headline figures: capacity mode's capacity first; a mix's scenarios
    each with their own score and figures."""
    shown = figure(top.score, 3, sign=True)
    score = f"score {shown} ({zero_words(top, points)}, lower is better)"
    found = top.record.capacity
    if top.record.scenarios:
        how = mode_words.aggregate()
        head = f"{score}: {how} of the scenarios' scores"
        if top.capacity_rps is not None:
            head = f"capacity {words.rate(top.capacity_rps, top.capacity_capped)} over the " + (
                f"scenarios within the SLOs; {head}"
            )
        return [head, *(f"  {part}" for part in scenario_parts(top.record))]
    if found is not None:
        return [
            f"capacity {words.capacity_rate(found)} within the SLOs; {score}",
            f"{at_rate(found)}: " + ", ".join(headline_words(top.metrics)),
        ]
    return [f"{score}; " + ", ".join(headline_words(top.metrics))]
