"""Every run measured cold (issue 33): warm-up prompts outside the measured set, the implied
hit rate of a prompt set, the stand-in tokenizer's random prompts, the stored hit rate per run
and its flag, and `tuner sim serve`'s dev-mode `/reset_prefix_cache`."""

from __future__ import annotations

import collections

import httpx
import pytest
from test_sim_server import SMALL, sim_server

from tuner import trial as tr
from tuner.trial import PrefixCacheRun, TrialPoint, TrialRecord
from tuner.workload.cold import implied_hit_rate, is_loopback, warmup_request
from tuner.workload.datasets import random_requests
from tuner.workload.request import BenchRequest
from tuner.workload.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir))


def _sharing_first_block(tok, requests) -> int:
    firsts = collections.Counter(tuple(tok(r.prompt).input_ids[:16]) for r in requests)
    return sum(n for n in firsts.values() if n > 1)


def test_random_prompts_over_a_stand_in_tokenizer_share_first_blocks_as_a_large_vocab(tok):
    """The tiny tokenizer's 1,024 tokens: vLLM's draws give many prompts the same first
    16-token block; the stand-in's draws (the default under 16,384 tokens) almost none, as
    over the production model's ~152k. Lengths stay exact."""
    kw = {"input_len": 48, "output_len": 4, "range_ratio": 0.0, "seed": 0}
    vllms = random_requests(tok, 300, standin=False, **kw)
    ours = random_requests(tok, 300, **kw)
    assert _sharing_first_block(tok, vllms) > 60
    assert _sharing_first_block(tok, ours) <= 4
    assert all(len(tok.encode(r.prompt, add_special_tokens=False)) == 48 for r in ours)
    assert [r.output_len for r in ours] == [r.output_len for r in vllms]
    # a real tokenizer's vocabulary is not a stand-in: vLLM's draws, unchanged
    assert tok.vocab_size < 16_384


def test_implied_hit_rate_counts_whole_blocks_shared_with_an_earlier_prompt() -> None:
    doc = list(range(100, 164))  # 4 blocks of 16
    a, b = [*doc, 1, 2, 3], [*doc, 4, 5]  # b repeats a's 4 full blocks
    assert implied_hit_rate([a, b]) == pytest.approx(64 / (67 + 66))
    assert implied_hit_rate([a, list(range(500, 567))]) == 0.0
    # the last token is always computed: a prompt cached whole hits one block less
    assert implied_hit_rate([doc, doc]) == pytest.approx(48 / 128)
    assert implied_hit_rate([]) == 0.0


def test_the_warm_up_prompt_is_the_first_ones_shape_with_another_first_block(tok) -> None:
    (first,) = random_requests(tok, 1, input_len=64, output_len=8, range_ratio=0.0, seed=1)
    warm = warmup_request(first)
    assert warm.prompt != first.prompt and warm.prompt[1:] == first.prompt[1:]
    assert (warm.output_len, warm.ignore_eos) == (first.output_len, first.ignore_eos)
    ids = [tok(p).input_ids for p in (first.prompt, warm.prompt)]
    assert ids[0][0] != ids[1][0]  # no block of the measured prompt can be hit
    chat = BenchRequest(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], 5, 4
    )
    assert warmup_request(chat).prompt[0]["content"] == "~e brief"


def test_only_a_loopback_engine_is_put_in_vllms_dev_mode() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
    assert not is_loopback("gpu-box.internal")


def test_a_run_above_what_its_prompts_imply_is_warm_and_round_trips() -> None:
    cold = PrefixCacheRun(hit_rate=0.01, implied_rate=0.0, rate_rps=4.0, reset=True)
    doc = PrefixCacheRun(hit_rate=0.6, implied_rate=0.58, scenario="doc")
    warm = PrefixCacheRun(hit_rate=0.97, implied_rate=0.0, rate_rps=8.0)
    assert not cold.warm and not doc.warm and warm.warm
    assert "at 8 req/s hit 97 % of prompt tokens (its prompts imply 0 %)" in warm.words()
    record = TrialRecord(prefix_cache_runs=(cold, doc, warm))
    attrs = record.encode()
    assert attrs[tr.PREFIX_CACHE_RUNS][2] == {
        "hit_rate": 0.97,
        "implied_rate": 0.0,
        "scenario": None,
        "rate_rps": 8.0,
        "reset": False,
    }
    assert TrialRecord.decode(attrs).prefix_cache_runs == (cold, doc, warm)
    point = TrialPoint(0, "COMPLETE", {}, {}, "feasible", attrs=attrs)
    assert point.warm_runs == (warm,)
    # a run without counters is never called warm, and a malformed entry is skipped
    unknown = {tr.PREFIX_CACHE_RUNS: [{"hit_rate": None, "implied_rate": 0.0}, {"x": 1}]}
    (only,) = TrialRecord.decode(unknown).prefix_cache_runs
    assert only.hit_rate is None and not only.warm


def _counters(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:prefix_cache")
    }
    return values["vllm:prefix_cache_queries_total"], values["vllm:prefix_cache_hits_total"]


def test_sim_serve_resets_its_prefix_cache_in_dev_mode_only() -> None:
    """As vLLM: `POST /reset_prefix_cache` exists under VLLM_SERVER_DEV_MODE=1 and answers
    {"success": true}; afterwards the same prompt finds nothing cached."""
    body = {"model": "m32", "prompt": list(range(100, 400)), "max_tokens": 2}
    with sim_server(*SMALL, "--block-size", "16", env={"VLLM_SERVER_DEV_MODE": "1"}) as sim:
        for _ in range(2):
            assert httpx.post(f"{sim.url}/v1/completions", json=body).status_code == 200
        assert _counters(sim.url) == (600.0, 288.0)  # the second one hit 18 blocks
        reset = httpx.post(f"{sim.url}/reset_prefix_cache")
        assert reset.status_code == 200 and reset.json() == {"success": True}
        assert httpx.post(f"{sim.url}/v1/completions", json=body).status_code == 200
        assert _counters(sim.url) == (900.0, 288.0)  # the third: a cold cache
    with sim_server(*SMALL, env={"VLLM_SERVER_DEV_MODE": "0"}) as sim:
        assert httpx.post(f"{sim.url}/reset_prefix_cache").status_code == 404
