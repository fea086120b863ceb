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
from typing import ClassVar, Literal, TypeVar

from tuner.measure.capacity import Beat
from tuner.measure.measurement import Measurement
from tuner.measure.objective import PENALTY_SCORE, capacity_score, constraints, score
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.sections import ObjectiveSpec
from tuner.spec.slo import Direction, metric_direction
from tuner.spec.workload import WorkloadSpec

CAPACITY_RPS = "capacity_rps"  # capacity mode's figure, req/s

RunOne = Callable[[str, WorkloadSpec], Measurement]  # one named workload's run(s)
Combine = Callable[[dict[str, Measurement]], Measurement]  # a mix's runs as one trial's
# which early-stopping rule a run answers to: the SLO rule only, or it and the comparison
# with the incumbent on the one score (docs/early-stopping.md)
StopRule = Literal["slo", "incumbent"]
Run = TypeVar("Run")  # one run a trial is judged on, as its judge holds it (`trial.scoring`)


@dataclass(frozen=True)
class RunFigures:
    """What a run (or a trial, its runs pooled) is judged on: its metrics and its capacity
    (req/s, 0 where none was found or the mode has none)."""

    metrics: Mapping[str, float]
    capacity_rps: float


@dataclass(frozen=True)
class ScoreSpan:
    """How far a trial's score moves with its figures (how wide a prediction's score margin
    is): `scale` when every weighted figure moves by one log unit, `floor` when the heaviest
    one does, and `searched`, the figures the mode's own search finds, each moving it by its
    own log miss beside the weighted ones."""

    scale: float
    floor: float
    searched: tuple[str, ...] = ()


class Objective:
    """Scalar mode: Σ w·s·ln(m / m_ref) against the baseline trial, minimised."""

    mode: ClassVar[str] = "scalar"
    # a trial's figures are one run of the study's one workload at its rate: what one
    # prediction of that workload can be set against (plan notes, verify's prediction)
    one_run_figures: ClassVar[bool] = True
    # the mode's search sets each trial's rate, and a trial's figure is the capacity it found
    # (req/s: a column, the front drawn at the top one). So the SLOs choose the rate: they
    # are what the mode measures, not constraints judged on a trial's figures (no
    # prediction rules a config out on them; early stopping: `early_stop`); and a trial's
    # figures are at its own rate, never compared with the baseline's. False: the SLOs judge
    # figures at the study's rate.
    has_capacity: ClassVar[bool] = False

    def __init__(self, spec: ObjectiveSpec) -> None:
        self.spec = spec
        self.weights = {k: abs(v) for k, v in spec.weights.items() if v}

    def directions(self) -> dict[str, Direction]:
        """Optuna's values: each one's name and direction, in order."""
        return {"score": "minimize"}

    def early_stop(self, reference_run: bool) -> StopRule | None:
        """What may stop a run early: None, nothing (a reference, the baseline or a
        `--confirm` re-run, is measured whole); "incumbent", the SLO rule and the comparison
        with the incumbent on the one score; "slo", the SLO rule only."""
        return None if reference_run else "incumbent"

    def _values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
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
        return self._values(mine.metrics, theirs.metrics)

    def _capacity_figure(self, found_rps: float | None) -> float | None:
        """A trial's capacity (req/s) from what its search found (a mix's: aggregated);
        None: the mode has no capacity."""
        return None

    def judged_runs(self, whole: Run, scenarios: Mapping[str, Run]) -> dict[str, Run]:
        """The runs a trial is judged on, by name (each scored against the reference's same
        run, its SLOs judged on its own figures): the study's one workload (""), the trial's
        whole run; a mix's scenarios are not this object's."""
        return {"": whole}

    def trial_figures(
        self, run_scores: Mapping[str, float], found_rps: Mapping[str, float | None]
    ) -> tuple[float, float | None]:
        """A trial's score and capacity (req/s; None: the mode has none) from its judged
        runs' (`judged_runs`): each one's score (`run_score`'s) and what its search found
        (None: no search result). The one run's."""
        return run_scores[""], self._capacity_figure(found_rps[""])

    def score_constraints(
        self, slos: Mapping[str, float], found_rps: Mapping[str, float | None]
    ) -> dict[str, float]:
        """The constraints a trial's score adds to its `trial_constraints`, from its judged
        runs' SLO constraints (`slos`) and what each run's search found: the one run's
        (its SLOs are in `trial_constraints` already)."""
        return self._found_constraints({"capacity": found_rps[""] or 0.0})

    def _found_constraints(self, found_rps: Mapping[str, float]) -> dict[str, float]:
        """Optuna's constraints on what the mode's search found (each constraint's name:
        the capacity it judges, req/s): none in a mode without a search."""
        return {}

    def stated_metrics(self) -> list[str]:
        """The metrics a change is stated on: the headline metrics, then the weighted ones."""
        return list(dict.fromkeys([*HEADLINE_METRICS, *(m for m in self.weights)]))

    def resolution(self) -> float | None:
        """Two trials within this relative width of each other tie (None: by their intervals)."""
        return None

    def score_span(self) -> ScoreSpan:
        """How far the score moves with its figures: Σ|w| and max|w| of the weights."""
        return ScoreSpan(
            sum(self.weights.values()) or 1.0, max(self.weights.values(), default=1.0) or 1.0
        )

    def stated_rate(self, rate_rps: float) -> float | None:
        """The rate a run's figures are stated at when the mode sets it (a capacity step's,
        a trial's capacity); None: the workload's own rate, not worth stating."""
        return None

    def rate_can_change(self, rates_rps: Sequence[float]) -> bool:
        """Whether a robustness check may change the workloads' rates: not when each is sent
        all at once (rate inf), nor when the mode's search sets the rate."""
        return not all(math.isinf(r) for r in rates_rps)

    def _run_one(self, name: str, w: WorkloadSpec, run: RunOne, search: RunOne) -> Measurement:
        """One workload's part of a trial: one run of it (`run`), or the mode's rate search
        over it (`search`)."""
        return run(name, w)

    def measure(
        self, workload: WorkloadSpec, run: RunOne, search: RunOne, combine: Combine
    ) -> Measurement:
        """Every run one engine start makes for a trial, as one Measurement: the study's one
        workload (a mix: each scenario's, `combine`d), each one run of it (`run`) or the
        mode's rate search over it (`search`)."""
        return self._run_one("", workload, run, search)

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

    def served_workload(self, workload: WorkloadSpec) -> WorkloadSpec | None:
        """The one workload a deployment of a trial's config serves, as the study measured
        it (what `tuner verify` sends, what the measured robustness check perturbs); None: a
        mix, which no one deployment serves."""
        return workload


