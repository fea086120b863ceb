"""The smallest change that keeps the gain, measured on the engine: `tuner run --confirm K`.

The simulator's check (`tuner.fidelity.smallest_check`) is free but only as good as the
simulator. So after `--confirm`'s re-measurements on a real engine, the best config is started
once more, then each config with one of its changed flags reverted to vLLM's default, then the
config with every dropped flag reverted (and, if that loses the gain, again with the costliest
one put back): one engine start and one run of the study's workload each, scored against the
measured baseline trial as a trial is scored, and judged by the same rule (`smallest_check.
loses`). The best config is measured again beside them so that every figure compared comes
from the same session. The record is stored as `tuner_smallest_measured:<trial>`;
`StudyRecord.smallest_of` prefers it to the simulator's. Its engine logs are
`smallest-<trial>-<ts>.log` in the study's log folder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tuner import trial as tr
from tuner.fidelity.smallest import changed_flags
from tuner.fidelity.smallest_check import decide, scorer
from tuner.measure.measurement import Measurement
from tuner.runners.engine_runner import TrialContext, TrialRunner
from tuner.spec.study import StudySpec
from tuner.trial import SmallestChange, TrialPoint
from tuner.trial.smallest import MEASURED

NOTE = "on the engine, one run of the study's workload each (tuner run --confirm)"


def check_best_measured(
    study: Any,
    spec: StudySpec,
    points: Sequence[TrialPoint],
    runner: TrialRunner,
    say: Callable[[str], None] = lambda _: None,
) -> SmallestChange | None:
    """Measure the check for the best config of the current spec; store and return the record
    (None when there is no best, the best is the baseline, or it changes no flag)."""
    best, base = tr.best(points), tr.baseline_of(points)
    if best is None or base is None or best.number == base.number:
        return None
    flags = changed_flags(best.params, base.params)
    if not flags:
        return None
    say(
        f"re-measuring trial {best.number} on the engine with each of its {len(flags)} changed "
        f"flags reverted to vLLM's default ({len(flags) + 1} engine starts, more if the "
        "flags it drops matter together)"
    )

    def measure(params: dict[str, Any]) -> Measurement | None:
        name = f"smallest-{best.number:04d}"
        ctx = TrialContext(spec.name, -1, dict(params), phase=lambda _: None, log_name=name)
        m = runner.measure(ctx)
        return m if m.metrics is not None else None

    record = decide(spec, best, base, scorer(spec, measure, base), NOTE, MEASURED)
    tr.write_smallest(study, best.number, record)
    return record
