"""`tuner check`: every problem of a study before the night, in one pass, and its cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import Storage, StudyFile, duration_s

if TYPE_CHECKING:
    from tuner.run.preflight import Preflight


def check(
    study_file: StudyFile,
    storage: Storage = None,
    n_trials: Annotated[
        int | None, typer.Option("--n-trials", min=1, help="Cost of N trials (default: budget).")
    ] = None,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="Against this timeout (default: budget).")
    ] = None,
) -> None:
    """Find every problem `tuner run` would meet, one line each (exit 2), and the night's cost.

    Checks the engine command, the model directory, tokenizer, dataset files and chat
    template, the flag names (against vLLM's own parser where the engine's python imports
    vLLM), and everything `tuner run` refuses; writes nothing (docs/preflight.md)."""
    from tuner.run.preflight import RunArgs, preflight
    from tuner.spec.study import load_study_spec

    spec = load_study_spec(study_file)
    args = RunArgs(storage=storage, n_trials=n_trials, timeout_s=duration_s("--timeout", timeout))
    found = preflight(spec, args)
    report(found, err=False)
    if not found.problems:
        typer.echo(f"{study_file}: no problem found; `tuner run {study_file}` is ready to start")


def report(found: Preflight, *, err: bool) -> None:
    """The cost and the notes (information), then each problem as one line on stderr and exit
    2 when there is any. `err`: the information goes to stderr too (`tuner run`, `plan`)."""
    if found.cost is not None:
        typer.echo(found.cost.line(), err=err)
    if found.flags_against:
        typer.echo(f"flag names checked against {found.flags_against}", err=err)
    for note in found.notes:
        typer.echo(f"note: {note}", err=err)
    for problem in found.problems:
        typer.echo(f"tuner: error: {' '.join(problem.split())}", err=True)
    if found.problems:
        typer.echo(
            f"tuner: {len(found.problems)} problem(s): fix them before the run "
            "(nothing was written)",
            err=True,
        )
        raise typer.Exit(2)
