"""How fast the engine is against the study's profile, read from one measured trial (issue 32
§5). Why a ratio of predictions is not enough, and the fit, are docs/early-stopping.md,
"Prediction skips" (step 2) and "A profile off in scale".

The speed `s` scales every constant of the profile alike (`tuner.sim.fit.speed_factors`); the
fit is one number, `s` within ±ln `MAX_FACTOR` found to `SPEED_RESOLUTION`, over the figures the
prediction reads (the SLO figures, the weighted metrics, capacity mode's capacity). It simulates
the reference's whole trial once per step of the search (about 20 steps, once per reference per
study), so callers fit it once and keep it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tuner.sim.fit import MAX_FACTOR

SPEED_RESOLUTION = math.log(1.02)  # 2 %: finer than a measured figure's run-to-run spread


def fitted_speed(misses_at: Callable[[float], dict[str, float] | None]) -> float:
    """The speed at which the re-scaled profile reproduces the reference best. `misses_at(s)`:
    the reference's miss per figure, ln(measured / predicted), on the profile `s`× faster
    (None: the simulator refuses the reference there). 1.0 when no figure can be read."""
    from scipy.optimize import minimize_scalar  # lazily: the CLI's start-up does not pay

    def cost(log_speed: float) -> float:
        misses = misses_at(math.exp(log_speed))
        if not misses:
            return math.inf
        return sum(e * e for e in misses.values())

    if not misses_at(1.0) or cost(0.0) == 0.0:
        return 1.0  # nothing to read, or the profile reproduces the reference as it is
    bound = math.log(MAX_FACTOR)
    found = minimize_scalar(
        cost, bounds=(-bound, bound), method="bounded", options={"xatol": SPEED_RESOLUTION}
    )
    best = float(found.x)
    return 1.0 if cost(0.0) <= cost(best) else round_speed(math.exp(best))


def round_speed(speed: float) -> float:
    """Three significant digits: one simulator per speed, cached by it."""
    return float(f"{speed:.3g}")
