"""The study `tuner init` writes: the model, the GPUs, the traffic, an SLO and a night's budget,
checked as `tuner plan` checks a study file before anything is written.

The choices, each overridable by an option (docs/study-file.md, "tuner init"):
- engine: `vllm serve` when this box has GPUs, else the simulated engine (`tuner sim serve`,
  every figure a prediction) on the GPU given, or one A6000;
- request rate: the highest round rate at which vLLM's defaults meet the SLO, each metric
  within 80 % of its limit, on the simulator (`tuner.scaffold.rate`): the baseline is a
  feasible point, so every tuned config has one to beat;
- budget: as many trials as `--hours` holds at the preflight's estimate of one trial
  (`tuner.run.cost`), at most `NIGHT_TRIALS`, and a timeout of `--hours`.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from tuner.errors import UserError
from tuner.run.checks import TOKENIZER_FILES, check_plan
from tuner.run.cost import duration, night_cost
from tuner.scaffold import box
from tuner.scaffold.baseline import space_for_gpu
from tuner.scaffold.draft import EngineDraft, StudyDraft
from tuner.scaffold.model_len import traffic_model_len
from tuner.scaffold.options import InitOptions, check_options
from tuner.scaffold.rate import choose_rate, sustained_rate
from tuner.scaffold.traffic import Traffic, traffic, traffic_words, with_template
from tuner.sim.profiles import BUILTIN_MODELS, ModelProfile, get_gpu, load_model
from tuner.sim.vllm_defaults import VLLM_VERSION
from tuner.spec.metric_keys import parse_latency_key, percentile_word
from tuner.spec.model_source import hub_cache_dir, model_dir
from tuner.spec.parsing import describe_validation_error, read_yaml_mapping
from tuner.spec.sections import MAX_NAME_LEN
from tuner.spec.slo import parse_slo
from tuner.spec.study import StudySpec
from tuner.spec.values import Scalar
from tuner.spec.workload import WorkloadSpec

SIM_GPU = "a6000"  # `tuner sim serve`'s own default
SIM_TOKENIZER = ".cache/tiny-qwen2"  # `make model` writes it; the demo's tokenizer
VLLM_COMMAND = ["vllm", "serve", "{model}"]
SIM_COMMAND = ["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"]
# at most, in a budget that fits --hours: past it, more trials teach TPE little
NIGHT_TRIALS = 100
MIN_TRIALS = 2  # the baseline and one tuned config
REPO = Path(__file__).resolve().parents[2]  # search_spaces/ of a checkout
# Hugging Face ids of the simulator's built-in models: what production's `vllm serve` loads.
HF_IDS = {
    "deepseek-r1-distill-qwen-32b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "deepseek-r1-0528-qwen3-8b": "deepseek-ai/DeepSeek-R1-0528-Qwen3-8B",
}


@dataclass
class Draft:
    """A checked study: its data (search space by path), spec, and what was chosen and why."""

    data: StudyDraft
    spec: StudySpec
    notes: list[str]


@dataclass
class _Hardware:
    gpu: str
    count: int
    engine: str
    found: str  # how the GPUs were known, in words


def draft_study(
    opts: InitOptions, output: Path, detect: Callable[[], box.Gpus | None] = box.detect
) -> Draft:
    """The study file's data, checked; `output` is where it will be written (the search
    space's path is relative to it). Every mistake is one UserError; nothing is written."""
    check_options(opts)
    profile = _model(opts)
    hw = _hardware(opts, detect)
    if hw.engine == "vllm" and model_dir(opts.model or "") is None:
        raise UserError(
            f"--model {opts.model}: vLLM loads a model directory or a hub id cached in "
            f"{hub_cache_dir()}; give --model DIR (its config.json is what the simulator "
            "reads), or --engine sim"
        )
    mix = traffic(opts.traffic, profile.max_position_embeddings, opts.num_prompts)
    found = _tokenizer(opts, hw.engine)
    mix = with_template(mix, Path(found) if found else model_dir(opts.model or ""))
    space_path = _search_space(opts, hw.gpu)
    data = _data(opts, profile, hw, mix, space_path, output)
    space, space_note = _space(space_path, hw, data)
    spec = _validated(data, space)
    model_len, len_note = traffic_model_len(spec, profile.max_position_embeddings)
    if model_len is not None:
        data["engine"]["flags"]["max-model-len"] = model_len
        spec = _validated(data, space)
    check_plan(spec)  # what `tuner plan` refuses: lengths, the GPU, the tokenizer, the dataset
    notes = [_hardware_note(profile, hw), *mix.notes, space_note, len_note]
    data["workload"]["request_rate"] = _rate(spec, opts, hw, notes)
    spec = _validated(data, space)
    data["budget"]["n_trials"] = _trials(spec, opts, notes)
    spec = _validated(data, space)
    limits = ", ".join(spec.objective.slo)
    given = "as given" if opts.slo else f"the default for {mix.kind} traffic; --slo to change"
    notes.append(f"SLO: {limits} ({given})")
    notes.append(_mode_note(opts, mix.kind))
    return Draft(data, spec, notes)


