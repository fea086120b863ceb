"""Search-space parameters, vLLM's own flag rules, and the mapping of values to argv and env."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TypeVar

import optuna

from tuner.spec.figures import exact
from tuner.spec.flag_values import AUTO_MAX_MODEL_LEN, as_written, long_flag
from tuner.spec.model_source import model_config
from tuner.spec.parts import Serving
from tuner.spec.sections import HardwareSpec, ParameterSpec, SearchSpace
from tuner.spec.values import Flags, Params, Scalar
from tuner.spec.vllm_rules import block_size_error, scheduler_error

N = TypeVar("N")  # what `check_rules` reads a flag as (int, float)

# Flags the simulator understands but production `vllm serve` does not.
SIM_ONLY_FLAGS = frozenset({"gpu", "load-delay-s"})


def distributions(space: SearchSpace) -> dict[str, optuna.distributions.BaseDistribution]:
    """Optuna distributions for `study.ask`, one per parameter."""
    return {name: _distribution(p) for name, p in space.parameters.items()}


def _distribution(p: ParameterSpec) -> optuna.distributions.BaseDistribution:
    D = optuna.distributions
    if p.type in ("int", "float"):
        assert p.low is not None and p.high is not None  # `ParameterSpec._check` holds it
        if p.type == "int":
            step = int(p.step or 1)
            return D.IntDistribution(int(p.low), int(p.high), log=p.log, step=1 if p.log else step)
        return D.FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    if p.type == "bool":
        return D.CategoricalDistribution([False, True])
    return D.CategoricalDistribution(list(p.choices or []))


def baseline_params(space: SearchSpace) -> dict[str, Scalar] | None:
    """vLLM's defaults as declared in the space, or None when any parameter lacks one."""
    declared = {n: p.default for n, p in space.parameters.items() if p.default is not None}
    return declared if len(declared) == len(space.parameters) else None


def flag_args(name: str, value: Scalar | None) -> list[str]:
    """One vLLM long flag: `--name value`, a bool as `--name`/`--no-name`, None as nothing."""
    flag = name if name.startswith("--") else f"--{name}"
    if value is None:
        return []
    if isinstance(value, bool):
        return [flag] if value else [f"--no-{flag[2:]}"]
    return [flag, str(value)]


def tuned_flags(space: SearchSpace, params: Params) -> dict[str, Scalar]:
    """Parameters that are flags, keyed by long flag name without dashes (a numeric flag's
    value as vLLM reads it: a trial stored by an older tuner with the choice 2.0 says 2; a
    stepped float range's 0.7799999999999999 as 0.78, `exact`)."""
    out = {}
    for name, p in space.parameters.items():
        if p.env is None and name in params:
            flag = long_flag(name, p)
            out[flag] = as_written(flag, exact(params[name]))
    return out


def tuned_env(space: SearchSpace, params: Params) -> dict[str, str]:
    return {
        p.env: str(exact(params[name]))
        for name, p in space.parameters.items()
        if p.env is not None and name in params
    }


