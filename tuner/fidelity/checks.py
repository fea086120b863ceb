"""Every check of the best config once a run's trials have ended, in the order the session
runs them (`CHECKS`), each a `tuner.fidelity.best_check.Check`. A new check is one module
implementing `Check` and one line here.

The order: the simulator's checks first (free), then the engine's; the measured flags check
re-measures what the simulator's flags check dropped, so it comes after it.
"""

from __future__ import annotations

from tuner.fidelity.best_check import Check
from tuner.fidelity.robustness import Robustness
from tuner.fidelity.robustness_measured import MeasuredRobustness
from tuner.fidelity.smallest_check import Smallest
from tuner.fidelity.smallest_measured import MeasuredSmallest

CHECKS: tuple[Check, ...] = (Robustness(), Smallest(), MeasuredRobustness(), MeasuredSmallest())
