"""Deployment shape (issue 23 §3): TP x DP as searched flags, refusals before launch, and the
simulated engine's data-parallel replicas behind vLLM's balancer."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tuner.errors import FailureKind, UserError
from tuner.run.checks import check_baseline_starts
from tuner.runners.precheck import predict_refusal
from tuner.sim.planner import simulate
from tuner.sim.profiles import get_gpu, load_model
from tuner.sim.replicas import Balancer, EngineLoad, Replicas, load_score
from tuner.spec.space import effective_flags, serve_argv, spec_rules
from tuner.spec.study import StudySpec

M32, A6000 = load_model("deepseek-r1-distill-qwen-32b"), get_gpu("a6000")
SHAPE = {"type": "categorical", "choices": [1, 2, 3, 4], "default": 4}
PREFIX = {"type": "bool", "default": True}


def _spec(space: dict[str, Any], **hardware: Any) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": "s",
            "engine": {"model": "deepseek-r1-distill-qwen-32b", "flags": {"max-model-len": 8192}},
            "hardware": {"gpu": "a6000", "count": 4, **hardware},
            "search_space": space,
            "workload": {"num_prompts": 4},
        }
    )


def test_data_parallel_fills_the_gpus_of_a_trial() -> None:
    space = {"parameters": {"tensor-parallel-size": SHAPE}, "fill_data_parallel": True}
    spec = _spec(space)
    assert effective_flags(spec, {"tensor-parallel-size": 2})["data-parallel-size"] == 2
    assert effective_flags(spec, {"tensor-parallel-size": 4})["data-parallel-size"] == 1
    argv = serve_argv(spec, {"tensor-parallel-size": 2})
    assert argv[argv.index("--data-parallel-size") + 1] == "2"
    # a slot of 2 GPUs: TP=2 leaves room for one replica
    small = {"type": "categorical", "choices": [1, 2], "default": 2}
    small_space = {"parameters": {"tensor-parallel-size": small}, "fill_data_parallel": True}
    slots = _spec(small_space, gpus="0-3", gpus_per_trial=2)
    assert effective_flags(slots, {"tensor-parallel-size": 2})["data-parallel-size"] == 1
    # TP=3 cannot fill 4 GPUs: refused with a reason, before any launch
    why = spec_rules(spec, effective_flags(spec, {"tensor-parallel-size": 3}))
    assert why is not None and "does not divide the trial's 4 GPU(s)" in why
    assert spec_rules(spec, effective_flags(spec, {"tensor-parallel-size": 1})) is None


def test_searched_data_parallel_refuses_products_over_the_gpus() -> None:
    dp = {"type": "categorical", "choices": [1, 2, 4], "default": 1}
    spec = _spec({"parameters": {"tensor-parallel-size": SHAPE, "data-parallel-size": dp}})
    flags = effective_flags(spec, {"tensor-parallel-size": 4, "data-parallel-size": 2})
    why = spec_rules(spec, flags)
    assert why is not None and "needs 8 GPUs, more than the trial's 4" in why
    assert spec_rules(spec, {"tensor-parallel-size": 2, "data-parallel-size": 2}) is None
    with pytest.raises(ValueError, match="cannot also be a parameter"):
        _spec({"parameters": {"data-parallel-size": dp}, "fill_data_parallel": True})


def test_precheck_refuses_weights_that_do_not_fit_one_gpu() -> None:
    spec = _spec({"parameters": {"enable-prefix-caching": PREFIX}})
    refused = predict_refusal(spec.engine.model, spec.hardware, {"tensor-parallel-size": 1}, {})
    assert refused is not None
    kind, message = refused
    assert kind == FailureKind.OUT_OF_MEMORY
    assert "weights take 61.03 GiB per GPU at tensor-parallel-size 1" in message
    two = {"tensor-parallel-size": 2, "data-parallel-size": 2, "max-model-len": 8192}
    assert predict_refusal(spec.engine.model, spec.hardware, two, {}) is None


def test_balancer_follows_vllm_scores() -> None:
    # waiting + running; waiting requests weigh more once the KV cache is over half full
    assert load_score(EngineLoad(3, 1, 2, 0.4)) == 3.0
    assert load_score(EngineLoad(3, 1, 2, 1.0)) == 3.0 + 1 * 6.0 * 0.5
    assert load_score(EngineLoad(5, 0, 2, 0.9)) == 5.0  # the in-flight floor
    b = Balancer(2)
    idle = [EngineLoad(0, 0, 0, 0.0)] * 2
    assert [b.choose(idle) for _ in range(4)] == [0, 1, 0, 1]  # ties rotate
    busy_kv = [EngineLoad(4, 2, 2, 0.95), EngineLoad(5, 0, 5, 0.2)]
    assert b.choose(busy_kv) == 1  # 4 + 2 x 6 x 0.45 = 9.4 against 5


def test_replicas_each_have_their_own_cache_and_share_the_load() -> None:
    flags = {"tensor-parallel-size": 2, "data-parallel-size": 2, "max-model-len": 8192}
    fleet = Replicas(M32, A6000, flags)
    assert len(fleet.engines) == 2
    assert fleet.engines[0].scheduler is not fleet.engines[1].scheduler
    assert fleet.engines[0].cost.tp == 2
    n = 40
    lens, outs, arrivals = [1024] * n, [64] * n, [i * 0.05 for i in range(n)]
    two = simulate(M32, A6000, flags, lens, outs, arrivals)
    one = simulate(M32, A6000, {**flags, "data-parallel-size": 1}, lens, outs, arrivals)
    assert len(two.records) == len(one.records) == n
    # two replicas of TP=2 serve the burst with less queueing than one
    p90 = lambda r: sorted(x.ttft_s for x in r.records)[int(0.9 * n)]  # noqa: E731
    assert p90(two) < p90(one)
    # one replica is the plain engine: data-parallel-size 1 changes nothing
    plain = simulate(M32, A6000, {"tensor-parallel-size": 2, "max-model-len": 8192}, lens, outs,
                     arrivals)  # fmt: skip
    assert [r.ttft_s for r in plain.records] == [r.ttft_s for r in one.records]


def test_the_server_and_the_planner_agree_on_two_replicas(tmp_path, tiny_model_dir) -> None:
    """`tuner sim serve --data-parallel-size 2` (real HTTP) against `tuner plan`'s virtual
    time on the same burst: the same routing, so the same figures within the box's lag."""
    from tuner.engine.ports import free_port
    from tuner.engine.process import EngineProcess
    from tuner.spec.workload import WorkloadSpec
    from tuner.workload.benchmark import run_benchmark
    from tuner.workload.request import BenchRequest
    from tuner_testing import TUNER

    n, prompt_len, out = 12, 2000, 24  # words: the server counts them without a tokenizer
    shape = ["--tensor-parallel-size", "2", "--data-parallel-size", "2"]
    port = free_port()
    argv = [*TUNER, "sim", "serve", "--model", "deepseek-r1-distill-qwen-32b", *shape]
    argv += ["--served-model-name", "m", "--port", str(port)]
    argv += ["--max-model-len", "8192", "--no-enable-prefix-caching"]
    workload = WorkloadSpec(tokenizer=str(tiny_model_dir), num_prompts=n, request_rate="inf")
    requests = [BenchRequest("x " * prompt_len, prompt_len, out, ignore_eos=True)] * n
    process = EngineProcess.start(argv, {}, tmp_path / "sim.log")
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(url, 60)
        served = run_benchmark(workload, url, "m", requests, tokenizer=None)
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        process.stop()
    flags = {"tensor-parallel-size": 2, "data-parallel-size": 2, "max-model-len": 8192}
    planned = simulate(M32, A6000, flags, [prompt_len] * n, [out] * n, [0.0] * n)
    plan = _means(planned.records, out)
    assert served.metrics["completed"] == n
    for key in ("mean_ttft_ms", "mean_tpot_ms"):
        assert served.metrics[key] == pytest.approx(plan[key], rel=0.25), key
    assert 'vllm:num_requests_running{engine="1"' in metrics  # a gauge per replica
    # one replica alone would be far off: the agreement is the routing's, not chance
    alone = simulate(M32, A6000, {**flags, "data-parallel-size": 1}, [prompt_len] * n,
                     [out] * n, [0.0] * n)  # fmt: skip
    one = _means(alone.records, out)
    assert one["mean_ttft_ms"] > 1.5 * served.metrics["mean_ttft_ms"]


