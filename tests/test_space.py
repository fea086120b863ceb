"""Flag mapping, quoting and vLLM's own rules."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import optuna
import pytest

from tuner.results.export import shell_command
from tuner.spec.sections import EngineSpec, HardwareSpec, SearchSpace
from tuner.spec.space import (
    baseline_params,
    check_rules,
    distributions,
    engine_argv,
    engine_env,
    flag_args,
    serve_argv,
    serve_config,
)
from tuner.spec.study import StudySpec


def _spec(**engine) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": "/models/My Model", "served_model_name": "m", **engine},
            "search_space": {
                "parameters": {
                    "max-num-seqs": {
                        "type": "int",
                        "low": 8,
                        "high": 512,
                        "log": True,
                        "default": 256,
                    },
                    "block-size": {"type": "categorical", "choices": [16, 32], "default": 16},
                    "gpu-memory-utilization": {
                        "type": "float",
                        "low": 0.7,
                        "high": 0.95,
                        "step": 0.05,
                        "default": 0.9,
                    },
                    "enable-chunked-prefill": {"type": "bool", "default": True},
                    "kv": {
                        "type": "int",
                        "low": 1,
                        "high": 4,
                        "env": "VLLM_CPU_KVCACHE_SPACE",
                        "default": 2,
                    },
                }
            },
            "workload": {},
        }
    )


PARAMS = {
    "max-num-seqs": 64,
    "block-size": 32,
    "gpu-memory-utilization": 0.85,
    "enable-chunked-prefill": False,
    "kv": 3,
}


def test_flag_args() -> None:
    assert flag_args("max-num-seqs", 8) == ["--max-num-seqs", "8"]
    assert flag_args("enable-chunked-prefill", True) == ["--enable-chunked-prefill"]
    assert flag_args("enable-chunked-prefill", False) == ["--no-enable-chunked-prefill"]
    assert flag_args("x", None) == []


def test_engine_argv_places_fixed_tuned_and_managed_flags() -> None:
    spec = _spec(
        command=["{python}", "-m", "api", "--model", "{model}"],
        flags={"dtype": "bfloat16", "enforce-eager": True},
    )
    argv = engine_argv(spec, PARAMS, port=4321)
    assert argv[1:5] == ["-m", "api", "--model", "/models/My Model"]
    assert argv[argv.index("--max-num-seqs") + 1] == "64"
    assert "--no-enable-chunked-prefill" in argv and "--enforce-eager" in argv
    assert argv[-4:] == ["--host", "127.0.0.1", "--port", "4321"]
    assert engine_env(spec, PARAMS) == {"VLLM_CPU_KVCACHE_SPACE": "3"}
    assert "kv" not in " ".join(argv)


@dataclass(frozen=True)
class _Serving:
    """Just the sections of the `Serving` part (`tuner.spec.parts`), no study around them."""

    engine: EngineSpec
    search_space: SearchSpace
    hardware: HardwareSpec
    simulated_accelerator: str = ""


def test_the_argv_and_the_export_take_just_the_serving_part() -> None:
    spec = _spec(flags={"dtype": "bfloat16"}, env={"HF_HOME": "/hf"})
    part = _Serving(spec.engine, spec.search_space, spec.hardware)
    assert engine_argv(part, PARAMS, port=4321) == engine_argv(spec, PARAMS, port=4321)
    assert (
        engine_env(part, PARAMS)
        == engine_env(spec, PARAMS)
        == {
            "HF_HOME": "/hf",
            "VLLM_CPU_KVCACHE_SPACE": "3",
        }
    )
    assert serve_config(part, PARAMS) == serve_config(spec, PARAMS)


def test_serve_argv_is_production_vllm_serve_even_for_other_launchers() -> None:
    spec = _spec(
        command=["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"],
        flags={"gpu": "a6000", "load-format": "dummy"},
        export_drop_flags=["load-format"],
    )
    argv = serve_argv(spec, PARAMS)
    assert argv[:3] == ["vllm", "serve", "/models/My Model"]
    assert "--gpu" not in argv and "--load-format" not in argv


def test_shell_command_round_trips_through_a_shell_parser() -> None:
    template = "{% if x %}'quoted' \"double\" $HOME{% endif %}"
    spec = _spec(flags={"chat-template": template})
    line = shell_command(spec, PARAMS)
    words = shlex.split(line)
    assert words[0] == "VLLM_CPU_KVCACHE_SPACE=3"
    assert words[1:4] == ["vllm", "serve", "/models/My Model"]
    assert words[words.index("--chat-template") + 1] == template


def test_serve_config_uses_long_names() -> None:
    cfg = serve_config(_spec(), PARAMS)
    assert cfg["model"] == "/models/My Model"
    assert cfg["max-num-seqs"] == 64 and cfg["enable-chunked-prefill"] is False


def test_stepped_floats_reach_the_command_rounded() -> None:
    argv = serve_argv(_spec(), {**PARAMS, "gpu-memory-utilization": 0.7799999999999999})
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.78"


def test_distributions_and_baseline() -> None:
    spec = _spec()
    dists = distributions(spec.search_space)
    assert dists["max-num-seqs"].log
    assert isinstance(dists["enable-chunked-prefill"], optuna.distributions.CategoricalDistribution)
    base = baseline_params(spec.search_space)
    assert base == {
        "max-num-seqs": 256,
        "block-size": 16,
        "gpu-memory-utilization": 0.9,
        "enable-chunked-prefill": True,
        "kv": 2,
    }
    for name, value in base.items():
        assert dists[name]._contains(dists[name].to_internal_repr(value))


@pytest.mark.parametrize(
    ("flags", "model_len", "needle"),
    [
        (
            {"max-num-seqs": 64, "max-num-batched-tokens": 32},
            None,
            "max_num_batched_tokens (32) must be greater than or equal to max_num_seqs (64).",
        ),
        (
            {"max-num-batched-tokens": 2048, "enable-chunked-prefill": False},
            4096,
            "max_num_batched_tokens (2048) is smaller than max_model_len (4096)",
        ),
        ({"gpu-memory-utilization": 1.2}, None, "gpu_memory_utilization must be in (0, 1]"),
    ],
)
def test_rules_refuse_like_vllm(flags, model_len, needle) -> None:
    assert needle in check_rules(flags, model_len)


def test_rules_accept_valid_configs() -> None:
    assert check_rules({"max-num-seqs": 64, "max-num-batched-tokens": 64}, 4096) is None
    assert (
        check_rules({"max-num-batched-tokens": 2048, "enable-chunked-prefill": True}, 4096) is None
    )
    assert (
        check_rules({"max-num-batched-tokens": 4096, "enable-chunked-prefill": False}, 4096) is None
    )
