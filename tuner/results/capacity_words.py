"""A capacity in words, the same in `best`, `export`, `trials` and the report.

A capacity search that met every SLO at `capacity.max_rps` stopped there: the config serves
at least that rate, and how much more is unknown. Such a capacity reads "≥ 5 req/s
(the highest rate allowed)", never "capacity 5 req/s", and never "run cap reached". The words
themselves are `tuner.trial.words` (the live line of `tuner run` uses them too).
"""

from __future__ import annotations

from tuner.trial import CapacityResult
from tuner.trial.words import CAPPED_NOTE, GOODPUT_NOTE, goodput, rate

__all__ = ["CAPPED_NOTE", "GOODPUT_NOTE", "entry_capped", "goodput", "rate"]


def entry_capped(found: CapacityResult | None) -> bool:
    """Whether one capacity search (a trial's, or one scenario's) stopped at max_rps."""
    return found is not None and found.capped
