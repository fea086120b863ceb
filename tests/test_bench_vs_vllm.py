"""`tuner bench` and `vllm bench serve` measure the same real vLLM the same way.

One fixed random workload, run three times by each client (up to nine while they disagree),
interleaved (tuner, vllm, vllm, tuner, tuner, vllm: each goes first as often), each client pinned
to a core the server does not use, every run cold: `tuner bench` empties the engine's prefix cache
after its warm-ups, and before each `vllm bench serve` run the test does what `vllm bench sweep`
does (`POST /reset_prefix_cache`, the server in dev mode). Counts must agree exactly; timing
figures must agree within the noise of these machines (see TOLERANCE), judged on the median over
rounds of tuner / vLLM, each round's two runs back to back: the other work of the shared box
drifts over the test's minute, and a pair sees it alike (a CI run on 7 Dec read vLLM's client 1.5x
slower on the medians of six runs each).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tuner_testing import TUNER, vllm_run
from tuner_testing.forked import command

REPO = Path(__file__).resolve().parent.parent
NUM_PROMPTS = 48
INPUT_LEN = 64
OUTPUT_LEN = 64
RUNS_PER_CLIENT = 3  # each run streams ~3000 tokens: ~3 s here, long enough to average
# Brief §5: with server and client pinned, the medians of three interleaved runs of the
# *same* client still differed by up to 25% on these shared 2-core machines. Two clients
# measured the same way must then agree within that; 35% adds room for the other work the
# shared machine does meanwhile. A client that timed tokens wrongly (per token vs per chunk,
# its own overhead, a different start time) misses by far more on this engine.
TOLERANCE = 0.35
TIMED_KEYS = ("mean_tpot_ms", "mean_itl_ms", "output_throughput")
# Issue 33's check: medians of throughput, TTFT and TPOT within ×1.5 whichever client runs
# first. TTFT (a few ms here) is the figure a warm prefix cache moves most.
RATIO_KEYS = ("median_ttft_ms", "median_tpot_ms", "output_throughput")
RATIO = 1.5


def _workload_flags(base_url: str, model: str, tokenizer: Path) -> list[str]:
    return [
        "--base-url", base_url,
        "--model", model,
        "--tokenizer", str(tokenizer),
        "--dataset-name", "random",
        "--random-input-len", str(INPUT_LEN),
        "--random-output-len", str(OUTPUT_LEN),
        "--num-prompts", str(NUM_PROMPTS),
        "--max-concurrency", "4",
        "--seed", "0",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "99",
    ]  # fmt: skip


def _client_core() -> int:
    """Core 0 on the 2-core machines: conftest pins the server to the last core."""
    return min(os.sched_getaffinity(0))


def _tuner_bench(argv: list[str]) -> None:
    """`tuner bench ARGV` on the client's core, forked from the tuner's zygote: as
    `vllm bench serve` below, its imports done before it starts."""
    cpus = [_client_core()]
    _succeeded(command(sys.executable, "tuner", [*TUNER[1:], "bench", *argv], cpus=cpus))


def _vllm_bench_serve(argv: list[str]) -> None:
    """`vllm bench serve ARGV` pinned as `_tuner_bench` pins `tuner bench`, forked from the vLLM
    zygote (tuner_testing.forked): its ~10 s of imports happen once, before any timing."""
    vllm = str(REPO / ".venv-vllm" / "bin" / "vllm")
    proc = vllm_run([vllm, "bench", "serve", *argv], timeout_s=120, cpus=[_client_core()])
    _succeeded(proc)


def _succeeded(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _reset_prefix_cache(base_url: str) -> None:
    """What `vllm bench sweep` does before each run (vllm/benchmarks/sweep/server.py)."""
    import httpx

    answer = httpx.post(f"{base_url}/reset_prefix_cache", timeout=30)
    assert answer.status_code == 200 and answer.json()["success"], answer.text


def test_tuner_bench_agrees_with_vllm_bench_serve(vllm_server, tmp_path):
    flags = _workload_flags(vllm_server.base_url, vllm_server.model, vllm_server.model_dir)
    results: dict[str, list[dict]] = {"tuner": [], "vllm": []}

    def tuner_run(i: int) -> None:
        ours = tmp_path / f"tuner-{i}.json"
        _tuner_bench([*flags, "--save-result", str(ours)])
        results["tuner"].append(json.loads(ours.read_text()))

    def vllm_bench_run(i: int) -> None:
        theirs = f"vllm-{i}.json"
        save = ["--save-result", "--result-dir", str(tmp_path), "--result-filename", theirs]
        _reset_prefix_cache(vllm_server.base_url)
        _vllm_bench_serve(["--backend", "vllm", *flags, "--disable-tqdm", *save])
        results["vllm"].append(json.loads((tmp_path / theirs).read_text()))

    def interleaved_runs(first: int) -> None:
        for i in range(first, first + RUNS_PER_CLIENT):
            pair = (tuner_run, vllm_bench_run) if i % 2 == 0 else (vllm_bench_run, tuner_run)
            for run in pair:  # each client first in turn: a warm cache would favour one
                run(i)

    interleaved_runs(0)

    for client, runs in results.items():
        for run in runs:
            assert run["completed"] == NUM_PROMPTS and run["failed"] == 0, client
            assert run["total_output_tokens"] == NUM_PROMPTS * OUTPUT_LEN, client
    # Same seed, same tokenizer, vLLM's algorithm: the same prompt lengths (as the server
    # counted them, from usage.prompt_tokens).
    assert results["tuner"][0]["total_input_tokens"] == NUM_PROMPTS * INPUT_LEN
    assert results["vllm"][0]["total_input_tokens"] == pytest.approx(
        NUM_PROMPTS * INPUT_LEN, rel=0.02
    )

    def pair_ratios() -> dict[str, float]:
        """Per key, the median over rounds of tuner / vLLM, each pair run back to back: a load
        that drifts over the minute the test takes moves both runs of a pair alike."""
        pairs = list(zip(results["tuner"], results["vllm"], strict=True))
        keys = dict.fromkeys((*TIMED_KEYS, *RATIO_KEYS))
        return {k: statistics.median(ours[k] / theirs[k] for ours, theirs in pairs) for k in keys}

    def agree(ratio: dict[str, float]) -> bool:
        return all(abs(ratio[k] - 1) <= TOLERANCE for k in TIMED_KEYS) and all(
            max(ratio[k], 1 / ratio[k]) <= RATIO for k in RATIO_KEYS
        )

    # A burst of other work on the shared box can skew a round; a client that times tokens
    # wrongly misses in every pair of every round. Up to two more rounds while they disagree.
    for first in (RUNS_PER_CLIENT, 2 * RUNS_PER_CLIENT):
        if agree(pair_ratios()):
            break
        interleaved_runs(first)
    n = len(results["tuner"])
    report = {k: round(v, 3) for k, v in pair_ratios().items()}
    print(f"median tuner / vllm over {n} pairs: {report}")  # shown with -s
    pairs = [(round(t["mean_tpot_ms"], 2), round(v["mean_tpot_ms"], 2))
             for t, v in zip(results["tuner"], results["vllm"], strict=True)]  # fmt: skip
    assert agree(pair_ratios()), (
        f"median tuner / vllm over {n} pairs: {report}; mean TPOT ms per pair: {pairs}"
    )
    # every run cold: `tuner bench` measured no cached prompt tokens (its own stand-in
    # prompts, distinct from vLLM's and from each other, and the cache emptied first)
    assert all(r["prefix_cache_hit_rate"] < 0.05 for r in results["tuner"])


_VLLM_RANDOM = """
import json
from transformers import AutoTokenizer
from vllm.benchmarks.datasets import RandomDataset
tok = AutoTokenizer.from_pretrained({model!r})
reqs = RandomDataset(random_seed=3).sample(
    tokenizer=tok, num_requests=40, input_len=100, output_len=16, range_ratio=0.3
)
print(json.dumps([[r.prompt, r.prompt_len, r.expected_output_len] for r in reqs]))
"""


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
def test_random_prompts_are_vllms(vllm_python, tiny_model_dir):
    """Same seed and tokenizer: vLLM's RandomDataset prompts, except where vLLM gives up on
    the exact length (then ours is exact and vLLM's is a few tokens off)."""
    from tuner.workload.datasets import random_requests
    from tuner.workload.tokenizer import load_tokenizer

    script = _VLLM_RANDOM.format(model=str(tiny_model_dir))
    proc = vllm_run([str(vllm_python), "-c", script], timeout_s=120)
    _succeeded(proc)
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])
    tok = load_tokenizer(str(tiny_model_dir))
    ours = random_requests(  # vLLM's draws: not the stand-in's (docs/datasets.md)
        tok, 40, input_len=100, output_len=16, range_ratio=0.3, seed=3, standin=False
    )
    assert [r.output_len for r in ours] == [t[2] for t in theirs]
    same = 0
    for r, (prompt, prompt_len, _) in zip(ours, theirs, strict=True):
        assert len(tok.encode(r.prompt, add_special_tokens=False)) == r.prompt_len
        if prompt_len == r.prompt_len:
            assert r.prompt == prompt
            same += 1
    assert same >= 0.75 * len(theirs)