def _means(records: list, out: int) -> dict[str, float]:
    """Mean TTFT and TPOT (ms) of simulated records, as vLLM's benchmark defines them."""
    ttft = [r.ttft_s for r in records]
    tpot = [(r.latency_s - r.ttft_s) / (out - 1) for r in records]
    return {
        "mean_ttft_ms": 1e3 * sum(ttft) / len(ttft),
        "mean_tpot_ms": 1e3 * sum(tpot) / len(tpot),
    }


def _fixed(space: dict[str, Any], flags: dict[str, Any], **hardware: Any) -> StudySpec:
    data = _spec(space, **hardware).model_dump()
    data["engine"]["flags"].update(flags)
    return StudySpec.model_validate(data)


def test_data_parallel_fills_what_tensor_times_pipeline_parallel_leave() -> None:
    """Issue 33: PP=2 on 4 GPUs gave TP=2 two replicas (8 GPUs) and refused every trial, the
    baseline included; a replica is TP x PP GPUs."""
    tp = {"type": "categorical", "choices": [1, 2], "default": 2}
    space = {"parameters": {"tensor-parallel-size": tp}, "fill_data_parallel": True}
    spec = _fixed(space, {"pipeline-parallel-size": 2})
    two = effective_flags(spec, {"tensor-parallel-size": 2})
    assert two["data-parallel-size"] == 1 and spec_rules(spec, two) is None
    one = effective_flags(spec, {"tensor-parallel-size": 1})
    assert one["data-parallel-size"] == 2 and spec_rules(spec, one) is None
    check_baseline_starts(spec)  # trial 0 starts: nothing to say
    # TP x PP that does not divide the GPUs is still refused per trial, in those words
    three = _fixed(space, {"pipeline-parallel-size": 3})
    why = spec_rules(three, effective_flags(three, {"tensor-parallel-size": 1}))
    assert why is not None and "pipeline-parallel-size 3 does not divide the trial's 4" in why