def effective_flags(spec: Serving, params: Params) -> dict[str, Scalar | None]:
    """Fixed flags overlaid with tuned ones (and the derived data-parallel-size: the trial's
    GPUs over one replica's, tensor-parallel-size x pipeline-parallel-size): what the engine
    is told, minus host/port/key."""
    flags = {**spec.engine.flags, **tuned_flags(spec.search_space, params)}
    gpus = trial_gpus(spec)
    if spec.search_space.fill_data_parallel and gpus is not None:
        replica = _size(flags, "tensor-parallel-size") * _size(flags, "pipeline-parallel-size")
        flags["data-parallel-size"] = max(1, gpus // max(replica, 1))
    return flags


def trial_gpus(spec: Serving) -> int | None:
    """The GPUs one trial's engine may use: a slot's (`gpus_per_trial`), the listed `gpus`,
    else the box's `hardware.count`; None when the study names no hardware."""
    return hardware_gpus(spec.hardware)


def hardware_gpus(hw: HardwareSpec) -> int | None:
    """`trial_gpus` of a study's `hardware:` section."""
    if hw.gpus_per_trial is not None:
        return hw.gpus_per_trial
    if hw.gpu_list:
        return len(hw.gpu_list)
    return hw.count if hw.accelerator is not None else None


def _size(flags: Flags, name: str) -> int:
    value = flags.get(name)
    return 1 if value is None or isinstance(value, bool) else int(value)


SHAPE_FLAGS = ("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size")


def shape_error(flags: Flags, gpus: int | None, *, filled: bool = False) -> str | None:
    """Why this deployment shape (TP x PP x DP GPUs) cannot run on a trial's GPUs; None if it
    can or the GPUs are unknown. `filled`: data-parallel-size was derived to fill them."""
    if gpus is None:
        return None
    tp, pp, dp = (_size(flags, name) for name in SHAPE_FLAGS)
    if tp * pp * dp > gpus:
        return (
            f"tensor-parallel-size {tp} x pipeline-parallel-size {pp} x data-parallel-size "
            f"{dp} needs {tp * pp * dp} GPUs, more than the trial's {gpus} "
            "(hardware.gpus_per_trial, gpus or count)"
        )
    if filled and gpus % (tp * pp):
        return (
            f"tensor-parallel-size {tp} x pipeline-parallel-size {pp} does not divide the "
            f"trial's {gpus} GPU(s): no data-parallel-size fills them"
        )
    return None


def spec_rules(spec: Serving, flags: Flags, platform: str | None = None) -> str | None:
    """The shape's fit on a trial's GPUs, then vLLM's checks (the block size on `platform`,
    "cuda" or "cpu", when known: `tuner.runners.plan.study_platform`): one line, or None."""
    filled = spec.search_space.fill_data_parallel
    return shape_error(flags, trial_gpus(spec), filled=filled) or check_rules(
        flags, max_model_len(spec), platform
    )


# The flags `spec_rules` reads: a config's fate before launch depends on these alone.
RULE_FLAGS = frozenset(
    {*SHAPE_FLAGS, "block-size", "max-num-seqs", "max-num-batched-tokens"}
    | {"enable-chunked-prefill", "gpu-memory-utilization"}
)
MAX_CORNERS = 1024  # more: the space is not walked (`rule_corners`)
MAX_INT_VALUES = 4096  # an int range's values are listed up to this many (`int_values`)


def int_values(p: ParameterSpec) -> list[int] | None:
    """Every value an int parameter draws (low, low + step, …, high); None for another type
    or past `MAX_INT_VALUES`."""
    if p.type != "int" or p.low is None or p.high is None:
        return None
    step = 1 if p.log else int(p.step or 1)
    low, high = int(p.low), int(p.high)
    if (high - low) // step >= MAX_INT_VALUES:
        return None
    return list(range(low, high + 1, step))


def drawn_values(p: ParameterSpec, flag: str, platform: str | None) -> list[Scalar]:
    """The values of parameter `p` on `flag` that `spec_rules` can tell apart: its choices;
    a range's ends (each rule but the block size's is monotone in a number); a block size
    range's lowest and highest size `platform` takes and refuses."""
    if p.type == "bool":
        return [False, True]
    if p.type == "categorical":
        return list(p.choices or [])
    assert p.low is not None and p.high is not None  # `ParameterSpec._check` holds it
    values = int_values(p)
    if flag == "block-size" and values is not None:
        taken = [v for v in values if block_size_error(v, platform) is None]
        refused = [v for v in values if block_size_error(v, platform) is not None]
        return list(dict.fromkeys([*taken[:1], *taken[-1:], *refused[:1], *refused[-1:]]))
    ends = [p.low, p.high] if values is None else [values[0], values[-1]]
    return list(dict.fromkeys(int(v) if p.type == "int" else v for v in ends))


def rule_corners(spec: Serving, platform: str | None) -> list[Params] | None:
    """Configs of the search space that stand for all of it under vLLM's rules (`spec_rules`
    on `platform`): every combination of `drawn_values` of the parameters on `RULE_FLAGS`,
    the others at their default (else their first value). Every config is refused before
    launch when all of these are. None past `MAX_CORNERS` combinations."""
    axes: dict[str, list[Scalar]] = {}
    for name, p in spec.search_space.parameters.items():
        flag = long_flag(name, p)
        values = drawn_values(p, flag, platform)
        if flag not in RULE_FLAGS:
            values = [p.default] if p.default is not None else values[:1]
        axes[name] = values
    corners: list[Params] = [{}]
    for name, values in axes.items():
        corners = [{**c, name: v} for c in corners for v in values]
        if len(corners) > MAX_CORNERS:
            return None
    return corners


def engine_argv(spec: Serving, params: Params, *, port: int) -> list[str]:
    """The argv that starts this trial's engine (real vLLM or `tuner sim serve`).

    An API key never goes on the command line (vLLM logs its arguments, and `ps` shows them):
    the runner passes it in the environment as VLLM_API_KEY, which vLLM reads.
    """
    eng = spec.engine
    argv = [part.format(model=eng.model, python=sys.executable) for part in eng.command]
    if eng.served_model_name:
        argv += ["--served-model-name", eng.served_model_name]
    for name, value in effective_flags(spec, params).items():
        argv += flag_args(name, value)
    argv += ["--host", eng.host, "--port", str(port)]
    return argv


def engine_env(spec: Serving, params: Params) -> dict[str, str]:
    return {**spec.engine.env, **tuned_env(spec.search_space, params)}


def simulator_flags(spec: Serving, params: Params) -> dict[str, Scalar | None]:
    """What the simulation core takes for one config: the engine's flags and its env in one
    mapping (it reads VLLM_CPU_KVCACHE_SPACE from there), as `tuner plan` passes them."""
    return {**effective_flags(spec, params), **engine_env(spec, params)}


def _production_flags(spec: Serving, params: Params) -> dict[str, Scalar | None]:
    drop = SIM_ONLY_FLAGS | set(spec.engine.export_drop_flags)
    return {k: v for k, v in effective_flags(spec, params).items() if k not in drop}


def serve_argv(spec: Serving, params: Params) -> list[str]:
    """Production's `vllm serve MODEL ...`, whichever way the study launched the engine."""
    argv = ["vllm", "serve", spec.engine.deployed_model]
    if spec.engine.served_model_name:
        argv += ["--served-model-name", spec.engine.served_model_name]
    for name, value in _production_flags(spec, params).items():
        argv += flag_args(name, value)
    return argv


def serve_env(spec: Serving, params: Params) -> dict[str, str]:
    return engine_env(spec, params)


def serve_config(spec: Serving, params: Params) -> dict[str, object]:
    """A `vllm serve --config FILE` mapping: long-form argument names as keys."""
    cfg: dict[str, object] = {"model": spec.engine.deployed_model}
    if spec.engine.served_model_name:
        cfg["served-model-name"] = spec.engine.served_model_name
    cfg.update({k: v for k, v in _production_flags(spec, params).items() if v is not None})
    return cfg


def max_model_len(spec: Serving) -> int | None:
    """`--max-model-len`, else the model's max_position_embeddings when its config is local
    (also for `-1`/`auto`, vLLM's longest that fits: at most that)."""
    value = spec.engine.flags.get("max-model-len")
    if value is not None and value != AUTO_MAX_MODEL_LEN:
        return int(value)
    cfg = model_config(spec.engine.model)  # a directory's, or a cached hub id's
    if cfg is not None:
        data = json.loads(cfg.read_text())
        if "max_position_embeddings" in data:
            return int(data["max_position_embeddings"])
    return None


def check_rules(flags: Flags, model_len: int | None, platform: str | None = None) -> str | None:
    """vLLM's checks on these flags, with its messages: the block size `platform`'s attention
    backends take (unchecked when None), then the scheduler's; None when they pass."""

    def number(name: str, kind: Callable[[Scalar], N]) -> N | None:
        value = flags.get(name)
        return None if value is None else kind(value)

    refused = block_size_error(number("block-size", int), platform)
    if refused is not None:
        return refused
    return scheduler_error(
        max_num_seqs=number("max-num-seqs", int),
        max_num_batched_tokens=number("max-num-batched-tokens", int),
        enable_chunked_prefill=flags.get("enable-chunked-prefill", True) is not False,
        max_model_len=model_len,
        gpu_memory_utilization=number("gpu-memory-utilization", float),
    )
