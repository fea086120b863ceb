"""How far off a simulated figure can be: the band printed beside every SIMULATED figure
(docs/simulator.md, "The band on every prediction"). Pure: plain values in, plain values out.

A band is a ratio interval [low, high] of true / simulated: [simulated × low, simulated ×
high] is meant to hold 80 % of the true figures, on a host and GPU the suite never saw
(docs/simulator.md, "The band on every prediction": its coverage, nested leave one source
out). Its home is the workload's shape (`regime`) and the figure's family (`family`:
throughput, TTFT, TPOT). Before a study has measured trials, the ratios come from published
real-GPU vLLM runs, each predicted by constants fitted without its source, a source counting
as one draw (`PUBLISHED_BANDS`); once the simulator has been calibrated on the study's own
trials, from those trials' residuals (`Bands.narrowed`).
Every band contains 1: the simulated figure itself is always inside its band.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from tuner.spec.figures import figure
from tuner.spec.workload import WorkloadSpec
from tuner.trial.keys import PREDICTED_PREFIX

if TYPE_CHECKING:
    from tuner.spec.parts import Traffic

Regime = Literal["light", "closed_loop", "poisson", "burst", "long_context"]
Family = Literal["throughput", "ttft", "tpot"]
REGIMES: tuple[Regime, ...] = ("light", "closed_loop", "poisson", "burst", "long_context")
FAMILIES: tuple[Family, ...] = ("throughput", "ttft", "tpot")

LONG_CONTEXT_TOKENS = 16384  # a prompt this long: its prefill, not the queue, sets TTFT
SHAREGPT_MEAN_PROMPT_TOKENS = 224  # ShareGPT_V3's mean prompt (docs/simulator.md)
COVERAGE = 0.8  # of held-out figures inside their band
DURATION = "duration"  # vLLM bench's seconds from the first request sent to the last answer
# A study's own residuals replace the table from this many per family: the hull of n
# exchangeable residuals holds the next one with probability (n - 1) / (n + 1), 80 % at 9.
MIN_RESIDUALS = 9

# Ratio published / SIMULATED per regime and family, from the cross-validated V1 figures of
# benchmarks/published/cv_last_run.json (each published figure predicted by constants fitted
# without its source: benchmarks/published_cv.py), with the source as the exchangeable unit:
# split conformal over sources on |ln ratio|, each source's score the |ln ratio| holding 90 %
# of its figures, the band the k-th smallest of n scores, k = ceil((n + 1) × 0.8): a source the
# suite never saw (a user's GPU and host) has 90 % of its figures inside with probability at
# least k / (n + 1) ≥ 80 %, were sources exchangeable. A
# regime with figures from fewer than 4 sources takes the family's band over every regime
# (today: every regime). Nested leave-one-source-out coverage and the rule: docs/simulator.md,
# "The band on every prediction". Written by (tests/test_published_cv.py holds the table to
# the file):
#   .venv/bin/python benchmarks/sim_bands.py
PUBLISHED_BANDS: dict[Regime, dict[Family, tuple[float, float]]] = {
    "light": {"throughput": (0.43, 2.32), "ttft": (0.45, 2.19), "tpot": (0.41, 2.39)},
    "closed_loop": {"throughput": (0.43, 2.32), "ttft": (0.45, 2.19), "tpot": (0.41, 2.39)},
    "poisson": {"throughput": (0.43, 2.32), "ttft": (0.45, 2.19), "tpot": (0.41, 2.39)},
    "burst": {"throughput": (0.43, 2.32), "ttft": (0.45, 2.19), "tpot": (0.41, 2.39)},
    "long_context": {"throughput": (0.43, 2.32), "ttft": (0.45, 2.19), "tpot": (0.41, 2.39)},
}


def regime(
    *,
    request_rate: float,
    max_concurrency: int | None,
    prompt_tokens: float,
    num_prompts: int | None = None,
) -> Regime:
    """The workload's regime, first match: long context (mean prompt >= 16k tokens), light
    (one request at a time: max_concurrency 1, or one prompt), closed loop
    (max_concurrency), burst (every request at once: rate inf), else Poisson arrivals."""
    if prompt_tokens >= LONG_CONTEXT_TOKENS:
        return "long_context"
    if max_concurrency == 1 or num_prompts == 1:
        return "light"
    if max_concurrency is not None:
        return "closed_loop"
    return "burst" if math.isinf(request_rate) else "poisson"


def mean_prompt_tokens(w: WorkloadSpec) -> float:
    """The workload's mean prompt, in tokens, from its spec alone (a jsonl file's: 0, read
    as short)."""
    if w.dataset_name == "random":
        return float(w.random_input_len)
    if w.dataset_name == "longdoc":
        weights = w.longdoc_weights or [1.0] * len(w.longdoc_lengths)
        total = sum(weights) or 1.0
        mean = sum(n * x for n, x in zip(w.longdoc_lengths, weights, strict=False)) / total
        return mean + w.longdoc_system_len
    if w.dataset_name == "sharegpt":
        return float(SHAREGPT_MEAN_PROMPT_TOKENS)
    return 0.0


def workload_regime(w: WorkloadSpec) -> Regime:
    """`regime` of a study's workload."""
    return regime(
        request_rate=w.request_rate,
        max_concurrency=w.max_concurrency,
        prompt_tokens=mean_prompt_tokens(w),
        num_prompts=w.num_prompts,
    )


