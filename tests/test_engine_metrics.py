"""The engine's /metrics for early stopping: vLLM's exposition text, the simulator's, failures."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tuner.workload.engine_metrics import Scraper, engine_sample, parse_samples

# As vLLM V1 exports them through prometheus_client: a counter's TYPE line names it without
# `_total`, its `_created` sample beside; one series per engine rank (data parallel 2 here).
VLLM_TEXT = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5 {32B}"} 16.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen2.5 {32B}"} 15.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen2.5 {32B}"} 7.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen2.5 {32B}"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5 {32B}"} 0.93
vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen2.5 {32B}"} 0.97
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen2.5 {32B}"} 3.0
vllm:num_preemptions_total{engine="1",model_name="Qwen/Qwen2.5 {32B}"} 1.0
vllm:num_preemptions_created{engine="0",model_name="Qwen/Qwen2.5 {32B}"} 1.7e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="a\\"b"} 42.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="a\\"b"} NaN
"""


def test_parses_vllm_exposition_text() -> None:
    samples = parse_samples(VLLM_TEXT)
    assert samples["vllm:num_requests_waiting"] == [7.0, 5.0]
    assert samples["vllm:time_to_first_token_seconds_bucket"] == [42.0]  # escaped quote
    assert "vllm:time_to_first_token_seconds_sum" not in samples  # NaN: no value
    s = engine_sample(VLLM_TEXT, t_s=4.0)
    assert s is not None
    assert (s.t_s, s.waiting, s.kv_cache_usage, s.preemptions) == (4.0, 12, 0.97, 4)
    assert s.describe() == "12 waiting in the engine's queue, KV cache 97% used, 4 preemption(s)"


def test_v0_names_timestamps_and_missing_gauges() -> None:
    v0 = (
        'vllm:num_requests_waiting{model_name="m"} 2 1700000000000\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        "garbage line\n"
    )
    s = engine_sample(v0, 1.0)
    assert s is not None and (s.waiting, s.kv_cache_usage, s.preemptions) == (2, 0.5, None)
    assert engine_sample("vllm:num_requests_running 3\n", 1.0) is None  # no queue gauge
    assert engine_sample("", 1.0) is None


def test_the_simulators_metrics_parse_the_same() -> None:
    """`tuner sim serve` serves the names vLLM does, one series per data-parallel rank: the
    parser reads its text (and sums the ranks)."""
    from tuner.sim.profiles import get_gpu, load_model
    from tuner.sim.replicas import Replicas
    from tuner.sim.server import ServeOptions, SimServer

    model, gpu = load_model("deepseek-r1-distill-qwen-32b"), get_gpu("a6000")
    flags = {"tensor-parallel-size": 2, "data-parallel-size": 2, "max-model-len": 4096}
    engine = Replicas(model, gpu, flags)
    for i in range(3):
        engine.add_request(str(i), 512, 16, 0.0)
    server = SimServer(engine, ServeOptions(model, gpu, flags, "/m", ["m"]))
    resp = asyncio.run(server.metrics(None))  # type: ignore[arg-type]
    s = engine_sample(resp.text, 0.0)
    assert s is not None and s.waiting == 3 and s.kv_cache_usage == 0.0 and s.preemptions == 0
    assert [e.num_waiting for e in engine.engines] == [2, 1]  # routed round-robin when idle
    assert 'vllm:num_requests_waiting{engine="1",model_name="m"} 1.0' in resp.text


@pytest.mark.parametrize("answer", ["refused", "500", "no gauges"])
def test_a_failed_scrape_is_no_error(answer: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if answer == "refused":
            raise httpx.ConnectError("refused", request=request)
        if answer == "500":
            return httpx.Response(500, text="boom")
        return httpx.Response(200, text="# nothing here\n")

    scraper = Scraper("http://127.0.0.1:1", {"Authorization": "Bearer k", "X": "y"})

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            await scraper.scrape(client, 1.0)

    asyncio.run(go())
    assert scraper.samples == [] and scraper.failures == 1
    assert scraper.headers == {"Authorization": "Bearer k"} and scraper.url.endswith("/metrics")
