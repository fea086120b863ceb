"""The simulated engine: scheduler + step-time model + a clock. No I/O, no asyncio.

Two drivers use it. The server (`tuner sim serve`) adds requests as they arrive and calls
`step()` in real time; the planner (`tuner.sim.planner.simulate`) runs in virtual time and
also calls `run_decodes()`, which books a whole run of identical pure-decode steps in
closed form.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from tuner.errors import EngineRefused
from tuner.sim.memory import (
    EngineConfig,
    MemoryBreakdown,
    config_error,
    memory_breakdown,
    resolve_flags,
    startup_error,
)
from tuner.sim.prefix_cache import block_hashes
from tuner.sim.profiles import GpuProfile, ModelProfile
from tuner.sim.scheduler import Scheduler, SimRequest
from tuner.sim.steptime import StepCostModel
from tuner.spec.values import Flags

# vLLM's `vllm:iteration_tokens_total` buckets, the tokens of one engine step
# (vllm/v1/metrics/buckets.py, ITERATION_TOKENS_BUCKETS; `+Inf` above the last)
STEP_TOKEN_EDGES: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


class StepResult(NamedTuple):
    duration_s: float
    emitted: dict[str, int]  # request id -> tokens emitted at the end of this step
    finished: list[str]


class Engine:
    """One simulated vLLM engine (all TP ranks together)."""

    def __init__(
        self,
        model: ModelProfile,
        gpu: GpuProfile,
        flags: Flags,
        *,
        record_times: bool = False,
    ) -> None:
        self.config: EngineConfig = resolve_flags(model, gpu, flags)
        error = config_error(model, gpu, self.config) or startup_error(model, gpu, self.config)
        if error:
            raise EngineRefused(error)
        self.model = model
        self.gpu = gpu
        self.memory: MemoryBreakdown = memory_breakdown(model, gpu, self.config)
        self.scheduler = Scheduler(self.config, self.memory.num_blocks)
        self.cost = StepCostModel(model, gpu, self.config.tensor_parallel_size)
        self.record_times = record_times
        # when the client receives the tokens of steps ending at these times, each step
        # giving this many requests a token (`tuner.sim.frontend.ApiThread.stream`); None:
        # at the steps' ends
        self.deliver: Callable[[np.ndarray, int], np.ndarray] | None = None
        self.clock = 0.0
        self.steps = 0
        # the steps by their tokens, per bucket of `STEP_TOKEN_EDGES` (not cumulative), the
        # last past its last edge; and their tokens in all: what /metrics shows
        self.step_token_counts = [0] * (len(STEP_TOKEN_EDGES) + 1)
        self.step_tokens_total = 0
        self.requests: dict[str, SimRequest] = {}

    # ---- online API --------------------------------------------------------------------

    def request_error(self, prompt_len: int, max_tokens: int) -> str | None:
        """vLLM's 400 for a request that cannot fit max-model-len, else None."""
        limit = self.config.max_model_len
        if prompt_len < 1:
            return "The prompt is empty: at least one token is needed."
        if prompt_len + max_tokens > limit:
            return (
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_len + max_tokens} tokens ({prompt_len} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion."
            )
        return None

    def add_request(
        self,
        request_id: str,
        prompt_len: int,
        max_tokens: int,
        now: float,
        prompt_ids: Sequence[int] | None = None,
    ) -> None:
        """Queue a request that arrived at `now` (seconds on the engine's clock). Its prompt's
        token ids, when known, let it share cached blocks with other requests; without them
        its blocks are its own (`tuner.sim.scheduler`: it still hits them after a preemption)."""
        error = self.request_error(prompt_len, max_tokens)
        if error:
            raise ValueError(error)
        if request_id in self.requests:
            raise ValueError(f"duplicate request id {request_id!r}")
        req = SimRequest(request_id, prompt_len, max(1, max_tokens), now)
        if prompt_ids is not None and self.config.enable_prefix_caching:
            req.block_hashes = block_hashes(prompt_ids, self.config.block_size)
        self.requests[request_id] = req
        self.scheduler.add(req)
        if not self.scheduler.running and len(self.scheduler.waiting) == 1:
            self.clock = max(self.clock, now)  # an idle engine waits for work

    def abort_request(self, request_id: str) -> None:
        req = self.requests.pop(request_id, None)
        if req is not None:
            self.scheduler.abort(req)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self, now: float | None = None) -> StepResult:
        """Run one engine step starting at max(clock, now); the clock moves to its end."""
        duration, emitted, finished = self.advance(now)
        return StepResult(duration, {r.id: 1 for r in emitted}, [r.id for r in finished])

    def advance(self, now: float | None = None) -> tuple[float, list[SimRequest], list[SimRequest]]:
        """`step()` returning the request objects: (duration, emitted, finished)."""
        start = self.clock if now is None else max(self.clock, now)
        batch = self.scheduler.schedule()
        if not batch.items:
            self.clock = start
            return 0.0, [], []
        sampled = 0
        pairs = 0.0
        kv_tokens = 0
        for req, q in batch.items:
            c = req.num_computed
            pairs += q * (c + (q + 1) / 2)
            kv_tokens += c + q
            if c + q >= req.prompt_len + req.num_output:  # its num_tokens, inline: a hot loop
                sampled += 1
        duration = self.cost.step_time(
            batch.num_tokens, len(batch.items), sampled, pairs, kv_tokens
        )
        self.clock = end = start + duration
        self.steps += 1
        self._observe(batch.num_tokens, 1)
        emitted, finished = self.scheduler.finish_step(batch)
        if self.record_times and emitted:
            seen = (
                end
                if self.deliver is None
                else float(self.deliver(np.array([end]), len(emitted))[0])
            )
            for req in emitted:
                req.pending.append(seen)
        for req in finished:
            del self.requests[req.id]
        return duration, emitted, finished

    # ---- virtual-time fast path -------------------------------------------------------

    def run_decodes(self, until_s: float = math.inf) -> tuple[int, list[SimRequest]]:
        """Book the run of pure-decode steps that starts now, in closed form.

        It applies only when every running request is decoding and no waiting request
        could be admitted (none waits, or max-num-seqs are running). The run stops at the
        step where the first request finishes, before the blocks run out, or at the step
        in progress at `until_s` (the next arrival). Returns (steps booked, finished
        requests); 0 steps means "take a normal step instead".
        """
        sched = self.scheduler
        running = sched.running
        cfg = self.config
        if not running or (sched.waiting and len(running) < cfg.max_num_seqs):
            return 0, []
        context = 0
        steps = math.inf
        for req in running:
            if req.num_tokens - req.num_computed != 1:
                return 0, []
            context += req.num_computed
            steps = min(
                steps,
                req.max_tokens - req.num_output,
                cfg.max_model_len - req.num_tokens,
            )
        steps = sched.decode_block_limit(int(steps))
        if steps < 2:
            return 0, []
        ends = self.clock + np.cumsum(self.cost.decode_run_times(steps, len(running), context))
        if until_s < ends[-1]:
            steps = min(steps, int(np.searchsorted(ends, until_s, side="left")) + 1)
            ends = ends[:steps]
        self.clock = float(ends[-1])
        self.steps += steps
        self._observe(len(running), steps)
        if self.record_times:
            seen = ends if self.deliver is None else self.deliver(ends, len(running))
            for req in running:
                if req.pending:
                    req.segments.append(np.array(req.pending))
                    req.pending = []
                req.segments.append(seen)
        finished = sched.advance_decodes(steps)
        for req in finished:
            del self.requests[req.id]
        return steps, finished

    # ---- what /metrics shows -------------------------------------------------------------

    def _observe(self, tokens: int, steps: int) -> None:
        """`steps` steps of `tokens` tokens each, in vLLM's step histogram."""
        self.step_token_counts[bisect.bisect_left(STEP_TOKEN_EDGES, tokens)] += steps
        self.step_tokens_total += tokens * steps

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting)

    @property
    def kv_cache_usage(self) -> float:
        return self.scheduler.kv_usage

    @property
    def num_preemptions(self) -> int:
        return self.scheduler.preemptions

    @property
    def prefix_cache_tokens(self) -> tuple[int, int]:
        """(queried, hit) prompt tokens so far: vllm:prefix_cache_queries / _hits."""
        cache = self.scheduler.cache
        return (cache.queries_tokens, cache.hits_tokens) if cache is not None else (0, 0)

    def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache, as vLLM's `/reset_prefix_cache`: False (nothing done) while
        a request is queued or running, as vLLM refuses while blocks are held."""
        if self.scheduler.has_work:
            return False
        if self.scheduler.cache is not None:
            self.scheduler.cache.reset()
        return True


def token_times(req: SimRequest) -> np.ndarray:
    """All emission times of a recorded request, in order."""
    parts = [*req.segments, np.array(req.pending)] if req.pending else req.segments
    return np.concatenate(parts) if parts else np.empty(0)
