"""vLLM's own configuration checks, with its messages (vllm/config/scheduler.py, cache.py).

Shared by the tuner's pre-launch rule check and the simulated engine, so that both refuse
exactly what vLLM refuses, in vLLM's words. Pure and light: no optuna, no numpy.
"""

from __future__ import annotations


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
