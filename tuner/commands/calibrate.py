"""`tuner calibrate`: fit the simulator's profile to a study's measured trials."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import Force, Storage, StudyFile, open_stored_study_files

if TYPE_CHECKING:
    from rich.table import Table

    from tuner.sim.fit import Calibration


def calibrate(
    study_file: StudyFile,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Write the calibrated profile file here.")
    ],
    storage: Storage = None,
    folds: Annotated[
        int, typer.Option(min=2, max=50, help="Held-out folds for the error (refits).")
    ] = 5,
    max_requests: Annotated[
        int | None,
        typer.Option(min=1, help="Simulate only the workload's first N requests (faster)."),
    ] = None,
    force: Force = False,
) -> None:
    """Fit the simulator's constants to the study's measured trials, from its hardware profile.

    Reads the trials an engine measured in full under the study's current spec (never
    `tuner plan`'s; a trial stopped early is left out, and said so), fits a few factors with
    the search loop's prior, so from one trial on (docs/simulator.md, "Calibration"), and
    prints the error per metric: on trials held out of the fit from 4 trials on, else
    in-sample. The profile file it writes goes in `hardware.profile:` or `tuner sim serve
    --gpu`.
    """
    from tuner.fidelity.bands import MIN_RESIDUALS, Bands
    from tuner.fidelity.calibration import Trust
    from tuner.runners.trial_runner import workload_requests
    from tuner.sim.profile_file import write_profile
    from tuner.spec.outputs import check_output_file
    from tuner.trial.reading import read_study

    study, spec, kept = open_stored_study_files(study_file, storage, simulated=None)
    check_output_file(output, "--output", force=force, keep=kept)  # before the fit, not after
    read = read_study(study)
    trust = Trust(spec, read.every, read.record)
    cal = trust.calibrate(workload_requests(spec), folds=folds, max_requests=max_requests)
    profile = replace(
        cal.profile,
        description=(
            f"{cal.profile.description}; calibrated on {cal.observations} trials "
            f"of study {study.study_name}"
        ).lstrip("; "),
    )
    write_profile(profile, output, "--output", force=force, keep=kept)
    simulated = read.record.simulated_with(read.every)
    _print_fit(cal, profile.name, study.study_name, simulated)
    for number, why in trust.left_out().items():
        typer.echo(f"left out: trial {number}, {why}")
    bands = Bands.of_study(spec).narrowed(trust.residuals(cal), "this study's calibration")
    typer.echo(
        "the band on the calibrated simulator's figures (true / SIMULATED, about 80 % of "
        f"figures; {MIN_RESIDUALS} held-out trials narrow a family): {bands.words()}"
    )
    typer.echo(
        f"wrote {output}: use it as `hardware.profile: {profile_setting(output, study_file)}` "
        f"in {study_file} or `tuner sim serve --gpu {output}`"
    )


def profile_setting(output: Path, study_file: Path) -> str:
    """`hardware.profile:` as the study file must write it: the study resolves it from its own
    directory, not from where `tuner` ran (`tuner.spec.study`)."""
    import os

    try:
        return os.path.relpath(output.resolve(), study_file.resolve().parent)
    except ValueError:  # another drive (Windows): only the whole path reaches it
        return str(output.resolve())


def _print_fit(cal: Calibration, name: str, study_name: str, simulated: bool) -> None:
    """What was fitted on which trials (of the SIMULATED engine: `simulated`), and its error
    on the trials held out of the fit."""
    from rich.console import Console
    from rich.table import Table

    from tuner.sim.fit import MAX_FACTOR, MIN_OBSERVATIONS

    console = Console(highlight=False)
    source = " (figures of the SIMULATED engine, `tuner sim serve`)" if simulated else ""
    used = ", ".join(str(n) for n in cal.trials)
    typer.echo(
        f"calibrated {name} on {cal.observations} measured trial(s) of study "
        f"{study_name!r} (trials {used}){source} in {cal.seconds:.1f} s"
    )
    if cal.observations < MIN_OBSERVATIONS:
        figures = cal.observations * len(cal.metrics)
        typer.echo(
            f"{cal.observations} trial(s) fix little: {figures} figures for "
            f"{len(cal.factors)} factors; the search loop's prior (a factor of 2 is one "
            "standard deviation) holds what they cannot tell apart, so the profile is a first "
            f"guess: calibrate again once {MIN_OBSERVATIONS} trials are measured in full"
        )
    if cal.skipped:
        typer.echo(f"left out (the simulator refuses them): trials {list(cal.skipped)}")
    factors = Table("factor", "× base profile", title="fitted factors", title_justify="left")
    for factor, value in cal.factors.items():
        factors.add_row(factor, f"{value:.3f}")
    console.print(factors)
    pinned = [n for n, v in cal.factors.items() if max(v, 1 / v) > 0.99 * MAX_FACTOR]
    if pinned:
        typer.echo(
            f"at the bound ({MAX_FACTOR:g}x): {', '.join(pinned)}: this machine is far from "
            f"the {name} profile, or the trials do not hold what those factors explain"
        )
    console.print(_error_table(cal))


def _error_table(cal: Calibration) -> Table:
    """Median |predicted / measured − 1| per metric: held out, in the fit, before the fit;
    with fewer than `MIN_OBSERVATIONS` trials nothing is held out, and the table says so."""
    from rich.table import Table

    from tuner.sim.fit import MIN_OBSERVATIONS

    held, n = cal.observations >= MIN_OBSERVATIONS, cal.observations
    heads = [f"held out ({cal.folds}-fold)"] if held else []
    errors = Table(
        "metric",
        *heads,
        "in fit" if held else f"in-sample, {n} trial{'s' if n > 1 else ''}",
        f"{cal.profile.name}, before",
        title="median |predicted / measured − 1|",
        title_justify="left",
    )
    for metric in cal.metrics:
        if metric not in cal.fit_error:
            continue
        cells = [f"{100 * cal.held_out_error.get(metric, float('nan')):.1f} %"] if held else []
        errors.add_row(
            metric,
            *cells,
            f"{100 * cal.fit_error[metric]:.1f} %",
            f"{100 * cal.base_error.get(metric, float('nan')):.1f} %",
        )
    return errors
