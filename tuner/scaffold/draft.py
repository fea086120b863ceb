"""The study file's mapping as `tuner init` drafts it (`tuner.scaffold.study`), section by
section in the order it is written; the sections `init` fills freely stay JSON objects. Built
from what the options name or the box has (`tuner.scaffold.sources`) and the traffic, with
paths named from the file's own folder (`shared_paths`); the rate and the budget are filled in
later (`tuner.scaffold.study`)."""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from tuner.scaffold.options import InitOptions
from tuner.scaffold.sources import REPO, Hardware, simulated_model
from tuner.scaffold.traffic import Traffic
from tuner.sim.profiles import ModelProfile
from tuner.spec.metric_keys import parse_latency_key, percentile_word
from tuner.spec.model_source import BUILTIN_HF_IDS
from tuner.spec.sections import MAX_NAME_LEN
from tuner.spec.slo import parse_slo
from tuner.spec.values import Scalar
from tuner.spec.workload import WorkloadSpec

VLLM_COMMAND = ["vllm", "serve", "{model}"]
SIM_COMMAND = ["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"]
MIN_TRIALS = 2  # the baseline and one tuned config


class EngineDraft(TypedDict, total=False):
    """The study file's `engine:` section as `tuner init` writes it."""

    command: list[str]
    model: str
    production_model: str
    startup_timeout_s: int
    flags: dict[str, Scalar]
    export_drop_flags: list[str]


class StudyDraft(TypedDict):
    """The study file's mapping as `tuner init` writes it, in its order."""

    name: str
    description: str
    engine: EngineDraft
    hardware: dict[str, object]
    search_space: str | dict[str, object]  # a path, or the space itself (its baseline moved)
    workload: dict[str, object]
    objective: dict[str, object]
    budget: dict[str, object]
    sampler: dict[str, object]
    trial: dict[str, object]


OP_WORDS = {"<=": "le", "<": "lt", ">=": "ge", ">": "gt"}  # SLO operators in a study name


def _name(opts: InitOptions, profile: ModelProfile, hw: Hardware, kind: str) -> str:
    """`MODEL-NxGPU-TRAFFIC[-sim]`, then what the options set that the defaults do not:
    `maxlen65536`, `in512-out512`, `c8` (a closed loop), `2.5rps`, `40prompts`, `capacity`
    (an `--objective` other than the traffic's default), the SLO as given
    (`p99_ttft_ms-le800`): two studies that differ in any of them get different names, so
    one never continues the other's stored trials (docs/study-file.md, "tuner init")."""
    if opts.name is not None:
        return opts.name
    model = Path(str(opts.model)).name if opts.model_config else profile.name
    parts = [model, f"{hw.count}x{hw.gpu}", kind, *(["sim"] if hw.engine == "sim" else [])]
    if opts.max_model_len is not None:
        parts.append(f"maxlen{opts.max_model_len}")
    if opts.input_len is not None:
        parts.append(f"in{opts.input_len}")
    if opts.output_len is not None:
        parts.append(f"out{opts.output_len}")
    if opts.concurrency is not None:
        parts.append(f"c{opts.concurrency}")
    if opts.rate is not None:
        parts.append(f"{opts.rate:g}rps")
    if opts.num_prompts is not None:  # what a trial measures: run refuses a change of it
        parts.append(f"{opts.num_prompts}prompts")
    if opts.objective is not None and opts.objective != replace(opts, objective=None).mode:
        parts.append(opts.objective)  # not the traffic's default mode
    for limit in (x for text in opts.slo for x in parse_slo(text)):
        parts.append(f"{limit.metric}-{OP_WORDS[limit.op]}{limit.value:g}")
    text = "-".join(parts)
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:MAX_NAME_LEN] or "study"


def study_data(
    opts: InitOptions,
    profile: ModelProfile,
    hw: Hardware,
    mix: Traffic,
    space: Path,
    output: Path,
    tokenizer: str | None,
    objective: dict[str, object],
) -> StudyDraft:
    """The study file's mapping, in the order it is written; `tokenizer`: the workload's
    (`tuner.scaffold.sources.workload_tokenizer`), None when the model directory holds one;
    `objective`: the objective section init chose (`tuner.scaffold.study`)."""
    model = simulated_model(opts)
    flags: dict[str, Scalar] = {}
    engine: EngineDraft = {"model": model}
    given = opts.model if opts.model_config else None  # the hub id whose config was given
    production = opts.production_model or given or BUILTIN_HF_IDS.get(model.lower())
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
    if opts.max_model_len is not None:
        flags["max-model-len"] = opts.max_model_len
    engine["flags"] = flags
    if "tokenizer" in flags:
        engine["export_drop_flags"] = ["tokenizer"]
    workload = {**mix.workload, **_measured(opts.slo or mix.slo)}
    if opts.concurrency is not None:
        workload["max_concurrency"] = opts.concurrency
    workload.update({"tokenizer": tokenizer} if tokenizer else {})
    simulated = "SIMULATED engine, figures are predictions" if hw.engine == "sim" else "vLLM"
    return {
        "name": _name(opts, profile, hw, mix.kind),
        "description": f"{profile.name} on {hw.count}× {hw.gpu}, {mix.kind} traffic ({simulated})",
        "engine": engine,
        "hardware": {"gpu": hw.gpu, "count": hw.count},
        "search_space": _relative(space, output.resolve().parent),
        "workload": {**workload, "request_rate": math.inf, "seed": 0},
        "objective": objective,
        "budget": {"n_trials": MIN_TRIALS, "timeout": hours_text(opts.hours)},
        "sampler": {"name": "tpe", "seed": 0},
        "trial": {"stall_timeout_s": 300 if mix.kind == "longdoc" else 60},
    }


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


def hours_text(hours: float) -> str:
    return f"{hours:g}h" if float(hours).is_integer() else f"{round(hours * 60)}m"
