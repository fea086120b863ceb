"""vLLM V1's scheduling rules: token budget, max-num-seqs, paged KV blocks, preemption.

One call of `Scheduler.schedule` is one engine step, following vllm/v1/core/sched/
scheduler.py: running requests first, in order (decodes and ongoing prefill chunks),
each given min(its new tokens, the budget left); when blocks run out the newest
running request is preempted (recompute: its blocks are freed and it goes back to the
front of the queue). Waiting requests are admitted only when nothing was preempted,
while fewer than max-num-seqs run; with chunked prefill off a prompt that does not fit
the budget left waits for the next step.

With prefix caching on (vLLM V1's default), every full block a request computes is named,
prompt and generated tokens alike, as vLLM hashes every full block of a request
(`Request.update_block_hashes`); a request admitted from scratch (new, or back after a
preemption) whose leading blocks are cached starts with those tokens computed
(`tuner.sim.prefix_cache`). A prompt's blocks are named by its token ids when they are known
(`block_hashes`); the rest of its blocks, and all of a prompt whose tokens are unknown, by the
request's own identity (`key`): distinct from every other request's, the same when the
request comes back after a preemption.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from itertools import count
from typing import TYPE_CHECKING

from tuner.sim.memory import EngineConfig
from tuner.sim.prefix_cache import PrefixCache

if TYPE_CHECKING:
    import numpy as np


@dataclass(slots=True, eq=False)
class SimRequest:
    """A request inside the engine. Tokens = prompt + generated; computed = in the KV cache."""

    id: str
    prompt_len: int
    max_tokens: int
    arrival_s: float
    num_computed: int = 0
    num_output: int = 0
    num_blocks: int = 0
    # Emission times (seconds) of the generated tokens, kept only when the engine records:
    # closed-form decode runs append arrays to `segments`, single steps floats to `pending`.
    segments: list[np.ndarray] = field(default_factory=list)
    pending: list[float] = field(default_factory=list)
    # Prefix caching: the chained names of the prompt's full blocks (empty: tokens unknown);
    # `key` names its other blocks (set by `Scheduler.add`, unique in the engine); the names
    # of its blocks that are cached and that it holds; how many of its leading blocks were
    # named (or found named by another request's copy); whether it was ever preempted.
    block_hashes: tuple[bytes, ...] = ()
    key: int = -1
    cached: list[Hashable] = field(default_factory=list)
    num_named: int = 0
    resumed: bool = False

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output


@dataclass(slots=True)
class Batch:
    """What one step computes: (request, new tokens) pairs, in scheduling order."""

    items: list[tuple[SimRequest, int]]
    num_tokens: int
    preempted: int


class Scheduler:
    """Queues and the block pool. Pure bookkeeping: no clock, no step times."""

    def __init__(self, cfg: EngineConfig, num_blocks: int) -> None:
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.total_blocks = num_blocks
        self.free_blocks = num_blocks
        self.running: list[SimRequest] = []
        self.waiting: deque[SimRequest] = deque()
        self.preemptions = 0
        self.cache: PrefixCache | None = PrefixCache() if cfg.enable_prefix_caching else None
        self._keys = count()

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def kv_usage(self) -> float:
        """Share of KV blocks in use, as vllm:kv_cache_usage_perc (0..1)."""
        return 1.0 - self.free_blocks / self.total_blocks if self.total_blocks else 0.0

    def add(self, req: SimRequest) -> None:
        req.key = next(self._keys)
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """Drop a request (client went away) and free its blocks."""
        if req in self.running:
            self.running.remove(req)
        elif req in self.waiting:
            self.waiting.remove(req)
        if self.cache is not None:
            self.cache.forget(req)
        self._free(req)

    def schedule(self) -> Batch:
        budget = self.cfg.max_num_batched_tokens
        items: list[tuple[SimRequest, int]] = []
        preempted = 0
        i = 0
        bs = self.block_size
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            q = min(req.prompt_len + req.num_output - req.num_computed, budget)
            if q <= 0:
                i += 1
                continue
            if -(-(req.num_computed + q) // bs) <= req.num_blocks:  # no new block: the
                items.append((req, q))  # common decode step, without `_allocate`'s call
                budget -= q
                i += 1
                continue
            while not self._allocate(req, q):
                victim = self.running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    break
            else:
                items.append((req, q))
                budget -= q
                i += 1
                continue
            break  # the request preempted itself: nothing more fits this step
        if not preempted:
            budget = self._admit(items, budget)
        return Batch(items, self.cfg.max_num_batched_tokens - budget, preempted)

    def _admit(self, items: list[tuple[SimRequest, int]], budget: int) -> int:
        chunked = self.cfg.enable_chunked_prefill
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_num_seqs:
            req = self.waiting[0]
            hits = self._hits(req)
            q = req.num_tokens - len(hits) * self.block_size
            if not chunked and q > budget:
                break
            q = min(q, budget)
            if not self._allocate_with_hits(req, hits, q):
                break
            self.waiting.popleft()
            if self.cache is not None:
                self.cache.forget(req)
            self.running.append(req)
            items.append((req, q))
            budget -= q
        return budget

    def finish_step(self, batch: Batch) -> tuple[list[SimRequest], list[SimRequest]]:
        """Apply a computed step: returns (requests that emitted a token, finished ones)."""
        emitted: list[SimRequest] = []
        finished: list[SimRequest] = []
        max_len, bs, cache = self.cfg.max_model_len, self.block_size, self.cache
        for req, q in batch.items:
            computed = req.num_computed = req.num_computed + q
            if cache is not None and computed // bs > req.num_named:
                self._name_computed_blocks(req, cache)  # a block newly full
            if computed < req.prompt_len + req.num_output:
                continue  # a prefill chunk: nothing sampled yet
            req.num_output += 1
            emitted.append(req)
            if req.num_output >= req.max_tokens or req.prompt_len + req.num_output >= max_len:
                finished.append(req)
        for req in finished:
            self.running.remove(req)
            self._free(req)
        return emitted, finished

    def decode_block_limit(self, steps: int) -> int:
        """How many of the next `steps` pure-decode steps fit in the free blocks (0..steps)."""
        bs = self.block_size
        # Tokens each running request can still add before it needs a new block.
        slack = [r.num_blocks * bs - r.num_computed for r in self.running]

        def needed(k: int) -> int:  # new blocks for k steps
            return sum(-(-(k - s) // bs) for s in slack if k > s)

        if needed(steps) <= self.free_blocks:
            return steps
        # needed(k) grows with k: the most steps that fit is the first k of 1..steps-1
        # that does not, less one (0 when even one step does not fit)
        return bisect.bisect_right(range(1, steps), self.free_blocks, key=needed)

    def advance_decodes(self, steps: int) -> list[SimRequest]:
        """Book `steps` pure-decode steps for every running request; returns the finished."""
        bs = self.block_size
        max_len = self.cfg.max_model_len
        finished = []
        for req in self.running:
            req.num_computed += steps
            req.num_output += steps
            blocks = -(-req.num_computed // bs)
            self._take(blocks - req.num_blocks)
            req.num_blocks = blocks
            if self.cache is not None:
                self._name_computed_blocks(req, self.cache)
            if req.num_output >= req.max_tokens or req.num_tokens >= max_len:
                finished.append(req)
        for req in finished:
            self.running.remove(req)
            self._free(req)
        return finished

    def _allocate(self, req: SimRequest, new_tokens: int) -> bool:
        blocks = -(-(req.num_computed + new_tokens) // self.block_size)
        extra = blocks - req.num_blocks
        if extra > self.free_blocks:
            return False
        if extra > 0:
            self._take(extra)
            req.num_blocks = blocks
        return True

    # ---- prefix caching ----------------------------------------------------------------

    def _names(self, req: SimRequest, start: int, stop: int) -> Iterator[Hashable]:
        """The names of a request's blocks start..stop-1: its prompt's token-id hashes, then
        (key, block index), unique to the request."""
        hashes = req.block_hashes
        for j in range(start, stop):
            yield hashes[j] if j < len(hashes) else (req.key, j)

    def _hits(self, req: SimRequest) -> list[Hashable]:
        """The cached leading blocks a request starting from scratch would take."""
        if self.cache is None or req.num_computed or not (req.block_hashes or req.resumed):
            return []  # a new request with no token ids has blocks nobody else computed
        # at least one token is computed: it samples the next output token
        limit = (req.num_tokens - 1) // self.block_size
        return self.cache.leading_hits(req, lambda start: self._names(req, start, limit))

    def _allocate_with_hits(self, req: SimRequest, hits: list[Hashable], q: int) -> bool:
        """Admit-time allocation: the hits, then blocks for `q` new tokens (all or nothing).
        Only a new request's lookup counts in the hit rate (vLLM counts a resumed one's apart:
        `PrefixCacheStats.record(preempted=True)`)."""
        cache, counted = self.cache, not req.resumed
        if not hits:
            if not self._allocate(req, q):
                return False
            if cache is not None and counted:
                cache.record(req.prompt_len, 0)
            return True
        assert cache is not None  # hits come from the prefix cache (`_hits`)
        hit_tokens = len(hits) * self.block_size
        new_blocks = -(-(hit_tokens + q) // self.block_size) - len(hits)
        if new_blocks > self.free_blocks:
            return False
        # taking a free cached block uses a free block; the request's own names past its
        # prompt's token ids are all free (a waiting request holds nothing, nobody else
        # holds them)
        shared = len(req.block_hashes)
        evictable = cache.evictable_among(hits[:shared]) + max(0, len(hits) - shared)
        if new_blocks > self.free_blocks - evictable:
            return False
        if counted:
            cache.record(req.prompt_len, hit_tokens)
        self.free_blocks -= evictable
        cache.take(hits)
        req.cached = list(hits)
        req.num_named = len(hits)
        req.num_computed = hit_tokens
        req.num_blocks = len(hits)
        return self._allocate(req, q)

    def _name_computed_blocks(self, req: SimRequest, cache: PrefixCache) -> None:
        """Name the blocks this request has now computed in full. A block whose name another
        request's copy holds stays unnamed here (that copy is the one that hits)."""
        full = req.num_computed // self.block_size
        if full <= req.num_named:
            return
        for name in self._names(req, req.num_named, full):
            if cache.add(name):
                req.cached.append(name)
        req.num_named = full

    def _take(self, blocks: int) -> None:
        """Use `blocks` free blocks: never-cached ones first, then evict cached ones."""
        if blocks <= 0:
            return
        if self.cache is not None:
            uncached = self.free_blocks - len(self.cache.evictable)
            if blocks > uncached:
                self.cache.evict(blocks - uncached)
        self.free_blocks -= blocks

    def _preempt(self, req: SimRequest) -> None:
        self._free(req)
        req.num_computed = 0
        req.resumed = True
        self.waiting.appendleft(req)
        self.preemptions += 1

    def _free(self, req: SimRequest) -> None:
        """Free a request's blocks; a cached block another request still uses stays in use."""
        freed = req.num_blocks
        if req.cached:
            assert self.cache is not None  # only the prefix cache names a request's blocks
            freed -= len(req.cached) - self.cache.release(req.cached)
            req.cached = []
        self.free_blocks += freed
        req.num_blocks = req.num_named = 0