def test_chat_endpoint_on_real_vllm(vllm_server, tmp_path):
    """The chat path on a real server: its chunk shape (role-only first delta, usage-only
    last chunk) parses, and ignore_eos/max_completion_tokens make output lengths exact."""
    out = tmp_path / "chat.json"
    flags = _workload_flags(vllm_server.base_url, vllm_server.model, vllm_server.model_dir)
    chat = ["--backend", "openai-chat", "--num-prompts", "8"]
    save = ["--save-result", str(out), "--save-detailed"]
    _tuner_bench([*flags, *chat, *save])
    data = json.loads(out.read_text())
    assert data["completed"] == 8 and data["failed"] == 0
    assert data["output_lens"] == [OUTPUT_LEN] * 8
    # The chat template wraps the prompt: the server counts more prompt tokens than ours.
    assert data["total_input_tokens"] > 8 * INPUT_LEN
    assert all(len(itl) >= OUTPUT_LEN - 1 for itl in data["itls"])


def test_verify_reads_the_flags_real_vllm_exposes(vllm_server):
    """`tuner verify`'s view of a real vLLM (dev mode, brief §5 flags): the scheduler's flags
    from /server_info, the cache's from /metrics' `vllm:cache_config_info`, max_model_len from
    /v1/models, the version from /version; a flag it runs with another value is named."""
    import httpx

    from tuner.verify.compare import flag_checks
    from tuner.verify.engine_info import cache_config_labels, read_engine_info

    url = vllm_server.base_url
    info = read_engine_info(url, vllm_server.model, None)
    assert info.sources == ("/version", "/metrics", "/server_info", "/v1/models")
    assert info.version == httpx.get(url + "/version").json()["version"]
    assert cache_config_labels(httpx.get(url + "/metrics").text)["block_size"] == "32"
    exported = {"max-num-batched-tokens": 2048, "max-num-seqs": 8, "block-size": 32}
    exported |= {"max-model-len": 1024, "VLLM_CPU_KVCACHE_SPACE": "1"}
    checks = {c.flag: c for c in flag_checks(exported, {f: info.flag(f) for f in exported})}
    assert [f for f, c in checks.items() if c.differs] == ["max-num-batched-tokens"]
    assert checks["max-num-batched-tokens"].engine == 1024  # it runs brief §5's 1024
    assert all(c.engine is not None for c in checks.values())


