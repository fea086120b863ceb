"""A lost race's figures are a stopped run's (the requests done when an SLO broke for sure):
`tuner run`'s live line and `tuner trials` mark them, never print them as a whole run's, which
read within the SLO beside "capacity below X" (the walk of 7 Dec: p99 TTFT 13383 ms against
p99_ttft_ms<=20000). In process: the record and its words."""

from __future__ import annotations

from tuner.measure.runs import CapacityResult, RateStep
from tuner.trial.record import TrialRecord
from tuner.trial.words import trial_line

FIGURES = {"p99_ttft_ms": 13383.0, "mean_tpot_ms": 43.8, "output_throughput": 78.1}
LOST = CapacityResult(0.0, runs=1, above_rps=0.1004, capacity_rps_low=0.0, capacity_rps_high=0.1004)


def _record(pruned_reason: str | None) -> TrialRecord:
    step = RateStep(0.1004, False, pruned_reason=pruned_reason, metrics=FIGURES)
    return TrialRecord(capacity=LOST, rate_steps=(step,), score=1.304)


def test_a_lost_race_stopped_early_marks_its_figures() -> None:
    stopped = _record("SLO p99_ttft_ms<=20000 broken for sure")
    assert stopped.stopped_figures and not stopped.partial  # a finished trial, not a stopped one
    line = trial_line(stopped, FIGURES)
    assert "capacity below 0.1004 req/s (0-0.1004)  at the lowest rate tried, stopped early" in line
    assert "p99 TTFT ~13383" in line, line
    whole = _record(None)  # its one run ran whole: its figures are a whole run's
    assert not whole.stopped_figures and "~" not in trial_line(whole, FIGURES)
