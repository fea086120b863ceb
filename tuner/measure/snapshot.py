"""What an early-stopping decision sees at one checkpoint: the requests measured so far
(`Snapshot`) and the engine's own gauges (`EngineSample`). Plain data, read by
`tuner.measure.pruning` and `tuner.measure.backlog`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.measure.records import RequestRecord


@dataclass(frozen=True)
class EngineSample:
    """The engine's `/metrics` at one checkpoint, `t_s` seconds into the workload (summed over
    a data-parallel engine's ranks; KV usage: the fullest rank's, 0..1)."""

    t_s: float
    waiting: int  # vllm:num_requests_waiting
    kv_cache_usage: float | None = None  # vllm:kv_cache_usage_perc
    preemptions: int | None = None  # vllm:num_preemptions_total, since the engine started

    def describe(self) -> str:
        words = [f"{self.waiting} waiting in the engine's queue"]
        if self.kv_cache_usage is not None:
            words.append(f"KV cache {self.kv_cache_usage:.0%} used")
        if self.preemptions is not None:
            words.append(f"{self.preemptions} preemption(s)")
        return ", ".join(words)


@dataclass(frozen=True)
class Snapshot:
    """The measured requests at one checkpoint. `sent`: every request sent so far, finished or
    not (`done[i]` says which); `total`: the workload's request count; `elapsed_s`: since the
    first dispatch; `max_output_tokens` / `input_tokens`: the whole workload's (None: unknown);
    `engine`: the engine's gauges at this and every earlier checkpoint, oldest first (empty
    when a scrape failed or the server has no `/metrics`); `arrivals_s`: every request's
    scheduled send time, in order (None: unknown, e.g. under a client concurrency limit)."""

    sent: Sequence[RequestRecord]
    done: Sequence[bool]
    total: int
    elapsed_s: float
    max_output_tokens: int | None = None
    input_tokens: int | None = None
    engine: Sequence[EngineSample] = ()
    arrivals_s: Sequence[float] | None = None

    @property
    def completed(self) -> int:
        return sum(1 for r, d in zip(self.sent, self.done, strict=True) if d and r.success)

    @property
    def waiting_first_token(self) -> int:
        return sum(1 for r, d in zip(self.sent, self.done, strict=True) if not d and not r.ttft_s)


def known_sum(values: Sequence[int | None]) -> int | None:
    """The sum, None when any value is unknown (a workload's output tokens, when some request
    has no fixed output length)."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None
