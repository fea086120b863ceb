"""The simulated engine behaves like vLLM: limits, direction of effects, exact bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.errors import EngineRefused
from tuner.measure.metrics import compute_metrics
from tuner.runners.precheck import refusal_kind
from tuner.sim.engine import Engine
from tuner.sim.planner import simulate
from tuner.sim.profiles import get_gpu, load_model

M32 = "deepseek-r1-distill-qwen-32b"
TP4 = {"tensor-parallel-size": 4, "max-model-len": 8192}
# docs/simulator.md: single-stream TPOT lies within [1, 2] x the weights/bandwidth floor.
TPOT_FLOOR_FACTOR = 2.0


def metrics(result):
    return compute_metrics(
        result.records,
        result.duration_s,
        selected_metrics=["ttft", "tpot", "itl", "e2el"],
        percentiles=[99],
    )


def test_single_stream_tpot_respects_the_bandwidth_floor():
    model, gpu = load_model(M32), get_gpu("a6000")
    floor_s = model.weight_bytes_per_gpu(4) / gpu.bandwidth_bytes_s
    assert floor_s == pytest.approx(0.0213, abs=0.001)
    m = metrics(simulate(model, gpu, TP4, [128], [256], [0.0]))
    assert floor_s * 1000 <= m["mean_tpot_ms"] <= TPOT_FLOOR_FACTOR * floor_s * 1000


def test_more_seqs_raise_throughput_and_cut_ttft_at_64_concurrent():
    def run(seqs):
        flags = {**TP4, "max-num-seqs": seqs}
        return metrics(simulate(M32, "a6000", flags, [512] * 64, [256] * 64, [0.0] * 64))

    low, high = run(8), run(64)
    assert high["output_throughput"] > 3 * low["output_throughput"]
    assert high["mean_ttft_ms"] < low["mean_ttft_ms"] / 3


def test_without_chunked_prefill_a_long_prompt_stalls_the_decodes():
    prompts, outputs, arrivals = [128] * 8 + [8000], [400] * 8 + [8], [0.0] * 8 + [3.0]

    def worst_itl_s(flags):
        r = simulate(M32, "a6000", {**TP4, "max-num-seqs": 64, **flags}, prompts, outputs, arrivals)
        return max(max(rec.itl_s) for rec in r.records[:8])

    chunked = worst_itl_s({"max-num-batched-tokens": 2048})
    whole = worst_itl_s({"enable-chunked-prefill": False})
    assert whole > 3 * chunked


def test_less_memory_means_preemptions_then_refusal():
    flags = {**TP4, "max-num-seqs": 256}
    n = 128
    preemptions = []
    for util in (0.9, 0.6, 0.45):
        r = simulate(M32, "a6000", {**flags, "gpu-memory-utilization": util},
                     [2048] * n, [1024] * n, [0.0] * n)  # fmt: skip
        assert all(rec.success and rec.output_tokens == 1024 for rec in r.records)
        preemptions.append(r.preemptions)
    assert preemptions[0] < preemptions[1] < preemptions[2]
    with pytest.raises(EngineRefused, match=r"No available memory|KV cache is needed"):
        simulate(M32, "a6000", {**flags, "gpu-memory-utilization": 0.3}, [10], [10], [0.0])
    with pytest.raises(EngineRefused) as refused:
        simulate(M32, "a6000", {**flags, "gpu-memory-utilization": 0.3}, [1], [1], [0.0])
    assert refusal_kind(str(refused.value)) == "kv_cache_too_small"


def test_larger_blocks_waste_more_of_the_last_block():
    prompts = np.random.default_rng(0).integers(50, 900, 40).tolist()

    def waste(block):
        flags = {**TP4, "block-size": block, "max-num-batched-tokens": 65536}
        engine = Engine(load_model(M32), get_gpu("a6000"), flags)
        for i, p in enumerate(prompts):
            engine.add_request(str(i), p, 10, 0.0)
        engine.step()
        reqs = engine.scheduler.running
        return sum(r.num_blocks * block - r.num_computed for r in reqs) / len(reqs)

    w16, w32, w64 = waste(16), waste(32), waste(64)  # vLLM 0.32 on CUDA: a multiple of 16
    assert w16 < w32 < w64
    assert w32 == pytest.approx(15.5, abs=5)  # about half a block on average


def test_closed_form_decode_runs_match_step_by_step(monkeypatch):
    rng = np.random.default_rng(1)
    n = 60
    args = (
        rng.integers(16, 1500, n).tolist(),
        rng.integers(1, 300, n).tolist(),
        np.cumsum(rng.exponential(0.2, n)).tolist(),
    )
    flags = {**TP4, "max-num-seqs": 16, "gpu-memory-utilization": 0.5, "block-size": 16}
    fast = simulate(M32, "a6000", flags, *args, max_concurrency=24)
    monkeypatch.setattr(Engine, "run_decodes", lambda self, until_s: (0, []))
    slow = simulate(M32, "a6000", flags, *args, max_concurrency=24)
    assert fast.events == slow.events and fast.preemptions == slow.preemptions
    for a, b in zip(fast.records, slow.records, strict=True):
        assert a.output_tokens == b.output_tokens
        assert a.start_s == pytest.approx(b.start_s, abs=1e-9)
        assert a.ttft_s == pytest.approx(b.ttft_s, abs=1e-9)
        assert np.allclose(a.itl_s, b.itl_s, atol=1e-9)


def test_records_are_what_the_client_records():
    r = simulate(M32, "a6000", TP4, [100, 200, 9000], [50, 1, 10], [0.0, 0.5, 1.0])
    a, b, too_long = r.records
    assert a.success and a.output_tokens == 50 and len(a.itl_s) == 49
    assert a.latency_s == pytest.approx(a.ttft_s + sum(a.itl_s))
    assert b.success and b.output_tokens == 1 and b.itl_s == [] and b.start_s == 0.5
    assert not too_long.success and "maximum context length is 8192" in too_long.error
    assert r.duration_s == pytest.approx(max(x.start_s + x.latency_s for x in (a, b)))


def test_max_concurrency_is_a_semaphore():
    n, limit = 30, 4
    r = simulate(M32, "a6000", TP4, [256] * n, [64] * n, [0.0] * n, max_concurrency=limit)
    spans = [(x.start_s, x.start_s + x.latency_s) for x in r.records]
    for t, _ in spans:
        in_flight = sum(1 for s, e in spans if s <= t < e)
        assert in_flight <= limit
    assert r.records[limit].start_s > 0  # the fifth waited for a slot


def test_online_api_steps_in_time():
    engine = Engine(load_model(M32), get_gpu("a6000"), TP4)
    engine.add_request("a", 1000, 3, now=5.0)
    emitted, finished, t = {}, [], 5.0
    while engine.has_work:
        result = engine.step()
        t += result.duration_s
        for rid, k in result.emitted.items():
            emitted[rid] = emitted.get(rid, 0) + k
        finished += result.finished
    assert emitted == {"a": 3} and finished == ["a"]
    assert engine.clock == pytest.approx(t)
    assert engine.num_running == engine.num_waiting == 0 and engine.kv_cache_usage == 0


def test_the_api_servers_front_end_admits_one_request_at_a_time():
    """vLLM's API server is one process: a burst reaches the engine request_overhead_s apart,
    in order (docs/simulator.md, "The API server's front end"); spaced arrivals never wait."""
    gpu = get_gpu("a6000").with_constants(request_overhead_s=0.05)
    burst = simulate(M32, gpu, TP4, [64] * 4, [2] * 4, [0.0] * 4)
    ttfts = [r.ttft_s for r in burst.records]
    spaced = simulate(M32, gpu, TP4, [64] * 4, [2] * 4, [0.0, 1.0, 2.0, 3.0])
    alone = [r.ttft_s for r in spaced.records]
    assert max(alone) - min(alone) < 1e-6 and alone[0] == pytest.approx(ttfts[0])
    for k, ttft in enumerate(ttfts, start=1):
        assert ttft >= 0.05 * k  # admitted at 0.05, 0.10, 0.15, 0.20 s
    # then at most the step under way and its own prefill (each no longer than a lone one)
    assert ttfts[-1] <= 0.05 * 4 + 2 * alone[0]


def _front_end_waits(constants: dict, scale: float, n: int = 3) -> list[float]:
    """Wall seconds each of `n` requests sent together waits in `tuner sim serve`'s front end
    (its own task and handlers' path, on a tiny engine)."""
    import asyncio

    from tuner.sim.replicas import Replicas
    from tuner.sim.server import ServeOptions, SimServer

    model, flags = load_model("tiny-qwen2"), {"max-model-len": 512}
    gpu = get_gpu("a6000").with_constants(**constants)
    server = SimServer(Replicas(model, gpu, flags), ServeOptions(model, gpu, flags, "/m", ["m"]))
    server.scale = scale

    async def burst() -> list[float]:
        loop = asyncio.get_running_loop()
        server._t0 = t0 = loop.time()
        front = asyncio.create_task(server._run_front_end())

        async def one() -> float:
            await server._through_front_end()
            return loop.time() - t0

        try:
            return list(await asyncio.gather(*(one() for _ in range(n))))
        finally:
            front.cancel()

    return asyncio.run(burst())


def test_the_sim_servers_front_end_queues_like_the_planners():
    # two simulated seconds per wall second: 20 ms a request is 10 ms of wall time
    waits = _front_end_waits({"request_overhead_s": 0.02}, scale=2.0)
    assert waits == pytest.approx([0.01, 0.02, 0.03], abs=4e-3)
    # and each then pays the front end's latency, which no request queues for (issue 45)
    late = {"request_overhead_s": 0.02, "frontend_latency_s": 0.1}
    waits = _front_end_waits(late, scale=2.0)
    assert waits == pytest.approx([0.06, 0.07, 0.08], abs=4e-3)
