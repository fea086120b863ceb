"""The structured values a trial or its study stores: frozen pydantic dataclasses, each
`Stored` (`tuner.trial.stored`: one encoder, one lenient decoder, the rule stated once).

`encode()` gives the JSON shape that is stored (the same shapes and keys as every earlier
version wrote, so old databases load). docs/storage.md lists them with their units.

The SLO constraint's key (`metric<=value`, `scenario:metric<=value`) is coded by
`tuner.spec.slo.SloLimit.constraint_key` and `parse_constraint_key`, below the measurement
layer that writes it; `Constraints` here is the one reader of a trial's constraints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import field
from typing import Annotated, Any, ClassVar

from pydantic import model_validator
from pydantic.dataclasses import dataclass

from tuner.spec.figures import figure
from tuner.spec.metric_keys import direction
from tuner.spec.slo import SloLimit, parse_constraint_key
from tuner.trial.keys import LEGACY_CONSTRAINTS, NAMED_CONSTRAINT_PREFIX
from tuner.trial.stored import (
    AsWritten,
    Figure,
    Figures,
    Finite,
    Interval,
    Lenient,
    Stored,
    is_finite,
)


def is_metric(name: str) -> bool:
    """Whether an attr name is a vLLM result metric (as opposed to score, flags, notes)."""
    return direction(name) is not None


def metrics_of(raw: object) -> dict[str, float]:
    """The finite vLLM metrics of a stored mapping (other keys and values left out)."""
    if not isinstance(raw, Mapping):
        return {}
    return {k: float(v) for k, v in raw.items() if is_finite(v) and is_metric(k)}


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


# The screen (`search.fidelity: multi`) ----------------------------------------------------


@dataclass(frozen=True)
class ScreenInfo(Stored):
    """How the screen chose a trial (`tuner.fidelity.screen`)."""

    candidates: int = 0  # configs the screen was asked to consider
    screened: int = 0  # configs it predicted
    requests: int = 0  # requests of the screen's workload
    calibrate_s: Finite = 0.0  # seconds calibrating
    screen_s: Finite = 0.0  # seconds predicting
    rank: Finite = 0.0  # the lower confidence bound it ranked by (score units, lower is better)
    distance: Finite = 0.0  # to the nearest real trial, in the unit cube [0, 1]
    score_error: Finite = 0.0  # the screen's score error it assumed (score units)
    predicted_feasible: bool = False  # predicted to meet every SLO
    calibrated_on: int = 0  # real trials the calibration was fitted to (0: uncalibrated)
    # the factors of the profile drawn from the calibration's posterior that ranked the
    # candidates (a Thompson draw); empty: the calibrated profile itself ranked them
    drawn_factors: Figures = field(default_factory=dict)


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


# The engine's start-up, phase by phase (`keys.STARTUP_PHASES`) ---------------------------


@dataclass(frozen=True)
class StartupPhases(Stored):
    """What vLLM's log said of the engine's start-up (`tuner.measure.startup_phases`, the
    keys and the lines they come from; docs/engine.md, "Start-up phases"). None: not logged."""

    model_init_s: Figure = None  # the model built, before its weights
    loading_s: Figure = None  # weights read into memory
    model_loading_s: Figure = None  # the whole model load
    weights_gib: Figure = None
    compile_s: Figure = None  # torch.compile, cold or from the compile cache
    compile_cached: bool | None = None  # True: from the compile cache; False: compiled cold
    graph_capture_s: Figure = None  # CUDA graphs
    graph_capture_gib: Figure = None
    kv_cache_gib: Figure = None
    kv_cache_tokens: Figure = None
    init_engine_s: Figure = None  # profiling, KV cache, compile, warm-up and graph capture

    def encode(self) -> dict[str, object]:
        return {k: v for k, v in super().encode().items() if v is not None}

    @classmethod
    def of(cls, parsed: Mapping[str, float]) -> StartupPhases:
        """The payload of `parse_startup_phases`' figures (its 1/0 compile flag a bool)."""
        cached = parsed.get("compile_cached")
        found = cls.decode({**parsed, "compile_cached": None if cached is None else bool(cached)})
        return found if found is not None else cls()

    @property
    def cold_compile_s(self) -> float:
        """Seconds compiling cold (0: from the cache, or not logged)."""
        return float(self.compile_s or 0.0) if self.compile_cached is False else 0.0

    def words(self) -> str:
        """ "load 12.3 s, compile 28.9 s cold, graphs 18 s" (the phases logged, to 3 digits;
        "model init 0.168 s" when no weights were loaded: `--load-format dummy`), or ""."""
        load = self.loading_s if self.loading_s is not None else self.model_loading_s
        how = {True: " cached", False: " cold", None: ""}[self.compile_cached]
        parts = [
            f"load {load:.3g} s" if load is not None else None,
            f"model init {self.model_init_s:.3g} s"
            if load is None and self.model_init_s is not None
            else None,
            f"compile {self.compile_s:.3g} s{how}" if self.compile_s is not None else None,
            f"graphs {self.graph_capture_s:.3g} s" if self.graph_capture_s is not None else None,
        ]
        return ", ".join(p for p in parts if p)


# The prediction skip (`keys.SKIP_PREDICTION`) --------------------------------------------
# What the prediction skip (`tuner.fidelity.predict_skip`) recorded about a trial before its
# launch: the calibrated prediction, the margin it was trusted to, and, when the launch was
# skipped, why ("ruled out by prediction"); docs/early-stopping.md.


