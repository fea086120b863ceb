"""Issue 45's model parts, each a pure function: the API server's front end (its serial share,
which sets the rate a burst reaches the engine, and its latency), GEMM efficiency by matrix
size, and the per-layer step floor (docs/simulator.md, "Step time" and "The API server's front
end")."""

from __future__ import annotations

import re

import pytest

from tuner.sim.frontend import front_end
from tuner.sim.planner import simulate
from tuner.sim.profiles import GPUS, ModelProfile, StepTimeConstants
from tuner.sim.steptime import StepCostModel, gemm_efficiency, layer_floor

# Qwen3-0.6B's shape (config.json): the small model whose Hopper decode step the floor is for
SMALL = ModelProfile("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936)
BIG = ModelProfile("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936)


def test_a_burst_reaches_the_engine_one_request_per_serial_cost_then_the_latency():
    c = StepTimeConstants(request_overhead_s=0.010, frontend_latency_s=0.030)
    free, reached = 0.0, []
    for _ in range(3):  # three requests sent together at t=0
        free, at_engine = front_end(0.0, free, c)
        reached.append(at_engine)
    assert reached == pytest.approx([0.040, 0.050, 0.060])  # 100 requests/s, 30 ms each late
    # a request sent after the queue drained pays its own serial cost and the latency only
    assert front_end(5.0, free, c) == pytest.approx((5.010, 5.040))


def test_the_front_ends_latency_adds_to_every_ttft_and_to_nothing_else():
    base = GPUS["a6000"]
    late = base.with_constants(frontend_latency_s=0.030)
    args = ("tiny-qwen2", {"max-model-len": 512}, [64] * 4, [8] * 4, [0.0, 1.0, 2.0, 3.0])
    a = simulate(args[0], base, *args[1:])
    b = simulate(args[0], late, *args[1:])
    for r0, r1 in zip(a.records, b.records, strict=True):
        assert r1.ttft_s - r0.ttft_s == pytest.approx(0.030, abs=1e-9)
        assert r1.itl_s == pytest.approx(r0.itl_s)


def test_gemm_efficiency_saturates_in_tokens_and_hidden_size():
    assert gemm_efficiency(0.7, 64, 1024, 0.0, 0.0) == 0.7  # halves at 0: the old model
    assert gemm_efficiency(0.7, 256, 5120, 256, 0.0) == pytest.approx(0.35)  # half at half
    small, big = (gemm_efficiency(0.7, 2048, d, 128, 2048) for d in (1024, 5120))
    assert small < big < 0.7
    assert gemm_efficiency(0.7, 1e9, 1e9, 128, 2048) == pytest.approx(0.7, rel=1e-5)


def test_a_small_models_prefill_is_slower_per_flop_with_the_size_curve():
    gpu = GPUS["h100"]
    sized = gpu.with_constants(gemm_half_hidden=2048.0)

    def prefill_ms(model, profile):
        return StepCostModel(model, profile, 1).step_time(2048, 1, 1, 2048 * 1024.5, 2048) * 1e3

    # both slower; the small model (hidden 1024) by 3x, the 32B (hidden 5120) by 1.4x
    small = prefill_ms(SMALL, sized) - prefill_ms(SMALL, gpu)
    big = prefill_ms(BIG, sized) / prefill_ms(BIG, gpu)
    assert small > 0 and 1.3 < big < 1.45


def test_the_layer_floor_binds_on_a_small_models_decode_step_only():
    assert layer_floor(28, 41e-6) == pytest.approx(1.148e-3)
    hopper = GPUS["h100"]
    floored = hopper.with_constants(layer_floor_s=41e-6)
    c = hopper.constants
    fixed = c.step_overhead_s + c.per_seq_overhead_s

    def decode_s(model, gpu):
        return StepCostModel(model, gpu, 1).step_time(1, 1, 1, 200.0, 200)

    # 0.6B: the weight read (1.5 GB at 0.88 of 3.35 TB/s: 0.5 ms) is under 28 layers' floor
    assert decode_s(SMALL, hopper) < 1.6e-3
    assert decode_s(SMALL, floored) == pytest.approx(28 * 41e-6 + fixed)
    assert decode_s(BIG, floored) == decode_s(BIG, hopper)  # a 32B's read is far above it
    # the closed-form decode run keeps the floor too
    run = StepCostModel(SMALL, floored, 1).decode_run_times(3, 1, 199)
    assert run[0] == pytest.approx(decode_s(SMALL, floored))


def test_a_profile_file_without_issue_45s_constants_reads_them_as_off(tmp_path):
    from tuner.sim.profile_file import load_gpu, profile_to_yaml

    text = profile_to_yaml(GPUS["a100-80g"].with_constants(frontend_latency_s=0.03))
    assert "frontend_latency_s: 0.03" in text
    (tmp_path / "new.yaml").write_text(text)
    assert load_gpu(str(tmp_path / "new.yaml")).constants.frontend_latency_s == 0.03
    names = (
        "frontend_latency_s",
        "stream_chunk_s",
        "gemm_half_tokens",
        "gemm_half_hidden",
        "layer_floor_s",
    )
    old = re.sub(rf"\n *({'|'.join(names)}): [^\n]*", "", text)
    (tmp_path / "old.yaml").write_text(old)
    assert load_gpu(str(tmp_path / "old.yaml")) == GPUS["a100-80g"]
