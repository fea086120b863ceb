"""What several workload runs on one engine start produce, in the shape a trial stores it:
the capacity search's rate steps and result per workload, each scenario's own figures, each
run's prefix cache. A runner builds them (`tuner.runners.load_runs`) and hands them over in its
`Measurement`; the stored trial (`tuner.trial`) writes and reads them. Each is `Stored`
(`tuner.measure.stored`: one encoder, one lenient decoder); docs/storage.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Annotated, ClassVar

from pydantic import model_validator
from pydantic.dataclasses import dataclass

from tuner.measure.stored import (
    AsWritten,
    Figure,
    Figures,
    Finite,
    Interval,
    Lenient,
    Stored,
    is_finite,
)
from tuner.spec.figures import figure

# Capacity mode ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityResult(Stored):
    """The rate search of one workload (`tuner.measure.capacity`), as the trial stores it."""

    OMITTED: ClassVar[Mapping[str, object]] = dict.fromkeys(
        ("capacity_rps_low", "capacity_rps_high")
    )

    capacity_rps: Finite = 0.0  # req/s, the highest offered rate that met every SLO (0: none did)
    goodput_rps: Figure = None  # request_goodput of the run at that rate
    resolved: bool = False  # the bracket closed to the resolution
    capped: bool = False  # feasible at max_rps: the capacity is at least this
    runs: int = 0  # workload runs the search took
    above_rps: Figure = None  # the lowest rate that broke an SLO (None: none did)
    # the capacity's interval (None: stored before 7 Dec 2026): the highest rate at which
    # every SLO held for sure (0: none), the lowest above it that broke one for sure (None:
    # none did); docs/objective.md, "Capacity mode"
    capacity_rps_low: Figure = None
    capacity_rps_high: Figure = None

    @property
    def interval(self) -> tuple[float, float | None] | None:
        """(low, high) req/s, high None when no rate broke an SLO for sure; None: not stored."""
        if self.capacity_rps_low is None:
            return None
        return self.capacity_rps_low, self.capacity_rps_high


_NOT_FIGURES = frozenset({"rate_rps", "runs"})  # a rate step's stored numbers that are no figure


@dataclass(frozen=True)
class RateStep(Stored):
    """One run of the capacity search: a point of the latency–load curve, all its figures
    (stored flat: `rate_rps`, the fields below and every finite figure side by side)."""

    rate_rps: Finite  # the offered rate, req/s
    feasible: bool = False  # met every SLO
    scenario: str | None = None  # the scenario it ran (None: the single workload)
    pruned_reason: str | None = None  # stopped early: above capacity
    metrics: Figures = field(default_factory=dict)  # vLLM's figures of the run (runs pooled)
    # the rate held every SLO for sure, broke one for sure, or neither ("holds", "breaks",
    # "unsure": `tuner.measure.rate_verdicts.rate_verdict`, by a t bound over its runs on fresh
    # seeds since 7 Dec 2026 (issue 46); by two agreeing runs before; None: stored before both)
    verdict: str | None = None
    runs: int = 1  # workload runs pooled at this rate (a repeat: a fresh seed)
    ci: Annotated[dict[str, Interval], Lenient] = field(default_factory=dict)  # the SLO figures'
    run_verdicts: tuple[str, ...] = ()  # each run's own verdict, by its own 95 % interval
    # each run's worst SLO figure against its limit, log(value / limit) (> 0: broken; a run
    # stopped early: a lower bound), the evidence of `verdict` (`rate_verdicts.run_excess`)
    run_excess: tuple[float, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, raw: object) -> object:
        if not isinstance(raw, Mapping):
            return raw
        figures = {k: v for k, v in raw.items() if k not in _NOT_FIGURES and is_finite(v)}
        return {**raw, "metrics": figures}

    def encode(self) -> dict[str, object]:
        judged: dict[str, object] = {}  # stored since the verdicts (7 Dec 2026)
        if self.verdict is not None:
            ci = {k: list(v) for k, v in self.ci.items()}
            judged = {
                "verdict": self.verdict,
                "runs": self.runs,
                "run_verdicts": list(self.run_verdicts),
                **({"run_excess": list(self.run_excess)} if self.run_excess else {}),
                "ci": ci,
            }
        return {
            "scenario": self.scenario or None,
            "rate_rps": self.rate_rps,
            "feasible": self.feasible,
            "pruned_reason": self.pruned_reason,
            **judged,
            **self.metrics,
        }


# Scenario mixes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioEntry(Stored):
    """One scenario of a trial: its own figures, score and (capacity mode) rate search."""

    OMITTED: ClassVar[Mapping[str, object]] = {"score": None}

    weight: Finite = 0.0
    # the run's figures as measured (`metrics_of` keeps the metrics)
    metrics: AsWritten[float] = field(default_factory=dict)
    ci: Annotated[dict[str, Interval], Lenient] = field(default_factory=dict)
    capacity: CapacityResult | None = None
    score: Figure = None  # against the reference's same scenario (None: not scored)


# Each run's prefix cache (`keys.PREFIX_CACHE_RUNS`) ---------------------------------------
# A trial's payload for each run's prefix cache: measured hit rate against what its prompts
# imply (docs/metrics.md, "Every run cold").

# A run whose measured hit rate exceeds what its prompts imply by more than this (a share of
# prompt tokens) was measured warm: something earlier on the engine start left them cached.
WARM_CACHE_MARGIN = 0.05


@dataclass(frozen=True, kw_only=True)
class PrefixCacheRun(Stored):
    """One run's prefix cache (docs/metrics.md, "Every run cold"): the share of its prompt
    tokens the engine found cached (vLLM's `prefix_cache_hits/queries` counters over the
    measured requests) against the share its own prompts imply
    (`tuner.workload.cold.implied_hit_rate`: what they share among themselves)."""

    hit_rate: Figure = None  # 0..1, measured; None: the engine exports no such counters
    implied_rate: Finite  # 0..1, what the run's prompts share
    scenario: str | None = None  # None: the single workload
    rate_rps: Figure = None  # capacity mode: the offered rate of the run
    reset: bool = False  # the engine emptied its prefix cache before the run

    @property
    def warm(self) -> bool:
        """Measured above what its prompts imply: not a cold run."""
        return self.hit_rate is not None and self.hit_rate > self.implied_rate + WARM_CACHE_MARGIN

    def words(self) -> str:
        """ "the run at 8 req/s hit 45 % of prompt tokens (its prompts imply 0 %)"."""
        where = [f"scenario {self.scenario}"] if self.scenario else []
        if self.rate_rps is not None:
            where.append(f"at {figure(self.rate_rps)} req/s")
        run = "the run " + " ".join(where) if where else "the run"
        hit = f"{100 * self.hit_rate:.0f} %" if self.hit_rate is not None else "unknown"
        return (
            f"{run} hit {hit} of prompt tokens (its prompts imply {100 * self.implied_rate:.0f} %)"
        )
