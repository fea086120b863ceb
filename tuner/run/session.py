"""One `tuner run` or `tuner plan`, start to end: the run package's entry point.

`run_study` is the run's whole sequence: the study's GPU slots (one loop per slot in threads,
`tuner.run.slots`) or a single loop; the confirmation of the best configs (`--confirm`), once
per study, after every slot has ended; then the robustness checks of the best config (on the
simulator; also on the engine after a confirmation on a real engine), and which of its changed
flags carry its gain: every check of `tuner.fidelity.checks.CHECKS`, in order, none named
here. The CLI (`tuner.commands.study`) and the benchmarks both call it: commands parse flags,
call it and print; what the run shows while it runs goes through a `RunView` (silent by
default).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import optuna

from tuner import trial as tr
from tuner.errors import RunInterrupted
from tuner.fidelity.best_check import Check, CheckInput
from tuner.measure.stored import Stored
from tuner.run.loop import StudyLoop
from tuner.run.progress import RunView
from tuner.run.signals import Interrupted, stopping
from tuner.run.slots import Slot, merge, plan_slots, run_slots
from tuner.run.summary import RunSummary
from tuner.runners.engine_runner import EngineRunner
from tuner.runners.trial_runner import TrialRunner
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.store.storage import Store, resolve_storage
from tuner.trial import TrialPoint

# A runner for one GPU slot, or (None) for a run that measures one trial at a time.
RunnerFactory = Callable[[Slot | None], TrialRunner]


@dataclass(frozen=True)
class RunOptions:
    """How to run a study: the flags of `tuner run` / `tuner plan`."""

    n_trials: int | None = None  # this many more trials; None: the study file's budget
    timeout_s: float | None = None  # stop starting trials after this long
    precheck: bool = True  # skip configs predicted not to fit in memory
    confirm: int = 0  # re-measure the best K configs at the end (once per study)
    confirm_flags: bool = True  # with `confirm`: re-measure the flags the simulator dropped
    accept_changes: bool = False  # a changed study file starts a new baseline
    pruning: bool = True  # stop hopeless trials early
    prediction_skip: bool = True  # never launch what the calibrated simulator rules out
    warm_start: list[tuple[str, Params]] = field(default_factory=list)  # (source, params)
    gpu_slots: bool = False  # split the study's `hardware.gpus` into slots (`plan_slots`)
    check_robustness: bool = True  # does the best config's gain survive small workload changes?
    # shown once the study can start (its file checked, storage open): the night's cost, notes
    notes: tuple[str, ...] = ()


@dataclass
class RunResult:
    """What the run did (`summary`), the study, the trials of its current spec, and the record
    of each check of the best config that ran, by its name (`Check.name`)."""

    summary: RunSummary
    study: optuna.Study
    points: list[TrialPoint]
    checks: dict[str, Stored] = field(default_factory=dict)

    @property
    def best(self) -> TrialPoint | None:
        return tr.best(self.points)


def engine_runners(spec: StudySpec, log_dir: Path, storage_url: str | None) -> RunnerFactory:
    """Engine runners: a slot's engines see only its GPUs and run on its share of the cores,
    and the client keeps off every slot's engine cores. `storage_url` None: the store's default
    (`$TUNER_STORAGE`, else `sqlite:///tuner.db`), resolved here for the runners' log folders."""
    url = resolve_storage(storage_url)
    slots = plan_slots(spec)
    every_core = sorted({c for s in slots for c in s.cores or []}) or None

    def make(slot: Slot | None) -> TrialRunner:
        if slot is None:
            return EngineRunner(spec, log_dir, url)
        return EngineRunner(
            spec,
            log_dir,
            url,
            gpus=slot.gpus,
            cores=slot.cores,
            all_engine_cores=every_core,
        )

    return make


def first_runner(
    spec: StudySpec, make_runner: RunnerFactory, options: RunOptions | None = None
) -> TrialRunner:
    """The run's runner (its first GPU slot's: its workload, its checks), the workload built.
    What can fail in building it (a broken tokenizer file, a dataset of garbage) fails here:
    a caller that calls this before it creates the study's database writes nothing when the
    study cannot start."""
    slots = plan_slots(spec) if (options or RunOptions()).gpu_slots else []
    runner = make_runner(slots[0] if slots else None)
    runner.prepare()
    return runner


