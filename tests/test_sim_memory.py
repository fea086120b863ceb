"""The memory plan and vLLM's start-up refusals (messages as vLLM words them)."""

from __future__ import annotations

import pytest

from tuner.errors import UserError
from tuner.sim.memory import check_config, memory_breakdown, resolve_flags
from tuner.sim.profiles import get_gpu, load_model

M32 = load_model("deepseek-r1-distill-qwen-32b")
A6000 = get_gpu("a6000")
CPU = get_gpu("cpu")
TINY = load_model("tiny-qwen2")
SEED_000 = {
    "gpu-memory-utilization": 0.7,
    "tensor-parallel-size": 4,
    "enable-chunked-prefill": True,
    "max-model-len": 65536,
    "max-num-seqs": 32,
    "max-num-batched-tokens": 131072,
    "block-size": 32,
}


def test_seed_production_command_starts():
    assert check_config(M32, A6000, SEED_000) is None
    mem = memory_breakdown(M32, A6000, resolve_flags(M32, A6000, SEED_000))
    assert mem.kv_bytes_per_token == 64 * 1024
    assert mem.kv_cache_tokens >= 65536


def test_vllm_v1_defaults():
    cfg = resolve_flags(M32, A6000, {"tensor-parallel-size": 4})
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.block_size) == (256, 2048, 16)
    assert cfg.enable_chunked_prefill and cfg.gpu_memory_utilization == 0.92
    assert cfg.max_model_len == 131072
    h100 = resolve_flags(M32, get_gpu("h100"), {})
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    off = resolve_flags(M32, A6000, {"enable-chunked-prefill": False, "max-model-len": 8192})
    assert off.max_num_batched_tokens == 8192  # raised to max-model-len, as vLLM does
    cpu = resolve_flags(TINY, CPU, {"max-model-len": 1024})
    assert (cpu.max_num_seqs, cpu.max_num_batched_tokens, cpu.block_size) == (128, 2048, 128)


def test_kv_cache_shrinks_with_utilization_and_grows_less_with_batched_tokens():
    def kv(**flags):
        cfg = resolve_flags(M32, A6000, {**SEED_000, **flags})
        return memory_breakdown(M32, A6000, cfg).kv_cache_bytes

    assert kv(**{"gpu-memory-utilization": 0.9}) > kv() > kv(**{"gpu-memory-utilization": 0.6})
    assert kv(**{"max-num-batched-tokens": 8192}) > kv()  # activation reserve


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"max-num-seqs": 256, "max-num-batched-tokens": 128},
         "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256)."),
        ({"enable-chunked-prefill": False, "max-num-batched-tokens": 8192},
         "max_num_batched_tokens (8192) is smaller than max_model_len (65536)."),
        ({"gpu-memory-utilization": 0.3},
         "No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"),
        ({"gpu-memory-utilization": 0.42, "max-num-batched-tokens": 8192},
         "To serve at least one request with the model's max seq len (65536), (4.0 GiB KV"),
        # vLLM 0.32 on CUDA: a multiple of 16, else no attention backend takes it
        ({"block-size": 8}, "No valid attention backend found for cuda"),
        ({"block-size": 24}, "block_size=24, ...). Reasons: {FLASH_ATTN: [block_size not sup"),
        ({"tensor-parallel-size": 3}, "Total number of attention heads (40) must be divisible"),
    ],
)  # fmt: skip
def test_refusals_match_vllm(flags, expected):
    message = check_config(M32, A6000, {**SEED_000, **flags})
    assert message is not None and expected in message


@pytest.mark.parametrize("block", [16, 32, 64, 128])
def test_cuda_takes_any_multiple_of_16(block):
    # vLLM 0.32 has no list of choices and no "up to 32" limit (vllm/config/cache.py):
    # FLASH_ATTN takes MultipleOf(16) (vllm/v1/attention/backends/flash_attn.py)
    assert check_config(M32, A6000, {**SEED_000, "block-size": block}) is None


def test_cpu_block_size_rule_and_kv_space():
    flags = {"max-model-len": 1024, "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert check_config(TINY, CPU, {**flags, "block-size": 32}) is None
    assert check_config(TINY, CPU, {**flags, "block-size": 16}) == (
        "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."
    )
    mem = memory_breakdown(TINY, CPU, resolve_flags(TINY, CPU, flags))
    assert mem.kv_cache_bytes == 1024**3


def test_bad_flag_values_are_user_errors():
    with pytest.raises(UserError, match="max-num-seqs: expected an integer"):
        resolve_flags(M32, A6000, {"max-num-seqs": "many"})
    with pytest.raises(UserError, match="gpu-memory-utilization: expected a number"):
        resolve_flags(M32, A6000, {"gpu_memory_utilization": "high"})