def test_the_step_histogram_verify_reads_is_real_vllms(vllm_server):
    """`tuner verify` bounds the token budget from `vllm:iteration_tokens_total` (issue 49):
    read from a real vLLM 0.32 (`--max-num-batched-tokens 1024`, brief §5) after a 700-token
    prompt, the bounds it gives hold the budget the engine runs, from both sides."""
    import httpx

    from tuner.verify.engine_info import (
        budget_at_most,
        inferred_bounds,
        prefix_hits,
        step_tokens_above,
        step_tokens_at_most,
    )

    url = vllm_server.base_url
    hits = prefix_hits(httpx.get(url + "/metrics").text)
    body = {"model": vllm_server.model, "prompt": [7 + i % 50 for i in range(700)], "max_tokens": 2}
    httpx.post(url + "/v1/completions", json=body, timeout=60).raise_for_status()
    text = httpx.get(url + "/metrics").text
    above, at_most = step_tokens_above(text), step_tokens_at_most(text)
    assert above is not None and above >= 512, above  # the 700-token prefill: past 512
    assert at_most is not None and at_most <= 1024, at_most  # never past the budget
    cached = prefix_hits(text) - hits
    bounds = inferred_bounds(above, None, budget_at_most(at_most, 700, cached))
    assert bounds and not any(b.excludes(1024) for b in bounds), bounds
