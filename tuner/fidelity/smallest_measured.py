"""The smallest change that keeps the gain, measured on the engine: `tuner run --confirm K`.

The simulator's check (`tuner.fidelity.smallest_check`) is free but only as good as the
simulator: a flag it does not model (or models as a no-op) it drops. So after `--confirm`'s
re-measurements on a real engine, the flags the simulator dropped are re-measured: the best
config is started once more, then with each dropped flag reverted alone to vLLM's default,
then with all of them reverted (and, if that loses the gain, with the costliest one put back):
one engine start and one run of the study's workload each (a config already measured in this
check is not started again, nor the best config when `--confirm` has just re-run it: its
latest re-run stands for it), scored against the measured baseline trial as a trial is scored,
and judged by the same rule: the simulator's check on the engine (`smallest_check.on_runner`).
The flags the simulator kept are not re-measured: they stay. Nothing is measured when the
simulator dropped nothing. The record is stored as `tuner_smallest_measured:<trial>`;
`StudyRecord.smallest_of` prefers it to the simulator's. Its engine logs are
`smallest-<trial>-<ts>.log` in the study's log folder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from tuner import trial as tr
from tuner.fidelity.best_check import CheckInput, best_pair
from tuner.fidelity.smallest_check import on_runner
from tuner.measure.stored import Stored
from tuner.runners.trial_runner import TrialRunner
from tuner.spec.parts import Measuring
from tuner.trial import SmallestChange, TrialPoint
from tuner.trial.smallest import MEASURED, SIMULATED

NOTE = "on the engine, one run of the study's workload each (tuner run --confirm)"
SIM_NOTE = "on the study's engine, the simulator (tuner sim serve), " + NOTE.split(", ", 1)[1]


def check_best_measured(
    study: tr.AttrsHolder,
    spec: Measuring,
    points: Sequence[TrialPoint],
    runner: TrialRunner,
    say: Callable[[str], None] = lambda _: None,
) -> SmallestChange | None:
    """Re-measure the flags the simulator dropped from the best config of the current spec;
    store and return the record (None when there is no best, the best is the baseline, or
    the simulator dropped no flag of it)."""
    pair = best_pair(points)
    if pair is None:
        return None
    best, base = pair
    predicted = tr.StudyRecord.of(study).smallest.get(best.number)  # the planner's check
    if predicted is None or predicted.spec_id != best.spec_id:
        return None
    dropped = [r.flag for r in predicted.dropped] if predicted.checked else []
    if not dropped:
        return None
    rerun = _latest_rerun(points, best)
    starts = predicted.remeasure_starts + (rerun is None)
    say(
        f"re-measuring trial {best.number} on the engine with the flags the simulator dropped "
        f"reverted to vLLM's default ({', '.join(dropped)}): {starts} engine start(s), more "
        "if they matter together"
    )
    record, simulated = on_runner(
        spec, runner, best, base, NOTE, MEASURED, ref=base, only=dropped, known=rerun
    )
    if simulated:  # figures of the simulator are labelled SIMULATED, wherever they come
        record = replace(record, source=SIMULATED, note=SIM_NOTE)
    record = replace(record, engine=True)
    tr.write_smallest(study, best.number, record)
    return record


def _latest_rerun(points: Sequence[TrialPoint], best: TrialPoint) -> TrialPoint | None:
    """`--confirm`'s last re-run of the best config, measured whole with its intervals: the
    config as this session's engine runs it, so it is not started again."""
    runs = [p for p in tr.reruns(points).get(best.number, []) if p.feasible and p.record.cis]
    return max(runs, key=lambda p: p.number) if runs else None


class MeasuredSmallest:
    """Which flags carry the gain, re-measured on the engine (`tuner.fidelity.best_check.Check`):
    after a `--confirm` on a real engine, the flags the simulator's check (`Smallest`, before
    it in `CHECKS`) dropped, unless `--no-confirm-flags`."""

    name = "smallest_measured"
    prefix = tr.SMALLEST_MEASURED
    record: type[Stored] = SmallestChange
    on_engine = True
    during = "the measured check of which flags carry the gain"

    def wanted(self, given: CheckInput) -> bool:
        return not given.runner.planned and bool(given.confirm) and given.confirm_flags

    def run(self, given: CheckInput) -> SmallestChange | None:
        return check_best_measured(
            given.study, given.spec, given.points, given.runner, say=given.say
        )
