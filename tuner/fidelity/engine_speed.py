"""How fast the engine is against the study's profile, read from one measured trial (issue 32
§5; docs/early-stopping.md, "A profile off in scale").

A profile off in scale misjudges more than the scale: at a fixed request rate, an engine
2× faster than its profile drains a queue that the profile predicts, so a config that
queues on the profile may not queue on the engine, and a ratio of predictions (the
candidate's against the reference's) does not cancel that. So the profile is re-scaled:
the speed `s` (every constant `s`× faster, `tuner.sim.fit.speed_factors`) at which the
simulator reproduces the reference trial's measured figures, and the candidates are
predicted on the profile at that speed, where queues form (or not) as they do on the engine.

The fit is one number: `s` minimises the sum of squared log misses, ln(measured /
predicted at `s`), over the figures that the prediction reads (the SLO figures, the
objective's weighted metrics, capacity mode's capacity), by a bounded Brent search on
ln `s` within ±ln `MAX_FACTOR` to `SPEED_RESOLUTION`. The simulator runs the reference's
whole trial once per step (about 20 steps, once per reference per study).
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
