"""Why an engine failed to start, read from its log with a table of real vLLM messages.

The kind is what the study records (`failure_kind`) and what the sampler learns to avoid;
the reason is the log line that showed it. The patterns come from logs of the CPU build
(tests/data/vllm_logs/) and from vLLM's source for the CUDA-only messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tuner.errors import FailureKind, TunerError
from tuner.spec.figures import figure

# vLLM 0.32's two forms: "Free memory on device cuda:0 (3.25/47.41 GiB) on startup is less than
# desired GPU memory utilization (0.9, 42.67 GiB). ..." and the one about "the engine's budget
# after excluding external process's weights".
BOX_BUSY_PATTERN = (
    r"Free memory on device \S+ \([\d.]+/[\d.]+ GiB\) on startup is less than desired GPU memory"
    r"|excluding external process'?s? weights"
)
# A GPU that failed under the engine, in the driver's, PyTorch's and NCCL's words: the kernel's
# "NVRM: Xid (PCI:0000:3b:00): 79, ...", "CUDA error: an illegal memory access was encountered",
# c10d's "Watchdog caught collective operation timeout" / "ProcessGroupNCCL ... timeout",
# "uncorrectable ECC error encountered".
GPU_FAULT_PATTERNS = (
    r"\bNVRM: Xid\b|\bXid \d+\b|\bXid \(PCI",
    r"CUDA error: an illegal memory access was encountered",
    r"[Ww]atchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imeout"
    r"|NCCL (?:error|WARN).*[Tt]imeout",
    r"[Uu]ncorrectable ECC error|ECC error encountered",
)
# Start failures that memory another process holds can cause (a config's own refusal, such as
# an argument vLLM rejects, it cannot).
_BOX_CAUSED = frozenset({FailureKind.OUT_OF_MEMORY, FailureKind.CRASHED})

# First match wins, so the specific kinds come before the broad ones. The number is how many
# following lines belong to the reason (pydantic puts the field and message below its header).
FAILURE_PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = tuple(
    (kind, re.compile(pattern), extra_lines)
    for kind, pattern, extra_lines in (
        # The box's state (vllm/v1/worker/utils.py, `request_memory`): another process holds
        # the memory `gpu-memory-utilization` asks for. Before any memory kind of the config.
        (FailureKind.BOX_BUSY, BOX_BUSY_PATTERN, 0),
        *((FailureKind.GPU_FAULT, p, 0) for p in GPU_FAULT_PATTERNS),
        (FailureKind.UNSUPPORTED_BLOCK_SIZE, r"No common block size for", 0),
        # CUDA in vLLM 0.32: no attention backend takes the size (tuner.spec.vllm_rules)
        (
            FailureKind.UNSUPPORTED_BLOCK_SIZE,
            r"No valid attention backend found .*block_size not supported",
            0,
        ),
        # Older vLLM (0.10): CUDA's argparse choices and its "up to 32" limit.
        (
            FailureKind.UNSUPPORTED_BLOCK_SIZE,
            r"[Bb]lock size \d+ is not supported|--block-size: invalid choice",
            0,
        ),
        (FailureKind.KV_CACHE_TOO_SMALL, r"No available memory for the cache blocks", 0),
        (
            FailureKind.KV_CACHE_TOO_SMALL,
            r"KV cache is needed, which is larger than the available KV cache",
            0,
        ),
        (
            FailureKind.OUT_OF_MEMORY,
            r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError",
            0,
        ),
        (FailureKind.OUT_OF_MEMORY, r"[Cc]annot allocate memory|std::bad_alloc|MemoryError", 0),
        (FailureKind.OUT_OF_MEMORY, r"is less than requested memory for kv", 0),
        (FailureKind.INVALID_ARGUMENT, r"error: unrecognized arguments|error: argument ", 0),
        (
            FailureKind.INVALID_ARGUMENT,
            r"No such option: --",
            0,
        ),  # `tuner sim serve` (click) wording
        (FailureKind.INVALID_ARGUMENT, r"must be greater than or equal to max_num_seqs", 0),
        (FailureKind.INVALID_ARGUMENT, r"is smaller than max_model_len", 0),
        (FailureKind.INVALID_ARGUMENT, r"\d+ validation errors? for \w+", 2),
        (FailureKind.PORT_IN_USE, r"[Aa]ddress already in use", 0),  # uvicorn, and aiohttp (sim)
    )
)

# vLLM's log prefix, e.g. "(EngineCore pid=42) ERROR 12-02 10:32:24 [core.py:1512] ".
_LOG_PREFIX = re.compile(
    r"^(?:\(\w[\w-]* pid=\d+\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s+"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"(?:^|\] )\s*[A-Za-z_][\w.]*(?:Error|Exception): ")
_ERROR_RECORD = re.compile(r"\b(?:ERROR|CRITICAL|FATAL)\b")
_PYDANTIC_DETAIL = re.compile(r"\s\[type=.*$")
MAX_REASON_CHARS = 400


@dataclass(frozen=True)
class Failure:
    """A classified engine failure: `kind` (a `FailureKind`), `reason`, `log_tail`."""

    kind: str
    reason: str
    log_tail: str


class EngineStartFailed(TunerError):
    """The engine exited or timed out before it was ready; `failure` says why."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"{failure.kind}: {failure.reason}")
        self.failure = failure