def _model(opts: InitOptions) -> ModelProfile:
    if not opts.model:
        raise UserError(
            "give --model DIR (a model directory with config.json) or a model the simulator "
            f"knows ({', '.join(sorted(BUILTIN_MODELS))})"
        )
    try:
        return load_model(opts.model)
    except UserError as exc:
        raise UserError(f"--model: {exc}") from None


def _hardware(opts: InitOptions, detect: Callable[[], box.Gpus | None]) -> _Hardware:
    """The GPUs: `--gpu` and `--count`, else what this box has (simulated with `--engine
    sim`), else one simulated A6000."""
    if opts.gpu is not None:
        name = get_gpu(opts.gpu).name
        return _Hardware(name, opts.count or 1, opts.engine or "sim", "given with --gpu")
    found = detect()
    if found is not None:
        count = opts.count or found.count
        if count > found.count:
            raise UserError(
                f"--count {count}: {found.source} finds {found.count}× {found.product} here"
            )
        words = f"found by {found.source}: {found.count}× {found.product}"
        return _Hardware(found.name, count, opts.engine or "vllm", words)
    if opts.engine == "vllm":
        raise UserError(
            "no GPU found (nvidia-smi, NVML): give --gpu NAME --count N, or --engine sim"
        )
    return _Hardware(SIM_GPU, opts.count or 1, "sim", "no GPU here: a simulated one")


def _search_space(opts: InitOptions, gpu: str) -> Path:
    default = REPO / "search_spaces" / ("cpu-tiny.yaml" if gpu == "cpu" else "vllm-core.yaml")
    path = Path(opts.search_space).expanduser() if opts.search_space else default
    if not path.is_file():
        raise UserError(f"search space {path} not found: give --search-space FILE")
    return path.resolve()


def _space(path: Path, hw: _Hardware, data: StudyDraft) -> tuple[dict[str, object], str]:
    """The search space with vLLM's defaults on the study's GPU as the baseline
    (`tuner.scaffold.baseline`): written into the study when they differ from the file's."""
    gpu = get_gpu(hw.gpu)
    found = space_for_gpu(read_yaml_mapping(path, "search-space file"), gpu, hw.count)
    words = f"vLLM {VLLM_VERSION}'s defaults on {hw.count}× {hw.gpu}"
    if not found.changes:
        return found.space, f"baseline (trial 0): {words}, as {path.name} declares them"
    data["search_space"] = found.space
    changed = "; ".join(found.changes)
    return found.space, f"baseline (trial 0): {words}, written here with {path.name}: {changed}"


def _tokenizer(opts: InitOptions, engine: str) -> str | None:
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


def _name(opts: InitOptions, profile: ModelProfile, hw: _Hardware, kind: str) -> str:
    if opts.name is not None:
        return opts.name
    sim = "-sim" if hw.engine == "sim" else ""
    text = f"{profile.name}-{hw.count}x{hw.gpu}-{kind}{sim}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:MAX_NAME_LEN] or "study"


