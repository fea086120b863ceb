"""The study file in parts: what a stage below the loop reads of it, each a few sections.

A function that reads one section takes that section (`EngineSpec`, `WorkloadSpec`,
`ObjectiveSpec`, ...); one that reads several takes the part that names just them. A
`StudySpec` is each part (they are protocols: a study passes as it is, and a test may pass
just the sections); a function typed with a part reads no other section (mypy says so)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tuner.spec.sections import (
    EngineSpec,
    HardwareSpec,
    ObjectiveSpec,
    PruningSpec,
    ScenarioSpec,
    SearchSpace,
    SearchSpec,
    TrialSpec,
)
from tuner.spec.slo import SloLimit
from tuner.spec.workload import WorkloadSpec


class Serving(Protocol):
    """The engine a trial starts: its command and fixed flags, the tuned flags, the GPUs."""

    @property
    def engine(self) -> EngineSpec: ...
    @property
    def search_space(self) -> SearchSpace: ...
    @property
    def hardware(self) -> HardwareSpec: ...
    @property
    def simulated_accelerator(self) -> str: ...


class Judging(Protocol):
    """How a run is judged: the objective, the scenarios' weights and each one's SLOs."""

    @property
    def objective(self) -> ObjectiveSpec: ...
    @property
    def scenarios(self) -> Sequence[ScenarioSpec]: ...
    def slo_limits(self, scenario: str | None = None) -> list[SloLimit]: ...


class Traffic(Protocol):
    """What is sent to the engine: the workload, or the scenarios' workloads by name."""

    @property
    def workload(self) -> WorkloadSpec: ...
    @property
    def workloads(self) -> Mapping[str, WorkloadSpec]: ...


class Measuring(Serving, Judging, Traffic, Protocol):
    """What a trial measures and how it is judged, as a runner reads it (and what reports a
    trial): the engine, the traffic, the judging, the capacity search, early stopping and a
    trial's timeouts; never the budget, the sampler or the storage (the loop's)."""

    @property
    def name(self) -> str: ...
    @property
    def search(self) -> SearchSpec: ...
    @property
    def trial(self) -> TrialSpec: ...
    @property
    def pruning(self) -> PruningSpec: ...
