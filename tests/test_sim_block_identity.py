"""Every request's blocks have an identity (issue 32, item 2): a preempted request hits its own
cached blocks again when it comes back, prompt and generated tokens alike, as vLLM hashes
every full block; a prompt known by length only (random, ShareGPT in `tuner plan`) shares no
block with another. So `tuner plan` (lengths) and `tuner sim serve` (token ids, from its
tokenizer) agree on a workload of long prompts that preempts."""

from __future__ import annotations

import random

import httpx
import pytest

from tuner.sim.memory import resolve_flags
from tuner.sim.planner import simulate
from tuner.sim.prefix_cache import block_hashes
from tuner.sim.profiles import get_gpu, load_model
from tuner.sim.scheduler import Scheduler, SimRequest

MODEL, GPU = load_model("deepseek-r1-distill-qwen-32b"), get_gpu("a6000")
BASE = {"tensor-parallel-size": 4, "max-model-len": 8192, "block-size": 16}


def _resumed_start(prompt_ids: list[int] | None) -> tuple[int, int, Scheduler]:
    """Two requests of 100-token prompts in a pool of 20 blocks of 16: the second is preempted
    at 161 tokens (6 blocks of prompt, 4 of its output, all full), the first then takes two of
    its freed blocks (its tail: least recently freed first). Returns (tokens the second
    starts from when it comes back, its tokens then, the scheduler)."""
    sched = Scheduler(resolve_flags(MODEL, GPU, BASE), 20)
    first, second = SimRequest("a", 100, 80, 0.0), SimRequest("b", 100, 100, 0.0)
    if prompt_ids is not None:
        second.block_hashes = block_hashes(prompt_ids, 16)
    sched.add(first)
    sched.add(second)
    resumed = None
    while sched.has_work:
        batch = sched.schedule()
        for req, _ in batch.items:
            if req is second and req.resumed and resumed is None:
                resumed = (req.num_computed, req.num_tokens)
        sched.finish_step(batch)
    assert sched.preemptions == 1 and resumed is not None
    return *resumed, sched


@pytest.mark.parametrize("ids", [None, list(range(1000, 1100))], ids=["lengths", "token-ids"])
def test_a_preempted_request_hits_its_own_blocks_generated_ones_too(ids) -> None:
    computed, tokens, sched = _resumed_start(ids)
    assert tokens == 161
    assert computed == 8 * 16  # blocks 0-7 survived: 6 of prompt, and 2 of generated tokens
    assert sched.free_blocks == sched.total_blocks
    # a resumed request's lookup is not a new query (vLLM counts it apart)
    assert sched.cache is not None and sched.cache.queries_tokens == 200
    assert sched.cache.hits_tokens == 0


def test_prompts_known_by_length_share_no_block() -> None:
    # 8 prompts of the same length, one at a time: each would hit the last one's blocks if
    # identity came from the length (or the position) rather than the request
    result = simulate(MODEL, GPU, BASE, [1000] * 8, [32] * 8, [2.0 * i for i in range(8)])
    assert result.prefix_cache_queries == 8000 and result.prefix_cache_hits == 0
    ttfts = [r.ttft_s for r in result.records]
    assert max(ttfts) < 1.05 * min(ttfts)  # every one computes its whole prompt


def test_known_and_unknown_prompts_mix_in_one_workload() -> None:
    doc = [random.Random(0).randrange(1, 30000) for _ in range(2000)]
    ids = [[*doc, 7, i] for i in range(3)] + [None]  # three questions on a document, one other
    lens = [2002, 2002, 2002, 2002]
    result = simulate(MODEL, GPU, BASE, lens, [8] * 4, [0.0, 5.0, 10.0, 15.0], prompt_ids=ids)
    assert result.prefix_cache_hits == 2 * 2000  # the document's 125 full blocks, twice
    assert result.prefix_cache_queries == sum(lens)


# ---- `tuner plan` against `tuner sim serve` ------------------------------------------------

# 12 prompts of 2500 tokens at 2 req/s (Poisson), 192-token answers, 32B at TP=4 on A6000s
# with a KV cache of 28,112 tokens: the cache fills and the engine preempts. `tuner plan`
# before block identity: 25 preemptions, mean TPOT 107 ms, 31.8 s; with it 2, 54 ms and
# 20.8 s, as on the server (SIMULATED).
N, PROMPT_LEN, OUTPUT_LEN = 12, 2500, 192
FLAGS = {"tensor-parallel-size": 4, "max-model-len": 4096, "gpu-memory-utilization": 0.38}
KEYS = ("output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms")