def tail_lines(text: str, max_lines: int = 40) -> str:
    """The last `max_lines` lines of `text`."""
    return "\n".join(text.splitlines()[-max_lines:])


def clean_line(line: str) -> str:
    """A log line without colour codes or vLLM's logger prefix, trimmed to a readable length."""
    line = _PYDANTIC_DETAIL.sub("", _LOG_PREFIX.sub("", _ANSI.sub("", line))).strip()
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 1] + "…"


def classify_failure(
    log_text: str, *, exit_code: int | None, timed_out: bool = False, timeout_s: float | None = None
) -> Failure:
    """Classify a failed start from the engine's log, its exit code and whether it timed out
    (`timeout_s`: the study's `engine.startup_timeout_s`, named in a timeout's reason).

    A known message wins over a timeout (an engine that logged "No common block size" and then
    hung failed for that reason). Without one, a timeout is `startup_timeout` and anything else
    is `crashed`, with the exit code and the first error line of the log as the reason.
    """
    lines = log_text.splitlines()
    tail = tail_lines(log_text)
    for kind, pattern, extra_lines in FAILURE_PATTERNS:
        for i, line in enumerate(lines):
            if pattern.search(line):
                parts = [clean_line(x) for x in lines[i : i + 1 + extra_lines]]
                return Failure(kind, clean_line(": ".join(p for p in parts if p)), tail)
    if timed_out:
        after = f" ({figure(timeout_s)} s, engine.startup_timeout_s)" if timeout_s else ""
        reason = f"engine not ready before the startup timeout{after}"
        return Failure(FailureKind.STARTUP_TIMEOUT, reason, tail)
    how = "was killed by a signal" if exit_code is not None and exit_code < 0 else "exited"
    reason = f"engine {how} (exit code {exit_code})"
    line = _first_error_line(lines)
    return Failure(FailureKind.CRASHED, clean_line(f"{reason}: {line}") if line else reason, tail)


def port_taken(failure: Failure, address: str, holders: str = "") -> Failure:
    """The failure of an engine while another process listened on its port (`holders` names
    it, e.g. "pid 42 (python3)"). The engine cannot have served there, so a timeout or a crash
    without a known message is `port_in_use` (retried on another port); a known message such
    as "Address already in use" stays, naming the holder."""
    who = f"another process ({holders})" if holders else "another process"
    if failure.kind == FailureKind.PORT_IN_USE:
        reason = f"{failure.reason} ({address} is held by {who})"
    elif failure.kind in (FailureKind.STARTUP_TIMEOUT, FailureKind.CRASHED):
        reason = f"{who} listens on {address}, not the engine; {failure.reason}"
    else:
        return failure
    return Failure(FailureKind.PORT_IN_USE, clean_line(reason), failure.log_tail)


def on_busy_box(failure: Failure, held: str) -> Failure:
    """The failure of a start while other processes held the GPU's memory (`held` describes
    them, read before the start: `tuner.engine.gpu_memory.busy_now`; "": none did). vLLM's
    free-memory refusal names them; an out-of-memory or unexplained crash becomes `box_busy`:
    the box's state, not the config's. Any other failure stays."""
    if not held or failure.kind not in _BOX_CAUSED | {FailureKind.BOX_BUSY}:
        return failure
    return Failure(FailureKind.BOX_BUSY, f"{failure.reason} [{held}]", failure.log_tail)


def gpu_fault(log_text: str) -> Failure | None:
    """A GPU fault in an engine's log (one that died during the workload), None without one."""
    lines = log_text.splitlines()
    for pattern in GPU_FAULT_PATTERNS:
        found = next((x for x in lines if re.search(pattern, x)), None)
        if found is not None:
            return Failure(FailureKind.GPU_FAULT, clean_line(found), tail_lines(log_text))
    return None


def _first_error_line(lines: list[str]) -> str:
    """The root cause as far as a log shows it: the first exception line or ERROR record,
    else the last non-empty line. (vLLM logs the root cause first, then re-raises generic
    errors such as "Engine core initialization failed".)"""
    for raw in lines:
        line = clean_line(raw)
        if line and (_EXCEPTION_LINE.search(raw) or _ERROR_RECORD.search(raw)):
            return line
    return next((clean_line(x) for x in reversed(lines) if x.strip()), "")
