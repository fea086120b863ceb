"""Engine flags, the memory plan, and where vLLM refuses to start (with vLLM's messages).

The memory plan follows vLLM V1's start-up: load the weights, profile one forward pass of
max-num-batched-tokens tokens (the activation peak), and give the KV cache what is left
of `gpu-memory-utilization` x device memory. `check_config` is also the tuner's
pre-launch infeasibility check for real studies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.errors import UserError
from tuner.sim import vllm_defaults
from tuner.sim.profiles import GiB, GpuProfile, ModelProfile
from tuner.spec.values import Flags, Scalar
from tuner.spec.vllm_rules import block_size_error, scheduler_error


@dataclass(frozen=True, slots=True)
class MemoryConstants:
    """Constants of the memory plan (per device)."""

    # Activation peak per batched token, in units of dtype bytes: residual + normed hidden
    # states (2 x hidden) and the MLP's gate/up output plus activation (3 x intermediate/TP).
    activation_hidden_factor: float = 2.0
    activation_intermediate_factor: float = 3.0
    # The sampler's profiling run: max-num-seqs rows of fp32 logits over the vocab.
    logits_bytes: int = 4
    # Memory outside PyTorch's allocator: CUDA context, NCCL buffers, CUDA graphs.
    non_torch_bytes: int = GiB


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Resolved engine flags (vLLM V1 defaults filled in for the platform)."""

    max_num_seqs: int
    block_size: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    enable_chunked_prefill: bool
    max_model_len: int
    tensor_parallel_size: int
    data_parallel_size: int = 1  # replicas, TP GPUs each (tuner.sim.replicas)
    kv_cache_space_gib: int | None = None  # VLLM_CPU_KVCACHE_SPACE on the CPU platform
    enable_prefix_caching: bool = True  # vLLM V1's default (tuner.sim.prefix_cache)


@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Where one device's memory goes, bytes. `num_blocks` <= 0 means no room for a cache."""

    total_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    kv_cache_bytes: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    max_model_len_bytes: int  # KV one max-model-len request needs

    @property
    def kv_cache_tokens(self) -> int:
        return max(0, self.num_blocks) * self.block_size


_INT_FLAGS = (
    "max-num-seqs",
    "block-size",
    "max-num-batched-tokens",
    "max-model-len",
    "tensor-parallel-size",
    "data-parallel-size",
)


def resolve_flags(model: ModelProfile, gpu: GpuProfile, flags: Flags) -> EngineConfig:
    """Fill vLLM's defaults (`vllm serve`, `tuner.sim.vllm_defaults`) for the flags not given;
    max-model-len from the model's config. With chunked prefill off the default token budget
    is raised to max-model-len. Keys are vLLM long names (`max-num-seqs` or `max_num_seqs`);
    others are ignored.
    """
    f = {str(k).lstrip("-").replace("_", "-"): v for k, v in flags.items()}
    ints = {k: _as_int(k, v) for k in _INT_FLAGS if (v := f.get(k)) is not None}
    tp = ints.get("tensor-parallel-size", 1)
    given = {**vllm_defaults.serve_defaults(gpu, tp), **f}  # the flags given, over the defaults
    chunked = _as_bool("enable-chunked-prefill", given["enable-chunked-prefill"])
    prefix = _as_bool("enable-prefix-caching", given["enable-prefix-caching"])
    util = _as_float("gpu-memory-utilization", given["gpu-memory-utilization"])
    max_model_len = ints.get("max-model-len", model.max_position_embeddings)
    seqs_default, tokens_default = vllm_defaults.batch_defaults(gpu, tp)  # as `given`'s defaults
    block_default = vllm_defaults.block_size(gpu)
    tokens = ints.get("max-num-batched-tokens")
    if tokens is None:
        tokens = tokens_default if chunked else max(max_model_len, tokens_default)
        tokens = min(tokens, ints.get("max-num-seqs", seqs_default) * max_model_len)
    seqs = ints.get("max-num-seqs", min(seqs_default, tokens))
    space = f.get("VLLM-CPU-KVCACHE-SPACE")
    return EngineConfig(
        max_num_seqs=seqs,
        block_size=ints.get("block-size", block_default),
        max_num_batched_tokens=tokens,
        gpu_memory_utilization=util,
        enable_chunked_prefill=chunked,
        max_model_len=max_model_len,
        tensor_parallel_size=tp,
        data_parallel_size=ints.get("data-parallel-size", 1),
        kv_cache_space_gib=_as_int("VLLM_CPU_KVCACHE_SPACE", space) if space else None,
        enable_prefix_caching=prefix,
    )


def memory_breakdown(
    model: ModelProfile,
    gpu: GpuProfile,
    cfg: EngineConfig,
    constants: MemoryConstants = MemoryConstants(),
) -> MemoryBreakdown:
    """The memory plan of one device (one TP rank)."""
    tp = cfg.tensor_parallel_size
    weights = model.weight_bytes_per_gpu(tp)
    per_token = model.dtype_bytes * (
        constants.activation_hidden_factor * model.hidden_size
        + constants.activation_intermediate_factor * model.intermediate_size / tp
    )
    logits = cfg.max_num_seqs * model.vocab_size * constants.logits_bytes
    activations = int(per_token * cfg.max_num_batched_tokens + logits)
    kv_per_token = model.kv_bytes_per_token(tp)
    if gpu.platform == "cpu" and cfg.kv_cache_space_gib is not None:
        budget, non_torch = cfg.kv_cache_space_gib * GiB, 0
        kv_bytes = budget
    else:
        budget = int(cfg.gpu_memory_utilization * gpu.memory_bytes)
        non_torch = constants.non_torch_bytes if gpu.platform == "cuda" else 0
        kv_bytes = budget - weights - activations - non_torch
    block_bytes = kv_per_token * cfg.block_size
    return MemoryBreakdown(
        total_bytes=gpu.memory_bytes,
        weights_bytes=weights,
        non_torch_bytes=non_torch,
        kv_cache_bytes=kv_bytes,
        kv_bytes_per_token=kv_per_token,
        block_size=cfg.block_size,
        num_blocks=kv_bytes // block_bytes if kv_bytes > 0 else 0,
        max_model_len_bytes=math.ceil(cfg.max_model_len / cfg.block_size) * block_bytes,
    )