def _word_prompts(tokenizer, n: int, length: int, seed: int) -> list[str]:
    """Distinct prompts of exactly `length` tokens: random single-token words."""
    from tuner.sim.text import TokenText

    words = TokenText(tokenizer).words
    rng = random.Random(seed)
    prompts = ["".join(rng.choice(words) for _ in range(length)) for _ in range(n)]
    assert all(len(tokenizer(p)["input_ids"]) == length for p in prompts)
    return prompts


def _planned(requests, spec):
    """What `tuner plan` computes for these requests (`PlanRunner._simulate`'s inputs)."""
    from tuner.measure.metrics import compute_metrics
    from tuner.runners.plan import study_workload

    work = study_workload(spec, requests)
    flags = {**spec.engine.flags, **FLAGS}
    sim = simulate(MODEL, GPU, flags, list(work.prompt_lens), list(work.output_lens),
                   list(work.arrival_s), prompt_ids=work.prompt_id_lists())  # fmt: skip
    figures = compute_metrics(
        sim.records, sim.duration_s, selected_metrics=["ttft", "tpot"], percentiles=[99.0]
    )
    return figures, sim.preemptions


@pytest.mark.slow  # a whole study or workload run: `make test`, not `make test-fast`
def test_plan_and_sim_serve_agree_on_long_prompts_that_preempt(tmp_path, tiny_model_dir) -> None:
    from tuner.engine.ports import free_port
    from tuner.engine.process import EngineProcess
    from tuner.spec.study import StudySpec
    from tuner.workload.benchmark import run_benchmark
    from tuner.workload.request import BenchRequest
    from tuner.workload.tokenizer import load_tokenizer
    from tuner_testing import TUNER

    spec = StudySpec.model_validate({
        "name": "s", "engine": {"model": MODEL.name, "flags": {}},
        "hardware": {"gpu": "a6000", "count": 4},
        "search_space": {"parameters": {"max-num-seqs": {"type": "int", "low": 8, "high": 16}}},
        "workload": {"num_prompts": N, "request_rate": 2, "num_warmups": 0,
                     "tokenizer": str(tiny_model_dir)},
    })  # fmt: skip
    prompts = _word_prompts(load_tokenizer(str(tiny_model_dir)), N, PROMPT_LEN, seed=1)
    requests = [BenchRequest(p, PROMPT_LEN, OUTPUT_LEN, ignore_eos=True) for p in prompts]
    planned, plan_preemptions = _planned(requests, spec)

    port = free_port()
    argv = [*TUNER, "sim", "serve", "--model", MODEL.name, "--gpu", "a6000"]
    argv += ["--tokenizer", str(tiny_model_dir), "--served-model-name", "m", "--port", str(port)]
    argv += [f"--{k}={v}" for k, v in FLAGS.items()]
    process = EngineProcess.start(argv, {}, tmp_path / "sim.log")
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(url, 60)
        served = run_benchmark(spec.workload, url, "m", requests, tokenizer=None).metrics
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
    finally:
        process.stop()
    assert served["completed"] == N
    for key in KEYS:
        assert served[key] == pytest.approx(planned[key], rel=0.10), (key, served, planned)
    counters = {
        line.split("{")[0]: float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("vllm:")
    }
    assert 1 <= plan_preemptions <= 4
    assert abs(counters["vllm:num_preemptions_total"] - plan_preemptions) <= 1
    # every prompt looked up once (the client's initial test request too): a resumed
    # request's lookup is not a new query
    assert counters["vllm:prefix_cache_queries_total"] == counters["vllm:prompt_tokens_total"]


def test_the_kept_lookup_of_the_queues_head_is_a_fresh_lookup() -> None:
    """`PrefixCache.leading_hits` keeps the head's run between steps and re-checks only what
    was evicted since: on a workload that thrashes (documents shared, answers evicting them),
    at every step it equals a scan of the names from scratch."""
    rng = random.Random(3)
    docs = [[rng.randrange(1, 30000) for _ in range(900)] for _ in range(3)]
    sched = Scheduler(resolve_flags(MODEL, GPU, BASE), 120)
    for i in range(14):
        ids = [*docs[i % 3], i] if i % 2 else None
        req = SimRequest(str(i), 901, 300, 0.0)
        if ids is not None:
            req.block_hashes = block_hashes(ids, 16)
        sched.add(req)
    checked = 0
    while sched.has_work:
        if sched.waiting and sched.cache is not None:
            head = sched.waiting[0]
            limit = (head.num_tokens - 1) // 16
            fresh = []
            for name in sched._names(head, 0, limit):
                if name not in sched.cache.refs:
                    break
                fresh.append(name)
            kept = sched._hits(head)
            if head.block_hashes or head.resumed:
                assert kept == fresh
                checked += bool(fresh)
        sched.finish_step(sched.schedule())
    assert sched.preemptions > 10 and checked > 1000
    assert sched.free_blocks == sched.total_blocks
