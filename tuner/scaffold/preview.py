"""A `tuner plan` before the night (`tuner init`, `tuner check`); what it prints and when it
stops: docs/preflight.md, "The plan preview". Every figure is SIMULATED.

What callers may assume: the preview runs the trials `tuner plan --n-trials 30` runs (the same
sampler, seed and prediction skips), so its verdict is the plan's; it ends on the first config
that `tuner.results.verdicts` calls CLEARLY better than vLLM's defaults, after `PLAN_TRIALS`
trials, or after `BUDGET_S` seconds; it says "nothing to win" only after a whole plan, with its
cause and what would change it, and "too few trials to tell" before that.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from tuner.errors import UserError
from tuner.fidelity.bands import Bands, range_text
from tuner.measure.mixes import objective_of
from tuner.measure.mode_words import ModeWords, words_of
from tuner.measure.modes import Objective
from tuner.results.verdicts import verdicts
from tuner.run.reading import budget_used
from tuner.runners.plan import PlanRunner
from tuner.sim.profiles import known_model
from tuner.spec.study import StudySpec
from tuner.trial import CAPACITY_RPS, TrialPoint, ranked
from tuner.trial.clearly import ClearlyBetter

# A whole plan: what the preview runs before it says "nothing to win" (the trials of the
# `tuner plan` its verdict is checked against, docs/preflight.md).
PLAN_TRIALS = 30
# Its limit, in this process's CPU seconds (one trial more may run past it): about the wall
# time `tuner check` and `tuner init` wait on an idle box, and the same trials on a busy one
# (a wall-clock limit would give a loaded box fewer trials, and another verdict). Short of a
# whole plan by then: "too few trials to tell".
BUDGET_S = 20.0

Cause = Literal[
    "gain",  # a config CLEARLY better than vLLM's defaults
    "defaults-break-slo",  # a tuned config meets the SLO vLLM's defaults break
    "too-few-trials",  # short of a whole plan and no gain yet
    "slo-unreachable",  # a whole plan: no config meets the SLO, the defaults included
    "defaults-at-limit",  # a whole plan: tuned configs clearly worse, none clearly better
    "no-clear-difference",  # a whole plan: none clearly better, within the figures' noise
]
GAINS: tuple[Cause, ...] = ("gain", "defaults-break-slo")


@dataclass(frozen=True)
class Preview:
    """What the preview found: one line to print, and whether it predicts a gain."""

    line: str
    gain: bool | None  # None: not run, or too few trials to tell
    seconds: float
    cause: Cause | None = None  # None: not run
    trials: int = 0  # counted as `tuner plan --n-trials` counts them


class PlanTrials(Protocol):
    """`tuner plan`'s trials of `spec`, one at a time, until `stop(trials)`, `n_trials` or the
    `deadline` (of `time.process_time`): `tuner.run.planned.planned_trials`, passed in by the
    command (drafting a study file runs no study loop)."""

    def __call__(
        self,
        spec: StudySpec,
        n_trials: int,
        deadline: float,
        stop: Callable[[list[TrialPoint]], bool],
    ) -> list[TrialPoint]: ...


def preview(
    spec: StudySpec, plan: PlanTrials, n_trials: int = PLAN_TRIALS, budget_s: float = BUDGET_S
) -> Preview:
    """Up to `n_trials` planned trials of `spec` (`plan`), for at most about `budget_s` CPU
    seconds, stopped at the first gain; never raises a UserError (a study the simulator cannot
    run is said in the line)."""
    t0, cpu0 = time.monotonic(), time.process_time()
    if known_model(spec.engine.model) is None or PlanRunner(spec).gpu is None:
        return Preview("plan preview: skipped (the simulator knows no model or GPU here)", None, 0)
    objective = objective_of(spec)  # built once for the preview
    try:
        points = plan(spec, n_trials, cpu0 + budget_s, lambda found: _gain(found, spec, objective))
    except UserError as exc:
        return Preview(f"plan preview: skipped ({exc})", None, time.monotonic() - t0)
    took = time.monotonic() - t0
    done = budget_used(points)[0]
    cause = cause_of(points, spec, objective, whole=done >= n_trials)
    line = _line(cause, points, spec, objective, f"{done} of {n_trials}", took)
    gain = True if cause in GAINS else None if cause == "too-few-trials" else False
    return Preview(line, gain, took, cause, done)


def _gain(points: Sequence[TrialPoint], spec: StudySpec, objective: Objective) -> bool:
    """The planned trials so far hold a gain: the preview can stop."""
    return cause_of(points, spec, objective, whole=False) in GAINS


def cause_of(
    points: Sequence[TrialPoint], spec: StudySpec, objective: Objective, *, whole: bool
) -> Cause:
    """What the planned trials say about the night (pure); `whole`: they are a whole plan, so
    no gain among them means none to find."""
    best = next(iter(ranked(points)), None)
    base = next((p for p in points if p.baseline and p.feasible), None)
    if best is not None and base is None:
        return "defaults-break-slo"
    if best is not None and base is not None and not best.baseline:
        kinds = {v.kind for v in verdicts(best, points, spec, objective, None)}
        if "clearly-better-than-baseline" in kinds:  # the verdict `tuner best` gives
            return "gain"
    if not whole:
        return "too-few-trials"
    if best is None:
        return "slo-unreachable"
    assert base is not None
    if not best.baseline:  # a tuned config scored better, within the figures' noise
        return "no-clear-difference"
    beats = ClearlyBetter(objective)
    tuned = [p for p in points if p.measured and not p.baseline and p.confirm_of is None]
    if any(not p.feasible or beats(base, p) for p in tuned):
        return "defaults-at-limit"  # the flags matter, and the defaults are best at them
    return "no-clear-difference"


def _line(
    cause: Cause,
    points: Sequence[TrialPoint],
    spec: StudySpec,
    objective: Objective,
    trials: str,
    took_s: float,
) -> str:
    """The one line the preview prints (every figure it names comes from `_figure`)."""
    head = f"plan preview ({trials} trials, SIMULATED, {took_s:.0f} s):"
    best = next(iter(ranked(points)), None)
    base = next((p for p in points if p.baseline and p.feasible), None)
    words = words_of(objective)
    if cause == "gain" and best is not None:
        return (
            f"{head} predicted gain, trial {best.number}: {_figure(best, base, spec, words)}, "
            "CLEARLY better than vLLM's defaults (the verdict `tuner best` gives)"
        )
    if cause == "defaults-break-slo" and best is not None:
        return (
            f"{head} predicted gain: vLLM's defaults break the SLO, trial {best.number} meets "
            f"it ({_figure(best, None, spec, words)})"
        )
    if cause == "too-few-trials":
        so_far = (
            f"none clearly beat vLLM's defaults yet ({_figure(best, base, spec, words)})"
            if best is not None and base is not None
            else "no config met the SLO yet, vLLM's defaults included"
        )
        night = spec.budget.n_trials  # a plan longer than the night: say which is which
        shorter = f" (the night itself runs {night} trials)" if night < PLAN_TRIALS else ""
        return (
            f"{head} too few trials to tell: {so_far}; `tuner plan --n-trials {PLAN_TRIALS}` "
            f"runs the whole plan{shorter}"
        )
    if cause == "slo-unreachable":
        lighter = words.load_hint(heavier=False)
        return (
            f"{head} no config met the SLO, vLLM's defaults included ({_nearest(points, spec)}): "
            "the night may find nothing that meets it; what would change it: a looser SLO "
            f"(--slo){f' or {lighter}' if lighter else ''}"
        )
    assert best is not None and base is not None
    figure = _figure(best, base, spec, words)
    heavier = _heavier(spec, words)
    if cause == "defaults-at-limit":
        found = (
            "vLLM's defaults are already the best config of the search space at this load "
            f"(no config clearly beat them: {figure}; others were clearly worse)"
        )
        change = f"a heavier load: {heavier}" if heavier else "other flags (--search-space)"
    else:
        found = (
            f"no config clearly beat vLLM's defaults ({figure}: within the noise, "
            f"{ClearlyBetter(objective).why})"
        )
        change = f"{_finer(objective)}, other flags (--search-space)" + (
            f", or a heavier load: {heavier}" if heavier else ""
        )
    return f"{head} {found}: the night may find nothing to win; what would change it: {change}"


def _heavier(spec: StudySpec, words: ModeWords) -> str | None:
    """How to load the engine more, in words; None where nothing would (the capacity search
    sets the rate; every request at once with no concurrency limit to raise)."""
    hint = words.load_hint(heavier=True)
    sent = list(spec.workloads.values()) or [spec.workload]
    if hint is None or not all(math.isinf(w.request_rate) for w in sent):
        return hint
    if any(w.max_concurrency for w in sent):  # all at once: the load is the requests in flight
        return "more requests in flight (workload.max_concurrency)"
    return None


def _finer(objective: Objective) -> str:
    """What would narrow the noise that hides a gain: more prompts (narrower intervals), or a
    finer capacity search."""
    if objective.resolution() is not None:
        return "a finer capacity search (objective.capacity.resolution)"
    return "more prompts per trial (--num-prompts: narrower intervals)"


def _figure(
    best: TrialPoint | None, base: TrialPoint | None, spec: StudySpec, words: ModeWords
) -> str:
    """The best config's predicted figure, against the defaults' (`base`: None where they
    broke the SLO)."""
    if best is None:
        return "no config measured"
    base_rps = (base.capacity_rps or 0.0) if base is not None else None
    said = words.gain(best.score, best.capacity_rps, base_rps)
    around = Bands.of_study(spec).around(CAPACITY_RPS, best.capacity_rps)  # capacity mode's
    return said if around is None else f"{said} ({range_text(around)})"


def _nearest(points: Sequence[TrialPoint], spec: StudySpec) -> str:
    """The measured config nearest to the SLO, and its figure (with its band) against each
    limit it broke."""
    limits = spec.slo_limits()
    tried = [p for p in points if p.measured and p.metrics]
    if not tried or not limits:
        return "no config measured"
    near = min(tried, key=lambda p: max(s.violation(p.metrics) for s in limits))
    broken = [s for s in limits if not s.met(near.metrics)]
    bands = Bands.of_study(spec)

    def held(metric: str) -> str:  # `1450 (620-3200)`: the figure with its band
        value = near.metrics.get(metric, float("nan"))
        around = bands.around(metric, value)
        return f"{value:.4g}" + (f" ({range_text(around)})" if around is not None else "")

    said = ", ".join(f"{s.metric} {held(s.metric)} against {s.op} {s.value:g}" for s in broken)
    return f"the nearest, trial {near.number}: {said}"
