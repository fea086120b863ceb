"""`tuner pareto`, `tuner export`, `tuner report`: the read-only commands over a stored study.

Heavy imports (optuna, plotly, matplotlib) stay inside the functions so `tuner --help` is fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import (
    Force,
    Simulated,
    Storage,
    StudyFile,
    Wide,
    open_stored_study,
    open_stored_study_files,
    stored_verifies,
)
from tuner.errors import UserError

if TYPE_CHECKING:
    import optuna

    from tuner.fidelity.bands import Bands
    from tuner.spec.parts import Traffic
    from tuner.trial import TrialPoint


def _points(study: optuna.Study, *, every_spec: bool = False) -> list[TrialPoint]:
    from tuner.results.shipped import study_points

    return study_points(study, every_spec=every_spec)


def _is_simulated(study: optuna.Study, points: list[TrialPoint]) -> bool:
    from tuner.trial import StudyRecord

    return StudyRecord.of(study).simulated_with(points)


def _bands(
    study: optuna.Study, spec: Traffic, points: list[TrialPoint], simulated: bool
) -> Bands | None:
    """A simulated study's bands (`tuner.fidelity.bands`): its figures are predictions; None for
    measured figures."""
    from tuner.fidelity.bands import Bands

    if not (simulated or _is_simulated(study, points)):
        return None
    return Bands.of_study(spec)


def _choose(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise UserError(f"unknown {what} {value!r}: choose one of {', '.join(allowed)}")
    return value


def pareto(
    study_file: StudyFile,
    storage: Storage = None,
    simulated: Simulated = False,
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
    objectives: Annotated[
        str,
        typer.Option(help="Comma-separated stored metrics; throughput is maximised."),
    ] = "p99_ttft_ms,mean_tpot_ms",
    scenario: Annotated[
        str | None, typer.Option(help="One scenario's front (a study with scenarios).")
    ] = None,
    wide: Wide = False,
) -> None:
    """List the non-dominated feasible configs (default: P99 TTFT against mean TPOT), each
    once: a config's `--confirm` re-runs pooled into its row, reused results left out. In
    capacity mode, among the configs that serve the highest capacity (as the report's plot)."""
    from tuner.results.front_table import front_text, print_front
    from tuner.results.pareto import check_complete, check_stored, noise_front, parse_objectives
    from tuner.trial import configs, for_scenario

    _choose(fmt, ("table", "json", "csv"), "format")
    objs = parse_objectives(objectives)
    study, spec = open_stored_study(study_file, storage, simulated)
    points = _points(study)
    if scenario is not None:
        points = for_scenario(points, scenario)
    check_complete(points, study.study_name)
    check_stored(points, [name for name, _ in objs], study.study_name)
    each = {c.point.number: c for c in configs(points)}
    pooled = [c.point for c in each.values()]
    noise = noise_front(pooled, objs)
    front = [each[p.number] for p in noise.points]
    if not front:
        raise UserError(f"study {study.study_name!r} has no feasible measured trial")
    if fmt == "table":
        feasible = sum(c.point.feasible for c in each.values())
        sim = _is_simulated(study, points)
        print_front(
            front,
            noise,
            objs,
            study.study_name,
            feasible,
            sim,
            scenario,
            wide=wide,
            at=noise.capacity_rps,
        )
    else:
        bands = _bands(study, spec, points, simulated)
        typer.echo(front_text(front, noise, fmt, bands), nl=False)


def export(
    study_file: StudyFile,
    storage: Storage = None,
    simulated: Simulated = False,
    trial: Annotated[int | None, typer.Option(help="Export this trial number.")] = None,
    slo: Annotated[
        str | None,
        typer.Option(help='Limits the trial must meet, e.g. "p99_ttft_ms<=2000,mean_tpot_ms<=80".'),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="shell, yaml or json.")] = "shell",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write to this file.")
    ] = None,
    force: Force = False,
    candidate: Annotated[
        bool,
        typer.Option(
            "--candidate",
            help=(
                "Write the best tuned config even when it is not clearly better than vLLM's "
                "defaults or is FRAGILE (else the defaults are written and the exit code is 3)."
            ),
        ),
    ] = False,
) -> None:
    """Write the best config (under an SLO) as a `vllm serve` command, `--config` YAML or JSON.

    Exit code 3: vLLM's defaults were written: the best tuned config is not clearly better
    than them, or is FRAGILE (`--candidate` writes it anyway), or no tuned config beat them."""
    from tuner.results.export import FORMATS, render
    from tuner.results.recommend import HELD_EXIT_CODE
    from tuner.results.shipped import shipped
    from tuner.spec.outputs import check_output_file, write_output_file
    from tuner.spec.slo import check_sense, parse_slo

    _choose(fmt, FORMATS, "format")
    if slo is not None:  # as the study file's: `p99_ttft_ms>=5` would pick the slowest
        check_sense(slo)
    limits = parse_slo(slo) if slo is not None else []
    if output is not None and fmt == "yaml" and output.suffix not in (".yaml", ".yml"):
        raise UserError(f"{output}: vLLM reads --config files only with a .yaml or .yml name")
    study, _, kept = open_stored_study_files(study_file, storage, simulated)
    if output is not None:
        check_output_file(output, "-o", force=force, keep=kept)  # before the work
    points = _points(study, every_spec=trial is not None)  # `--trial N` may be an older spec's
    choice, spec, baseline = shipped(study, points, trial=trial, limits=limits, candidate=candidate)
    text = render(
        fmt,
        spec,
        choice,
        study.study_name,
        simulated=_is_simulated(study, points),
        baseline=baseline,
        config_path=str(output) if output is not None else "FILE",
    )
    if output is None:
        typer.echo(text, nl=False)
    else:
        write_output_file(output, text, "-o", force=force, keep=kept)
        typer.echo(f"wrote {output} (trial {choice.point.number}: {choice.why})", err=True)
    if choice.held:
        typer.echo(
            f"tuner export: wrote {choice.why}; exit code {HELD_EXIT_CODE} "
            "(--candidate writes the candidate)",
            err=True,
        )
        raise typer.Exit(HELD_EXIT_CODE)
    if trial is None and not candidate and choice.point.baseline:  # nothing tuned to deploy
        typer.echo(
            f"tuner export: the best is vLLM's defaults (baseline trial {choice.point.number}), "
            f"the config you already run; exit code {HELD_EXIT_CODE}",
            err=True,
        )
        raise typer.Exit(HELD_EXIT_CODE)


