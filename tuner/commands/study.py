"""`tuner run`, `tuner plan`, `tuner trials`, `tuner best`: a study from its file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import (
    AcceptChanges,
    Simulated,
    Storage,
    StudyFile,
    Wide,
    duration_s,
    load_study_file,
    open_store,
    open_stored_study,
    stored_verifies,
)
from tuner.commands.run_output import print_best, print_result, view
from tuner.spec.values import Params

NoPruning = Annotated[
    bool, typer.Option("--no-pruning", help="Run every trial to the end (no early stopping).")
]

NoPrecheck = Annotated[
    bool, typer.Option("--no-precheck", help="Launch configs predicted not to fit in memory.")
]

NoPredictionSkip = Annotated[
    bool,
    typer.Option(
        "--no-prediction-skip",
        help="Launch every config, even one the calibrated simulator rules out.",
    ),
]

NoPreflight = Annotated[
    bool,
    typer.Option(
        "--no-preflight",
        help="Skip the slow part of the preflight: asking vLLM for its flags, the cost.",
    ),
]

if TYPE_CHECKING:
    from tuner.run.preflight import Preflight
    from tuner.spec.study import StudySpec
    from tuner.store.storage import Store


Confirm = Annotated[
    int,
    typer.Option(
        "--confirm",
        min=0,
        help=(
            "Re-measure the best K configs at the end, each trial.confirm_repeats times "
            "(3 by default): K × 3 more engine runs; then the best and the baseline under "
            "perturbed workloads: 2 more engine starts of 5 workload runs each "
            "(docs/robustness.md); then the flags the simulator dropped from the best, "
            "one engine start each (docs/results.md)."
        ),
    ),
]
NoConfirmFlags = Annotated[
    bool,
    typer.Option(
        "--no-confirm-flags",
        help="With --confirm: do not re-measure the flags the simulator dropped.",
    ),
]


def run(
    study_file: StudyFile,
    n_trials: Annotated[
        int | None, typer.Option("--n-trials", min=1, help="Run N more trials.")
    ] = None,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="Stop after this long (8h, 90m).")
    ] = None,
    storage: Storage = None,
    no_precheck: NoPrecheck = False,
    no_preflight: NoPreflight = False,
    confirm: Confirm = 0,
    no_confirm_flags: NoConfirmFlags = False,
    log_dir: Annotated[Path, typer.Option("--log-dir", help="Engine logs.")] = Path("runs"),
    accept_changes: AcceptChanges = False,
    no_pruning: NoPruning = False,
    no_prediction_skip: NoPredictionSkip = False,
    gpus: Annotated[
        str | None,
        typer.Option("--gpus", help="GPUs to split into slots, e.g. 0-7 (docs/scale-out.md)."),
    ] = None,
    gpus_per_trial: Annotated[
        int | None,
        typer.Option("--gpus-per-trial", min=1, help="GPUs of one slot: one trial per slot."),
    ] = None,
    from_plan: Annotated[
        int | None,
        typer.Option(
            "--from-plan", min=1, help="First run the top K configs of this study's `tuner plan`."
        ),
    ] = None,
    warm_start: Annotated[
        tuple[str, int] | None,
        typer.Option(
            "--warm-start",
            metavar="STUDY K",
            help="First run the top K configs of another stored study.",
        ),
    ] = None,
) -> None:
    """Run (or continue) a study: restart the engine for every trial, score it, store it."""
    from tuner.commands.check import refuse
    from tuner.run.preflight import RunArgs, preflight
    from tuner.run.session import RunOptions, engine_runners, first_runner, run_study

    timeout_s = duration_s("--timeout", timeout)
    args = RunArgs(storage, n_trials, timeout_s, from_plan, warm_start, accept_changes)
    found = []
    spec = load_study_file(
        study_file,
        # every problem of the run, one line each, before anything is written (exit 2); the
        # night's cost and the plan's trust come once the store is open (docs/preflight.md)
        check=lambda s: found.append(refuse(preflight(s, args, slow=not no_preflight))),
        change=lambda s: _with_gpus(s, gpus, gpus_per_trial),
    )
    options = RunOptions(
        n_trials=n_trials,
        timeout_s=timeout_s,
        precheck=not no_precheck,
        confirm=confirm,
        confirm_flags=not no_confirm_flags,
        accept_changes=accept_changes,
        pruning=not no_pruning,
        prediction_skip=not no_prediction_skip,
        gpu_slots=True,
    )
    _check_log_dir(log_dir)
    make_runner = engine_runners(spec, log_dir, storage or spec.storage)
    runner = first_runner(spec, make_runner, options)  # a broken file: nothing written yet
    store = open_store(spec, storage)
    queued = _warm_start(spec, store, from_plan, warm_start)
    options = replace(options, warm_start=queued, notes=_info(found))  # shown once it starts
    log_dir.mkdir(parents=True, exist_ok=True)
    print_result(run_study(spec, store, make_runner, options, view(), runner))


def _check_log_dir(log_dir: Path) -> None:
    """`--log-dir` must be a folder, or creatable as one: refused before anything is written
    (not a FileExistsError or NotADirectoryError traceback once the run has started)."""
    from tuner.errors import UserError

    for path in (log_dir, *log_dir.absolute().parents):
        if path.exists():
            if not path.is_dir():
                raise UserError(f"--log-dir {log_dir}: {path} is a file, not a folder")
            return


def _warm_start(
    spec: StudySpec, store: Store, from_plan: int | None, warm_start: tuple[str, int] | None
) -> list[tuple[str, Params]]:
    """The configs `--from-plan` and `--warm-start` queue first: (label, params)."""
    from tuner.errors import UserError
    from tuner.fidelity.warm_start import top_configs
    from tuner.trial.specs import study_name

    queued: list[tuple[str, Params]] = []
    skipped: list[str] = []
    if from_plan is not None:
        plan = study_name(spec, True)
        queued += top_configs(store, plan, from_plan, spec, plan=True, skipped=skipped)
    if warm_start is not None:
        other, k = warm_start
        if k < 1:
            raise UserError(f"--warm-start: K must be at least 1, not {k}")
        queued += top_configs(store, other, k, spec, skipped=skipped)
    for line in skipped:
        typer.echo(line, err=True)
    return queued


def plan(
    study_file: StudyFile,
    n_trials: Annotated[int, typer.Option("--n-trials", min=1, help="Trials to simulate.")] = 50,
    storage: Storage = None,
    accept_changes: AcceptChanges = False,
    no_pruning: NoPruning = False,
    no_prediction_skip: NoPredictionSkip = False,
) -> None:
    """Run the same study in virtual time on the simulator (no engine, no waiting)."""
    from tuner.commands.check import refuse
    from tuner.run.preflight import plan_preflight
    from tuner.run.session import RunOptions, run_study
    from tuner.runners.plan import PlanRunner
    from tuner.trial.uptime import real_startups_s

    found = []
    spec = load_study_file(
        study_file, check=lambda s: found.append(refuse(plan_preflight(s, storage)))
    )
    runner = PlanRunner(spec)
    runner.prepare()  # a broken tokenizer or dataset file: nothing written yet
    store = open_store(spec, storage)
    runner.measured_startup_s = real_startups_s(store, spec.name)
    options = RunOptions(
        n_trials=n_trials,
        accept_changes=accept_changes,
        pruning=not no_pruning,
        prediction_skip=not no_prediction_skip,
        notes=_info(found),  # shown once the study can start: a refusal stays one line
    )
    result = run_study(spec, store, lambda _: runner, options, view(), runner)
    print_result(result)


def _with_gpus(spec: StudySpec, gpus: str | None, per_trial: int | None) -> StudySpec:
    """`--gpus` and `--gpus-per-trial` over the study file's `hardware:`."""
    from pydantic import ValidationError

    from tuner.errors import UserError
    from tuner.spec.parsing import describe_validation_error
    from tuner.spec.sections import HardwareSpec

    if gpus is None and per_trial is None:
        return spec
    data = spec.hardware.model_dump()
    if gpus is not None:
        data["gpus"] = gpus
    if per_trial is not None:
        data["gpus_per_trial"] = per_trial
    try:
        hardware = HardwareSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"--gpus/--gpus-per-trial: {describe_validation_error(exc)}") from None
    return spec.model_copy(update={"hardware": hardware})


