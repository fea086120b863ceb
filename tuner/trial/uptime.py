"""Engine time: the seconds an engine was up (launch until stopped), per trial and per run.

Every trial records `engine_s` (`tuner.trial.point.ENGINE_S`): 0 when no engine was launched for
it (refused before launch, or a reused result); for `tuner plan` the virtual seconds a real
engine would have been up, i.e. a modelled start-up plus the workload. A launched trial stores
the split too, `startup_s` from launch to ready and `workload_s` from ready to stopped
(warm-ups, every run, the stop), `engine_s` their sum; for an engine never ready, no `startup_s`
and a `workload_s` of 0 (`TrialRecord.engine_split_s`). The run summary and the report say how
much of the night went on starting engines (`startup_share`).

The planner's start-up is, in order: `hardware.startup_s` from the study file; else the median
start-up of the real study's measured trials, when `tuner run` has some (`median_startup_s`);
else the simulator's estimate of a real engine's start (`tuner.sim.boot.estimated_startup_s`, an
estimate, not a measurement: docs/early-stopping.md).

The simulated engine (`tuner sim serve`) is neither: it starts in seconds, whatever GPU it
stands in for. `simulated_engine_startup_s` is its measured start-up plus its `--load-delay-s`;
the night's cost of a study on it counts that, not a real engine's (docs/preflight.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from tuner.spec.values import Flags

if TYPE_CHECKING:
    import optuna

    from tuner.trial.point import TrialPoint
    from tuner.trial.record import AttrsHolder

# Measured: `.venv/bin/python benchmarks/sim_startup.py --repeats 3` (5 Dec 2026, 03:29 UTC,
# load average 2.0): `tuner sim serve` launch to its first /health 200, median 1.75 s
# (1.16-2.07 s) with the tiny tokenizer; 7-8 s under a load average of 12-17 (docs/performance.md).
SIM_STARTUP_S = 2.0


def simulated_engine_startup_s(flags: Flags) -> float:
    """The launch-to-ready seconds of `tuner sim serve` with these engine flags: its measured
    start-up plus the `load-delay-s` it is told to wait."""
    try:
        delay = float(flags.get("load-delay-s") or 0.0)
    except (TypeError, ValueError):  # `tuner check` names a bad flag value
        delay = 0.0
    return SIM_STARTUP_S + delay


def median_startup_s(startups: Iterable[object]) -> float | None:
    """The median of the measured start-ups given (None when there are none)."""
    values = [float(s) for s in startups if isinstance(s, int | float) and s > 0]
    return statistics.median(values) if values else None


class Studies(Protocol):
    """Where studies are stored (`tuner.store.storage.Store`, a layer above)."""

    def study_names(self) -> list[str]: ...
    def load_study(self, name: str) -> optuna.Study: ...


def real_startups_s(store: Studies, name: str) -> float | None:
    """The median start-up of the measured, not simulated, trials of study `name` in `store`."""
    from tuner.trial.reading import read_study

    if name not in store.study_names():
        return None
    points = read_study(store.load_study(name)).every
    return median_startup_s(p.record.startup_s for p in points if p.measured and not p.simulated)


def study_line(points: Iterable[TrialPoint]) -> str:
    """The whole study's engine time in words, from its trials' `engine_s` (the report's)."""
    from tuner.trial.outcome import outcome

    points = list(points)
    engine_s = [float(p.record.engine_s or 0.0) for p in points]
    total = sum(engine_s)
    launched = sum(1 for s in engine_s if s > 0)
    words = f"{total:.0f} s of engine time over {launched} launched trial(s)"
    words += startup_share(total, [p.record.engine_split_s for p in points])
    words += compile_share(points)
    stopped = [
        (p, s) for p, s in zip(points, engine_s, strict=True) if outcome(p) == "stopped" and s
    ]
    if stopped:
        used = sum(s for _, s in stopped)
        words += f"; {len(stopped)} stopped early, using {used:.0f} s"
        full = [f for p, _ in stopped if (f := p.record.engine_full_s) is not None]
        if len(full) == len(stopped):  # `tuner plan` knows the full length
            words += f" instead of {sum(full):.0f} s"
    return words


def startup_share(total_s: float, splits: Iterable[tuple[float, float] | None]) -> str:
    """ ", of which N s (P %) starting engines": the start-up part of `total_s` from the trials'
    `engine_split_s`; "" when no trial stored its split."""
    known = [s for s in splits if s is not None]
    if not known or total_s <= 0:
        return ""
    startup = sum(s for s, _ in known)
    return f", of which {startup:.0f} s ({startup / total_s:.0%}) starting engines"


def compile_share(points: Iterable[TrialPoint]) -> str:
    """ " (N s of it compiling cold, K start(s))": the cold compiles real engines logged
    (docs/engine.md, "Start-up phases"); "" when none did. A simulated engine's phases are a
    real engine's, not its own seconds: left out."""
    cold = [
        phases.cold_compile_s
        for p in points
        if (phases := p.record.startup_phases) is not None and not p.simulated
    ]
    cold = [s for s in cold if s > 0]
    return f" ({sum(cold):.0f} s of it compiling cold, {len(cold)} start(s))" if cold else ""


def interrupted_engine_s(started_at: float | None, ended_at: float | None) -> float | None:
    """The engine time an interrupted trial used: from its first launch (`engine_started_at`)
    until the interruption (`ended_at`, on the same clock); 0 when no engine was launched;
    None when the end is unknown."""
    if started_at is None:
        return 0.0
    if ended_at is None:
        return None
    return max(ended_at - started_at, 0.0)


def launch_recorder(trial: AttrsHolder) -> Callable[[], None]:
    """A hook for the runner's engine launches that records the first on the live trial
    (`engine_started_at`, unix s): an interruption's engine time counts from it."""
    from tuner.trial.record import TrialRecord, write

    first: list[float] = []

    def launched() -> None:
        if not first:
            first.append(time.time())
            write(trial, TrialRecord(engine_started_at=first[0]))

    return launched


def engine_s_until_now(trial: AttrsHolder) -> float | None:
    """The engine time a trial interrupted in this process used, until now."""
    from tuner.trial.point import record_of

    return interrupted_engine_s(record_of(trial).engine_started_at, time.time())


class EngineTime(Protocol):
    """A run's engine time and its savings (`tuner.run.summary.RunSummary`, a layer above)."""

    engine_s: float
    startup_s: float
    measured_engine_s: list[float]
    saved_by_precheck: int
    saved_by_reuse: int
    prediction_saved_s: float
    pruned: list[tuple[float, float | None]]


def summary_line(summary: EngineTime) -> str:
    """The run's engine time in words, with what precheck, reuse and early stopping saved
    (vLLM's rules' refusals are not a saving: those configs were never candidates).

    Time saved by a config never launched is an estimate: the mean engine time of the trials
    measured in this run (none measured: no estimate)."""
    measured = summary.measured_engine_s
    mean = sum(measured) / len(measured) if measured else None
    never = summary.saved_by_precheck + summary.saved_by_reuse
    parts = [f"engine time used {summary.engine_s:.0f} s"]
    if summary.engine_s > 0:
        parts[0] += (
            f" ({summary.startup_s:.0f} s of it, {summary.startup_s / summary.engine_s:.0%}, "
            "starting engines)"
        )
    if mean is None:
        parts.append(
            f"{never} launch(es) saved by precheck/reuse (no measured trial to estimate their time)"
        )
    else:
        parts.append(
            f"saved by precheck/reuse about {never * mean:.0f} s (estimate: "
            f"{never} launch(es) × {mean:.0f} s, the mean of measured trials)"
        )
    skipped = getattr(summary, "saved_by_prediction", 0)
    if skipped:
        parts.append(
            f"saved by prediction skips about {summary.prediction_saved_s:.0f} s ({skipped} "
            "launch(es) ruled out by the simulator's prediction; estimate)"
        )
    if summary.pruned:
        # A pruned trial of `tuner plan` knows its full length; a real one is estimated.
        saved = sum(
            max((full if full is not None else (mean or used)) - used, 0.0)
            for used, full in summary.pruned
        )
        parts.append(
            f"saved by early stopping about {saved:.0f} s ({len(summary.pruned)} trial(s) "
            "stopped; estimate)"
        )
    return "; ".join(parts)
