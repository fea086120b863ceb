"""Request arrival times, drawn the way `vllm bench serve` draws them (pure)."""

from __future__ import annotations

import math

import numpy as np


def arrival_times(n: int, request_rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Send offsets in seconds from the first dispatch, one per request, non-decreasing.

    `request_rate = inf` sends everything at t=0. Otherwise the gaps are gamma-distributed
    with shape=burstiness and scale=1/(rate*burstiness): burstiness 1 is a Poisson process,
    lower is burstier, `inf` gives constant gaps of 1/rate. As vLLM does, the gaps come from
    numpy's legacy generator seeded with `seed`, the first request waits one gap, and the
    cumulative offsets are rescaled so the last lands at exactly n/rate (so throughput does
    not depend on the seed's luck).
    """
    if n <= 0:
        return np.zeros(0)
    if not request_rate > 0:
        raise ValueError("request_rate must be > 0")
    if not burstiness > 0:
        raise ValueError("burstiness must be > 0")
    if math.isinf(request_rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / request_rate)
    else:
        rng = np.random.RandomState(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    offsets = np.cumsum(gaps)
    if offsets[-1] > 0:
        offsets *= (n / request_rate) / offsets[-1]
    return offsets
