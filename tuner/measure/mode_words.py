"""A study's objective in words: one class per kind of objective object (issue 51).

The objective object (`tuner.measure.modes`, `tuner.measure.mixes`) keeps the decisions; what
each kind says to a person lives here, keyed by the object's class (`WORDS`), so a command,
the report or a section asks `words_of(objective)` for them and never the mode's name: a
workload's rate, a run's live label, the preview's gain and load advice, the robustness
check's gain and why it kept the rate, and a mix's aggregate and its scenarios' lines.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from tuner.measure.mixes import CapacityMix, MixOf, ScenarioMix
from tuner.measure.modes import CapacityObjective, MultiObjective, Objective
from tuner.spec.figures import figure
from tuner.spec.sections import ObjectiveSpec, ScenarioSpec
from tuner.spec.workload import WorkloadSpec


class ModeWords:
    """Scalar and multi mode's words (a score against the defaults' 0, the study's rate)."""

    def __init__(self, spec: ObjectiveSpec, scenarios: Mapping[str, ScenarioSpec]) -> None:
        self.spec = spec
        self.scenarios = scenarios  # a mix's, by name; empty for one workload

    def rate(self, rate_rps: float) -> str:
        """A workload's request rate in words (`tuner best`, the report)."""
        return "all at once" if rate_rps == float("inf") else f"{rate_rps:g} req/s"

    def run_label(self, rate_rps: float) -> str | None:
        """What the live display adds to a run's name: nothing (None), or its rate."""
        return None

    def gain(self, best_score: float | None, best_rps: float | None, base_rps: float | None) -> str:
        """The best trial's figure against vLLM's defaults, in words (`tuner init`'s preview);
        `base_rps` None: the defaults broke the SLO (no figure of theirs to set against)."""
        return f"score {figure(best_score or 0.0, 3, sign=True)} against the defaults' 0"

    def load_hint(self, *, heavier: bool) -> str | None:
        """How to give the night a heavier (or lighter) load, in words (the plan preview's
        advice); None where the mode's own search sets the load. Capacity mode is advised,
        scalar mode never from it: advice that never sends a study back where it came from."""
        if heavier:
            return "a higher rate (--rate) or capacity mode (`tuner init --objective capacity`)"
        return "a lower rate (--rate)"

    def gain_figure(self, gain: float) -> str:
        """A gain (`Objective.run_gain`'s) in the study's terms."""
        return f"score {-gain:+.3f}"

    def fixed_rate(self) -> str:
        """Why a robustness check changed no rate, when the mode is why."""
        return ""

    def estimated_trial(self) -> str:
        """What the night's cost adds to its source, the simulated baseline trial: how it ran
        (nothing: one run of the workload)."""
        return ""

    def aggregate(self) -> str:
        """How a mix's scenarios' scores make the trial's, in words (`objective.aggregate`):
        a mix's workload lines, and `tuner best`'s headline of a trial with scenarios."""
        return "the worst" if self.spec.aggregate == "worst" else "the weighted mean"

    def workload_lines(
        self, workload: WorkloadSpec, describe: Callable[[WorkloadSpec], str]
    ) -> list[str]:
        """The workload in words (each line from `describe`)."""
        return [f"workload: {describe(workload)}"]


class CapacityWords(ModeWords):
    """Capacity mode's words: the rate is searched, the figure is a capacity (req/s)."""

    def rate(self, rate_rps: float) -> str:
        return "rate searched for the capacity"

    def run_label(self, rate_rps: float) -> str | None:
        return f"at {figure(rate_rps)} req/s"  # one step of the search

    def gain(self, best_score: float | None, best_rps: float | None, base_rps: float | None) -> str:
        found = f"{figure(best_rps or 0)} req/s"
        if base_rps is None:
            return f"capacity {found}"
        return f"capacity {figure(base_rps)} → {found}"

    def load_hint(self, *, heavier: bool) -> str | None:
        return None  # the capacity search sets the rate

    def gain_figure(self, gain: float) -> str:
        return f"capacity ×{math.exp(gain):.3f}"

    def fixed_rate(self) -> str:
        return " (the capacity search sets the rate)"

    def estimated_trial(self) -> str:
        return ", its rate search as a launch runs it"


class MixWords(ModeWords):
    """A scenario mix's words: each scenario's line (combined with the mode's words)."""

    def workload_lines(
        self, workload: WorkloadSpec, describe: Callable[[WorkloadSpec], str]
    ) -> list[str]:
        head = f"workload: {len(self.scenarios)} scenarios, the score is "
        return [f"{head}{self.aggregate()} of theirs:"] + [
            f"  {s.name} (weight {s.weight:g}): {describe(s.workload())}"
            + (f"; SLO {', '.join(s.slo)}" if s.slo else "")
            for s in self.scenarios.values()
        ]


class ScenarioMixWords(MixWords, ModeWords):
    """A scalar-mode mix's words."""


class CapacityMixWords(MixWords, CapacityWords):
    """A capacity-mode mix's words."""


# each kind of objective object (`objective_of`'s classes) and its words
WORDS: dict[type[Objective], type[ModeWords]] = {
    Objective: ModeWords,
    MultiObjective: ModeWords,
    CapacityObjective: CapacityWords,
    ScenarioMix: ScenarioMixWords,
    CapacityMix: CapacityMixWords,
}


def words_of(objective: Objective) -> ModeWords:
    """The words of a study's objective object (`objective_of`'s)."""
    scenarios = objective.scenarios if isinstance(objective, MixOf) else {}
    return WORDS[type(objective)](objective.spec, scenarios)
