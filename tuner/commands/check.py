"""`tuner check`: every problem of a study before the night, in one pass, and its cost."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import NoPreview, Storage, StudyFile, duration_s

if TYPE_CHECKING:
    from tuner.run.preflight import Preflight
    from tuner.spec.parts import Serving


def check(
    study_file: StudyFile,
    storage: Storage = None,
    n_trials: Annotated[
        int | None, typer.Option("--n-trials", min=1, help="Cost of N trials (default: budget).")
    ] = None,
    timeout: Annotated[
        str | None, typer.Option("--timeout", help="Against this timeout (default: budget).")
    ] = None,
    no_preview: NoPreview = False,
) -> None:
    """Find every problem `tuner run` would meet, one line each (exit 2), and the night's cost;
    then a short `tuner plan` preview of what the night may win (SIMULATED).

    Engine, model, tokenizer, datasets, chat template, flag names; writes nothing.
    """
    from tuner.run.preflight import RunArgs, preflight
    from tuner.spec.study import load_study_spec

    spec = load_study_spec(study_file)
    args = RunArgs(storage=storage, n_trials=n_trials, timeout_s=duration_s("--timeout", timeout))
    found = preflight(spec, args)
    if found.judging:
        typer.echo(
            f"note: {study_file} changes how trials are judged ({'; '.join(found.judging)}): "
            "`tuner run` re-scores the stored trials from their metrics, none is measured again"
        )
    if found.flags_against:
        typer.echo(f"flag names checked against {found.flags_against}")
    for line in info_lines(found):
        typer.echo(line)
    for line in gpu_lines(spec):
        typer.echo(line)
    refuse(found)
    if not no_preview:
        from tuner.run.planned import planned_trials
        from tuner.scaffold.preview import preview

        typer.echo(preview(spec, planned_trials).line)
    if not found.problems:
        typer.echo(f"{study_file}: no problem found; `tuner run {study_file}` is ready to start")


def gpu_lines(spec: Serving) -> list[str]:
    """Each GPU's memory held by other processes, and the gpu-memory-utilization that can
    start now against the study's own (none without a GPU: docs/reliability.md)."""
    from tuner.scaffold.box import memory_lines
    from tuner.spec.space import baseline_params

    name = "gpu-memory-utilization"
    wanted = (baseline_params(spec.search_space) or {}).get(name, spec.engine.flags.get(name))
    return memory_lines(wanted=float(wanted) if isinstance(wanted, (int, float)) else 0.9)


def info_lines(found: Preflight) -> list[str]:
    """The night's cost and the notes, as lines (`tuner run`/`plan` show them once the study
    can start, so that a refusal before that stays one line)."""
    lines = [found.cost.line()] if found.cost is not None else []
    return lines + [f"note: {note}" for note in found.notes]


def refuse(found: Preflight) -> Preflight:
    """Each problem as one line on stderr (a count after several), and exit 2; none: return
    `found`."""
    for problem in found.problems:
        typer.echo(f"tuner: error: {' '.join(problem.split())}", err=True)
    if len(found.problems) > 1:
        typer.echo(f"tuner: {len(found.problems)} problems, nothing written", err=True)
    if found.problems:
        raise typer.Exit(2)
    return found