def family(metric: str) -> Family | None:
    """The family of a vLLM bench key: throughput (any `*throughput`, goodput, capacity),
    TTFT, TPOT (ITL too: a decode step's time); None: no band (counts, scores, E2EL:
    `Bands.ratio` gives E2EL the hull of TTFT's and TPOT's)."""
    if metric.endswith(("throughput", "goodput")) or metric == "capacity_rps":
        return "throughput"
    if metric.endswith("_ttft_ms"):
        return "ttft"
    if metric.endswith(("_tpot_ms", "_itl_ms")):
        return "tpot"
    return None


@dataclass(frozen=True)
class Band:
    """A ratio interval true / simulated, and where it comes from, in words."""

    low: float
    high: float
    source: str

    def around(self, value: float) -> tuple[float, float]:
        """[value × low, value × high]: where the true figure is likely to be."""
        return value * self.low, value * self.high

    def inverse(self) -> Band:
        """The band of a time that the throughput's band scales inversely (a workload's
        seconds: the same requests served faster end sooner)."""
        return Band(1.0 / self.high, 1.0 / self.low, self.source)


def _hull(bands: Iterable[Band]) -> Band | None:
    found = list(bands)
    if not found:
        return None
    sources = "; ".join(dict.fromkeys(b.source for b in found))
    return Band(min(b.low for b in found), max(b.high for b in found), sources)


def residual_band(ratios: Sequence[float], what: str) -> Band | None:
    """The band that a study's own residuals (measured / calibrated prediction, one per trial
    held out of the fit) give: their hull, with 1 in it; None below `MIN_RESIDUALS`."""
    kept = [r for r in ratios if r > 0 and math.isfinite(r)]
    if len(kept) < MIN_RESIDUALS:
        return None
    return Band(min(1.0, *kept), max(1.0, *kept), f"{what}: {len(kept)} trials' residuals")


@dataclass(frozen=True)
class Bands:
    """The bands of one study's (or one workload's) simulated figures: the regimes of its
    workloads (the hull of their bands: a study with scenarios), and the families that its
    own trials narrowed (`narrowed`)."""

    regimes: tuple[Regime, ...]
    own: Mapping[Family, Band] = field(default_factory=dict)

    @classmethod
    def of(cls, workloads: Iterable[WorkloadSpec]) -> Bands:
        found = tuple(dict.fromkeys(workload_regime(w) for w in workloads))
        return cls(found or ("poisson",))

    @classmethod
    def of_study(cls, spec: Traffic) -> Bands:
        """The bands of a study's figures: the hull over its workloads' regimes (each
        scenario's, else its one workload)."""
        return cls.of(list(spec.workloads.values()) or [spec.workload])

    def plus(self, more: Regime) -> Bands:
        """These bands, over one more regime too."""
        return Bands(tuple(dict.fromkeys((*self.regimes, more))), self.own)

    def narrowed(self, residuals: Mapping[str, Sequence[float]], what: str) -> Bands:
        """The bands once the simulator has been calibrated on the study's own trials:
        `residuals` per metric, measured / calibrated prediction of each trial held out of the
        fit (`what`: the calibration, in words). A family with `MIN_RESIDUALS` of them takes
        their hull, never narrower than their spread (and possibly wider than the table's);
        the others keep the published table."""
        own = dict(self.own)
        for fam in FAMILIES:
            ratios = [r for m, rs in residuals.items() if family(m) == fam for r in rs]
            found = residual_band(ratios, what)
            if found is not None:
                own[fam] = found
        return Bands(self.regimes, own)

    def family_band(self, fam: Family) -> Band:
        if fam in self.own:
            return self.own[fam]
        published = (
            Band(*PUBLISHED_BANDS[r][fam], f"published GPU runs, {r.replace('_', ' ')}")
            for r in self.regimes
        )
        found = _hull(published)
        assert found is not None  # `regimes` is never empty
        return found

    def words(self) -> str:
        """`throughput ×0.81-1.14, TTFT ×…, TPOT ×… (published GPU runs, poisson)`: each
        family's ratio band and where it comes from (once, when all come from one place)."""
        names = {"throughput": "throughput", "ttft": "TTFT", "tpot": "TPOT"}
        bands = {fam: self.family_band(fam) for fam in FAMILIES}
        one = len({b.source for b in bands.values()}) == 1
        parts = [
            f"{names[fam]} ×{range_text((b.low, b.high))}" + ("" if one else f" ({b.source})")
            for fam, b in bands.items()
        ]
        return ", ".join(parts) + (f" ({bands['tpot'].source})" if one else "")

    def ratio(self, metric: str) -> Band | None:
        """The metric's band; E2EL: the hull of TTFT's and TPOT's; the bench's `duration`:
        the throughput's inverted (the same requests served faster end sooner); None: no band
        (a count, a score)."""
        fam = family(metric)
        if fam is not None:
            return self.family_band(fam)
        if metric.endswith("_e2el_ms"):
            return _hull([self.family_band("ttft"), self.family_band("tpot")])
        if metric == DURATION:
            return self.family_band("throughput").inverse()
        return None

    def around(self, metric: str, value: float | None) -> tuple[float, float] | None:
        """[low, high] of a simulated figure; None: no band, or no finite figure."""
        band = self.ratio(metric)
        if band is None or value is None or not math.isfinite(value):
            return None
        return band.around(value)

    def json_keys(self, metrics: Mapping[str, object]) -> dict[str, list[float]]:
        """`{m}_band: [low, high]` for each simulated metric `m` that has a band (the JSON of
        `tuner trials --simulated`, `tuner pareto --simulated`)."""
        out: dict[str, list[float]] = {}
        for name, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            found = self.around(name, float(value))
            if found is not None:
                out[f"{name}{BAND_SUFFIX}"] = [found[0], found[1]]
        return out

    def text(self, metric: str, value: float, unit: str = "") -> str:
        """`0.82 req/s (0.61-1.05, SIMULATED)`: a simulated figure with its band."""
        return band_text(value, self.around(metric, value), unit)


