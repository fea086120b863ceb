"""Why a study's trial reads slower than `tuner verify` on the same config (docs/verify.md,
"Checked on a real vLLM"): one real vLLM (the suite's session engine, `vllm_server` of
tests/conftest.py: vLLM's CPU build, the tiny model, pinned to one core), the same workload
(16 random prompts of 96-160 tokens, 32 out, 8 req/s, seed 0) run by the same client
(`run_benchmark`) under three conditions, interleaved, 3 rounds in rotated order, after one
trial-like run right after the engine is ready:

- V: as verify runs it: no warm-up, no prefix-cache reset, no checkpoint;
- T: as a trial runs it: 1 warm-up, the prefix cache reset, early stopping's checkpoint every
  2 s (each scrapes the engine's /metrics; the callback never stops the run);
- T-noscrape: T without the checkpoint (so T - T-noscrape is the scrapes, T-noscrape - V the
  warm-up and reset).

It is a pytest module so that it reuses the suite's engine fixture (it starts no engine of its
own beyond the session's); it lives outside tests/ so that `make test` never runs it:

    PYTHONPATH=. .venv/bin/pytest -p no:cacheprovider -p tests.conftest \
        benchmarks/trial_vs_verify_vllm.py -s

Prints each condition's p99 TTFT, mean TPOT and the box's load average per run; writes them
all to $PROBE_OUT (default /tmp/trial_vs_verify.json).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tuner.measure.pruning import Decision
from tuner.spec.workload import WorkloadSpec
from tuner.workload.benchmark import run_benchmark
from tuner.workload.datasets import build_requests
from tuner.workload.tokenizer import load_tokenizer

pytestmark = pytest.mark.vllm

WORKLOAD = {
    "endpoint": "/v1/completions",
    "dataset_name": "random",
    "random_input_len": 128,
    "random_output_len": 32,
    "random_range_ratio": 0.25,
    "num_prompts": 16,
    "request_rate": 8,
    "seed": 0,
}
# label -> (warm-ups, prefix-cache reset, checkpoint every 2 s)
CONDITIONS = {"V": (0, False, False), "T": (1, True, True), "T-noscrape": (1, True, False)}
FIGURES = ("p99_ttft_ms", "mean_ttft_ms", "mean_tpot_ms", "output_throughput")


def test_trial_against_verify_conditions(vllm_server) -> None:
    tok = load_tokenizer(str(vllm_server.model_dir))
    rows: list[dict] = []
    scrapes: list[float] = []

    def check(snapshot) -> Decision:
        scrapes.append(time.monotonic())
        return Decision(False)

    def run(label: str, warmups: int, reset: bool, scrape: bool) -> None:
        w = WorkloadSpec(**WORKLOAD, num_warmups=warmups)
        result = run_benchmark(
            w,
            vllm_server.base_url,
            vllm_server.model,
            build_requests(w, tok),
            tokenizer=tok,
            reset_cache=reset,
            checkpoint=check if scrape else None,
            checkpoint_every_s=2.0,
        )
        figures = {k: result.metrics[k] for k in FIGURES}
        rows.append({"label": label, **figures, "load1": os.getloadavg()[0], "t": time.time()})

    run("T-first-after-ready", *CONDITIONS["T"])
    labels = list(CONDITIONS)
    for i in range(3):
        for label in labels[i:] + labels[:i]:
            run(label, *CONDITIONS[label])
    with open(os.environ.get("PROBE_OUT", "/tmp/trial_vs_verify.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for label in ["T-first-after-ready", *labels]:
        mine = [r for r in rows if r["label"] == label]
        shown = {k: [round(r[k], 1) for r in mine] for k in ("p99_ttft_ms", "mean_tpot_ms")}
        print(label, shown, "load", [round(r["load1"], 1) for r in mine])
    print("checkpoints (each a /metrics scrape):", len(scrapes))
    assert len(rows) == 10
