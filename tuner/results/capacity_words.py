"""A capacity in words, the same in `best`, `export`, `trials` and the report.

A capacity search that met every SLO at `capacity.max_rps` stopped there: the config serves
at least that rate, and how much more is unknown. Such a capacity reads "at least 5 req/s
(the highest rate allowed)", never "capacity 5 req/s", and never "run cap reached".
"""

from __future__ import annotations

from tuner.trial import CapacityResult

CAPPED_NOTE = "(the highest rate allowed)"


def entry_capped(found: CapacityResult | None) -> bool:
    """Whether one capacity search (a trial's, or one scenario's) stopped at max_rps."""
    return found is not None and found.capped


def rate(rps: float, is_capped: bool) -> str:
    """`5 req/s`, or `at least 5 req/s (the highest rate allowed)`."""
    return f"at least {rps:.4g} req/s {CAPPED_NOTE}" if is_capped else f"{rps:.4g} req/s"
