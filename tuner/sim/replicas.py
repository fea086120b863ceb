"""Data-parallel replicas behind vLLM's own request balancing.

`vllm serve --data-parallel-size N --tensor-parallel-size T` starts N engine cores, each with
its own scheduler and KV cache on its own T GPUs (so its own all-reduce group: the step time
of `tuner.sim.steptime` at TP=T), and its API server routes every request to one of them.

The routing rule is vLLM 0.32.0's `DPLBAsyncMPClient.get_core_engine_for_request`
(vllm/v1/engine/core_client.py). For each engine, scanned from a start index that moves on by
one after every request (so that ties rotate):

    score = max(client_count x in_flight, waiting + running)
    if waiting: score += waiting x 6 x max(0, kv_cache_usage - 0.5)

and the request goes to the first engine with the lowest score. `in_flight` is the API
server's own count of its unfinished requests on that engine; `waiting`, `running` and
`kv_cache_usage` come from the DP coordinator's snapshot (every 100 ms, vllm/v1/engine/
coordinator.py), bumped locally by each routed request. The simulator has one API server
(client_count 1) and reads the engines' live counts instead of a 100 ms snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from tuner.sim.engine import Engine
from tuner.sim.memory import EngineConfig
from tuner.sim.profiles import GpuProfile, ModelProfile
from tuner.spec.values import Flags

KV_PRESSURE_FROM = 0.5  # waiting requests count more above this KV-cache usage
KV_PRESSURE_WEIGHT = 6.0  # ramps to 3 x waiting at a full cache


class EngineLoad(NamedTuple):
    in_flight: int  # the API server's unfinished requests on this engine
    waiting: int
    running: int
    kv_cache_usage: float  # 0..1


def load_score(load: EngineLoad, client_count: int = 1) -> float:
    """vLLM's score of one engine: lower is chosen."""
    score = float(max(client_count * load.in_flight, load.waiting + load.running))
    if load.waiting:
        score += (
            load.waiting * KV_PRESSURE_WEIGHT * max(0.0, load.kv_cache_usage - KV_PRESSURE_FROM)
        )
    return score


class Balancer:
    """vLLM's DP load balancer for one API server: the lowest score, ties rotating."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.start = 0

    def choose(self, loads: Sequence[EngineLoad]) -> int:
        best, best_score = 0, float("inf")
        for i in range(self.size):
            idx = (self.start + i) % self.size
            score = load_score(loads[idx])
            if score < best_score:
                best, best_score = idx, score
        self.start = (self.start + 1) % self.size
        return best


class Replicas:
    """`data-parallel-size` simulated engines (one per replica) and the balancer in front."""

    def __init__(
        self,
        model: ModelProfile,
        gpu: GpuProfile,
        flags: Flags,
        *,
        record_times: bool = False,
    ) -> None:
        first = Engine(model, gpu, flags, record_times=record_times)  # refuses as vLLM would
        rest = range(first.config.data_parallel_size - 1)
        self.engines = [
            first,
            *(Engine(model, gpu, flags, record_times=record_times) for _ in rest),
        ]
        self.balancer = Balancer(len(self.engines))
        self.owner: dict[str, int] = {}  # request id -> its replica, while unfinished

    def deliver(self, received: Callable[[np.ndarray, int], np.ndarray]) -> None:
        """Record tokens at the times `received` gives (`Engine.deliver`), on every replica:
        one API server writes every replica's tokens."""
        for engine in self.engines:
            engine.deliver = received

    @property
    def config(self) -> EngineConfig:
        return self.engines[0].config

    @property
    def gpu(self) -> GpuProfile:
        return self.engines[0].gpu

    def request_error(self, prompt_len: int, max_tokens: int) -> str | None:
        return self.engines[0].request_error(prompt_len, max_tokens)

    def route(self, queued: Sequence[int] | None = None) -> int:
        """The replica vLLM's balancer sends the next request to. `queued`: requests routed
        to each replica that its engine has not taken yet (the server's arrival queues)."""
        loads = [
            EngineLoad(
                len(e.requests) + (queued[i] if queued else 0),
                e.num_waiting,
                e.num_running,
                e.kv_cache_usage,
            )
            for i, e in enumerate(self.engines)
        ]
        return self.balancer.choose(loads)

    def add_request(
        self,
        request_id: str,
        prompt_len: int,
        max_tokens: int,
        now: float,
        prompt_ids: Sequence[int] | None = None,
    ) -> Engine:
        """Route a request and queue it on its replica's engine (`Engine.add_request`)."""
        i = self.route()
        self.engines[i].add_request(request_id, prompt_len, max_tokens, now, prompt_ids)
        self.owner[request_id] = i
        return self.engines[i]

    def abort_request(self, request_id: str) -> None:
        replica = self.owner.pop(request_id, None)
        if replica is not None:
            self.engines[replica].abort_request(request_id)

    def finished(self, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            self.owner.pop(rid, None)

    def earliest(self) -> Engine | None:
        """The replica with work whose clock is earliest: the next to step; None when idle."""
        busy = [e for e in self.engines if e.has_work]
        return min(busy, key=lambda e: e.clock) if busy else None

    # ---- what /metrics shows, over the replicas ---------------------------------------

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.engines)

    @property
    def num_waiting(self) -> int:
        return sum(e.num_waiting for e in self.engines)

    @property
    def kv_cache_usage(self) -> float:
        return sum(e.kv_cache_usage for e in self.engines) / len(self.engines)

    @property
    def num_preemptions(self) -> int:
        return sum(e.num_preemptions for e in self.engines)

    @property
    def prefix_cache_tokens(self) -> tuple[int, int]:
        pairs = [e.prefix_cache_tokens for e in self.engines]
        return sum(q for q, _ in pairs), sum(h for _, h in pairs)

    def reset_prefix_cache(self) -> bool:
        """Every replica's prefix cache emptied; False where one still had work."""
        return all([e.reset_prefix_cache() for e in self.engines])
