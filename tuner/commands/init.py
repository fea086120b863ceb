"""`tuner init`: the options, then the study file `tuner.scaffold` drafts from the box."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from tuner.commands.common import NoPreview

Output = Annotated[
    Path | None,
    typer.Option("-o", "--output", help="The study file to write (default: NAME.yaml)."),
]
Model = Annotated[
    str | None,
    typer.Option("--model", help="A model directory with config.json, or a built-in model."),
]
Engine = Annotated[
    str | None, typer.Option("--engine", help="vllm or sim (default: vllm when a GPU is found).")
]
Gpu = Annotated[
    str | None,
    typer.Option("--gpu", help="A built-in GPU (default: the GPUs found here)."),
]
Count = Annotated[int | None, typer.Option("--count", min=1, help="GPUs (tensor parallel).")]
Traffic = Annotated[str, typer.Option("--traffic", help="chat, longdoc or FILE.jsonl.")]
Slo = Annotated[
    list[str] | None,
    typer.Option("--slo", help="A limit such as p99_ttft_ms<=800 (repeat for more)."),
]
Hours = Annotated[float, typer.Option("--hours", help="The night: the budget fits it.")]
Trials = Annotated[
    int | None, typer.Option("--trials", help="The budget in trials (default: fits --hours).")
]
Rate = Annotated[
    float | None, typer.Option("--rate", help="Request rate, req/s (default: simulated).")
]
NumPrompts = Annotated[int | None, typer.Option("--num-prompts", min=1, help="Requests per trial.")]
Name = Annotated[str | None, typer.Option("--name", help="The study's name.")]
ProductionModel = Annotated[
    str | None, typer.Option("--production-model", help="The model production serves (a HF id).")
]
Tokenizer = Annotated[
    str | None, typer.Option("--tokenizer", help="Tokenizer directory of the workload.")
]
SearchSpace = Annotated[str | None, typer.Option("--search-space", help="Search-space file.")]
Objective = Annotated[
    str | None,
    typer.Option(
        "--objective", help="scalar or capacity (default: capacity for longdoc, else scalar)."
    ),
]

Force = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Replace an existing -o file (never a device); write a night whose SLO no config "
        "meets at any rate.",
    ),
]
MaxModelLen = Annotated[
    int | None,
    typer.Option(
        "--max-model-len", min=1, help="vLLM's --max-model-len (default: what the traffic needs)."
    ),
]
InputLen = Annotated[
    int | None, typer.Option("--input-len", min=1, help="Random prompts of N tokens (chat).")
]
OutputLen = Annotated[
    int | None, typer.Option("--output-len", min=1, help="Answers of N tokens (chat).")
]
Concurrency = Annotated[
    int | None,
    typer.Option("--concurrency", min=1, help="A closed loop: N requests at once (scalar)."),
]
ModelConfig = Annotated[
    str | None,
    typer.Option("--model-config", help="config.json of a --model hub id not on this box."),
]


def init(
    output: Output = None,
    model: Model = None,
    engine: Engine = None,
    gpu: Gpu = None,
    count: Count = None,
    traffic: Traffic = "chat",
    slo: Slo = None,
    hours: Hours = 8.0,
    trials: Trials = None,
    rate: Rate = None,
    num_prompts: NumPrompts = None,
    name: Name = None,
    production_model: ProductionModel = None,
    tokenizer: Tokenizer = None,
    search_space: SearchSpace = None,
    objective: Objective = None,
    max_model_len: MaxModelLen = None,
    input_len: InputLen = None,
    output_len: OutputLen = None,
    concurrency: Concurrency = None,
    model_config: ModelConfig = None,
    force: Force = False,
    no_preview: NoPreview = False,
) -> None:
    """Write a ready study file: the model, this box's GPUs, the traffic, an SLO, a night's
    budget (docs/study-file.md, "tuner init").

    Built-in models: deepseek-r1-distill-qwen-32b, deepseek-r1-0528-qwen3-8b, tiny-qwen2.
    Built-in GPUs: a6000, a100-80g, a100-pcie, a100-pcie-nop2p, h100, h100-nvl, h100-pcie, h200,
    l40s, t4, cpu.
    """
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
        objective=objective,
        max_model_len=max_model_len,
        input_len=input_len,
        output_len=output_len,
        concurrency=concurrency,
        model_config=model_config,
        force=force,
    )
    check_options(opts)
    if output is not None:
        check_output(output, force)

    from tuner.run.planned import planned_trials
    from tuner.scaffold.preview import preview
    from tuner.scaffold.study import draft_study
    from tuner.scaffold.write import next_commands, write_study

    draft = draft_study(opts, output or Path("PENDING.yaml"))
    if not no_preview and draft.reachable:  # out of reach: the preview would find nothing
        draft.notes.append(preview(draft.spec, planned_trials).line)
    path = output or Path(f"{draft.data['name']}.yaml")
    write_study(draft, path, force)
    for line in draft.notes:
        typer.echo(line)
    from tuner.scaffold.box import memory_lines

    for line in memory_lines():  # what a busy GPU leaves (docs/reliability.md)
        typer.echo(line)
    typer.echo(f"wrote {shlex.quote(str(path))}; next: {', '.join(next_commands(path))}")
