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

from tuner.errors import UserError
from tuner.measure.records import RequestRecord
from tuner.sim.engine import token_times as _token_times
from tuner.sim.frontend import Admitted, ApiThread
from tuner.sim.profiles import GpuProfile, ModelProfile, get_gpu, load_model
from tuner.sim.replicas import Replicas
from tuner.sim.scheduler import SimRequest
from tuner.spec.values import Flags


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
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of which cached: vLLM's prefix-cache hit rate is hits/queries


def simulate(
    model: ModelProfile | str,
    gpu: GpuProfile | str,
    flags: Flags,
    prompt_lens: list[int],
    output_lens: list[int],
    arrival_s: list[float],
    *,
    max_concurrency: int | None = None,
    prompt_ids: list[list[int] | None] | None = None,
) -> SimResult:
    """Run one workload. Raises `EngineRefused` (vLLM's message) if the engine would not start.

    Request i is sent at max(arrival_s[i], a free concurrency slot), in order, waits for the
    API server's front end (one process: it admits one request at a time, `request_overhead_s`
    each), reaches the engine when admitted, and asks for exactly output_lens[i] tokens
    (ignore_eos). Requests longer than max-model-len fail
    with vLLM's 400 message, like the real server answers them. With `prompt_ids` (each
    prompt's token ids, or None where unknown) requests share cached prefixes
    (`tuner.sim.prefix_cache`); a prompt of unknown tokens shares no block with another, as
    random prompts do, but, like every request, hits its own cached blocks again when it
    comes back after a preemption.
    """
    if not len(prompt_lens) == len(output_lens) == len(arrival_s):
        raise UserError("prompt_lens, output_lens and arrival_s must have the same length")
    if prompt_ids is not None and len(prompt_ids) != len(prompt_lens):
        raise UserError("prompt_ids must have one entry per request")
    if max_concurrency is not None and max_concurrency < 1:
        raise UserError("max_concurrency must be >= 1")
    model = load_model(model) if isinstance(model, str) else model
    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    fleet = Replicas(model, gpu, flags, record_times=True)
    client = _Client(fleet, prompt_lens, output_lens, arrival_s, max_concurrency)
    fleet.deliver(client.api.stream)
    client.prompt_ids = prompt_ids
    now = 0.0
    while True:
        client.dispatch(now)
        client.observe(now)
        # the replica whose clock is earliest steps next: every request that arrived before
        # its step was routed first, with every replica's state as of that time
        engine = fleet.earliest()
        if engine is None:
            if client.idle:
                break
            now = client.next_dispatch_s()
            continue
        steps, done = engine.run_decodes(until_s=client.next_dispatch_s())
        if not steps:
            duration, _, done = engine.advance(now)
            if not duration:
                raise RuntimeError("simulated engine made no progress")  # a scheduler bug
        client.complete(done)
        following = fleet.earliest()
        now = max(now, following.clock if following is not None else engine.clock)
        client.observe(now)
    return SimResult(
        records=[r for r in client.records if r is not None],
        duration_s=client.last_s,
        events=fleet.steps,
        preemptions=fleet.num_preemptions,
        engine_trace=client.trace,
        prefix_cache_queries=fleet.prefix_cache_tokens[0],
        prefix_cache_hits=fleet.prefix_cache_tokens[1],
    )


class _Client:
    """The client's part of a run: each request sent at its arrival time (or once a
    concurrency slot frees), admitted by the API server (`tuner.sim.frontend.ApiThread`: one
    at a time, in order, in the time streaming leaves it), then queued on the engine; its
    tokens received when the API server has written them; its record; the engine's
    `/metrics` after every dispatch and step."""

    def __init__(
        self,
        engine: Replicas,
        prompt_lens: list[int],
        output_lens: list[int],
        arrival_s: list[float],
        max_concurrency: int | None,
    ) -> None:
        n = len(prompt_lens)
        self.engine = engine
        self.prompt_lens, self.output_lens, self.arrival_s = prompt_lens, output_lens, arrival_s
        self.records: list[RequestRecord | None] = [None] * n
        self.start_s = [0.0] * n
        self.order = deque(sorted(range(n), key=lambda i: arrival_s[i]))
        # heap: the times the concurrency slots free; None: no limit
        self.slots = [0.0] * max_concurrency if max_concurrency else None
        self.api = ApiThread(engine.gpu.constants)
        self.admitted: deque[Admitted] = deque()  # admitted, not yet at the engine
        self.last_s = 0.0
        self.trace: list[tuple[float, int, float, int]] = []
        self.prompt_ids: list[list[int] | None] | None = None

    @property
    def idle(self) -> bool:
        """Every request has been sent and has reached the engine (or been refused)."""
        return not (self.order or self.api.busy or self.admitted)

    def next_dispatch_s(self) -> float:
        """The client's next event: a request sent, admitted, or reaching the engine."""
        at_engine = self.admitted[0].at_engine_s if self.admitted else math.inf
        return min(self.api.next_event_s(self._next_sent_s()), at_engine)

    def _next_sent_s(self) -> float:
        if not self.order:
            return math.inf
        first = self.arrival_s[self.order[0]]
        if self.slots is None:
            return first
        return max(first, self.slots[0]) if self.slots else math.inf

    def dispatch(self, now: float) -> None:
        slots, order = self.slots, self.order
        while order and self._next_sent_s() <= now:
            i = order.popleft()
            arrived = self.arrival_s[i]
            sent = arrived if slots is None else max(arrived, heapq.heappop(slots))
            self.start_s[i] = sent
            error = self.engine.request_error(self.prompt_lens[i], self.output_lens[i])
            if error:
                self.records[i] = RequestRecord(self.prompt_lens[i], error=error, start_s=sent)
                self.last_s = max(self.last_s, sent)
                if slots is not None:
                    heapq.heappush(slots, sent)
                continue
            self.api.submit(i, sent)
        self.admitted.extend(self.api.admit(now))
        while self.admitted and self.admitted[0].at_engine_s <= now:
            i, at_engine = self.admitted.popleft()
            ids = self.prompt_ids[i] if self.prompt_ids is not None else None
            self.engine.add_request(
                str(i), self.prompt_lens[i], self.output_lens[i], at_engine, ids
            )

    def complete(self, done: list[SimRequest]) -> None:
        """Record finished requests; a concurrency slot frees when its last token is read."""
        self.engine.finished([req.id for req in done])
        for req in done:
            i = int(req.id)
            record = self.records[i] = _record(req, self.start_s[i])
            end = record.start_s + record.latency_s
            self.last_s = max(self.last_s, end)
            if self.slots is not None:
                heapq.heappush(self.slots, end)

    def observe(self, t: float) -> None:
        engine, trace = self.engine, self.trace
        state = (engine.num_waiting, engine.kv_cache_usage, engine.num_preemptions)
        if not trace or trace[-1][1:] != state:
            trace.append((t, *state))


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
