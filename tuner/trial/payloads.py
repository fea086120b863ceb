"""The structured values a trial or its study stores, each with one encoder and one decoder.

Optuna stores attrs as JSON. Each payload below is a frozen dataclass; `encode()` gives the
JSON shape that is stored (the same shapes and keys as every earlier version wrote, so old
databases load), and `decode(raw)` reads it back, tolerating missing keys and returning None
for a value that is not of the shape at all. docs/storage.md lists them with their units.

The SLO constraint's key (`metric<=value`, `scenario:metric<=value`) is coded by
`tuner.spec.slo.SloLimit.constraint_key` and `parse_constraint_key`, below the measurement
layer that writes it; `Constraints` here is the one reader of a trial's constraints.
Each run's prefix-cache hit rate (`PrefixCacheRun`) has its own module, `prefix_cache`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from tuner.spec.metric_keys import direction
from tuner.spec.slo import SloLimit, parse_constraint_key
from tuner.trial.keys import LEGACY_CONSTRAINTS, NAMED_CONSTRAINT_PREFIX


def is_finite(value: object) -> TypeGuard[float]:
    """A real number (not a bool) that is finite: what a stored figure must be."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_metric(name: str) -> bool:
    """Whether an attr name is a vLLM result metric (as opposed to score, flags, notes)."""
    return direction(name) is not None


def metrics_of(raw: object) -> dict[str, float]:
    """The finite vLLM metrics of a stored mapping (other keys and values left out)."""
    if not isinstance(raw, Mapping):
        return {}
    return {k: float(v) for k, v in raw.items() if is_finite(v) and is_metric(k)}


def _float(value: object) -> float | None:
    return float(value) if is_finite(value) else None


def _floats(raw: object) -> dict[str, float]:
    """A stored {name: number} mapping, its finite numbers only."""
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if is_finite(v)}


# Confidence intervals ---------------------------------------------------------------------


def encode_ci(ci: tuple[float, float]) -> list[float]:
    """A 95 % bootstrap interval as stored: [low, high]."""
    return [float(ci[0]), float(ci[1])]


def decode_ci(raw: object) -> tuple[float, float] | None:
    if isinstance(raw, list | tuple) and len(raw) == 2 and all(is_finite(x) for x in raw):
        return float(raw[0]), float(raw[1])
    return None


def encode_cis(cis: Mapping[str, tuple[float, float]]) -> dict[str, list[float]]:
    return {k: encode_ci(v) for k, v in cis.items()}


def decode_cis(raw: object) -> dict[str, tuple[float, float]]:
    if not isinstance(raw, Mapping):
        return {}
    return {k: ci for k, v in raw.items() if (ci := decode_ci(v)) is not None}


# Capacity mode ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacityResult:
    """The rate search of one workload (`tuner.measure.capacity`), as the trial stores it."""

    capacity_rps: float  # req/s, the highest offered rate that met every SLO (0: none did)
    goodput_rps: float | None = None  # request_goodput of the run at that rate
    resolved: bool = False  # the bracket closed to the resolution
    capped: bool = False  # feasible at max_rps: the capacity is at least this
    runs: int = 0  # workload runs the search took
    above_rps: float | None = None  # the lowest rate that broke an SLO (None: none did)

    def encode(self) -> dict[str, object]:
        return {
            "capacity_rps": self.capacity_rps,
            "goodput_rps": self.goodput_rps,
            "resolved": self.resolved,
            "capped": self.capped,
            "runs": self.runs,
            "above_rps": self.above_rps,
        }

    @classmethod
    def decode(cls, raw: object) -> CapacityResult | None:
        if not isinstance(raw, Mapping):
            return None
        return cls(
            capacity_rps=_float(raw.get("capacity_rps")) or 0.0,
            goodput_rps=_float(raw.get("goodput_rps")),
            resolved=bool(raw.get("resolved", False)),
            capped=bool(raw.get("capped", False)),
            runs=int(raw.get("runs") or 0),
            above_rps=_float(raw.get("above_rps")),
        )