@dataclass(frozen=True)
class SkipPrediction(Stored):
    """One config's prediction before launch. `raw`: the simulator's figures; `raw_score`:
    its score against the simulator's figures for the reference trial (the profile's scale
    cancels); `anchor`: the reference trial's own miss, ln(measured / predicted) per figure;
    `score`/`metrics`: calibrated (the figures by the anchor, both by the median miss of the
    study's other launched trials); `margin`: how far each (and the score, key "score") may
    still be off, in log units (score units for "score"); `errors_from`: the distinct
    predictions of launched trials those misses came from (below 3: the stated conservative
    margin). `ruled_out`: why it was not launched (None: it was launched); `incumbent`: the
    best score then; `engine_s`: the engine time a launch was predicted to take (what a skip
    saves); `speed`: the profile's speed the prediction was made at (every constant that many
    times faster: the speed the reference measured; 1: the profile as it is)."""

    OMITTED = dict.fromkeys(("raw_score", "score", "engine_s", "incumbent", "ruled_out", "speed"))

    raw: Figures = field(default_factory=dict)
    raw_score: Figure = None
    metrics: Figures = field(default_factory=dict)
    score: Figure = None
    margin: Figures = field(default_factory=dict)
    anchor: Figures = field(default_factory=dict)
    errors_from: int = 0
    engine_s: Figure = None
    incumbent: Figure = None
    ruled_out: str | None = None
    speed: Figure = None


# Robustness (study attrs) -----------------------------------------------------------------


@dataclass(frozen=True)
class RobustnessRecord(Stored):
    """Whether a config's gain over the baseline survives small workload changes, as the
    simulator predicted it (`tuner.fidelity.robustness`) or the engine measured it (`runs`
    set: `tuner.fidelity.robustness_measured`). A gain of ±inf (a config the engine refuses)
    is held and stored as None: JSON has no infinity."""

    OMITTED: ClassVar[Mapping[str, object]] = {"runs": None, "finished": True}

    spec_id: str | None = None  # the spec the check ran under
    fragile: bool | None = None  # None: not checked (see `verdict`)
    verdict: str = ""  # the finding in plain words
    gain: Figure = None  # the config's gain (−score) over the baseline, nominal workload
    gains: dict[str, Figure] = field(default_factory=dict)  # per perturbation
    # measured only: {perturbation: {"config": metrics, "baseline": metrics}}
    runs: AsWritten[dict[str, dict[str, float]]] | None = None
    # measured only: False while the check runs, and after it was interrupted (a signal, a
    # killed tuner): a later `tuner run` redoes it
    finished: bool = True

    @property
    def measured(self) -> bool:
        return self.runs is not None


# Constraints (system attrs) ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Constraints(Mapping[str, float]):
    """A trial's constraints (≤ 0 feasible): Optuna's named ones (`set_constraint`), else the
    legacy unnamed list optuna-dashboard reads, shown by index ("0", "1", ...). Named ones
    are either SLOs (`slos`: key → (scenario, limit)) or health checks (measured,
    failed_requests, capacity, pruned)."""

    named: dict[str, float] = dataclasses.field(default_factory=dict)
    legacy: tuple[float, ...] = ()

    def _shown(self) -> dict[str, float]:
        return self.named or {str(i): v for i, v in enumerate(self.legacy)}

    def __getitem__(self, key: str) -> float:
        return self._shown()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._shown())

    def __len__(self) -> int:
        return len(self._shown())

    @property
    def slos(self) -> dict[str, tuple[str, SloLimit]]:
        return {k: found for k in self.named if (found := parse_constraint_key(k)) is not None}

    @property
    def any_broken(self) -> bool:
        return any(v > 0 for v in [*self.named.values(), *self.legacy])

    @property
    def broken(self) -> list[str]:
        """Names of the named constraints broken (the legacy list has no names)."""
        return [k for k, v in self.named.items() if v > 0]

    @property
    def only_slos_broken(self) -> bool:
        """Every health check holds: only SLO constraints (if any) are broken."""
        if not self.named:
            return all(v <= 0 for v in self.legacy)
        slos = self.slos
        return all(v <= 0 or k in slos for k, v in self.named.items())

    def encode(self) -> tuple[dict[str, float], list[float]]:
        """What is written: the named constraints, and their values as the legacy list."""
        return dict(self.named), list(self.named.values()) if self.named else list(self.legacy)

    @classmethod
    def decode(cls, system_attrs: Mapping[str, Any]) -> Constraints:
        named = {
            k.removeprefix(NAMED_CONSTRAINT_PREFIX): float(v)
            for k, v in system_attrs.items()
            if k.startswith(NAMED_CONSTRAINT_PREFIX)
        }
        legacy = tuple(float(v) for v in system_attrs.get(LEGACY_CONSTRAINTS) or [])
        return cls(named, legacy)


# Calibration (study attr) -----------------------------------------------------------------


@dataclass(frozen=True)
class CalibrationRecord(Stored):
    """The screen's latest calibrated accelerator profile (`search.fidelity: multi`)."""

    profile: AsWritten[object] = field(default_factory=dict)  # a `GpuProfile` as a dict
    factors: AsWritten[float] = field(default_factory=dict)  # the fitted factors, by name
    # per metric: measured / predicted − 1, held out
    held_out_error: AsWritten[float] = field(default_factory=dict)
    observations: int = 0  # real trials it was fitted to
