"""What a study `tuner init` drafts names, each given by an option or else found on this box:
the model (a directory with config.json, or a built-in one), the GPUs and the engine (`vllm
serve` with GPUs here, else the simulator), the search-space file, the workload's tokenizer.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import UserError
from tuner.run.checks import TOKENIZER_FILES
from tuner.scaffold import box
from tuner.scaffold.options import InitOptions
from tuner.sim.profiles import BUILTIN_MODELS, ModelProfile, get_gpu, load_model
from tuner.spec.model_source import model_dir

SIM_GPU = "a6000"  # `tuner sim serve`'s own default
SIM_TOKENIZER = ".cache/tiny-qwen2"  # `make model` writes it; the demo's tokenizer
REPO = Path(__file__).resolve().parents[2]  # search_spaces/ of a checkout


@dataclass
@dataclass
class Hardware:
    """The study's GPUs and engine, and how they were known."""

    gpu: str
    count: int
    engine: str
    found: str  # how the GPUs were known, in words


HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")  # `org/name`, as Hugging Face ids read


def study_model(opts: InitOptions) -> ModelProfile:
    if not opts.model and opts.model_config:
        raise UserError(
            f"--model-config {opts.model_config}: give --model HUB_ID too, the model it is the "
            "config of (what production's `vllm serve` loads)"
        )
    if not opts.model:
        raise UserError(
            "give --model DIR (a model directory with config.json) or a model the simulator "
            f"knows ({', '.join(sorted(BUILTIN_MODELS))})"
        )
    if opts.model_config:  # the shape of the hub id `--model`, named after it
        try:
            profile = load_model(Path(opts.model_config).expanduser())
        except UserError as exc:
            raise UserError(f"--model-config: {exc}") from None
        return dataclasses.replace(profile, name=opts.model)
    try:
        return load_model(opts.model)
    except UserError as exc:
        # a hub id with no copy here: the option that hands its config.json over (issue 49)
        hub = HUB_ID.fullmatch(opts.model) is not None and not Path(opts.model).exists()
        more = "; or give its config.json with --model-config PATH" if hub else ""
        raise UserError(f"--model: {exc}{more}") from None


def simulated_model(opts: InitOptions) -> str:
    """`engine.model`, what the simulator reads: `--model-config`'s config.json (or its folder)
    when given, the hub id `--model` then being production's; else `--model`, a directory
    resolved."""
    model = opts.model_config or str(opts.model)
    if opts.model_config or Path(model).expanduser().is_dir():
        return str(Path(model).expanduser().resolve())
    return model


def study_hardware(opts: InitOptions, detect: Callable[[], box.Gpus | None]) -> Hardware:
    """The GPUs: `--gpu` and `--count`, else what this box has (simulated with `--engine
    sim`), else one simulated A6000."""
    if opts.gpu is not None:
        name = get_gpu(opts.gpu).name
        return Hardware(name, opts.count or 1, opts.engine or "sim", "given with --gpu")
    found = detect()
    if found is not None:
        count = opts.count or found.count
        if count > found.count:
            raise UserError(
                f"--count {count}: {found.source} finds {found.count}× {found.product} here"
            )
        words = f"found by {found.source}: {found.count}× {found.product}"
        return Hardware(found.name, count, opts.engine or "vllm", words)
    if opts.engine == "vllm":
        raise UserError(
            "no GPU found (nvidia-smi, NVML): give --gpu NAME --count N, or --engine sim"
        )
    return Hardware(SIM_GPU, opts.count or 1, "sim", "no GPU here: a simulated one")


def search_space_file(opts: InitOptions, gpu: str) -> Path:
    default = REPO / "search_spaces" / ("cpu-tiny.yaml" if gpu == "cpu" else "vllm-core.yaml")
    path = Path(opts.search_space).expanduser() if opts.search_space else default
    if not path.is_file():
        raise UserError(f"search space {path} not found: give --search-space FILE")
    return path.resolve()


def workload_tokenizer(opts: InitOptions, engine: str) -> str | None:
    """The workload's tokenizer: `--tokenizer`, else the model directory's own, else (on the
    simulated engine) the tiny one `make model` writes."""
    if opts.tokenizer:
        path = Path(opts.tokenizer).expanduser()
        if not path.is_dir():
            raise UserError(f"--tokenizer {opts.tokenizer}: directory not found")
        return str(path.resolve())
    model = model_dir(opts.model or "")  # a directory, or a cached hub id's snapshot
    if model is not None and any((model / name).is_file() for name in TOKENIZER_FILES):
        return None
    if engine == "vllm":
        return None  # `tuner check` names the missing tokenizer
    # `make model` writes it in the checkout; `tuner init` may run from anywhere
    for path in (Path(SIM_TOKENIZER), REPO / SIM_TOKENIZER):
        if path.is_dir():
            return str(path.resolve())
    raise UserError(
        f"the simulated engine needs a tokenizer: give --tokenizer DIR, or run `make model` "
        f"(it writes {SIM_TOKENIZER})"
    )
