"""`tuner init`: write a ready study file from what is on the box (`tuner.scaffold`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def init(
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="The study file to write (default: NAME.yaml)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="A model directory with config.json, or a built-in name "
            "(deepseek-r1-distill-qwen-32b, deepseek-r1-0528-qwen3-8b, tiny-qwen2).",
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option("--engine", help="vllm or sim (default: vllm when a GPU is found)."),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="a6000, a100-80g, h100, h200, l40s, t4, cpu (default: found)."),
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", min=1, help="GPUs (tensor parallel).")
    ] = None,
    traffic: Annotated[
        str, typer.Option("--traffic", help="chat, longdoc or FILE.jsonl.")
    ] = "chat",
    slo: Annotated[
        list[str] | None,
        typer.Option("--slo", help="A limit such as p99_ttft_ms<=800 (repeat for more)."),
    ] = None,
    hours: Annotated[float, typer.Option("--hours", help="The night: the budget fits it.")] = 8.0,
    trials: Annotated[
        int | None, typer.Option("--trials", help="The budget in trials (default: fits --hours).")
    ] = None,
    rate: Annotated[
        float | None, typer.Option("--rate", help="Request rate, req/s (default: simulated).")
    ] = None,
    num_prompts: Annotated[
        int | None, typer.Option("--num-prompts", min=1, help="Requests per trial.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="The study's name.")] = None,
    production_model: Annotated[
        str | None,
        typer.Option("--production-model", help="The model production serves (a HF id)."),
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option("--tokenizer", help="Tokenizer directory of the workload.")
    ] = None,
    search_space: Annotated[
        str | None, typer.Option("--search-space", help="Search-space file.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing file.")] = False,
) -> None:
    """Write a ready study file: the model, this box's GPUs, the traffic, an SLO, a night's
    budget (docs/study-file.md, "tuner init")."""
    from tuner.scaffold.options import InitOptions, check_options, check_output

    opts = InitOptions(
        model=model,
        engine=engine,
        gpu=gpu,
        count=count,
        traffic=traffic,
        slo=list(slo or []),
        hours=hours,
        trials=trials,
        rate=rate,
        num_prompts=num_prompts,
        name=name,
        production_model=production_model,
        tokenizer=tokenizer,
        search_space=search_space,
    )
    check_options(opts)
    if output is not None:
        check_output(output, force)

    from tuner.scaffold.study import draft_study
    from tuner.scaffold.write import write_study

    draft = draft_study(opts, output or Path("PENDING.yaml"))
    path = output or Path(f"{draft.data['name']}.yaml")
    write_study(draft, path, force)
    for line in draft.notes:
        typer.echo(line)
    typer.echo(f"wrote {path}; next: tuner check {path}, tuner run {path}, tuner best {path}")
