"""`tuner plan`'s trials one at a time, in a throw-away store: the loop of the plan preview
(`tuner.scaffold.preview` judges the trials and says what they mean; `tuner init` and `tuner
check` pass `planned_trials` to it, so drafting a study file runs no study loop itself).

The same trials as `tuner plan`: its loop, sampler, seed and prediction skips (they steer the
sampler, so the preview's trials are the plan's, and they spare the skipped configs' runs).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable

from tuner.run.cost import length_only_runner
from tuner.run.loop import StudyLoop
from tuner.run.reading import budget_used
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import TrialPoint
from tuner.trial.reading import read_study


def planned_trials(
    spec: StudySpec, n_trials: int, deadline: float, stop: Callable[[list[TrialPoint]], bool]
) -> list[TrialPoint]:
    """The plan's trials, one at a time, until `stop(trials)`, `n_trials` (as `tuner plan
    --n-trials` counts them) or the `deadline` (of `time.process_time`); vLLM's defaults at
    least, so every verdict has them to judge against."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the preview says what it found
    with tempfile.TemporaryDirectory(prefix="tuner-preview-") as folder:
        store = Store(f"sqlite:///{folder}/preview.db")
        try:
            loop = StudyLoop(spec, store, length_only_runner(spec))
            points: list[TrialPoint] = []
            while not points or (
                budget_used(points)[0] < n_trials and time.process_time() < deadline
            ):
                loop.run(n_trials=1)
                found = read_study(loop.study).every
                if len(found) == len(points):  # the loop stopped itself (a broken study)
                    break
                points = found
                if stop(points):
                    break
            return points
        finally:
            store.close()
