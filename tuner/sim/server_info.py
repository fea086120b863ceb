"""What `tuner sim serve` says about its own config, in vLLM's shapes (front, not core):

- `vllm:cache_config_info`, the /metrics gauge whose labels are vLLM's CacheConfig
  (vllm/v1/metrics/loggers.py, `log_metrics_info`), set to 1;
- `GET /server_info?config_format=json` (dev mode only, as vLLM's
  vllm/entrypoints/serve/dev/server_info/api_router.py): the config sections vLLM dumps
  (`model_config`, `cache_config`, `scheduler_config`, `parallel_config`; only the fields the
  simulator models), the `VLLM_*` variables and `system_env` with the simulated GPUs named
  as collect_env's `nvidia_gpu_models` does (`GPU 0: <name>`, one line each).
"""

from __future__ import annotations

import os

from tuner import __version__
from tuner.sim.engine import STEP_TOKEN_EDGES
from tuner.sim.memory import EngineConfig
from tuner.sim.profiles import GpuProfile
from tuner.spec.values import Scalar


def step_tokens_histogram(engines: list[tuple[str, list[int], int]]) -> list[str]:
    """`vllm:iteration_tokens_total`, vLLM's histogram of the tokens in each engine step
    (vllm/v1/metrics/loggers.py), one series per engine: `engines` holds each one's labels
    (`engine="0",model_name="m"`), its steps per bucket of `STEP_TOKEN_EDGES` (the last past
    the last edge) and their tokens in all. Buckets are cumulative, as Prometheus writes them."""
    name = "vllm:iteration_tokens_total"
    lines = [
        f"# HELP {name} Histogram of number of tokens per engine_step.",
        f"# TYPE {name} histogram",
    ]
    for labels, counts, tokens in engines:
        edges = [f"{float(e)}" for e in STEP_TOKEN_EDGES] + ["+Inf"]
        running = 0
        for edge, n in zip(edges, counts, strict=True):
            running += n
            lines.append(f'{name}_bucket{{{labels},le="{edge}"}} {float(running)}')
        lines.append(f"{name}_count{{{labels}}} {float(running)}")
        lines.append(f"{name}_sum{{{labels}}} {float(tokens)}")
    return lines


def cache_config(cfg: EngineConfig) -> dict[str, Scalar]:
    return {
        "block_size": cfg.block_size,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "cache_dtype": "auto",
        "enable_prefix_caching": cfg.enable_prefix_caching,
    }


def cache_config_info(cfg: EngineConfig, engines: int) -> list[str]:
    """The gauge's Prometheus lines, one per engine (vLLM's `engine` label)."""
    labels = ",".join(f'{k}="{v}"' for k, v in cache_config(cfg).items())
    return [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        *(f'vllm:cache_config_info{{{labels},engine="{i}"}} 1.0' for i in range(engines)),
    ]


def server_info(cfg: EngineConfig, gpu: GpuProfile, model_path: str) -> dict[str, object]:
    gpus = cfg.tensor_parallel_size * cfg.data_parallel_size
    return {
        "vllm_config": {
            "model_config": {"model": model_path, "max_model_len": cfg.max_model_len},
            "cache_config": cache_config(cfg),
            "scheduler_config": {
                "max_num_seqs": cfg.max_num_seqs,
                "max_num_batched_tokens": cfg.max_num_batched_tokens,
                "enable_chunked_prefill": cfg.enable_chunked_prefill,
            },
            "parallel_config": {
                "tensor_parallel_size": cfg.tensor_parallel_size,
                "data_parallel_size": cfg.data_parallel_size,
            },
        },
        "vllm_env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")},
        "system_env": {
            "vllm_version": f"sim-{__version__}",
            "nvidia_gpu_models": "\n".join(f"GPU {i}: {gpu.name}" for i in range(gpus)),
        },
    }
