"""Virtual-time driver: a whole workload through the simulated engine, no server, no waiting.

It plays the client's part the way `vllm bench serve` does (dispatch at the arrival time,
`max_concurrency` as a FIFO semaphore) and returns the same `RequestRecord`s the real
client records, so `tuner.measure.metrics` computes the figures identically. Every figure it
produces is a simulation, never a measurement.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tuner.errors import UserError
from tuner.measure.records import RequestRecord
from tuner.sim.engine import Engine
from tuner.sim.engine import token_times as _token_times
from tuner.sim.profiles import GpuProfile, ModelProfile, get_gpu, load_model
from tuner.sim.scheduler import SimRequest


@dataclass(slots=True)
class SimResult:
    """Per-request records (in workload order) and run totals, seconds of virtual time.

    `events` counts simulated engine steps, closed-form ones included. `engine_trace`: what
    the engine's `/metrics` would show, (time, num_requests_waiting, kv_cache_usage_perc,
    num_preemptions_total), after every dispatch and every step, in time order.
    """

    records: list[RequestRecord]
    duration_s: float
    events: int
    preemptions: int
    engine_trace: list[tuple[float, int, float, int]] = field(default_factory=list)


def simulate(
    model: ModelProfile | str,
    gpu: GpuProfile | str,
    flags: dict[str, Any],
    prompt_lens: list[int],
    output_lens: list[int],
    arrival_s: list[float],
    *,
    max_concurrency: int | None = None,
) -> SimResult:
    """Run one workload. Raises `EngineRefused` (vLLM's message) if the engine would not start.

    Request i is sent at max(arrival_s[i], a free concurrency slot), in order, reaches the
    engine `request_overhead_s` later, and asks for exactly output_lens[i] tokens
    (ignore_eos). Requests longer than max-model-len fail
    with vLLM's 400 message, like the real server answers them.
    """
    if not len(prompt_lens) == len(output_lens) == len(arrival_s):
        raise UserError("prompt_lens, output_lens and arrival_s must have the same length")
    if max_concurrency is not None and max_concurrency < 1:
        raise UserError("max_concurrency must be >= 1")
    model = load_model(model) if isinstance(model, str) else model
    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    engine = Engine(model, gpu, flags, record_times=True)
    n = len(prompt_lens)
    records: list[RequestRecord | None] = [None] * n
    start_s = [0.0] * n
    order = deque(sorted(range(n), key=lambda i: arrival_s[i]))
    slots = [0.0] * max_concurrency if max_concurrency else None  # heap: times slots free
    frontend_s = gpu.constants.request_overhead_s
    last_s = 0.0

    def next_dispatch_s() -> float:
        """When the next request reaches the engine (sent, plus the API server's delay)."""
        if not order:
            return math.inf
        if slots is None:
            return arrival_s[order[0]] + frontend_s
        return max(arrival_s[order[0]], slots[0]) + frontend_s if slots else math.inf

    def dispatch(now: float) -> None:
        nonlocal last_s
        while order and next_dispatch_s() <= now:
            i = order.popleft()
            sent = arrival_s[i] if slots is None else max(arrival_s[i], heapq.heappop(slots))
            start_s[i] = sent
            error = engine.request_error(prompt_lens[i], output_lens[i])
            if error:
                records[i] = RequestRecord(prompt_lens[i], error=error, start_s=sent)
                last_s = max(last_s, sent)
                if slots is not None:
                    heapq.heappush(slots, sent)
                continue
            engine.add_request(str(i), prompt_lens[i], output_lens[i], sent + frontend_s)

    def complete(done: list[SimRequest]) -> None:
        nonlocal last_s
        for req in done:
            i = int(req.id)
            records[i] = _record(req, start_s[i])
            last_s = max(last_s, records[i].start_s + records[i].latency_s)
            if slots is not None:
                heapq.heappush(slots, engine.clock)

    trace: list[tuple[float, int, float, int]] = []

    def observe(t: float) -> None:
        state = (engine.num_waiting, engine.kv_cache_usage, engine.num_preemptions)
        if not trace or trace[-1][1:] != state:
            trace.append((t, *state))

    now = 0.0
    while True:
        dispatch(now)
        observe(now)
        if not engine.has_work:
            if not order:
                break
            now = next_dispatch_s()
            continue
        steps, done = engine.run_decodes(until_s=next_dispatch_s())
        if not steps:
            duration, _, done = engine.advance(now)
            if not duration:
                raise RuntimeError("simulated engine made no progress")  # a scheduler bug
        complete(done)
        now = engine.clock
        observe(now)
    return SimResult(
        records=[r for r in records if r is not None],
        duration_s=last_s,
        events=engine.steps,
        preemptions=engine.num_preemptions,
        engine_trace=trace,
    )


def _record(req: SimRequest, sent_s: float) -> RequestRecord:
    times = _token_times(req) - sent_s
    return RequestRecord(
        prompt_len=req.prompt_len,
        success=True,
        output_tokens=req.num_output,
        ttft_s=float(times[0]),
        itl_s=(times[1:] - times[:-1]).tolist(),
        latency_s=float(times[-1]),
        start_s=sent_s,
    )