def _info(found: list[Preflight]) -> tuple[str, ...]:
    from tuner.commands.check import info_lines

    return tuple(line for f in found for line in info_lines(f))


def trials(
    study_file: StudyFile,
    storage: Storage = None,
    simulated: Simulated = False,
    fmt: Annotated[str, typer.Option("--format", help="table, csv or json.")] = "table",
    wide: Wide = False,
) -> None:
    """List every trial: state, parameters, headline metrics, score and failure reason."""
    from tuner.errors import UserError
    from tuner.results.verifies import verify_lines, with_verifies
    from tuner.results.views import trials_frame, trials_records
    from tuner.trial.reading import read_study

    if fmt not in ("table", "csv", "json"):
        raise UserError(f"--format must be table, csv or json, not {fmt!r}")
    study, spec = open_stored_study(study_file, storage, simulated)
    read = read_study(study)
    points, record = read.judged_all(), read.record  # each under its latest judging
    verifies = stored_verifies(study.study_name, study_file, storage)
    if fmt == "json":  # every rate run of a capacity trial as an object, not a count
        from tuner.fidelity.bands import Bands, prediction_residuals, with_predicted_bands

        sim = simulated or record.simulated_with(points)  # predictions: each with its band
        bands = Bands.of_study(spec) if sim else None
        rows = trials_records(points, record, bands)
        if not sim:  # the screen's predictions, banded as narrowed by its own misses
            screen = Bands.of_study(spec).narrowed(
                prediction_residuals(p.record.prediction_error for p in points),
                "this study's screen: its predictions of the trials measured",
            )
            rows = [with_predicted_bands(row, screen) for row in rows]
        rows = with_verifies(rows, verifies)
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    frame = trials_frame(points, record)
    if fmt == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        from tuner.results.views import print_trials_table
        from tuner.trial import tally_line

        print_trials_table(frame, wide=wide, counts=tally_line(points))
        if verifies:
            typer.echo("\nverify history (`tuner verify`, oldest first):")
            typer.echo("\n".join(verify_lines(verifies)))


def best(
    study_file: StudyFile, storage: Storage = None, simulated: Simulated = False, wide: Wide = False
) -> None:
    """Print the best feasible trial as a ready-to-run `vllm serve` command."""

    study, _ = open_stored_study(study_file, storage, simulated)
    print_best(study, wide=wide)
