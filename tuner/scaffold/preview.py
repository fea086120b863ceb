"""A short `tuner plan` before the night (`tuner init`, `tuner check`): a few trials of the
study on the simulator in virtual time, in seconds, and whether any beat vLLM's defaults
clearly. A night where the planner finds nothing to win is said before it is spent, with what
would change it (docs/preflight.md, "The plan preview"). Every figure is SIMULATED.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

from tuner.errors import UserError
from tuner.measure.mixes import objective_of
from tuner.results.verdicts import verdicts
from tuner.run.cost import length_only_runner
from tuner.run.loop import StudyLoop
from tuner.runners.plan import PlanRunner
from tuner.sim.bands import Bands, range_text
from tuner.sim.profiles import known_model
from tuner.spec.study import StudySpec
from tuner.store.storage import Store
from tuner.trial import CAPACITY_RPS, TrialPoint, ranked
from tuner.trial.reading import read_study

PREVIEW_TRIALS = 6  # the baseline and five tuned configs: seconds on the simulator
NO_GAIN = ("baseline-is-best", "not-clearly-better-than-baseline")


@dataclass(frozen=True)
class Preview:
    """What the preview found: one line to print, and whether it predicts a gain."""

    line: str
    gain: bool | None  # None: not run
    seconds: float


def preview(spec: StudySpec, n_trials: int = PREVIEW_TRIALS) -> Preview:
    """`n_trials` planned trials of `spec` in a throw-away store; never raises a UserError
    (a study the simulator cannot run is said in the line)."""
    t0 = time.monotonic()
    if known_model(spec.engine.model) is None or PlanRunner(spec).gpu is None:
        return Preview("plan preview: skipped (the simulator knows no model or GPU here)", None, 0)
    try:
        points = _planned(spec, n_trials)
    except UserError as exc:
        return Preview(f"plan preview: skipped ({exc})", None, time.monotonic() - t0)
    took = time.monotonic() - t0
    counted = sum(not p.refused_by_rules for p in points)
    head = f"plan preview ({counted} trials, SIMULATED, {took:.0f} s):"
    best = next(iter(ranked(points)), None)
    base = next((p for p in points if p.baseline and p.feasible), None)
    if best is None:  # a looser SLO or a lower rate, not "a tighter SLO" or "higher"
        return Preview(
            f"{head} no config met the SLO, vLLM's defaults included: the night may find "
            "nothing that meets it; what would change it: a looser SLO (--slo), a lower rate "
            "(--rate), or other flags (--search-space)",
            False,
            took,
        )
    if base is None:  # a tuned config meets the SLO the defaults break: that is the gain
        return Preview(
            f"{head} predicted gain: vLLM's defaults break the SLO, trial {best.number} meets "
            f"it ({_figure(best, None, spec)})",
            True,
            took,
        )
    kinds = {v.kind for v in verdicts(best, points, spec, None)}
    figure = _figure(best, base, spec)
    if best.baseline or kinds & set(NO_GAIN):
        return Preview(
            f"{head} no config clearly beat vLLM's defaults ({figure}): the night may find "
            f"nothing to win; {_change(spec)}",
            False,
            took,
        )
    return Preview(f"{head} predicted gain, trial {best.number}: {figure}", True, took)


def _planned(spec: StudySpec, n_trials: int) -> list[TrialPoint]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the line says what it found
    with tempfile.TemporaryDirectory(prefix="tuner-preview-") as folder:
        store = Store(f"sqlite:///{folder}/preview.db")
        try:
            # no prediction skips: they save engine time, of which a plan has none
            loop = StudyLoop(spec, store, length_only_runner(spec), prediction_skip=False)
            loop.run(n_trials=n_trials)
            return read_study(loop.study).every
        finally:
            store.close()


def _figure(best: TrialPoint, base: TrialPoint | None, spec: StudySpec) -> str:
    """The best config's predicted figure, against the defaults' (`base`: None where they
    broke the SLO)."""
    base_rps = (base.capacity_rps or 0.0) if base is not None else None
    words = objective_of(spec).gain_words(best.score, best.capacity_rps, base_rps)
    around = Bands.of_study(spec).around(CAPACITY_RPS, best.capacity_rps)  # capacity mode's
    return words if around is None else f"{words} ({range_text(around)})"


def _change(spec: StudySpec) -> str:
    """What would give the night something to win."""
    other = objective_of(spec).other_mode_hint()
    return (
        f"what would change it: {other}, another rate (--rate, higher: the defaults "
        "queue), a tighter SLO, or other flags (--search-space)"
    )
