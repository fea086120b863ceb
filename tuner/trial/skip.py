"""What the prediction skip (`tuner.fidelity.predict_skip`) recorded about a trial before its
launch: the calibrated prediction, the margin it was trusted to, and, when the launch was
skipped, why ("ruled out by prediction"). Stored under `keys.SKIP_PREDICTION`;
docs/early-stopping.md.
"""

from __future__ import annotations

from dataclasses import field

from pydantic.dataclasses import dataclass

from tuner.trial.stored import Figure, Figures, Stored


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