def _data(
    opts: InitOptions,
    profile: ModelProfile,
    hw: _Hardware,
    mix: Traffic,
    space: Path,
    output: Path,
) -> StudyDraft:
    """The study file's mapping, in the order it is written."""
    tokenizer = _tokenizer(opts, hw.engine)
    model = str(opts.model)
    if Path(model).expanduser().is_dir():
        model = str(Path(model).expanduser().resolve())
    flags: dict[str, Scalar] = {}
    engine: EngineDraft = {"model": model}
    production = opts.production_model or HF_IDS.get(model.lower())
    if production and production != model:
        engine["production_model"] = production
    if hw.engine == "vllm":
        engine = {"command": VLLM_COMMAND, **engine}
    if hw.engine == "sim":
        engine = {"command": SIM_COMMAND, **engine, "startup_timeout_s": 60}
        flags = {"gpu": hw.gpu, "load-delay-s": 1}
        if tokenizer:
            flags["tokenizer"] = tokenizer
    if hw.count > 1:
        flags["tensor-parallel-size"] = hw.count
    engine["flags"] = flags
    if "tokenizer" in flags:
        engine["export_drop_flags"] = ["tokenizer"]
    workload = {**mix.workload, **_measured(opts.slo or mix.slo)}
    workload.update({"tokenizer": tokenizer} if tokenizer else {})
    simulated = "SIMULATED engine, figures are predictions" if hw.engine == "sim" else "vLLM"
    return {
        "name": _name(opts, profile, hw, mix.kind),
        "description": f"{profile.name} on {hw.count}× {hw.gpu}, {mix.kind} traffic ({simulated})",
        "engine": engine,
        "hardware": {"gpu": hw.gpu, "count": hw.count},
        "search_space": _relative(space, output.resolve().parent),
        "workload": {**workload, "request_rate": math.inf, "seed": 0},
        "objective": _objective(opts, mix),
        "budget": {"n_trials": MIN_TRIALS, "timeout": _hours_text(opts.hours)},
        "sampler": {"name": "tpe", "seed": 0},
        "trial": {"stall_timeout_s": 300 if mix.kind == "longdoc" else 60},
    }


def _objective(opts: InitOptions, mix: Traffic) -> dict[str, object]:
    """Scalar mode: the latency and throughput score under the SLO; capacity mode (docs/
    objective.md): the highest rate each config serves within the SLO, from the study's rate."""
    slos = list(opts.slo or mix.slo)
    if opts.mode == "capacity":
        return {"mode": "capacity", "slo": slos}
    weights = {"p99_ttft_ms": 1.0, "mean_tpot_ms": 1.0, "output_throughput": 1.0}
    return {"weights": weights, "slo": slos}


def _measured(slos: Sequence[str]) -> dict[str, str]:
    """The workload's `percentile_metrics` and `metric_percentiles` when an SLO names a
    latency or percentile the defaults (ttft, tpot, itl at P99) do not measure."""
    default = WorkloadSpec()
    metrics, percentiles = default.selected_metrics, default.percentiles
    for limit in (x for text in slos for x in parse_slo(text)):
        key = parse_latency_key(limit.metric)
        if key is not None and key.metric not in metrics:
            metrics = [*metrics, key.metric]
        if key is not None and key.percentile is not None and key.percentile not in percentiles:
            percentiles = sorted([*percentiles, key.percentile])
    out = {}
    if metrics != default.selected_metrics:
        out["percentile_metrics"] = ",".join(metrics)
    if percentiles != default.percentiles:
        out["metric_percentiles"] = ",".join(map(percentile_word, percentiles))
    return out


def _relative(path: Path, start: Path) -> str:
    """`path` as the study file names it: from the file's own folder (absolute when no
    path leads there, or the file is outside the checkout that holds it)."""
    if not (start.is_relative_to(REPO) or path.is_relative_to(start)):
        return str(path)
    try:
        return os.path.relpath(path, start)
    except ValueError:
        return str(path)


