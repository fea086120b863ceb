"""Documents asked several times, in the simulator: prefix-cache hit rate and TTFT by block size.

Builds the long-document workload (tiny model's tokenizer, `longdoc_lengths` 4000,7000, 40
prompts at 4 req/s, burst order) with 1 and with 4 questions per document, and plans it on
the simulated 4×A6000 / DeepSeek-R1-Distill-Qwen-32B (TP=4, max-model-len 8192, 8 output
tokens) at block sizes 16, 32 and 64. Prints P99 and mean TTFT and the hit rate (SIMULATED).

Usage: .venv/bin/python benchmarks/prefix_reuse.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tuner.runners.plan import study_workload
from tuner.sim.planner import simulate
from tuner.spec.workload import WorkloadSpec
from tuner.tools.tinymodel import make_tiny_model
from tuner.workload.datasets import build_requests
from tuner.workload.tokenizer import load_tokenizer


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tok = load_tokenizer(str(make_tiny_model(Path(tmp) / "tiny")))
    print("questions  block  P99 TTFT s  mean TTFT s  hit rate (SIMULATED)")
    for questions in ([1], [4]):
        w = WorkloadSpec(dataset_name="longdoc", longdoc_lengths=[4000, 7000], num_prompts=40,
                         request_rate=4.0, longdoc_questions=questions)  # fmt: skip
        requests = build_requests(w, tok)

        class _Study:  # what study_workload reads of a study spec
            workload = w

        work = study_workload(_Study(), requests, w)
        for block in (16, 32, 64):  # vLLM 0.32 on CUDA: a multiple of 16
            flags = {"tensor-parallel-size": 4, "max-model-len": 8192, "block-size": block}
            r = simulate("deepseek-r1-distill-qwen-32b", "a6000", flags, list(work.prompt_lens),
                         [8] * len(requests), list(work.arrival_s),
                         prompt_ids=work.prompt_id_lists())  # fmt: skip
            ttft = np.array([x.ttft_s for x in r.records])
            rate = r.prefix_cache_hits / r.prefix_cache_queries if r.prefix_cache_queries else 0
            print(f"{questions[0]:9d}  {block:5d}  {np.percentile(ttft, 99):10.2f}  "
                  f"{ttft.mean():11.2f}  {rate:8.1%}")  # fmt: skip


if __name__ == "__main__":
    main()
