"""The objective object: one class per objective mode, built once from the study file.

Every decision that depends on the mode is a method or a class attribute here, never an `if`
on `objective.mode` elsewhere (issue 35): what Optuna is told (its values, directions and
names, a failed trial's values, the constraints on what the mode's search found), a run's
score against the reference's, how wide a tie is, which metrics a change is stated on,
whether the mode searches the request rate itself, how far a prediction's score may be off,
and a trial's figure in words. A fourth mode is one more class in `MODES`. A scenario mix is
the composite of one such object per scenario (`tuner.measure.mixes`, which has the factory
`objective_of`). docs/objective.md has the formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from tuner.measure.capacity import Beat
from tuner.measure.measurement import Measurement
from tuner.measure.objective import PENALTY_SCORE, capacity_score, constraints, score
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.slo import Direction, metric_direction
from tuner.spec.workload import WorkloadSpec

CAPACITY_RPS = "capacity_rps"  # capacity mode's figure, req/s

RunOne = Callable[[str, WorkloadSpec], Measurement]  # one named workload's run(s)
Combine = Callable[[dict[str, Measurement]], Measurement]  # a mix's runs as one trial's
Run = TypeVar("Run")  # one run a trial is judged on, as its judge holds it (`trial.scoring`)


@dataclass(frozen=True)
class RunFigures:
    """What a run (or a trial, its runs pooled) is judged on: its metrics and its capacity
    (req/s, 0 where none was found or the mode has none)."""

    metrics: Mapping[str, float]
    capacity_rps: float


class Objective:
    """Scalar mode: Σ w·s·ln(m / m_ref) against the baseline trial, minimised."""

    mode: ClassVar[str] = "scalar"
    # early stopping may compare a running trial with the incumbent on its one score
    prunes_against_incumbent: ClassVar[bool] = True
    # the SLOs are constraints judged on a trial's figures (early stopping's SLO rule spares
    # the reference runs, the prediction skip may rule a config out on them); False: they are
    # what the mode measures (a capacity step above capacity is stopped whoever runs it)
    slos_judge_figures: ClassVar[bool] = True
    # a trial's figures are at the study's own rate, so they compare with the baseline's
    figures_against_baseline: ClassVar[bool] = True
    # a trial's figures are one run of the study's one workload at its rate: what one
    # prediction of that workload can be set against (plan notes, verify's prediction)
    one_run_figures: ClassVar[bool] = True
    # a trial has a capacity figure (req/s): a column, and the front drawn at the top one
    has_capacity: ClassVar[bool] = False

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

    def run_score(self, mine: RunFigures, theirs: RunFigures) -> float:
        """One run's score against the reference's same run (`theirs`), lower is better:
        Σ w·s·ln(m / m_ref)."""
        return score(mine.metrics, theirs.metrics, self.spec.weights)

    def trial_values(self, trial_score: float, mine: RunFigures, theirs: RunFigures) -> list[float]:
        """What Optuna is told for a measured trial (its score, its pooled figures `mine`)
        against the reference trial's figures (`theirs`)."""
        return self.values(mine.metrics, theirs.metrics)

    def capacity_figure(self, found_rps: float | None) -> float | None:
        """A trial's capacity (req/s) from what its search found (a mix's: aggregated);
        None: the mode has no capacity."""
        return None

    def judged_runs(self, whole: Run, scenarios: Mapping[str, Run]) -> dict[str, Run]:
        """The runs a trial is judged on, by name (each scored against the reference's same
        run, its SLOs judged on its own figures): the study's one workload (""), the trial's
        whole run; a mix's scenarios are not this object's."""
        return {"": whole}

    def trial_score(self, run_scores: Mapping[str, float]) -> float:
        """A trial's score from its judged runs' (`judged_runs`, each `run_score`'s): the one
        run's."""
        return run_scores[""]

    def trial_capacity(self, found_rps: Mapping[str, float | None]) -> float | None:
        """A trial's capacity figure (req/s; None: the mode has none) from what each judged
        run's search found (None: no search result)."""
        return self.capacity_figure(found_rps[""])

    def score_constraints(
        self, slos: Mapping[str, float], found_rps: Mapping[str, float | None]
    ) -> dict[str, float]:
        """The constraints a trial's score adds to its `trial_constraints`, from its judged
        runs' SLO constraints (`slos`) and what each run's search found: the one run's
        (its SLOs are in `trial_constraints` already)."""
        return self.found_constraints({"capacity": found_rps[""] or 0.0})

    def found_constraints(self, found_rps: Mapping[str, float]) -> dict[str, float]:
        """Optuna's constraints on what the mode's search found (each constraint's name:
        the capacity it judges, req/s): none in a mode without a search."""
        return {}

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

    def load_hint(self, *, heavier: bool) -> str | None:
        """How to give the night a heavier (or lighter) load, in words (the plan preview's
        advice); None where the mode's own search sets the load. Capacity mode is advised,
        scalar mode never from it: advice that never sends a study back where it came from."""
        if heavier:
            return "a higher rate (--rate) or capacity mode (`tuner init --objective capacity`)"
        return "a lower rate (--rate)"

    def stated_rate(self, rate_rps: float) -> float | None:
        """The rate a run's figures are stated at when the mode sets it (a capacity step's,
        a trial's capacity); None: the workload's own rate, not worth stating."""
        return None

    def searched_figures(self) -> list[str]:
        """The figures the mode's own search finds, beside the weighted ones (a prediction's
        miss on them widens its score's margin)."""
        return []

    def rate_can_change(self, rates_rps: Sequence[float]) -> bool:
        """Whether a robustness check may change the workloads' rates: not when each is sent
        all at once (rate inf), nor when the mode's search sets the rate."""
        return not all(math.isinf(r) for r in rates_rps)

    def run_one(self, name: str, w: WorkloadSpec, run: RunOne, search: RunOne) -> Measurement:
        """One workload's part of a trial: one run of it (`run`), or the mode's rate search
        over it (`search`)."""
        return run(name, w)

    def measure(self, workload: WorkloadSpec, one: RunOne, combine: Combine) -> Measurement:
        """Every run one engine start makes for a trial, as one Measurement: the study's one
        workload (a mix: each scenario's, `combine`d)."""
        return one("", workload)

    def to_beat(self, best_rps: float | None, reference_rps: float | None) -> Beat | None:
        """What a trial's rate search must beat to be worth finishing; None: no such rule."""
        return None

    def trial_constraints(
        self, metrics: Mapping[str, float] | None, failed_fraction: float
    ) -> dict[str, float]:
        """Optuna's constraints a trial has before its score's own: health and the SLOs on
        its figures."""
        return constraints(self.spec, metrics, failed_fraction=failed_fraction)

    def run_gain(self, mine: RunFigures, base: RunFigures) -> float | None:
        """One run's gain over the baseline's same run (−score; capacity: ln of the capacity
        ratio); None where the baseline has no figure, −inf where the config has none."""
        if not base.metrics:
            return None
        if not mine.metrics:
            return -math.inf
        return -score(mine.metrics, base.metrics, self.spec.weights)

    def gain_figure(self, gain: float) -> str:
        """A gain (`run_gain`'s) in the study's terms."""
        return f"score {-gain:+.3f}"

    def fixed_rate_words(self) -> str:
        """Why a robustness check changed no rate, when the mode is why."""
        return ""

    def aggregate_words(self) -> str:
        """How a mix's scenarios' scores make the trial's, in words (`objective.aggregate`):
        a mix's workload lines, and `tuner best`'s headline of a trial with scenarios."""
        return "the worst" if self.spec.aggregate == "worst" else "the weighted mean"

    def workload_lines(
        self, workload: WorkloadSpec, describe: Callable[[WorkloadSpec], str]
    ) -> list[str]:
        """The workload in words (each line from `describe`)."""
        return [f"workload: {describe(workload)}"]

    def served_workload(self, workload: WorkloadSpec) -> WorkloadSpec | None:
        """The one workload a deployment of a trial's config serves, as the study measured
        it (what `tuner verify` sends, what the measured robustness check perturbs); None: a
        mix, which no one deployment serves."""
        return workload


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
    prunes_against_incumbent = False  # a rate step has only the SLO rule
    slos_judge_figures = False  # the SLOs choose the rate: they are the measurement
    figures_against_baseline = False  # each trial's figures are at its own capacity rate
    one_run_figures = False  # several rate steps
    has_capacity = True

    def directions(self) -> list[Direction]:
        return ["maximize"]

    def names(self) -> list[str]:
        return [CAPACITY_RPS]

    def values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
        raise NotImplementedError("capacity mode's values come from its search (trial.scoring)")

    def penalty_values(self, measured: Sequence[Mapping[str, float]] = ()) -> list[float] | None:
        return [0.0]  # req/s: served nothing within the SLOs

    def run_score(self, mine: RunFigures, theirs: RunFigures) -> float:
        """−ln(capacity / the reference's); a capacity of 0 counts as half the lowest rate
        the search tries."""
        floor_rps = self.spec.search.min_rps / 2
        return capacity_score(mine.capacity_rps, theirs.capacity_rps, floor_rps)

    def trial_values(self, trial_score: float, mine: RunFigures, theirs: RunFigures) -> list[float]:
        return [mine.capacity_rps]

    def capacity_figure(self, found_rps: float | None) -> float | None:
        return found_rps

    def found_constraints(self, found_rps: Mapping[str, float]) -> dict[str, float]:
        """Each capacity of 0 (nothing served within the SLOs) is infeasible."""
        return {name: 0.0 if rps > 0 else 1.0 for name, rps in found_rps.items()}

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

    def load_hint(self, *, heavier: bool) -> str | None:
        return None  # the capacity search sets the rate

    def stated_rate(self, rate_rps: float) -> float | None:
        return rate_rps

    def searched_figures(self) -> list[str]:
        return [CAPACITY_RPS]

    def rate_can_change(self, rates_rps: Sequence[float]) -> bool:
        return False  # the search sets the rate

    def run_one(self, name: str, w: WorkloadSpec, run: RunOne, search: RunOne) -> Measurement:
        return search(name, w)

    def to_beat(self, best_rps: float | None, reference_rps: float | None) -> Beat | None:
        if not best_rps or not reference_rps:
            return None  # no capacity found yet
        return Beat(best_rps, reference_rps)

    def run_gain(self, mine: RunFigures, base: RunFigures) -> float | None:
        if not base.capacity_rps:
            return None
        return math.log(mine.capacity_rps / base.capacity_rps) if mine.capacity_rps else -math.inf

    def gain_figure(self, gain: float) -> str:
        return f"capacity ×{math.exp(gain):.3f}"

    def fixed_rate_words(self) -> str:
        return " (the capacity search sets the rate)"


MODES: dict[str, type[Objective]] = {
    c.mode: c for c in (Objective, MultiObjective, CapacityObjective)
}
