"""The flags `tuner sim serve` accepts: the one list of them (tests/test_preflight.py checks it
against the command's options).

`tuner check` and `tuner plan` check a study's flag names against it when the engine is the
simulator, and, where vLLM is not importable, against its vLLM part (docs/preflight.md).
"""

from __future__ import annotations

# vLLM's flags that the simulator models: they change its figures
MODELLED = (
    "tensor-parallel-size",
    "data-parallel-size",
    "max-model-len",
    "max-num-seqs",
    "block-size",
    "max-num-batched-tokens",
    "gpu-memory-utilization",
    "enable-chunked-prefill",
    "enable-prefix-caching",
)
# vLLM's flags that it takes as `vllm serve` does, and that change no figure
SERVING = ("model", "tokenizer", "served-model-name", "host", "port", "api-key")
IGNORED = (
    "dtype",
    "load-format",
    "seed",
    "chat-template",
    "chat-template-content-format",
    "enforce-eager",
    "disable-log-requests",
    "disable-log-stats",
    "trust-remote-code",
)
# its own: the simulated GPU, its load time, the time scale (tests), faults
SIM_ONLY = (
    "gpu",
    "load-delay-s",
    "time-scale",
    "fault-refuse-start",
    "fault-crash-after",
    "fault-hang-after",
    "fault-slow-start-s",
    "fault-no-usage",
    "fault-busy-starts",
    "fault-gpu-fault-after",
    "fault-release-s",
    "fault-state",
)
VLLM_FLAGS = frozenset(MODELLED + SERVING + IGNORED)  # vLLM's, as the simulator knows them
SIM_FLAGS = VLLM_FLAGS | frozenset(SIM_ONLY)  # every flag `tuner sim serve` accepts


def models(flag: str) -> bool:
    """Whether the simulator's figures depend on vLLM flag `flag` (with or without dashes,
    `_` or `-`); an environment variable ("") is never modelled."""
    return bool(flag) and flag.removeprefix("--").replace("_", "-") in MODELLED
