"""What the client records for one request; the input of every metric.

The one type the client, the simulator, the metrics and the store share, so it sits at the
bottom of the package and imports nothing of the tuner.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestRecord:
    """One request as `vllm bench serve` records it (RequestFuncOutput), times in seconds.

    `ttft_s` is first non-empty `choices` message minus send time, `itl_s` the gaps
    between successive such messages, `latency_s` (E2EL) the last such message minus
    send time. `output_tokens` comes from `usage.completion_tokens`.
    """

    prompt_len: int
    success: bool = False
    output_tokens: int = 0
    ttft_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    latency_s: float = 0.0
    start_s: float = 0.0  # send time, seconds since the benchmark's first dispatch
    error: str = ""
    generated_text: str = ""
