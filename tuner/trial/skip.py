"""What the prediction skip (`tuner.fidelity.predict_skip`) recorded about a trial before its
launch: the calibrated prediction, the margin it was trusted to, and, when the launch was
skipped, why ("ruled out by prediction"). Stored under `keys.SKIP_PREDICTION`;
docs/early-stopping.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tuner.trial.payloads import is_finite


def _floats(raw: object) -> dict[str, float]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): float(v) for k, v in raw.items() if is_finite(v)}


def _opt(raw: object) -> float | None:
    return float(raw) if is_finite(raw) else None


@dataclass(frozen=True)
class SkipPrediction:
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

    raw: dict[str, float] = field(default_factory=dict)
    raw_score: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    score: float | None = None
    margin: dict[str, float] = field(default_factory=dict)
    anchor: dict[str, float] = field(default_factory=dict)
    errors_from: int = 0
    engine_s: float | None = None
    incumbent: float | None = None
    ruled_out: str | None = None
    speed: float | None = None

    def encode(self) -> dict[str, object]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def decode(cls, raw: object) -> SkipPrediction | None:
        if not isinstance(raw, Mapping):
            return None
        reason = raw.get("ruled_out")
        return cls(
            raw=_floats(raw.get("raw")),
            raw_score=_opt(raw.get("raw_score")),
            metrics=_floats(raw.get("metrics")),
            score=_opt(raw.get("score")),
            margin=_floats(raw.get("margin")),
            anchor=_floats(raw.get("anchor")),
            errors_from=int(raw.get("errors_from") or 0),
            engine_s=_opt(raw.get("engine_s")),
            incumbent=_opt(raw.get("incumbent")),
            ruled_out=str(reason) if reason else None,
            speed=_opt(raw.get("speed")),
        )