class MultiObjective(Objective):
    """Multi mode: a Pareto search over the raw objectives, each in its own direction."""

    mode = "multi"

    def early_stop(self, reference_run: bool) -> StopRule | None:
        return None if reference_run else "slo"  # no one score to compare

    def directions(self) -> dict[str, Direction]:
        return {name: metric_direction(name) for name in self.spec.objectives}

    def _values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
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
    one_run_figures = False  # several rate steps
    has_capacity = True  # the SLOs choose the rate; each trial's figures at its own

    def directions(self) -> dict[str, Direction]:
        return {CAPACITY_RPS: "maximize"}

    def early_stop(self, reference_run: bool) -> StopRule | None:
        """A rate step has only the SLO rule, and a step an SLO stops is above capacity
        whoever runs it, a reference too."""
        return "slo"

    def _values(self, metrics: Mapping[str, float], reference: Mapping[str, float]) -> list[float]:
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

    def _capacity_figure(self, found_rps: float | None) -> float | None:
        return found_rps

    def _found_constraints(self, found_rps: Mapping[str, float]) -> dict[str, float]:
        """Each capacity of 0 (nothing served within the SLOs) is infeasible."""
        return {name: 0.0 if rps > 0 else 1.0 for name, rps in found_rps.items()}

    def stated_metrics(self) -> list[str]:
        return [CAPACITY_RPS]

    def resolution(self) -> float | None:
        return self.spec.search.resolution

    def score_span(self) -> ScoreSpan:
        return ScoreSpan(1.0, 1.0, (CAPACITY_RPS,))  # one log-ratio

    def stated_rate(self, rate_rps: float) -> float | None:
        return rate_rps

    def rate_can_change(self, rates_rps: Sequence[float]) -> bool:
        return False  # the search sets the rate

    def _run_one(self, name: str, w: WorkloadSpec, run: RunOne, search: RunOne) -> Measurement:
        return search(name, w)

    def to_beat(self, best_rps: float | None, reference_rps: float | None) -> Beat | None:
        if not best_rps or not reference_rps:
            return None  # no capacity found yet
        return Beat(best_rps, reference_rps)

    def run_gain(self, mine: RunFigures, base: RunFigures) -> float | None:
        if not base.capacity_rps:
            return None
        return math.log(mine.capacity_rps / base.capacity_rps) if mine.capacity_rps else -math.inf


MODES: dict[str, type[Objective]] = {
    c.mode: c for c in (Objective, MultiObjective, CapacityObjective)
}
