"""The objective object: one class per objective mode, built once from the study file.

Every decision that depends on the mode is a method or a class attribute here, never an `if`
on `objective.mode` elsewhere (issue 35): what Optuna is told (its values, directions and
names, a failed trial's values), how wide a tie is, which metrics a change is stated on,
whether the mode searches the request rate itself, how far a prediction's score may be off,
and a trial's figure in words. A fourth mode is one more class in `MODES`. A scenario mix
is a composite of one such object per scenario (`ScenarioMix`, `CapacityMix`): what differs
for a mix (its runs, its constraints, its stop rules, its words) is its method, never an `if`
on `spec.scenarios` elsewhere; `tuner.trial.scoring` scores each scenario and aggregates.
docs/objective.md has the formulas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

from tuner.measure.capacity import Beat
from tuner.measure.measurement import Measurement, ended_after
from tuner.measure.objective import PENALTY_SCORE, constraints, health_constraints, score
from tuner.spec.figures import figure
from tuner.spec.metric_keys import HEADLINE_METRICS
from tuner.spec.sections import ScenarioSpec
from tuner.spec.slo import Direction, metric_direction
from tuner.spec.study import ObjectiveSpec, StudySpec
from tuner.spec.workload import WorkloadSpec

CAPACITY_RPS = "capacity_rps"  # capacity mode's figure, req/s

RunOne = Callable[[str, WorkloadSpec], Measurement]  # one named workload's run(s)


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

    def measure(
        self,
        workload: WorkloadSpec,
        one: RunOne,
        combine: Callable[[dict[str, Measurement]], Measurement],
    ) -> Measurement:
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

    def run_gain(
        self,
        mine: Mapping[str, float] | None,
        base: Mapping[str, float] | None,
        mine_rps: float | None,
        base_rps: float | None,
    ) -> float | None:
        """One run's gain over the baseline's same run (−score; capacity: ln of the capacity
        ratio); None where the baseline has no figure, −inf where the config has none."""
        if not base:
            return None
        if not mine:
            return -math.inf
        return -score(mine, base, self.spec.weights)

    def gain_figure(self, gain: float) -> str:
        """A gain (`run_gain`'s) in the study's terms."""
        return f"score {-gain:+.3f}"

    def fixed_rate_words(self) -> str:
        """Why a robustness check changed no rate, when the mode is why."""
        return ""

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

    def run_gain(
        self,
        mine: Mapping[str, float] | None,
        base: Mapping[str, float] | None,
        mine_rps: float | None,
        base_rps: float | None,
    ) -> float | None:
        if not base_rps:
            return None
        return math.log(mine_rps / base_rps) if mine_rps else -math.inf

    def gain_figure(self, gain: float) -> str:
        return f"capacity ×{math.exp(gain):.3f}"

    def fixed_rate_words(self) -> str:
        return " (the capacity search sets the rate)"


class MixOf(Objective):
    """A scenario mix: the composite of one objective per scenario (`parts`, each of the
    study's mode), each scenario measured on the same engine start, its score aggregated
    from theirs (weighted mean or worst, `objective.aggregate`). Combined with the mode's
    class (`ScenarioMix`, `CapacityMix`), so what a mix does not change is the mode's."""

    prunes_against_incumbent = False  # each scenario's run has only the SLO rule
    one_run_figures = False  # one run per scenario, the trial's figures pooled

    def __init__(self, spec: ObjectiveSpec, scenarios: Sequence[ScenarioSpec]) -> None:
        super().__init__(spec)
        self.scenarios = {s.name: s for s in scenarios}
        self.parts = {s.name: MODES[spec.mode](spec) for s in scenarios}

    def aggregate_words(self) -> str:
        """How the scenarios' scores make the trial's, in words."""
        return "the worst" if self.spec.aggregate == "worst" else "the weighted mean"

    def measure(
        self,
        workload: WorkloadSpec,
        one: RunOne,
        combine: Callable[[dict[str, Measurement]], Measurement],
    ) -> Measurement:
        """Each scenario in turn; a failure or an early stop ends the trial there, with the
        time of every run before it."""
        parts: dict[str, Measurement] = {}
        for name, s in self.scenarios.items():
            m = one(name, s.workload())
            if m.metrics is None or m.pruned_reason:
                return ended_after(m, list(parts.values()))
            parts[name] = m
        return combine(parts)

    def to_beat(self, best_rps: float | None, reference_rps: float | None) -> Beat | None:
        return None  # the mix's capacity is aggregated, no one search can be cut short

    def trial_constraints(
        self, metrics: Mapping[str, float] | None, failed_fraction: float
    ) -> dict[str, float]:
        """Health only: the SLOs are judged per scenario (the score's constraints), never
        on the pooled figures, a mix no one serves."""
        return health_constraints(self.spec, metrics, failed_fraction=failed_fraction)

    def served_workload(self, workload: WorkloadSpec) -> WorkloadSpec | None:
        return None

    def workload_lines(
        self, workload: WorkloadSpec, describe: Callable[[WorkloadSpec], str]
    ) -> list[str]:
        head = f"workload: {len(self.scenarios)} scenarios, the score is "
        return [f"{head}{self.aggregate_words()} of theirs:"] + [
            f"  {s.name} (weight {s.weight:g}): {describe(s.workload())}"
            + (f"; SLO {', '.join(s.slo)}" if s.slo else "")
            for s in self.scenarios.values()
        ]


class ScenarioMix(MixOf, Objective):
    """A scalar-mode mix: each scenario scored against the reference's same scenario."""


class CapacityMix(MixOf, CapacityObjective):
    """A capacity-mode mix: each scenario's own capacity search; the mix's capacity is
    aggregated for show, its score from the scenarios' own log-ratios."""


MODES: dict[str, type[Objective]] = {
    c.mode: c for c in (Objective, MultiObjective, CapacityObjective)
}
# a mix of each mode that takes scenarios (multi mode takes one workload: `spec.study`)
MIXES: dict[str, type[MixOf]] = {"scalar": ScenarioMix, "capacity": CapacityMix}


def objective_of(spec: StudySpec) -> Objective:
    """The study file's objective as the object that decides for its mode, and for its
    scenario mix when it has one."""
    if spec.scenarios:
        return MIXES[spec.objective.mode](spec.objective, spec.scenarios)
    return MODES[spec.objective.mode](spec.objective)
