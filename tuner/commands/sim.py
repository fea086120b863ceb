"""`tuner sim serve`: a simulated `vllm serve` (same flags, same endpoints, no GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tuner.commands.common import Force
from tuner.errors import UserError
from tuner.sim.profiles import BUILTIN_MODELS, GPUS

if TYPE_CHECKING:
    from tuner.sim.profiles import GpuProfile
    from tuner.sim.text import TokenText

MODEL_NAMES = ", ".join(BUILTIN_MODELS)
GPU_NAMES = ", ".join(GPUS)
DEFAULT_VLLM_PYTHON = ".venv-vllm/bin/python"  # `make vllm-env`'s, beside the study files

app = typer.Typer(
    help="The simulated vLLM engine: a stand-in for `vllm serve` that needs no GPU.",
    no_args_is_help=True,
)

_VLLM = "vLLM flags"
_IGNORED = "Accepted for compatibility with vllm serve; no effect"
_FAULTS = "Fault injection"


# `tuner sim serve`'s options that are not vLLM's own: the simulated GPU's load time, the time
# scale (tests), faults.
LoadDelay = Annotated[
    float, typer.Option(min=0, help="Simulated model-load time before the port opens.")
]
TimeScale = Annotated[
    float,
    typer.Option(
        min=1,
        envvar="TUNER_SIM_TIME_SCALE",
        help="For tests of logic, not timing: serve N times faster than real time (the "
        "tuner's client follows, and measures in simulated seconds). Default 1.",
    ),
]
RefuseStart = Annotated[
    bool, typer.Option(help="Fail at start-up after the load delay.", rich_help_panel=_FAULTS)
]
CrashAfter = Annotated[
    int | None,
    typer.Option(min=0, help="Exit abruptly once N requests started.", rich_help_panel=_FAULTS),
]
HangAfter = Annotated[
    int | None,
    typer.Option(min=0, help="Stop streaming once N requests started.", rich_help_panel=_FAULTS),
]
SlowStart = Annotated[
    float,
    typer.Option(min=0, help="Extra seconds before the port opens.", rich_help_panel=_FAULTS),
]
BusyStarts = Annotated[
    int,
    typer.Option(
        min=0,
        help="The first N starts (counted in --fault-state) refuse with vLLM's free-memory error.",
        rich_help_panel=_FAULTS,
    ),
]
GpuFaultAfter = Annotated[
    int | None,
    typer.Option(
        min=0,
        help="Die with CUDA's illegal-memory-access error once N requests started.",
        rich_help_panel=_FAULTS,
    ),
]
ReleaseS = Annotated[
    float,
    typer.Option(
        min=0,
        help="Hold the GPU's memory S s after exit (in --fault-state, for a stand-in nvidia-smi).",
        rich_help_panel=_FAULTS,
    ),
]
FaultState = Annotated[
    str | None,
    typer.Option(help="JSON file counting starts across processes.", rich_help_panel=_FAULTS),
]
NoUsage = Annotated[
    bool,
    typer.Option(help="Stream no usage chunk, even when asked for one.", rich_help_panel=_FAULTS),
]
# vLLM's flags that the simulator reads, and those it accepts and ignores.
ModelArg = Annotated[
    str | None,
    typer.Argument(
        metavar="[MODEL]", help=f"As `vllm serve MODEL`: as --model (built in: {MODEL_NAMES})."
    ),
]
Model = Annotated[
    str | None,
    typer.Option(
        help=f"Directory with config.json, or a built-in name: {MODEL_NAMES}.",
        rich_help_panel=_VLLM,
    ),
]
Tokenizer = Annotated[
    str | None,
    typer.Option(help="Tokenizer directory (default: the model directory).", rich_help_panel=_VLLM),
]
VllmInt = Annotated[int | None, typer.Option(rich_help_panel=_VLLM)]
ChunkedPrefill = Annotated[
    bool | None,
    typer.Option("--enable-chunked-prefill/--no-enable-chunked-prefill", rich_help_panel=_VLLM),
]
PrefixCaching = Annotated[
    bool | None,
    typer.Option("--enable-prefix-caching/--no-enable-prefix-caching", rich_help_panel=_VLLM),
]
ApiKey = Annotated[str | None, typer.Option(envvar="VLLM_API_KEY", rich_help_panel=_VLLM)]
Ignored = Annotated[str | None, typer.Option(rich_help_panel=_IGNORED)]
IgnoredSwitch = Annotated[bool, typer.Option(rich_help_panel=_IGNORED)]


@app.command()
def serve(
    model_arg: ModelArg = None,
    model: Model = None,
    tokenizer: Tokenizer = None,
    served_model_name: Annotated[str | None, typer.Option(rich_help_panel=_VLLM)] = None,
    tensor_parallel_size: VllmInt = None,
    data_parallel_size: VllmInt = None,
    max_model_len: VllmInt = None,
    max_num_seqs: VllmInt = None,
    block_size: VllmInt = None,
    max_num_batched_tokens: VllmInt = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option(rich_help_panel=_VLLM)] = None,
    enable_chunked_prefill: ChunkedPrefill = None,
    enable_prefix_caching: PrefixCaching = None,
    host: Annotated[str, typer.Option(rich_help_panel=_VLLM)] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, rich_help_panel=_VLLM)] = 8000,
    api_key: ApiKey = None,
    gpu: Annotated[
        str,
        typer.Option(help=f"Accelerator: a built-in name ({GPU_NAMES}) or a profile file."),
    ] = "a6000",
    load_delay_s: LoadDelay = 0.0,
    time_scale: TimeScale = 1.0,
    fault_refuse_start: RefuseStart = False,
    fault_crash_after: CrashAfter = None,
    fault_hang_after: HangAfter = None,
    fault_slow_start_s: SlowStart = 0.0,
    fault_no_usage: NoUsage = False,
    fault_busy_starts: BusyStarts = 0,
    fault_gpu_fault_after: GpuFaultAfter = None,
    fault_release_s: ReleaseS = 0.0,
    fault_state: FaultState = None,
    dtype: Ignored = None,
    load_format: Ignored = None,
    seed: Annotated[int | None, typer.Option(rich_help_panel=_IGNORED)] = None,
    chat_template: Ignored = None,
    chat_template_content_format: Ignored = None,
    enforce_eager: IgnoredSwitch = False,
    disable_log_requests: IgnoredSwitch = False,
    disable_log_stats: IgnoredSwitch = False,
    trust_remote_code: IgnoredSwitch = False,
) -> None:
    """Serve the OpenAI API from a simulated vLLM engine, in real time.

    Refused configurations print vLLM's message and exit 1, as vLLM does; unknown flags
    and bad values exit 2. The environment variable VLLM_CPU_KVCACHE_SPACE (GiB) sizes the
    KV cache of the `cpu` profile, as in vLLM's CPU build.
    """
    given = dict(locals())  # every option by name: no other local exists yet
    from dataclasses import fields

    from tuner.sim.faults import FaultPlan
    from tuner.sim.flags import MODELLED
    from tuner.sim.server import ServeOptions
    from tuner.sim.startup import engine_setup, serve

    # the modelled flags by vLLM's name, from the one list of them (tuner/sim/flags.py)
    flags = {name: given[name.replace("-", "_")] for name in MODELLED}
    if enforce_eager:  # no compile or graph capture at the start (tuner.sim.boot's phases)
        flags["enforce-eager"] = True
    model_path = _model_path(model, model_arg)
    simulated = builtin_of(model_path)  # the export's `vllm serve HF_ID`: its built-in profile
    options = ServeOptions(
        **engine_setup(simulated, gpu, flags),
        text=_text(tokenizer, simulated),  # loaded after the engine's checks passed
        served_model_names=[served_model_name or model_path],
        host=host,
        port=port,
        api_key=api_key,
        load_delay_s=load_delay_s,
        time_scale=time_scale,
        # every `--fault-*` option, by its FaultPlan field's name
        faults=FaultPlan(**{f.name: given[f"fault_{f.name}"] for f in fields(FaultPlan)}),
    )
    code = serve(options)
    if code:
        raise typer.Exit(code)


def builtin_of(model: str) -> str:
    """The built-in model whose Hugging Face id `model` is (what `tuner export` writes after
    `vllm serve`), else `model` as given: the exported command runs on the simulator as it
    is, served under that id as `tuner verify` expects."""
    from tuner.spec.model_source import BUILTIN_HF_IDS

    by_id = {hub.lower(): name for name, hub in BUILTIN_HF_IDS.items()}
    return by_id.get(model.lower(), model)


def _model_path(model: str | None, model_arg: str | None) -> str:
    """`--model` or the positional MODEL, as `vllm serve` takes either."""

    if model and model_arg and model != model_arg:
        raise UserError(f"two different models given: {model_arg!r} and --model {model!r}")
    path = model or model_arg
    if path is None:
        raise UserError("tuner sim serve: give the model (--model DIR or a built-in name)")
    return path


def _text(tokenizer: str | None, model_path: str) -> TokenText:
    """The simulated server's token text from the workload's tokenizer: a join only this
    layer can make (`tuner.sim` may not import `tuner.workload`, its neighbour)."""
    from tuner.sim.text import TokenText
    from tuner.workload.tokenizer import served_counter

    return TokenText(served_counter(tokenizer, model_path))


@app.command()
def profile(
    name: Annotated[
        str | None,
        typer.Argument(
            help=f"A built-in accelerator ({GPU_NAMES}) or a profile file; with --measure, "
            "the built-in whose overheads the measured profile keeps (default: the measured "
            "platform's)."
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write to this file (default: stdout).")
    ] = None,
    force: Force = False,
    measure: Annotated[
        bool,
        typer.Option(
            "--measure",
            help="Measure this machine's accelerator with PyTorch microbenchmarks (GEMMs at "
            "the model's shapes, attention, memory bandwidth, all-reduce across GPUs) and "
            "write the profile they give.",
        ),
    ] = False,
    python: Annotated[
        str | None,
        typer.Option(
            help="--measure: a Python with PyTorch (vLLM's own environment; default "
            f"{DEFAULT_VLLM_PYTHON} when there is one)."
        ),
    ] = None,
    model: Annotated[
        str, typer.Option(help="--measure: the model whose shapes to time (built in or a dir).")
    ] = "tiny-qwen2",
    threads: Annotated[
        int,
        typer.Option(
            min=1, help="--measure on the CPU: torch threads (1: as the CPU study pins vLLM)."
        ),
    ] = 1,
    quick: Annotated[
        bool, typer.Option("--quick", help="--measure: fewer shapes (a check, seconds).")
    ] = False,
) -> None:
    """Print a built-in accelerator profile as a profile file, to edit for another GPU, or
    (--measure) one measured on this machine.

    Every datasheet figure and step-time constant is named, in bytes, bytes/s, FLOP/s and
    seconds; `tuner sim serve --gpu FILE` and `hardware.profile: FILE` read it back.
    """
    from tuner.sim.profile_file import load_gpu, profile_to_yaml, write_profile

    if measure:
        if output is not None:  # before the measurement, not after
            from tuner.spec.outputs import check_output_file

            check_output_file(output, "--output", force=force)
        gpu = _measured(name, python, model, threads, quick)
    elif name is None:
        raise UserError("give an accelerator NAME (or FILE), or --measure")
    else:
        gpu = load_gpu(name)
    if output is None:
        typer.echo(profile_to_yaml(gpu), nl=False)
    else:
        write_profile(gpu, output, "--output", force=force)


def _measured(
    base: str | None, python: str | None, model_path: str, threads: int, quick: bool
) -> GpuProfile:
    """The profile measured with `python`'s PyTorch, over the overheads of `base`."""
    from pathlib import Path

    from tuner.sim.measured import base_profile, measured_profile, run_microbench
    from tuner.sim.profiles import load_model

    if base is not None and base.strip().lower() not in GPUS:
        raise UserError(f"--measure keeps a built-in's overheads: {base!r} is none ({GPU_NAMES})")
    if python is None:
        if not Path(DEFAULT_VLLM_PYTHON).is_file():
            raise UserError(
                f"--measure needs a Python with PyTorch: give --python PATH ({DEFAULT_VLLM_PYTHON}"
                " is not here)"
            )
        python = DEFAULT_VLLM_PYTHON
    shapes = load_model(model_path)
    found = run_microbench(python, shapes, threads=threads, quick=quick)
    try:
        base_gpu = base_profile(found, base)
        return measured_profile(found, shapes, f"{base_gpu.name}-measured", base_gpu)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise UserError(f"the microbenchmark's result does not read: {exc!r}") from None