def report(
    study_file: StudyFile,
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write.")],
    storage: Storage = None,
    simulated: Simulated = False,
    png: Annotated[
        Path | None, typer.Option("--png", help="Also write the Pareto plot as a PNG.")
    ] = None,
    force: Force = False,
) -> None:
    """Write one self-contained HTML report (opens offline), optionally the front as PNG."""
    import io

    import optuna

    from tuner.measure.mixes import objective_of
    from tuner.results.pareto import check_complete
    from tuner.results.report.page import build_report
    from tuner.results.report.png import write_png
    from tuner.results.shipped import shipped_point
    from tuner.spec.outputs import check_output_file, write_output_file

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the importance's scratch study

    study, spec, kept = open_stored_study_files(study_file, storage, simulated)
    files = [(output, "-o"), *([(png, "--png")] if png is not None else [])]
    for path, what in files:  # before the work, each as it will be written
        check_output_file(path, what, force=force, keep=kept)
    if png is not None and png.resolve() == output.resolve():
        raise UserError(f"--png {png}: the same file as -o; give another file name")
    points = _points(study)
    check_complete(points, study.study_name)
    sim = _is_simulated(study, points)
    verifies = stored_verifies(study.study_name, study_file, storage)
    objective = objective_of(spec)  # the study's, built once for the report and its PNG
    html = build_report(study, spec, objective, points, simulated=sim, verifies=verifies)
    image = io.BytesIO()
    if png is not None:
        write_png(
            points,
            image,
            study.study_name,
            slo_lines=spec.objective.slo,
            simulated=sim,
            recommended=shipped_point(study, points),
        )
    write_output_file(output, html, "-o", force=force, keep=kept)
    if png is not None:
        write_output_file(png, image.getvalue(), "--png", force=force, keep=kept)
    typer.echo(f"wrote {output}" + (f" and {png}" if png else ""), err=True)
