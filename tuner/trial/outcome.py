"""What became of each trial, counted once (pure): the one source of every count of trials by
how they ended that `tuner trials`, the report's header and the engine-time line give.

A trial's `status` (`point.Status`) is what Optuna's state and the constraints say; it calls
"pruned" both a launch stopped early and a config never launched because the calibrated
simulator ruled it out, and "failed" both a crash and a config refused before launch (vLLM's
rules, the memory precheck). Counted under one word, a study of 28 ruled-out configs and one
stopped run read "29 stopped early (pruned)" beside "1 stopped early" (issue 46). `outcome`
tells them apart; `tally` counts by it, in one order, in one set of words.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from tuner.trial.point import TrialPoint

Outcome = Literal[
    "feasible", "infeasible", "stopped", "ruled-out", "refused", "failed", "waiting", "running"
]

# Each outcome in words, in the order every count lists them
OUTCOME_WORDS: dict[Outcome, str] = {
    "feasible": "feasible",
    "infeasible": "infeasible",
    "stopped": "stopped early (pruned)",
    "ruled-out": "ruled out on a prediction (never launched)",
    "refused": "refused before launch (never launched)",
    "failed": "failed",
    "waiting": "waiting",
    "running": "running",
}
# Listed even when none ended so (the others only when some did)
ALWAYS_COUNTED: tuple[Outcome, ...] = ("feasible", "infeasible", "failed")


def outcome(p: TrialPoint) -> Outcome:
    """How trial `p` ended: measured within the constraints or not; stopped early by the
    pruner (launched); ruled out on the simulator's prediction or refused before launch
    (vLLM's rules, the memory precheck), neither launched; failed; waiting; running."""
    if p.record.ruled_out:
        return "ruled-out"
    if p.status in ("feasible", "infeasible"):
        return p.status
    if p.status == "pruned":
        return "stopped"
    if p.status == "failed":
        return "refused" if p.record.predicted and p.state == "COMPLETE" else "failed"
    return "waiting" if p.state == "WAITING" or p.stale_queue else "running"


def tally(points: Iterable[TrialPoint]) -> dict[Outcome, int]:
    """How many trials ended each way, every outcome in `OUTCOME_WORDS`' order."""
    found = [outcome(p) for p in points]
    return {o: found.count(o) for o in OUTCOME_WORDS}


def tally_words(points: Iterable[TrialPoint]) -> list[tuple[str, int]]:
    """(words, count) for each outcome some trial ended in, and always the first three."""
    return [(OUTCOME_WORDS[o], n) for o, n in tally(points).items() if n or o in ALWAYS_COUNTED]


def tally_line(points: Iterable[TrialPoint]) -> str:
    """`57 trials: 22 feasible, 0 infeasible, 7 failed, ...` (`tuner trials`' last line)."""
    points = list(points)
    return f"{len(points)} trials: " + ", ".join(f"{n} {w}" for w, n in tally_words(points))
