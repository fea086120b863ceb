"""The API server's one thread (`tuner.sim.frontend.ApiThread`): admissions in the time that
streaming leaves, and tokens read when the server has written them (docs/simulator.md, "The
API server's front end")."""

from __future__ import annotations

import numpy as np
import pytest

from tuner.measure.metrics import compute_metrics
from tuner.sim.frontend import ApiThread, front_end
from tuner.sim.planner import simulate
from tuner.sim.profiles import GPUS, StepTimeConstants


def _admitted(api: ApiThread, now: float) -> list[float]:
    return [a.at_engine_s for a in api.admit(now)]


def test_with_no_streaming_cost_admissions_are_the_serial_queue_of_before():
    c = StepTimeConstants(request_overhead_s=0.010, frontend_latency_s=0.030)
    api = ApiThread(c)
    for i in range(3):
        api.submit(i, 0.0)
    api.submit(3, 5.0)
    # streaming at no cost: tokens are read at the steps' ends, and admissions do not wait
    ends = np.array([0.001, 0.002, 0.003])
    assert api.stream(ends, 100) is ends
    free, expected = 0.0, []
    for sent in (0.0, 0.0, 0.0, 5.0):
        free, at_engine = front_end(sent, free, c)
        expected.append(at_engine)
    assert api.next_admission_s() == pytest.approx(0.010)
    assert _admitted(api, 1.0) == pytest.approx(expected[:3])
    assert api.next_admission_s() == pytest.approx(5.010)
    assert _admitted(api, 6.0) == pytest.approx(expected[3:])
    assert not api.busy


def test_tokens_are_read_when_the_thread_has_written_every_chunk_before_them():
    api = ApiThread(StepTimeConstants(stream_chunk_s=1e-4))
    ends = np.array([0.001, 0.0012, 0.0014, 0.010])
    got = api.stream(ends, 10)  # 1 ms of writing per step: the first three queue
    free, expected = 0.0, []
    for end in ends:
        free = max(free, end) + 10 * 1e-4
        expected.append(free)
    assert got == pytest.approx(expected)  # 2.0, 3.0, 4.0 ms; then 11 ms, the queue drained
    assert api.streamed_until_s == pytest.approx(0.011)


def test_streaming_comes_first_and_an_admission_takes_the_time_it_leaves():
    # a step every 1 ms, each 0.5 ms of writing: half the thread is left for admitting, so a
    # 2 ms admission takes 4 ms, and the next one starts when it ends
    api = ApiThread(StepTimeConstants(request_overhead_s=0.002, stream_chunk_s=5e-5))
    api.submit(0, 0.0)
    api.submit(1, 0.0)
    ends = np.arange(0, 11) * 1e-3
    got = api.stream(ends, 10)
    assert got == pytest.approx(ends + 0.0005)  # the streaming never waits for an admission
    assert _admitted(api, 0.0105) == pytest.approx([0.004, 0.008])
    alone = ApiThread(StepTimeConstants(request_overhead_s=0.002))
    alone.submit(0, 0.0)
    alone.submit(1, 0.0)
    assert _admitted(alone, 1.0) == pytest.approx([0.002, 0.004])


def test_an_admission_cut_by_a_query_resumes_where_it_stopped():
    api = ApiThread(StepTimeConstants(request_overhead_s=0.002, stream_chunk_s=1e-4))
    api.submit(0, 0.0)
    assert api.admit(0.0015) == []  # 1.5 ms of the 2 done
    api.stream(np.array([0.0015]), 5)  # 0.5 ms of writing, first
    assert api.next_admission_s() == pytest.approx(0.0025)
    assert _admitted(api, 0.003) == pytest.approx([0.0025])


def _burst(chunk_s: float, admit_s: float = 2e-3) -> dict:
    gpu = GPUS["h100"].with_constants(stream_chunk_s=chunk_s, request_overhead_s=admit_s)
    n = 64
    sim = simulate("tiny-qwen2", gpu, {"max-model-len": 512}, [64] * n, [32] * n, [0.0] * n)
    return compute_metrics(
        sim.records, sim.duration_s, selected_metrics=["ttft", "tpot"], percentiles=[99.0]
    )


def test_when_every_stream_runs_the_client_reads_tokens_at_the_servers_pace():
    free, busy = _burst(0.0, admit_s=1e-6), _burst(2e-4, admit_s=1e-6)
    # 64 streams admitted at once, x 0.2 ms: each step's tokens take 12.8 ms to write, far
    # past a tiny model's step
    assert free["mean_tpot_ms"] < 3
    assert busy["mean_tpot_ms"] == pytest.approx(64 * 0.2, rel=0.1)


def test_streams_slow_a_bursts_admission_and_a_cost_near_0_is_the_model_without_it():
    free, busy = _burst(0.0), _burst(2e-4)
    assert busy["p99_ttft_ms"] > 1.2 * free["p99_ttft_ms"]  # the last admitted later
    near = _burst(1e-12)
    for metric in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms"):
        assert near[metric] == pytest.approx(free[metric], rel=1e-6)


def _closed_loop(chunk_s: float) -> dict:
    # a closed loop: each request is sent when the one before it in its slot has been read,
    # in the middle of a step the engine has already simulated
    gpu = GPUS["h100"].with_constants(stream_chunk_s=chunk_s, frontend_latency_s=0.02)
    n = 96
    sim = simulate(
        "tiny-qwen2",
        gpu,
        {"max-model-len": 512},
        [64] * n,
        [24] * n,
        [0.0] * n,
        max_concurrency=16,
    )
    return compute_metrics(
        sim.records, sim.duration_s, selected_metrics=["ttft", "tpot"], percentiles=[99.0]
    )


def test_in_a_closed_loop_an_admission_uses_the_idle_time_of_the_step_in_progress():
    # a request sent while a step runs is admitted in that step's idle time, not after the
    # writing of its tokens: a cost near 0 is the model without it, in a closed loop too
    free, near = _closed_loop(0.0), _closed_loop(1e-12)
    for metric in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms"):
        assert near[metric] == pytest.approx(free[metric], rel=1e-6)


def test_a_span_merged_with_one_already_passed_still_holds_the_thread():
    # a 2 ms admission around 1 ms of writing ends at 3 ms, past that span; then a step the
    # driver streams late queues its writing right behind it (one span, 1-4 ms): a request
    # admitted from 3 ms waits for its end
    api = ApiThread(StepTimeConstants(request_overhead_s=0.002, stream_chunk_s=1e-4))
    api.stream(np.array([0.001]), 10)
    api.submit(0, 0.0)
    assert _admitted(api, 0.003) == pytest.approx([0.003])
    api.stream(np.array([0.0019]), 20)
    api.submit(1, 0.0025)
    assert api.next_admission_s() == pytest.approx(0.006)