BAND_SUFFIX = "_band"


def with_bands(metrics: Mapping[str, object], bands: Bands | None) -> dict[str, object]:
    """`metrics` with each simulated figure's `{m}_band` beside it (`Bands.json_keys`);
    `bands` None (measured figures): `metrics` as they are."""
    if bands is None:
        return dict(metrics)
    out: dict[str, object] = {}
    keys = bands.json_keys(metrics)
    for name, value in metrics.items():
        out[name] = value
        if f"{name}{BAND_SUFFIX}" in keys:
            out[f"{name}{BAND_SUFFIX}"] = keys[f"{name}{BAND_SUFFIX}"]
    return out


def prediction_residuals(errors: Iterable[Mapping[str, float] | None]) -> dict[str, list[float]]:
    """Measured / predicted per metric, from each trial's stored `prediction_error` (measured
    / predicted - 1: the screen's prediction, made before the trial ran, from the trials
    before it): residuals that `Bands.narrowed` takes (the score's difference is no ratio)."""
    out: dict[str, list[float]] = {}
    for found in errors:
        for metric, error in (found or {}).items():
            if family(metric) is not None or metric.endswith("_e2el_ms"):
                out.setdefault(metric, []).append(1.0 + error)
    return out


def with_predicted_bands(row: Mapping[str, object], bands: Bands) -> dict[str, object]:
    """A measured trial's row with each SIMULATED `predicted_<m>` (the screen's prediction)
    followed by its `predicted_<m>_band`; its measured figures stay as they are."""
    predicted = {k: v for k, v in row.items() if k.startswith(PREDICTED_PREFIX)}
    keys = bands.json_keys({k[len(PREDICTED_PREFIX) :]: v for k, v in predicted.items()})
    out: dict[str, object] = {}
    for name, value in row.items():
        out[name] = value
        band = keys.get(f"{name[len(PREDICTED_PREFIX) :]}{BAND_SUFFIX}")
        if name in predicted and band is not None:
            out[f"{name}{BAND_SUFFIX}"] = band
    return out


def band_text(value: float, around: tuple[float, float] | None, unit: str = "") -> str:
    """`0.82 req/s (0.61-1.05, SIMULATED)`; no band: `0.82 req/s (SIMULATED)`."""
    unit = f" {unit.strip()}" if unit.strip() else ""
    if around is None:
        return f"{figure(value)}{unit} (SIMULATED)"
    return f"{figure(value)}{unit} ({range_text(around)}, SIMULATED)"


def range_text(around: tuple[float, float]) -> str:
    """`0.61-1.05`: a band's ends as people read them."""
    return f"{figure(around[0])}-{figure(around[1])}"