def shared_paths(data: StudyDraft, folder: Path) -> StudyDraft:
    """`data` as the file at `folder` writes it: the model directory, tokenizers and dataset
    named from that folder (`_relative`), so the study moves with what it names; the loader
    reads them from there (`tuner.spec.study.load_study_spec`)."""
    out = copy.deepcopy(data)

    def rel(value: str) -> str:
        path = Path(value)
        return _relative(path, folder) if path.is_absolute() and path.exists() else value

    engine, workload = out["engine"], out["workload"]
    if "model" in engine:
        engine["model"] = rel(engine["model"])
    flags = engine["flags"]
    if isinstance(tokenizer := flags.get("tokenizer"), str):
        flags["tokenizer"] = rel(tokenizer)
    for key in ("tokenizer", "dataset_path"):
        if isinstance(value := workload.get(key), str):
            workload[key] = rel(value)
    return out


def _hours_text(hours: float) -> str:
    return f"{hours:g}h" if float(hours).is_integer() else f"{round(hours * 60)}m"


def _validated(data: StudyDraft, space: dict[str, object]) -> StudySpec:
    try:
        return StudySpec.model_validate({**data, "search_space": space})
    except ValidationError as exc:
        raise UserError(f"the study would be refused: {describe_validation_error(exc)}") from None


def _mode_note(opts: InitOptions, kind: str) -> str:
    """`kind`: the traffic's kind in the SLO's note's words (`jsonl` for a file)."""
    why = "as given" if opts.objective else f"the default for {kind} traffic"
    if opts.mode == "capacity":
        return (
            "objective: capacity, the highest request rate each config serves within the SLO, "
            f"searched from the rate above on one engine start ({why}; --objective scalar "
            "for the latency score at that rate)"
        )
    return (
        f"objective: scalar, p99 TTFT, mean TPOT and output throughput at that rate ({why}; "
        "--objective capacity for the most traffic within the SLO)"
    )


def _hardware_note(profile: ModelProfile, hw: _Hardware) -> str:
    engine = "`tuner sim serve`, SIMULATED" if hw.engine == "sim" else "`vllm serve`"
    return f"{profile.name} on {hw.count}× {hw.gpu} ({hw.found}); engine: {engine}"


def _rate(spec: StudySpec, opts: InitOptions, hw: _Hardware, notes: list[str]) -> float:
    """The request rate: `--rate`, else the highest round rate at which vLLM's defaults meet
    the SLO with a margin on the simulator (`tuner.scaffold.rate`)."""
    if opts.rate is not None:
        rate, why = opts.rate, "as given"
    else:
        # the rate is the baseline's at one fixed rate (capacity mode's first step)
        scalar = spec.objective.model_copy(update={"mode": "scalar"})
        spec = spec.model_copy(update={"objective": scalar})
        try:
            sustained = sustained_rate(spec)
        except UserError as exc:
            raise UserError(
                f"{spec.engine.model} on {hw.count}× {hw.gpu}: {exc}: give more GPUs "
                "(--count) or a larger --gpu"
            ) from None
        choice = choose_rate(spec, sustained)
        rate, why = choice.rate, choice.why()
    notes.append(f"traffic: {traffic_words(spec.workload)} at {rate:g} req/s ({why})")
    return rate


def _trials(spec: StudySpec, opts: InitOptions, notes: list[str]) -> int:
    """`--trials`, else as many trials as `--hours` holds at the preflight's estimate."""
    hours = _hours_text(opts.hours)
    cost = night_cost(spec, n_trials=1)
    if opts.trials is not None:
        n, why = opts.trials, "as given"
    elif cost.trial_s is None:
        raise UserError(f"cannot estimate one trial's time ({cost.source}): give --trials N")
    else:
        fit = int(opts.hours * 3600 // cost.trial_s)
        if fit < MIN_TRIALS:
            raise UserError(
                f"one trial takes about {duration(cost.trial_s)} ({cost.source}): --hours "
                f"{opts.hours:g} holds {fit}; give more --hours or fewer --num-prompts"
            )
        n = min(fit, NIGHT_TRIALS)
        cap = f", at most {NIGHT_TRIALS}" if fit > NIGHT_TRIALS else ""
        why = f"what {hours} holds{cap}"
    if cost.trial_s is not None:
        why += f"; one trial ≈ {duration(cost.trial_s)}, {cost.basis}"
    notes.append(f"budget: {n} trials, timeout {hours} ({why})")
    return n
