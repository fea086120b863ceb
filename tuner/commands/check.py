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
    """Each problem as one line on stderr and exit 2 when there is any; the cost and the notes
    as information: on stdout with what the flags were checked against (`tuner check`), or on
    stderr only when there is no problem (`err`: `tuner run`, `tuner plan`)."""
    if not (err and found.problems):
        if found.cost is not None:
            typer.echo(found.cost.line(), err=err)
        if found.flags_against and not err:
            typer.echo(f"flag names checked against {found.flags_against}")
        for note in found.notes:
            typer.echo(f"note: {note}", err=err)
    for problem in found.problems:
        typer.echo(f"tuner: error: {' '.join(problem.split())}", err=True)
    if len(found.problems) > 1:
        typer.echo(f"tuner: {len(found.problems)} problems, nothing written", err=True)
    if found.problems:
        raise typer.Exit(2)
