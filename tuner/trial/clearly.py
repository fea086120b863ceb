"""Is one config clearly better than another, for this study? (pure)

The one rule every "clearly better" in the tuner uses: the verdicts against vLLM's defaults and
the runner-up (`tuner.results.verdicts`), and which changed flags carry a config's gain
(`tuner.fidelity.smallest`). Scalar modes: the 95 % interval of the difference on some weighted
headline metric (`objective.clearly_better`). Capacity mode: the capacity, which is what is
ranked, by its interval (`capacity.clearly_above`; stored without one: beyond the search's
resolution). The metrics were measured at each config's own rate, so their intervals do not
compare.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.measure.capacity import clearly_above
from tuner.measure.mixes import objective_of
from tuner.measure.objective import clearly_better
from tuner.spec.metric_keys import HEADLINE_METRICS, metric_words
from tuner.spec.study import StudySpec
from tuner.trial.point import TrialPoint


@dataclass(frozen=True)
class ClearlyBetter:
    """`ClearlyBetter(spec)(a, b)`: is trial a clearly better than trial b?"""

    spec: StudySpec

    @property
    def resolution(self) -> float | None:
        return objective_of(self.spec).resolution()

    @property
    def why(self) -> str:
        if self.resolution is not None:
            return (
                "the capacities' intervals overlap (stored without intervals: they differ "
                f"by no more than the capacity search's resolution ({self.resolution:.0%}))"
            )
        return (
            "the 95% confidence intervals of the differences include no gain on any weighted metric"
        )

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
        h, weights = HEADLINE_METRICS, self.spec.objective.weights
        return [
            metric_words(m)[0]
            for m, w in weights.items()
            if clearly_better(a.cis(h), b.cis(h), {m: w}, a.metrics, b.metrics)
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
        weights = self.spec.objective.weights
        return clearly_better(a.cis(h), b.cis(h), weights, a.metrics, b.metrics)
