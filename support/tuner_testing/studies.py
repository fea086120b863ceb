"""Study files for tests and benchmarks: the shipped demo on `tuner sim serve`, the CPU study on
a real vLLM."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tuner_testing.cli import REPO


def sim_time_scale() -> float:
    """Simulated seconds per wall second of the `tuner sim serve` a test starts (the suite sets
    TUNER_SIM_TIME_SCALE, tests/conftest.py; docs/simulator.md): to compare a wall-clock
    figure (`engine_s`) with a measured one (`pruned_at_s`, in simulated seconds)."""
    return float(os.environ.get("TUNER_SIM_TIME_SCALE") or 1.0)


def sim_study(
    tmp_path: Path,
    tokenizer: Path,
    *,
    flags: dict[str, Any] | None = None,
    workload: dict[str, Any] | list[dict[str, Any]] | None = None,
    **top: Any,
) -> Path:
    """A study over `tuner sim serve` (simulated 4×A6000, 32B model) with a short workload;
    `workload` as a list: those scenarios, as written."""
    data: dict[str, Any] = {
        "name": "e2e",
        "engine": {
            "command": ["{python}", "-m", "tuner.cli", "sim", "serve", "--model", "{model}"],
            "model": "deepseek-r1-distill-qwen-32b",
            "served_model_name": "qwen32b",
            "startup_timeout_s": 60,
            "flags": {
                "gpu": "a6000",
                "tensor-parallel-size": 4,
                "max-model-len": 8192,
                "tokenizer": str(tokenizer),
                **(flags or {}),
            },
            "export_drop_flags": ["tokenizer"],
        },
        "hardware": {"gpu": "a6000", "count": 4},
        "search_space": {
            "parameters": {
                "max-num-seqs": {"type": "int", "low": 8, "high": 256, "log": True, "default": 256},
                "max-num-batched-tokens": {
                    "type": "int",
                    "low": 256,
                    "high": 16384,
                    "log": True,
                    "default": 2048,
                },
                "gpu-memory-utilization": {
                    "type": "float",
                    "low": 0.7,
                    "high": 0.95,
                    "step": 0.05,
                    "default": 0.9,
                },
            }
        },
        "workload": {
            "tokenizer": str(tokenizer),
            "random_input_len": 128,
            "random_output_len": 16,
            "num_prompts": 16,
            "request_rate": 16,
            **(workload if isinstance(workload, dict) else {}),
        },
        "budget": {"n_trials": 3},
        "trial": {"stall_timeout_s": 5},
    }
    if isinstance(workload, list):
        data["workload"] = workload
    data.update(top)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cpu_study(
    tmp_path: Path,
    model_dir: Path,
    vllm_python: Path,
    core: int,
    *,
    kv_cache_gib: tuple[int, int] | None = (1, 2),
    **top: Any,
) -> Path:
    """studies/cpu-tiny.yaml aimed at this test's model and vLLM, with a smaller workload.

    `kv_cache_gib` = (default, high) of VLLM_CPU_KVCACHE_SPACE; None keeps the file's (4, 4).
    vLLM's CPU build fills its whole KV cache as it starts: its "init engine" took 0.5 s at
    1 GiB and 1.8 s at 4 on this box, but 3.9-6.4 s and 23.8-25.5 s at another time, with the
    box's memory in another state (docs/performance.md, "The KV cache at start-up"). The
    tests' engines hold 1 or 2 GiB."""
    data = yaml.safe_load((REPO / "studies" / "cpu-tiny.yaml").read_text())
    data["search_space"] = yaml.safe_load((REPO / "search_spaces" / "cpu-tiny.yaml").read_text())
    if kv_cache_gib is not None:
        default, high = kv_cache_gib
        data["search_space"]["parameters"]["VLLM_CPU_KVCACHE_SPACE"].update(
            default=default, high=high
        )
    engine = data["engine"]
    engine["command"] = [str(vllm_python), *engine["command"][1:]]
    engine["model"] = str(model_dir)
    engine["cpu_affinity"] = [core]
    engine["env"] = {
        **engine.get("env", {}),
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    # Fixed lengths here (the shipped file varies them): the tests count exact tokens, and a
    # short, equal workload keeps each real-engine trial's run time predictable.
    data["workload"].update(
        num_prompts=16, random_output_len=16, random_range_ratio=0.0, num_warmups=1
    )
    data.update(top)
    path = tmp_path / "cpu-study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