@dataclass(frozen=True)
class RateStep:
    """One run of the capacity search: a point of the latency–load curve, all its figures."""

    rate_rps: float  # the offered rate, req/s
    feasible: bool  # met every SLO
    scenario: str | None = None  # the scenario it ran (None: the single workload)
    pruned_reason: str | None = None  # stopped early: above capacity
    metrics: dict[str, float] = field(default_factory=dict)  # vLLM's figures of the run

    def encode(self) -> dict[str, object]:
        figures = {k: float(v) for k, v in self.metrics.items() if is_finite(v)}
        return {
            "scenario": self.scenario or None,
            "rate_rps": self.rate_rps,
            "feasible": self.feasible,
            "pruned_reason": self.pruned_reason,
            **figures,
        }

    @classmethod
    def decode(cls, raw: object) -> RateStep | None:
        if not isinstance(raw, Mapping) or not is_finite(raw.get("rate_rps")):
            return None
        return cls(
            rate_rps=float(raw["rate_rps"]),
            feasible=bool(raw.get("feasible", False)),
            scenario=raw.get("scenario") or None,
            pruned_reason=raw.get("pruned_reason"),
            metrics={k: float(v) for k, v in raw.items() if k != "rate_rps" and is_finite(v)},
        )


def decode_rate_steps(raw: object) -> tuple[RateStep, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(s for s in (RateStep.decode(x) for x in raw) if s is not None)


# Scenario mixes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioEntry:
    """One scenario of a trial: its own figures, score and (capacity mode) rate search."""

    weight: float
    metrics: dict[str, Any]  # the run's figures as measured (`metrics_of` keeps the metrics)
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    capacity: CapacityResult | None = None
    score: float | None = None  # against the reference's same scenario (None: not scored)

    def encode(self) -> dict[str, object]:
        out: dict[str, object] = {
            "weight": self.weight,
            "metrics": dict(self.metrics),
            "ci": encode_cis(self.ci),
            "capacity": self.capacity.encode() if self.capacity is not None else None,
        }
        if self.score is not None:
            out["score"] = self.score
        return out

    @classmethod
    def decode(cls, raw: object) -> ScenarioEntry | None:
        if not isinstance(raw, Mapping):
            return None
        return cls(
            weight=_float(raw.get("weight")) or 0.0,
            metrics=dict(m) if isinstance(m := raw.get("metrics"), Mapping) else {},
            ci=decode_cis(raw.get("ci")),
            capacity=CapacityResult.decode(raw.get("capacity")),
            score=_float(raw.get("score")),
        )


def encode_scenarios(entries: Mapping[str, ScenarioEntry]) -> dict[str, dict[str, object]]:
    return {name: e.encode() for name, e in entries.items()}


def decode_scenarios(raw: object) -> dict[str, ScenarioEntry]:
    if not isinstance(raw, Mapping):
        return {}
    return {n: e for n, v in raw.items() if (e := ScenarioEntry.decode(v)) is not None}


# The screen (`search.fidelity: multi`) ----------------------------------------------------


@dataclass(frozen=True)
class ScreenInfo:
    """How the screen chose a trial (`tuner.fidelity.screen`)."""

    candidates: int  # configs the screen was asked to consider
    screened: int  # configs it predicted
    requests: int  # requests of the screen's workload
    calibrate_s: float  # seconds calibrating
    screen_s: float  # seconds predicting
    rank: float  # the lower confidence bound it ranked by (score units, lower is better)
    distance: float  # to the nearest real trial, in the unit cube [0, 1]
    score_error: float  # the screen's score error it assumed (score units)
    predicted_feasible: bool  # predicted to meet every SLO
    calibrated_on: int  # real trials the calibration was fitted to (0: uncalibrated)
    # the factors of the profile drawn from the calibration's posterior that ranked the
    # candidates (a Thompson draw); empty: the calibrated profile itself ranked them
    drawn_factors: Mapping[str, float] = field(default_factory=dict)

    def encode(self) -> dict[str, object]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["drawn_factors"] = dict(self.drawn_factors)
        return out

    @classmethod
    def decode(cls, raw: object) -> ScreenInfo | None:
        if not isinstance(raw, Mapping):
            return None
        return cls(
            candidates=int(raw.get("candidates") or 0),
            screened=int(raw.get("screened") or 0),
            requests=int(raw.get("requests") or 0),
            calibrate_s=_float(raw.get("calibrate_s")) or 0.0,
            screen_s=_float(raw.get("screen_s")) or 0.0,
            rank=_float(raw.get("rank")) or 0.0,
            distance=_float(raw.get("distance")) or 0.0,
            score_error=_float(raw.get("score_error")) or 0.0,
            predicted_feasible=bool(raw.get("predicted_feasible", False)),
            calibrated_on=int(raw.get("calibrated_on") or 0),
            drawn_factors=_floats(raw.get("drawn_factors")),
        )


# Robustness (study attrs) -----------------------------------------------------------------


@dataclass(frozen=True)
class RobustnessRecord:
    """Whether a config's gain over the baseline survives small workload changes, as the
    simulator predicted it (`tuner.fidelity.robustness`) or the engine measured it (`runs`
    set: `tuner.fidelity.robustness_measured`)."""

    spec_id: str | None  # the spec the check ran under
    fragile: bool | None  # None: not checked (see `verdict`)
    verdict: str  # the finding in plain words
    gain: float | None = None  # the config's gain (−score) over the baseline, nominal workload
    gains: dict[str, float | None] = field(default_factory=dict)  # per perturbation
    # measured only: {perturbation: {"config": metrics, "baseline": metrics}}
    runs: dict[str, dict[str, dict[str, float]]] | None = None
    # measured only: False while the check runs, and after it was interrupted (a signal, a
    # killed tuner): a later `tuner run` redoes it
    finished: bool = True

    def encode(self) -> dict[str, object]:
        """±inf (a config the engine refuses) is stored as None: JSON has no infinity."""
        out: dict[str, object] = {
            "spec_id": self.spec_id,
            "fragile": self.fragile,
            "verdict": self.verdict,
            "gain": self.gain,
            "gains": {
                k: v if v is None or math.isfinite(v) else None for k, v in self.gains.items()
            },
        }
        if self.runs is not None:
            out["runs"] = self.runs
        if not self.finished:
            out["finished"] = False
        return out

    @classmethod
    def decode(cls, raw: object) -> RobustnessRecord | None:
        if not isinstance(raw, Mapping):
            return None
        gains = raw.get("gains")
        runs = raw.get("runs")
        return cls(
            spec_id=raw.get("spec_id"),
            fragile=raw.get("fragile"),
            verdict=str(raw.get("verdict") or ""),
            gain=_float(raw.get("gain")),
            gains=dict(gains) if isinstance(gains, Mapping) else {},
            runs=dict(runs) if isinstance(runs, Mapping) else None,
            finished=raw.get("finished") is not False,
        )

    @property
    def measured(self) -> bool:
        return self.runs is not None


# Constraints (system attrs) ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Constraints(Mapping[str, float]):
    """A trial's constraints (≤ 0 feasible): Optuna's named ones (`set_constraint`), else the
    legacy unnamed list optuna-dashboard reads, shown by index ("0", "1", ...). Named ones
    are either SLOs (`slos`: key → (scenario, limit)) or health checks (measured,
    failed_requests, capacity, pruned)."""

    named: dict[str, float] = field(default_factory=dict)
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
class CalibrationRecord:
    """The screen's latest calibrated accelerator profile (`search.fidelity: multi`)."""

    profile: dict[str, Any]  # `tuner.sim.profiles.GpuProfile` as a dict
    factors: dict[str, float]  # the fitted factors, by name
    held_out_error: dict[str, float]  # per metric: measured / predicted − 1, held out
    observations: int  # real trials it was fitted to

    def encode(self) -> dict[str, object]:
        return {
            "profile": dict(self.profile),
            "factors": dict(self.factors),
            "held_out_error": dict(self.held_out_error),
            "observations": self.observations,
        }

    @classmethod
    def decode(cls, raw: object) -> CalibrationRecord | None:
        if not isinstance(raw, Mapping):
            return None
        return cls(
            profile=dict(raw.get("profile") or {}),
            factors=dict(raw.get("factors") or {}),
            held_out_error=dict(raw.get("held_out_error") or {}),
            observations=int(raw.get("observations") or 0),
        )