def test_a_fixed_data_parallel_size_under_fill_is_refused_not_overridden() -> None:
    space = {"parameters": {"tensor-parallel-size": SHAPE}, "fill_data_parallel": True}
    with pytest.raises(ValueError, match=r"engine\.flags\.data-parallel-size: 1 contradicts"):
        _fixed(space, {"data-parallel-size": 1})
    # without fill_data_parallel the fixed value is what the engine is told
    plain = _fixed({"parameters": {"enable-prefix-caching": PREFIX}}, {"data-parallel-size": 2})
    assert effective_flags(plain, {})["data-parallel-size"] == 2


@pytest.mark.parametrize(
    ("space", "flags", "hardware", "needle"),
    [
        # TP=3 filling 4 GPUs: no data-parallel-size does
        ({"tensor-parallel-size": {**SHAPE, "default": 3}}, {}, {},
         "tensor-parallel-size 3 x pipeline-parallel-size 1 does not divide the trial's 4"),
        # a fixed TP=3 without fill: vLLM's rule on the model's 40 heads
        ({}, {"tensor-parallel-size": 3}, {},
         "Total number of attention heads (40) must be divisible by tensor parallel size (3)"),
        # more GPUs than the box has
        ({}, {"tensor-parallel-size": 8}, {}, "needs 8 GPUs, more than the trial's 4"),
        ({}, {"tensor-parallel-size": 4}, {"gpus": "0-1"}, "needs 4 GPUs, more than the trial's 2"),
    ],
)  # fmt: skip
def test_a_baseline_that_can_never_start_is_a_problem_before_the_run(
    space: dict, flags: dict, hardware: dict, needle: str
) -> None:
    fill = "tensor-parallel-size" in space
    spec = _fixed(
        {"parameters": {**space, "enable-prefix-caching": PREFIX}, "fill_data_parallel": fill},
        flags,
        **hardware,
    )
    with pytest.raises(UserError) as err:
        check_baseline_starts(spec)
    text = str(err.value)
    assert needle in text and text.startswith("search_space: the baseline (trial 0"), text
    assert "\n" not in text