def config_error(model: ModelProfile, gpu: GpuProfile, cfg: EngineConfig) -> str | None:
    """Errors vLLM raises while building its config, before loading the model."""
    tp = cfg.tensor_parallel_size
    if not 0 < cfg.gpu_memory_utilization <= 1:
        return f"gpu_memory_utilization must be in (0, 1], got {cfg.gpu_memory_utilization}"
    sizes = (cfg.max_num_seqs, cfg.block_size, cfg.max_num_batched_tokens, tp)
    if min(*sizes, cfg.data_parallel_size) < 1:
        return (
            "max_num_seqs, block_size, max_num_batched_tokens, tensor_parallel_size and "
            "data_parallel_size must be >= 1"
        )
    if model.num_heads % tp:
        return (
            f"Total number of attention heads ({model.num_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    if cfg.max_model_len > model.max_position_embeddings:
        return (
            f"User-specified max_model_len ({cfg.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={model.max_position_embeddings} in "
            "model's config.json)."
        )
    return scheduler_error(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        max_model_len=cfg.max_model_len,
        gpu_memory_utilization=None,  # checked first, above
    )


def devices_error(gpu: GpuProfile, cfg: EngineConfig, visible: str | None) -> str | None:
    """vLLM's refusal of a shape wider than the GPUs it sees (`visible`: CUDA_VISIBLE_DEVICES;
    vllm/config/parallel.py checks one replica's world size; each local data-parallel rank
    takes its own GPUs)."""
    if gpu.platform != "cuda" or not visible:
        return None
    count, world = len(visible.split(",")), cfg.tensor_parallel_size
    if count >= world * cfg.data_parallel_size:
        return None
    if count < world:
        return f"World size ({world}) is larger than the number of available GPUs ({count})"
    return (
        f"data_parallel_size ({cfg.data_parallel_size}) x world size ({world}) is larger "
        f"than the number of available GPUs ({count}) (simulated)"
    )


def startup_error(model: ModelProfile, gpu: GpuProfile, cfg: EngineConfig) -> str | None:
    """Errors vLLM raises while loading the model: the attention backend's block size (vLLM
    0.32's rule per platform, `tuner.spec.vllm_rules`), then the KV cache."""
    refused = block_size_error(cfg.block_size, gpu.platform)
    if refused is not None:
        return refused
    mem = memory_breakdown(model, gpu, cfg)
    if gpu.platform == "cuda" and mem.weights_bytes + mem.non_torch_bytes > mem.total_bytes:
        return (
            "torch.OutOfMemoryError: CUDA out of memory while loading the model: its weights "
            f"take {_gib(mem.weights_bytes)} GiB per GPU at tensor-parallel-size "
            f"{cfg.tensor_parallel_size}, and the GPU has a total capacity of "
            f"{_gib(mem.total_bytes)} GiB (simulated). Use a larger tensor-parallel-size."
        )
    if mem.kv_cache_bytes <= 0:
        return (
            "No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine (this flag also "
            "controls CPU memory reservation on the CPU backend, despite its name). See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    if mem.max_model_len_bytes > mem.kv_cache_bytes:
        estimate = mem.kv_cache_bytes // (mem.kv_bytes_per_token * cfg.block_size)
        estimate *= cfg.block_size
        hint = (
            f"Based on the available memory, the estimated maximum model length is {estimate}. "
            if estimate > 0
            else ""
        )
        return (
            f"To serve at least one request with the model's max seq len ({cfg.max_model_len}), "
            f"({_gib(mem.max_model_len_bytes)} GiB KV cache is needed, which is larger than "
            f"the available KV cache memory ({_gib(mem.kv_cache_bytes)} GiB). {hint}"
            "Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
            "CPU backend) or decreasing `max_model_len` when initializing the engine. See "
            "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        )
    return None


def check_config(model: ModelProfile, gpu: GpuProfile, flags: Flags) -> str | None:
    """vLLM's refusal message for these flags on this hardware, or None if it would start."""
    cfg = resolve_flags(model, gpu, flags)
    return config_error(model, gpu, cfg) or startup_error(model, gpu, cfg)


def _gib(n: int) -> str:
    return f"{round(n / GiB, 2)}"


def _as_int(name: str, value: Scalar) -> int:
    if isinstance(value, bool):
        raise UserError(f"flag {name}: expected an integer, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"flag {name}: expected an integer, got {value!r}") from None
    if not number.is_integer():
        raise UserError(f"flag {name}: expected an integer, got {value!r}")
    return int(number)


def _as_float(name: str, value: Scalar | None) -> float:
    try:
        if value is not None:
            return float(value)
    except (TypeError, ValueError):
        pass
    raise UserError(f"flag {name}: expected a number, got {value!r}")


def _as_bool(name: str, value: Scalar | None) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise UserError(f"flag {name}: expected true or false, got {value!r}")
