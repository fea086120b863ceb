"""Run one workload against a server: warm-up, paced dispatch, metrics and their uncertainty.

The order of events mirrors `vllm bench serve`: one initial test request, then
`num_warmups` warm-up requests (both unmeasured), then the measured requests dispatched at
their arrival times under the `max_concurrency` semaphore. A watchdog stops the run early
when the caller says the engine died, or when no stream made progress for too long.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from tuner.errors import TunerError
from tuner.measure.metrics import confidence_intervals, run_metrics
from tuner.measure.pruning import Checkpoints, Decision
from tuner.measure.records import RequestRecord
from tuner.measure.snapshot import EngineSample, Snapshot, known_sum
from tuner.spec.metric_keys import PREFIX_CACHE_HIT_RATE
from tuner.spec.workload import WorkloadSpec
from tuner.tls import tls_context
from tuner.workload import loop
from tuner.workload.client import (
    CHAT_ENDPOINT,
    StreamActivity,
    make_transport,
    request_body,
    request_headers,
    stream_request,
)
from tuner.workload.cold import reset_prefix_cache, warmup_request
from tuner.workload.engine_metrics import Scraper, prefix_cache_hit_rate, scrape_prefix_cache
from tuner.workload.probe import scaled_clock, server_time_scale
from tuner.workload.request import BenchRequest
from tuner.workload.schedule import arrival_times

if TYPE_CHECKING:
    from tuner.workload.tokenizer import HFTokenizer

WATCHDOG_POLL_S = 0.25
WARMUP = -1  # the request index of the warm-ups: a prompt outside the measured set


class BenchmarkAborted(TunerError, RuntimeError):
    """The run was stopped before its end (engine died or hung); `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BenchmarkPruned(TunerError, RuntimeError):
    """Early stopping stopped the run at a checkpoint: `result` holds the requests finished
    by then (metrics over those, duration up to the stop), `reason` says why, `engine` holds
    the engine's gauges then (None: not scraped)."""

    def __init__(
        self,
        reason: str,
        result: BenchmarkResult,
        engine: EngineSample | None = None,
        decision: Decision | None = None,  # what the stop learnt
    ) -> None:
        super().__init__(reason)
        self.reason, self.result, self.engine, self.decision = reason, result, engine, decision


@dataclass
class BenchmarkResult:
    """Per-request records, the run's duration, vLLM's metrics and bootstrap CIs (key ->
    (lo, hi)). `start_perf_s` is the perf_counter of the first dispatch (times the server's
    time scale, `tuner.workload.probe.scaled_clock`): records' `start_s` count from it."""

    records: list[RequestRecord]
    duration_s: float
    metrics: dict[str, float]
    ci: dict[str, tuple[float, float]] = field(default_factory=dict)
    start_perf_s: float = 0.0
    cache_reset: bool = False  # the engine emptied its prefix cache before the measured run


def run_benchmark(
    spec: WorkloadSpec,
    base_url: str,
    model: str,
    requests: list[BenchRequest],
    *,
    api_key: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    should_abort: Callable[[], str | None] | None = None,
    stall_timeout_s: float | None = None,
    tokenizer: HFTokenizer | None = None,
    checkpoint: Callable[[Snapshot], Decision] | None = None,
    checkpoint_every_s: float = 2.0,
    checkpoint_every_requests: int | None = None,
    reset_cache: bool = True,
) -> BenchmarkResult:
    """Measure `requests` against `base_url` (synchronous; runs its own event loop).

    Failed requests become failed records, never exceptions. `should_abort` is polled every
    0.25 s; a reason it returns, or `stall_timeout_s` without any stream progress while
    requests are in flight, cancels everything and raises BenchmarkAborted. `tokenizer`
    re-counts output tokens only when the server sent no usage (as vLLM does); without it,
    such a request fails (`NO_OUTPUT_COUNT`). `checkpoint` gets a `tuner.measure.pruning.Snapshot`
    every `checkpoint_every_s` of the measured run and, if set, every
    `checkpoint_every_requests` completed requests (`tuner.measure.pruning.Checkpoints`), with the
    engine's `/metrics` scraped then (best effort); a Decision to stop cancels every request
    and raises BenchmarkPruned with the finished ones.

    The initial test request and the warm-ups send a prompt outside the measured set, and
    (`reset_cache`) the engine's prefix cache is emptied after them where it offers that
    (`tuner.workload.cold`): the measured run starts cold.

    Against `tuner sim serve --time-scale N` (a test setting), arrivals, records and
    checkpoints are in the server's simulated seconds, N per wall second; the watchdog's
    stall timeout and the request timeout stay in wall seconds.
    """
    if not requests:
        raise ValueError("no requests to run")
    run = _Run(spec, base_url, model, requests, api_key, on_progress)
    run.reset_cache = reset_cache
    run.set_time_scale(server_time_scale(base_url, api_key))
    run.checkpoint = checkpoint
    run.schedule = Checkpoints(checkpoint_every_s, checkpoint_every_requests)
    gc.collect()
    gc.freeze()  # as vLLM does: fewer GC pauses while streaming
    try:
        records, duration_s = loop.run(run.supervised(should_abort, stall_timeout_s))
    except _Stopped as stop:
        done = [r for r, d in zip(run.live, run.done, strict=True) if d]
        count_output_tokens(done, tokenizer)
        metrics = run_metrics(done, stop.elapsed_s, spec) if any(r.success for r in done) else {}
        result = BenchmarkResult(done, stop.elapsed_s, metrics, {}, run.t0, run.cache_reset)
        raise BenchmarkPruned(stop.reason, result, stop.engine, stop.decision) from None
    finally:
        gc.unfreeze()
    count_output_tokens(records, tokenizer)
    metrics = run_metrics(records, duration_s, spec)
    ci = confidence_intervals(records, duration_s, metrics, seed=spec.seed)
    if (rate := prefix_cache_hit_rate(*run.prefix_cache)) is not None:
        metrics[PREFIX_CACHE_HIT_RATE] = rate
    return BenchmarkResult(records, duration_s, metrics, ci, run.t0, run.cache_reset)


NO_OUTPUT_COUNT = (
    "output tokens unknown: the server sent no usage.completion_tokens, and no tokenizer "
    "was given to count the generated text"
)


def count_output_tokens(records: list[RequestRecord], tokenizer: HFTokenizer | None) -> None:
    """Output tokens of each successful request the server sent no usage for, as vLLM counts
    them: the generated text re-tokenized without special tokens. Unknowable without a
    tokenizer: then the request fails (a guess would make TPOT and throughput wrong)."""
    for rec in records:
        if not rec.success or rec.output_tokens:
            continue
        if tokenizer is None:
            rec.success, rec.error = False, NO_OUTPUT_COUNT
            continue
        rec.output_tokens = len(tokenizer(rec.generated_text, add_special_tokens=False).input_ids)


class _Stopped(TunerError):
    """Early stopping's decision, raised out of the event loop."""

    def __init__(
        self,
        reason: str,
        elapsed_s: float,
        engine: EngineSample | None,
        decision: Decision | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason, self.elapsed_s, self.engine = reason, elapsed_s, engine
        self.decision = decision


class _Run:
    """The state of one run inside its event loop."""

    def __init__(
        self,
        spec: WorkloadSpec,
        base_url: str,
        model: str,
        requests: list[BenchRequest],
        api_key: str | None,
        on_progress: Callable[[int, int], None] | None,
    ) -> None:
        self.spec = spec
        self.url = httpx.URL(base_url.rstrip("/") + spec.endpoint)  # parsed once
        self.chat = spec.endpoint == CHAT_ENDPOINT
        self.requests = requests
        self.bodies = [request_body(spec.endpoint, model, r) for r in requests]
        self.warm_body = request_body(spec.endpoint, model, warmup_request(requests[0]))
        self.reset_cache = True  # empty the engine's prefix cache after the warm-ups
        self.cache_reset = False  # it did
        self.headers = request_headers(api_key)
        self.on_progress = on_progress
        self.activity = StreamActivity()
        self.scale = 1.0  # the server's simulated seconds per wall second
        self.clock = time.perf_counter  # measures in the server's seconds
        self.t0 = self.clock()
        self.measuring = False  # the measured requests are being sent
        self.live: list[RequestRecord] = []  # measured requests sent so far, filling as they go
        self.done: list[bool] = []
        self.offsets: list[float] | None = None  # the measured requests' send times
        self.checkpoint: Callable[[Snapshot], Decision] | None = None
        self.schedule = Checkpoints(2.0)
        self.scraper = Scraper(base_url, self.headers)
        self.base_url = base_url
        # the engine's prefix-cache counters when the measured run starts and ends
        self.prefix_cache: list[tuple[float, float] | None] = []

    def set_time_scale(self, time_scale: float) -> None:
        self.scale, self.clock = time_scale, scaled_clock(time_scale)
        self.t0 = self.activity.last_s = self.clock()

    async def supervised(
        self, should_abort: Callable[[], str | None] | None, stall_timeout_s: float | None
    ) -> tuple[list[RequestRecord], float]:
        work = asyncio.create_task(self._work())
        watch = asyncio.create_task(self._watch(should_abort, stall_timeout_s))
        await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if work.done():
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            return work.result()
        work.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await work
        reason = watch.result()
        if isinstance(reason, _Stopped):
            raise reason
        raise BenchmarkAborted(reason)

    async def _watch(
        self, should_abort: Callable[[], str | None] | None, stall_timeout_s: float | None
    ) -> str | _Stopped:
        # trust_env off, as the workload's client
        async with httpx.AsyncClient(trust_env=False, verify=tls_context()) as metrics_client:
            while True:
                await asyncio.sleep(WATCHDOG_POLL_S / self.scale)
                reason = should_abort() if should_abort else None
                if reason:
                    return reason
                if self.checkpoint is not None and self.measuring:
                    elapsed_s = self.clock() - self.t0
                    live = zip(self.live, self.done, strict=True)
                    completed = sum(1 for r, d in live if d and r.success)
                    if self.schedule.due(elapsed_s, completed):
                        await self.scraper.scrape(metrics_client, elapsed_s)
                        stopped = self._check(self.clock() - self.t0)
                        if stopped is not None:
                            return stopped
                idle_s = (self.clock() - self.activity.last_s) / self.scale  # wall seconds
                if stall_timeout_s and self.activity.in_flight and idle_s > stall_timeout_s:
                    return f"engine hung: no tokens for {stall_timeout_s:g} s"

    def _check(self, elapsed_s: float) -> _Stopped | None:
        outs = [r.output_len for r in self.requests]
        snap = Snapshot(
            list(self.live),
            list(self.done),
            len(self.requests),
            elapsed_s,
            max_output_tokens=known_sum(outs),
            input_tokens=sum(r.prompt_len for r in self.requests),
            engine=list(self.scraper.samples),
            # the schedule, when requests reach the engine at it (no client-side limit)
            arrivals_s=None if self.spec.max_concurrency else self.offsets,
        )
        assert self.checkpoint is not None  # _watch checks only with a stop rule
        decision = self.checkpoint(snap)
        if not decision.stop:
            return None
        return _Stopped(decision.reason, elapsed_s, decision.engine, decision)

    async def _send(
        self,
        transport: httpx.AsyncBaseTransport,
        i: int,
        t0: float,
        rec: RequestRecord | None = None,
    ) -> RequestRecord:
        async with asyncio.timeout(self.spec.request_timeout_s):
            return await stream_request(
                transport,
                self.url,
                self.warm_body if i == WARMUP else self.bodies[i],
                self.headers,
                prompt_len=self.requests[max(i, 0)].prompt_len,
                chat=self.chat,
                t0=t0,
                activity=self.activity,
                connect_timeout_s=self.spec.request_timeout_s,
                rec=rec,
                clock=self.clock,
            )

    async def _send_timed(
        self,
        transport: httpx.AsyncBaseTransport,
        i: int,
        t0: float,
        rec: RequestRecord | None = None,
    ) -> RequestRecord:
        sent = self.clock()
        try:
            return await self._send(transport, i, t0, rec)
        except TimeoutError:
            return RequestRecord(
                prompt_len=self.requests[max(i, 0)].prompt_len,
                start_s=sent - t0,
                error=f"request timed out after {self.spec.request_timeout_s:g} s",
            )

    async def _work(self) -> tuple[list[RequestRecord], float]:
        spec = self.spec
        limit = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
        offsets = arrival_times(len(self.requests), spec.request_rate, spec.burstiness, spec.seed)
        self.offsets = [float(o) for o in offsets]
        done = 0

        async def limited(i: int, t0: float, measured: bool) -> RequestRecord:
            nonlocal done
            async with limit or contextlib.nullcontext():
                if not measured:
                    rec = await self._send_timed(transport, i, t0)
                else:
                    k = len(self.live)
                    self.live.append(RequestRecord(prompt_len=self.requests[i].prompt_len))
                    self.done.append(False)
                    rec = await self._send_timed(transport, i, t0, self.live[k])
                    self.live[k], self.done[k] = rec, True
            if measured:
                done += 1
                if self.on_progress:
                    self.on_progress(done, len(self.requests))
            return rec

        async with make_transport(spec.max_concurrency) as transport:
            first = await self._send_timed(transport, WARMUP, self.clock())
            if not first.success:
                raise BenchmarkAborted(f"initial test request failed: {first.error}")
            warm_t0 = self.clock()
            warm = (limited(WARMUP, warm_t0, False) for _ in range(spec.num_warmups))
            await asyncio.gather(*warm)
            if self.reset_cache:
                self.cache_reset = await reset_prefix_cache(self.base_url, self.headers)
            await self._scrape_prefix_cache()
            self.t0 = t0 = self.clock()
            self.measuring = True
            tasks: list[asyncio.Task[RequestRecord]] = []
            try:
                for i, offset in enumerate(offsets):
                    delay = (t0 + offset - self.clock()) / self.scale  # wall seconds
                    if delay > 0:
                        await asyncio.sleep(delay)
                    tasks.append(asyncio.create_task(limited(i, t0, True)))
                records = list(await asyncio.gather(*tasks))
            finally:  # an abort during dispatch must not leave requests running
                for task in tasks:
                    task.cancel()
            duration_s = self.clock() - t0
            await self._scrape_prefix_cache()
            return records, duration_s

    async def _scrape_prefix_cache(self) -> None:
        async with httpx.AsyncClient(trust_env=False, verify=tls_context()) as client:
            self.prefix_cache.append(await scrape_prefix_cache(client, self.base_url, self.headers))
