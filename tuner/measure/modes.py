"""The objective object: one class per objective mode, built once from the study file.

Every decision that depends on the mode is a method or a class attribute here, never an `if`
on `objective.mode` elsewhere (issue 35): what Optuna is told (its values, directions and
names, a failed trial's values), how wide a tie is, which metrics a change is stated on,
whether the mode searches the request rate itself, how far a prediction's score may be off,
and a trial's figure in words. A fourth mode is one more class in `MODES`. A scenario mix
scores each scenario with the same object and aggregates (`tuner.trial.scoring`).
docs/objective.md has the formulas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

from tuner.measure.objective import PENALTY_SCORE, score
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.slo import Direction, metric_direction
from tuner.spec.study import ObjectiveSpec

CAPACITY_RPS = "capacity_rps"  # capacity mode's figure, req/s


class Objective:
    """Scalar mode: Σ w·s·ln(m / m_ref) against the baseline trial, minimised."""

    mode: ClassVar[str] = "scalar"
    # the mode searches the request rate itself: a trial's figure is the highest rate it
    # serves within the SLOs, its other figures are at that rate (so never compared with the
    # baseline's, and its SLOs are the measurement, not constraints judged on its figures)
    rated: ClassVar[bool] = False
    # early stopping may compare a running trial with the incumbent on its one score
    prunes_against_incumbent: ClassVar[bool] = True

    def __init__(self, spec: ObjectiveSpec) -> None:
        self.spec = spec
        self.weights = {k: abs(v) for k, v in spec.weights.items() if v}

    def directions(self) -> list[Direction]:
        """Optuna's direction of each value."""
        return ["minimize"]

    def names(self) -> list[str]:
        """Optuna's name of each value."""
        return ["score"]

    def values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
        """What Optuna is told for a measured run of one workload."""
        return [score(metrics, reference, self.spec.weights)]

    def penalty_values(self, measured: Sequence[Mapping[str, float]] = ()) -> list[float] | None:
        """Values for a trial with no measurement (its constraints make it infeasible anyway);
        None while no value can be given."""
        return [PENALTY_SCORE]

    def stated_metrics(self) -> list[str]:
        """The metrics a change is stated on: the headline metrics, then the weighted ones."""
        return list(dict.fromkeys([*HEADLINE_METRICS, *(m for m in self.weights)]))

    def resolution(self) -> float | None:
        """Two trials within this relative width of each other tie (None: by their intervals)."""
        return None

    def noise_log(self) -> float:
        """A gain (a log ratio) at or below this is within the measurement's resolution."""
        return 0.0

    def score_scale(self) -> float:
        """How far the score moves when every figure moves by one log unit (Σ|w|)."""
        return sum(self.weights.values()) or 1.0

    def score_floor(self) -> float:
        """How far the score moves when the heaviest figure moves by one log unit (max|w|)."""
        return max(self.weights.values(), default=1.0) or 1.0

    def rate_words(self, rate_rps: float) -> str:
        """A workload's request rate in words (`tuner best`, the report)."""
        return "all at once" if rate_rps == float("inf") else f"{rate_rps:g} req/s"

    def run_label(self, rate_rps: float) -> str | None:
        """What the live display adds to a run's name: nothing (None), or its rate."""
        return None

    def gain_words(
        self, best_score: float | None, best_rps: float | None, base_rps: float | None
    ) -> str:
        """The best trial's figure against vLLM's defaults, in words (`tuner init`'s preview);
        `base_rps` None: the defaults broke the SLO (no figure of theirs to set against)."""
        return f"score {figure(best_score or 0.0, 3, sign=True)} against the defaults' 0"

    def other_mode_hint(self) -> str:
        """The other way to give a night something to win, in words."""
        return "capacity mode (`tuner init --objective capacity`: the most traffic within the SLO)"


class MultiObjective(Objective):
    """Multi mode: a Pareto search over the raw objectives, each in its own direction."""

    mode = "multi"
    prunes_against_incumbent = False  # no one score to compare

    def directions(self) -> list[Direction]:
        return [metric_direction(name) for name in self.spec.objectives]

    def names(self) -> list[str]:
        return list(self.spec.objectives)

    def values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
        return [float(metrics[name]) for name in self.spec.objectives]

    def penalty_values(self, measured: Sequence[Mapping[str, float]] = ()) -> list[float] | None:
        """The worst value each objective has measured in this study, so failed trials sit in
        the dominated corner without stretching the dashboard's axes; None while nothing has
        been measured yet."""
        out = []
        for name in self.spec.objectives:
            values = [m[name] for m in measured if name in m]
            if not values:
                return None
            out.append(max(values) if metric_direction(name) == "minimize" else min(values))
        return out

    def stated_metrics(self) -> list[str]:
        return list(dict.fromkeys([*HEADLINE_METRICS, *self.spec.objectives]))


class CapacityObjective(Objective):
    """Capacity mode: the highest request rate at which every SLO holds, maximised; the score
    is −ln(capacity / the reference's)."""

    mode = "capacity"
    rated = True
    prunes_against_incumbent = False  # a rate step has only the SLO rule

    def directions(self) -> list[Direction]:
        return ["maximize"]

    def names(self) -> list[str]:
        return [CAPACITY_RPS]

    def values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
        raise NotImplementedError("capacity mode's values come from its search (trial.scoring)")

    def penalty_values(self, measured: Sequence[Mapping[str, float]] = ()) -> list[float] | None:
        return [0.0]  # req/s: served nothing within the SLOs

    def stated_metrics(self) -> list[str]:
        return [CAPACITY_RPS]

    def resolution(self) -> float | None:
        return self.spec.search.resolution

    def noise_log(self) -> float:
        return math.log1p(self.spec.search.resolution)

    def score_scale(self) -> float:
        return 1.0  # one log-ratio

    def score_floor(self) -> float:
        return 1.0

    def rate_words(self, rate_rps: float) -> str:
        return "rate searched for the capacity"

    def run_label(self, rate_rps: float) -> str | None:
        return f"at {figure(rate_rps)} req/s"  # one step of the search

    def gain_words(
        self, best_score: float | None, best_rps: float | None, base_rps: float | None
    ) -> str:
        found = f"{figure(best_rps or 0)} req/s"
        if base_rps is None:
            return f"capacity {found}"
        return f"capacity {figure(base_rps)} → {found}"

    def other_mode_hint(self) -> str:
        return "--objective scalar at a rate near the capacity"


MODES: dict[str, type[Objective]] = {
    c.mode: c for c in (Objective, MultiObjective, CapacityObjective)
}


def objective_of(spec: ObjectiveSpec) -> Objective:
    """The study file's objective as the object that decides for its mode."""
    return MODES[spec.mode](spec)