def run_study(
    spec: StudySpec,
    store: Store,
    make_runner: RunnerFactory,
    options: RunOptions | None = None,
    view: RunView | None = None,
    runner: TrialRunner | None = None,
) -> RunResult:
    """Run (or continue) the study up to its budget, confirm, check the best; the result.
    `runner`: the run's, from `first_runner` (built here when not given).

    Ctrl-C, SIGTERM or SIGHUP during the trials: the trial in flight is recorded as interrupted
    and `RunInterrupted` is raised."""
    options = options or RunOptions()
    view = view or RunView()
    slots = plan_slots(spec) if options.gpu_slots else []
    if runner is None:
        runner = first_runner(spec, make_runner, options)
    try:
        if len(slots) > 1:
            loop, summary = _run_slots(spec, store, runner, make_runner, slots, options, view)
        else:  # one slot (all of --gpus in one trial) needs no threads
            loop = _loop(spec, store, runner, options, view)
            _say(view, options.notes)
            summary = loop.run(
                n_trials=options.n_trials, timeout_s=options.timeout_s, confirm=options.confirm
            )
    except KeyboardInterrupt as exc:  # recorded already; typer would swallow the signal's name
        signum = getattr(exc, "signum", signal.SIGINT)
        raise RunInterrupted(signum, signal.Signals(signum).name) from None
    points = loop.points()
    view.ran(summary, points)
    result = RunResult(summary, loop.study, points)
    if options.check_robustness and result.best is not None:
        _check_best(result, spec, runner, options, view)
    return result


def _loop(
    spec: StudySpec,
    store: Store,
    runner: TrialRunner,
    options: RunOptions,
    view: RunView,
    slot: str | None = None,
) -> StudyLoop:
    return StudyLoop(
        spec,
        store,
        runner,
        precheck=options.precheck,
        progress=view.progress(slot),
        accept_changes=options.accept_changes,
        pruning=options.pruning,
        prediction_skip=options.prediction_skip,
        slot=slot,
        warm_start=options.warm_start,
        say=view.say,
    )


def _say(view: RunView, lines: tuple[str, ...]) -> None:
    for line in lines:
        view.say(line)


def _run_slots(
    spec: StudySpec,
    store: Store,
    runner: TrialRunner,
    make_runner: RunnerFactory,
    slots: list[Slot],
    options: RunOptions,
    view: RunView,
) -> tuple[StudyLoop, RunSummary]:
    """One loop per slot, in threads; then the study's one confirmation, on the first slot."""
    workload, loops = runner.built(), []  # built once (`first_runner`), handed to every slot
    for i, slot in enumerate(slots):
        r = runner if i == 0 else make_runner(slot).with_spec(spec, workload)
        r.prepare()  # the first slot's: done already; another's: its own tokenizer
        loops.append(_loop(spec, store, r, options, view, slot.label))
    _say(view, options.notes)
    summary = run_slots(
        loops,
        n_trials=options.n_trials,
        timeout_s=options.timeout_s,
        on_start=view.start,
        on_stop=view.stop,
    )
    if not options.confirm:
        return loops[0], summary
    # Every slot has ended: one worker re-measures the best configs, holding the study's lock
    # like any single run (no new trials: n_trials=0).
    confirming = _loop(spec, store, runner, replace(options, warm_start=[]), view)
    confirmed = confirming.run(n_trials=0, confirm=options.confirm)
    return confirming, merge([summary, confirmed])


def _check_best(
    result: RunResult, spec: StudySpec, runner: TrialRunner, options: RunOptions, view: RunView
) -> None:
    """Every check of the best config this run asks for (`Check.wanted`), in `CHECKS`'s
    order, each record kept in `result.checks`."""
    from tuner.fidelity.checks import CHECKS

    view.say("checking that the best config's gain survives small workload changes")
    given = CheckInput(
        result.study,
        spec,
        result.points,
        runner,
        confirm=options.confirm,
        confirm_flags=options.confirm_flags,
        say=view.say,
    )
    for check in (c for c in CHECKS if c.wanted(given)):
        on_engine = check.on_engine  # its signals handled as a trial's
        record = _measured_check(result, runner, check, given) if on_engine else check.run(given)
        if record is not None:
            result.checks[check.name] = record


def _measured_check(
    result: RunResult, runner: TrialRunner, check: Check, given: CheckInput
) -> Stored | None:
    """A check measured on the engine, its signals handled as a trial's: the first Ctrl-C,
    SIGTERM or SIGHUP stops its engine, lets the check record itself as interrupted and
    raises `RunInterrupted`; a second one kills the engine at once."""
    try:
        with stopping(runner.kill):
            return check.run(given)
    except Interrupted as exc:
        runner.close()
        best = result.best.number if result.best is not None else None
        raise RunInterrupted(
            exc.signum, exc.signal_name, f"{check.during} of trial {best}"
        ) from None
