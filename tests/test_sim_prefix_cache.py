"""The simulator's prefix cache follows vLLM V1's rules: full blocks only, at least one prompt
token computed, freed blocks stay cached until evicted (LRU), shared blocks counted once, and
`--no-enable-prefix-caching` turns it off."""

from __future__ import annotations

import random

import pytest

from tuner.sim.engine import Engine
from tuner.sim.planner import simulate
from tuner.sim.prefix_cache import PrefixCache, block_hashes
from tuner.sim.profiles import get_gpu, load_model

MODEL, GPU = load_model("deepseek-r1-distill-qwen-32b"), get_gpu("a6000")
BASE = {"tensor-parallel-size": 4, "max-model-len": 8192}


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 30000) for _ in range(n)]


def _run(engine: Engine, prompts: list[list[int]], gap_s: float = 1.0) -> Engine:
    for i, ids in enumerate(prompts):
        engine.add_request(str(i), len(ids), 8, i * gap_s, ids)
        while engine.has_work and engine.clock < (i + 1) * gap_s:
            engine.step()
    while engine.has_work:
        engine.step()
    return engine


def test_block_names_chain_over_full_blocks_only() -> None:
    a = block_hashes(list(range(40)), 16)
    assert len(a) == 2  # the last 8 tokens are a partial block: no name
    assert block_hashes(list(range(32)), 16) == a
    b = block_hashes([99, *range(1, 40)], 16)  # first block differs ...
    assert a[1] != b[1]  # ... so the second, with the same tokens, has another name


def test_questions_on_one_document_hit_its_full_blocks_once_it_is_computed() -> None:
    doc = _tokens(1000, 0)  # 62 full blocks of 16, and 8 tokens
    prompts = [doc + _tokens(20, 1 + i) for i in range(3)]
    engine = _run(Engine(MODEL, GPU, {**BASE, "block-size": 16}), prompts)
    queries, hits = engine.prefix_cache_tokens
    assert queries == sum(len(p) for p in prompts)
    assert hits == 2 * 62 * 16  # the 2nd and 3rd prompts: the document's full blocks
    assert engine.scheduler.free_blocks == engine.scheduler.total_blocks


def test_block_size_decides_how_much_of_a_shared_document_hits() -> None:
    doc = _tokens(1000, 0)
    prompts = [doc + _tokens(20, 1 + i) for i in range(2)]
    hits = {
        bs: _run(Engine(MODEL, GPU, {**BASE, "block-size": bs}), prompts).prefix_cache_tokens[1]
        for bs in (16, 32, 64)  # vLLM 0.32 on CUDA: a multiple of 16
    }
    assert hits == {16: 992, 32: 992, 64: 960}


def test_a_prompt_that_hits_entirely_still_computes_its_last_block() -> None:
    prompt = _tokens(64, 3)  # exactly 4 blocks of 16
    engine = _run(Engine(MODEL, GPU, {**BASE, "block-size": 16}), [prompt, prompt])
    assert engine.prefix_cache_tokens == (128, 48)  # (64 - 1) // 16 = 3 blocks hit


def test_hits_make_the_first_token_sooner() -> None:
    doc = _tokens(6000, 0)
    prompts = [doc + _tokens(30, 1 + i) for i in range(8)]
    arrivals = [2.0 * i for i in range(8)]

    def ttft(prefix: bool) -> float:
        result = simulate(
            MODEL, GPU, {**BASE, "enable-prefix-caching": prefix}, [len(p) for p in prompts],
            [16] * 8, arrivals, prompt_ids=prompts,
        )  # fmt: skip
        later = [r.ttft_s for r in result.records[1:]]
        return sum(later) / len(later)

    assert ttft(True) < 0.3 * ttft(False)


def test_prefix_caching_off_or_unknown_tokens_never_hit() -> None:
    doc = _tokens(500, 0)
    off = _run(Engine(MODEL, GPU, {**BASE, "enable-prefix-caching": False}), [doc, doc])
    assert off.prefix_cache_tokens == (0, 0)
    engine = Engine(MODEL, GPU, BASE)
    for i in range(2):
        engine.add_request(str(i), 500, 4, 0.0)  # lengths only, as random prompts
    while engine.has_work:
        engine.step()
    assert engine.prefix_cache_tokens == (1000, 0)  # looked up, as vLLM does; never shared


def test_freed_blocks_are_evicted_least_recently_freed_first() -> None:
    cache = PrefixCache()
    a, b = block_hashes(_tokens(32, 1), 16), block_hashes(_tokens(32, 2), 16)
    for name in (*a, *b):
        assert cache.add(name)
    assert cache.release(a) == 2 and cache.release(b) == 2
    cache.take(b[:1])  # b's head is used again: not free, not evictable
    cache.evict(2)  # a's two blocks, tail first
    assert cache.leading_hits("a", lambda i: a[i:]) == []
    assert cache.leading_hits("b", lambda i: b[i:]) == list(b)
    cache.evict(1)  # b's tail: the only free one left
    assert cache.leading_hits("b", lambda i: b[i:]) == list(b[:1])


@pytest.mark.parametrize("utilization", [0.9, 0.5])
def test_a_cache_under_pressure_hits_less_and_never_loses_a_block(utilization: float) -> None:
    # 24 documents of 6000 tokens, each asked twice, round robin: 144k tokens of documents,
    # which fit a 0.9 cache (437k tokens) but not a 0.5 one (122k): there LRU evicts each
    # document before it is asked again.
    docs = [_tokens(6000, 10 + d) for d in range(24)]
    prompts = [docs[i % 24] + _tokens(20, 100 + i) for i in range(48)]
    flags = {**BASE, "gpu-memory-utilization": utilization, "max-num-seqs": 8}
    engine = _run(Engine(MODEL, GPU, flags), prompts, gap_s=0.5)
    sched = engine.scheduler
    assert sched.free_blocks == sched.total_blocks
    assert sched.cache is not None and len(sched.cache.evictable) == len(sched.cache)
    assert len(sched.cache) <= sched.total_blocks
    queries, hits = engine.prefix_cache_tokens
    assert queries == sum(len(p) for p in prompts)
    every_second_ask = 24 * 6000
    assert hits == (every_second_ask if utilization == 0.9 else 0)
