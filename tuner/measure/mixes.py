"""A scenario mix as the objective object: the composite of one mode's object per scenario.

What differs for a mix (its runs, the runs it is judged on and how their scores, capacities
and constraints make the trial's, its stop rules, its Optuna values, its words) is a method
here, never an `if` on `spec.scenarios` elsewhere (issue 35); `tuner.trial.scoring` packs
each scenario's run from its stored entry and scores it with the mode's `run_score`.
`objective_of` builds a study's object: one mode's (`tuner.measure.modes`), or its mix's.
docs/objective.md has the formulas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tuner.measure.capacity import Beat
from tuner.measure.measurement import Measurement, ended_after
from tuner.measure.modes import (
    MODES,
    CapacityObjective,
    Combine,
    Objective,
    Run,
    RunFigures,
    RunOne,
    StopRule,
)
from tuner.measure.objective import (
    aggregate,
    aggregate_capacity,
    equivalent_capacity,
    health_constraints,
)
from tuner.spec.parts import Judging
from tuner.spec.sections import ObjectiveSpec, ScenarioSpec
from tuner.spec.workload import WorkloadSpec


class MixOf(Objective):
    """A scenario mix: the composite of one objective per scenario (`parts`, each of the
    study's mode), each scenario measured on the same engine start, its score aggregated
    from theirs (weighted mean or worst, `objective.aggregate`). Combined with the mode's
    class (`ScenarioMix`, `CapacityMix`), so what a mix does not change is the mode's."""

    one_run_figures = False  # one run per scenario, the trial's figures pooled

    def __init__(self, spec: ObjectiveSpec, scenarios: Sequence[ScenarioSpec]) -> None:
        super().__init__(spec)
        self.scenarios = {s.name: s for s in scenarios}
        self.parts = {s.name: MODES[spec.mode](spec) for s in scenarios}
        self.scenario_weights = {s.name: s.weight for s in scenarios}

    def measure(
        self, workload: WorkloadSpec, run: RunOne, search: RunOne, combine: Combine
    ) -> Measurement:
        """Each scenario in turn; a failure or an early stop ends the trial there, with the
        time of every run before it."""
        parts: dict[str, Measurement] = {}
        for name, s in self.scenarios.items():
            m = self._run_one(name, s.workload(), run, search)
            if m.metrics is None or m.pruned_reason:
                return ended_after(m, list(parts.values()))
            parts[name] = m
        return combine(parts)

    def early_stop(self, reference_run: bool) -> StopRule | None:
        """Each scenario's run has only the SLO rule (no one score to compare with an
        incumbent's), where the mode stops a run at all."""
        return "slo" if super().early_stop(reference_run) else None

    def to_beat(self, best_rps: float | None, reference_rps: float | None) -> Beat | None:
        return None  # the mix's capacity is aggregated, no one search can be cut short

    def judged_runs(self, whole: Run, scenarios: Mapping[str, Run]) -> dict[str, Run]:
        """Each scenario's run, by its name (the pooled figures are no one workload's)."""
        return dict(scenarios)

    def trial_figures(
        self, run_scores: Mapping[str, float], found_rps: Mapping[str, float | None]
    ) -> tuple[float, float | None]:
        """The scenarios' scores aggregated (their weighted mean, or the worst), and their
        capacities (a scenario whose search found none counts 0), shown as the mix's."""
        how = self.spec.aggregate
        score = aggregate(run_scores, self.scenario_weights, how)
        caps = {name: rps or 0.0 for name, rps in found_rps.items()}
        found = aggregate_capacity(caps, self.scenario_weights, how) if caps else None
        return score, self._capacity_figure(found)

    def score_constraints(
        self, slos: Mapping[str, float], found_rps: Mapping[str, float | None]
    ) -> dict[str, float]:
        """The SLOs judged per scenario (never on the pooled figures: `trial_constraints`),
        then each scenario's search's (`scenario:capacity`)."""
        found = {f"{name}:capacity": rps or 0.0 for name, rps in found_rps.items()}
        return {**slos, **self._found_constraints(found)}

    def trial_constraints(
        self, metrics: Mapping[str, float] | None, failed_fraction: float
    ) -> dict[str, float]:
        """Health only: the SLOs are judged per scenario (the score's constraints), never
        on the pooled figures, a mix no one serves."""
        return health_constraints(self.spec, metrics, failed_fraction=failed_fraction)

    def served_workload(self, workload: WorkloadSpec) -> WorkloadSpec | None:
        return None


class ScenarioMix(MixOf, Objective):
    """A scalar-mode mix: each scenario scored against the reference's same scenario."""

    def trial_values(self, trial_score: float, mine: RunFigures, theirs: RunFigures) -> list[float]:
        """The aggregated score (the pooled figures are no one workload's)."""
        return [trial_score]


class CapacityMix(MixOf, CapacityObjective):
    """A capacity-mode mix: each scenario's own capacity search; the mix's capacity is
    aggregated for show, its score from the scenarios' own log-ratios."""

    def trial_values(self, trial_score: float, mine: RunFigures, theirs: RunFigures) -> list[float]:
        """The reference's capacity scaled by e^(−score), in req/s; 0 when the aggregated
        capacity is 0."""
        floor_rps = self.spec.search.min_rps / 2
        found = mine.capacity_rps > 0
        return [equivalent_capacity(trial_score, theirs.capacity_rps, floor_rps) if found else 0.0]


# a mix of each mode that takes scenarios (multi mode takes one workload: `spec.study`)
MIXES: dict[str, type[MixOf]] = {"scalar": ScenarioMix, "capacity": CapacityMix}


def objective_of(spec: Judging) -> Objective:
    """The study file's objective as the object that decides for its mode, and for its
    scenario mix when it has one."""
    if spec.scenarios:
        return MIXES[spec.objective.mode](spec.objective, spec.scenarios)
    return MODES[spec.objective.mode](spec.objective)
