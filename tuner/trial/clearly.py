"""Is one config clearly better than another, for this study? (pure)

The one rule every "clearly better" in the tuner uses: the verdicts against vLLM's defaults and
the runner-up (`tuner.results.verdicts`), and which changed flags carry a config's gain
(`tuner.fidelity.smallest`). Scalar modes: the 95 % interval of the difference on some weighted
headline metric (`objective.clearly_better`). Capacity mode: the capacity, which is what is
ranked, by its interval (`capacity.clearly_above`; stored without one: beyond the search's
resolution). The metrics were measured at each config's own rate, so their intervals do not
compare. A front's axes (`tuner.results.pareto.noise_front`): the same interval rule on each
metric alone (`clearly_better_on`, `within_noise`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.measure.capacity import clearly_above
from tuner.measure.modes import Objective
from tuner.measure.objective import clearly_better
from tuner.spec.metric_keys import HEADLINE_METRICS, metric_words
from tuner.trial.point import TrialPoint


@dataclass(frozen=True)
class ClearlyBetter:
    """`ClearlyBetter(objective)(a, b)`: is trial a clearly better than trial b? `objective`:
    the study's objective object (its ties, its weights)."""

    objective: Objective

    @property
    def resolution(self) -> float | None:
        return self.objective.resolution()

    @property
    def why(self) -> str:
        if self.resolution is not None:
            return (
                "the capacities' intervals overlap (stored without intervals: they differ "
                f"by no more than the capacity search's resolution ({self.resolution:.0%}))"
            )
        return (
            "no weighted metric gained 5% or more with the 95% confidence interval of its "
            "difference clear of no gain"
        )

    def why_of(self, a: TrialPoint, b: TrialPoint) -> str:
        """`why`, for this pair: in capacity mode, the one of its two cases that holds (both
        capacities with their intervals, or not), never both at once."""
        if self.resolution is None:
            return self.why
        if a.capacity_interval is not None and b.capacity_interval is not None:
            return "the capacities' intervals overlap"
        if a.capacity_interval is None and b.capacity_interval is None:
            return (
                "stored without intervals, the capacities differ by no more than the capacity "
                f"search's resolution ({self.resolution:.0%})"
            )
        return self.why

    @property
    def why_clear(self) -> str:
        if self.resolution is not None:
            return (
                "one held the SLOs for sure at a rate where the other broke them (stored without "
                f"intervals: beyond the capacity search's resolution ({self.resolution:.0%}))"
            )
        return "the 95% confidence interval of the difference lies wholly on the better side"

    def on(self, a: TrialPoint, b: TrialPoint) -> list[str]:
        """The metrics on which a is clearly better than b, in words."""
        if self.resolution is not None:
            return ["capacity"] if self(a, b) else []
        weights = self.objective.spec.weights
        return [
            metric_words(m)[0] for m, w in weights.items() if w > 0 and clearly_better_on(a, b, m)
        ]

    def __call__(self, a: TrialPoint, b: TrialPoint) -> bool:
        if self.resolution is not None:
            if a.capacity_rps is None or b.capacity_rps is None:
                return a.capacity_rps is not None
            return clearly_above(
                a.capacity_rps,
                a.capacity_interval,
                b.capacity_rps,
                b.capacity_interval,
                self.resolution,
            )
        h = HEADLINE_METRICS
        weights = self.objective.spec.weights
        return clearly_better(a.cis(h), b.cis(h), weights, a.metrics, b.metrics)


def clearly_better_on(a: TrialPoint, b: TrialPoint, metric: str) -> bool:
    """Is a's figure clearly better than b's on this one metric (its direction's better side)?
    `objective.clearly_better` on that metric alone: False when either lacks its interval."""
    return clearly_better(a.cis([metric]), b.cis([metric]), {metric: 1.0}, a.metrics, b.metrics)


def within_noise(a: TrialPoint, b: TrialPoint, metrics: Sequence[str]) -> bool:
    """Neither config is clearly better than the other on any of `metrics`: each difference's
    95 % interval includes no gain. False when either lacks an interval on one of them: the
    noise is then unknown, not shown to be small."""
    if any(p.ci(m) is None for p in (a, b) for m in metrics):
        return False
    return not any(clearly_better_on(x, y, m) for m in metrics for x, y in ((a, b), (b, a)))
