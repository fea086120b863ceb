"""The screen's unit cube (`tuner.fidelity.screen`): each parameter of a search space mapped
to [0, 1) (log ranges in log, categorical choices as equal slices), and distances in it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna

D = optuna.distributions


def distance(u: Sequence[float], seen: np.ndarray | None) -> float:
    """Euclidean distance to the nearest real trial in the unit cube, scaled to [0, 1]."""
    if seen is None or not len(seen):
        return 1.0
    nearest = float(np.min(np.linalg.norm(seen - np.asarray(u), axis=1)))
    return min(nearest / math.sqrt(len(u)), 1.0)


def from_unit(d: D.BaseDistribution, x: float) -> Any:
    x = min(max(x, 0.0), 1.0 - 1e-12)
    if isinstance(d, D.CategoricalDistribution):
        return d.choices[int(x * len(d.choices))]
    assert isinstance(d, D.IntDistribution | D.FloatDistribution)
    if d.log:
        value = math.exp(math.log(d.low) + x * (math.log(d.high) - math.log(d.low)))
    else:
        value = d.low + x * (d.high - d.low)
    if isinstance(d, D.IntDistribution):
        step = d.step or 1
        return int(min(max(d.low + round((value - d.low) / step) * step, d.low), d.high))
    if d.step is not None:
        k = round((value - d.low) / d.step)
        return float(round(min(d.low + k * d.step, d.high), 9))
    return float(value)


def to_unit(d: D.BaseDistribution, value: Any) -> float:
    if isinstance(d, D.CategoricalDistribution):
        i = d.choices.index(value) if value in d.choices else 0
        return (i + 0.5) / len(d.choices)
    assert isinstance(d, D.IntDistribution | D.FloatDistribution)
    if d.high == d.low:
        return 0.5
    if d.log:
        return (math.log(value) - math.log(d.low)) / (math.log(d.high) - math.log(d.low))
    return (float(value) - d.low) / (d.high - d.low)
