"""What one trial's runs produced: the value a runner hands to the pipeline."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tuner.measure.pruning import Decision
from tuner.measure.records import RequestRecord
from tuner.measure.snapshot import EngineSample

if TYPE_CHECKING:  # pydantic's: not loaded by the simulated engine, which makes no such runs
    from tuner.measure.runs import CapacityResult, PrefixCacheRun, RateStep, ScenarioEntry


@dataclass
class Measurement:
    """What one trial produced: metrics, or the reason there are none."""

    metrics: dict[str, float] | None = None
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    records: list[RequestRecord] = field(default_factory=list)
    failure_kind: str | None = None
    failure_reason: str | None = None
    log_tail: str = ""
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    vllm_version: str | None = None
    log_path: str | None = None
    startup_s: float | None = None
    workload_s: float | None = None
    engine_s: float = 0.0  # the engine was up this long, launch until stopped (0: never)
    pruned_reason: str | None = None  # early stopping stopped it: metrics are partial
    pruned_at_s: float | None = None  # seconds into the workload
    pruned_engine: EngineSample | None = None  # the engine's gauges at the stop
    pruned_decision: Decision | None = None  # what the stop learnt
    engine_full_s: float | None = None  # plan only: its engine time had it run to the end
    simulated: bool = False  # the figures are the simulator's predictions
    box_waits: int = 0  # starts that found the GPU busy and waited (tuner.engine.gpu_memory)
    gpu_faults: int = 0  # GPU faults before this measurement: each retried on a fresh start
    # Several runs on one engine start (`tuner.runners.load_runs`; `tuner.measure.runs`):
    # capacity mode's rate steps, the search's result per workload, each scenario's own
    # figures. Empty for one plain run.
    rate_steps: list[RateStep] = field(default_factory=list)
    capacity: CapacityResult | None = None
    scenarios: dict[str, ScenarioEntry] = field(default_factory=dict)
    # Every run's prefix cache, in order: measured hit rate, implied rate
    prefix_cache_runs: list[PrefixCacheRun] = field(default_factory=list)
    # The start-up's phases as the engine's log told them (`parse_startup_phases`' keys)
    startup_phases: dict[str, float] = field(default_factory=dict)

    @property
    def found_rps(self) -> float | None:
        """The capacity its rate search found (req/s); None: it ran no search (a mix's
        are each scenario's own)."""
        return self.capacity.capacity_rps if self.capacity is not None else None


def ended_after(m: Measurement, done: list[Measurement]) -> Measurement:
    """A trial of several runs ended by `m` (a failure, an early stop) after the runs `done`:
    `m`'s figures, with the workload and engine seconds and the prefix cache of every run."""
    out = replace(
        m,
        workload_s=sum(p.workload_s or 0.0 for p in [*done, m]),
        prefix_cache_runs=[c for r in [*done, m] for c in r.prefix_cache_runs],
    )
    before = sum(p.engine_s for p in done)
    out.engine_s = before + m.engine_s
    if m.engine_full_s is not None:
        out.engine_full_s = before + m.engine_full_s
    return out
