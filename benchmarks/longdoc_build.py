"""How long building a workload's prompts takes: the long-document dataset against random.

Builds, with `tuner.workload.datasets.build_requests` and the tiny model's Qwen2 tokenizer
(`.cache/tiny-qwen2`, a byte-level BPE with a 1024-token vocabulary), under several seeds:
16 longdoc prompts of 32768 tokens; 200 longdoc prompts of the default mix
(512/2048/8192/32768, equal shares); 16 random prompts of 32768 tokens. Prints the median and
spread per case (docs/datasets.md, "Speed").

Usage: .venv/bin/python benchmarks/longdoc_build.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from tuner.spec.workload import WorkloadSpec
from tuner.workload.datasets import build_requests
from tuner.workload.tokenizer import load_tokenizer

REPO = Path(__file__).resolve().parent.parent
CASES = {
    "longdoc 16 x 32768": dict(dataset_name="longdoc", num_prompts=16, longdoc_lengths=[32768]),
    "longdoc 200 of the default mix": dict(dataset_name="longdoc", num_prompts=200),
    "random 16 x 32768": dict(
        dataset_name="random", num_prompts=16, random_input_len=32768, random_range_ratio=0.0
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    tokenizer = load_tokenizer(str(REPO / ".cache" / "tiny-qwen2"))
    for name, fields in CASES.items():
        times, tokens = [], 0
        for seed in range(args.seeds):
            spec = WorkloadSpec(**fields, seed=seed)
            t0 = time.perf_counter()
            requests = build_requests(spec, tokenizer)
            times.append(time.perf_counter() - t0)
            tokens = sum(r.prompt_len for r in requests)
        print(
            f"| {name} | {tokens:,} | {statistics.median(times):.1f} s | "
            f"{min(times):.1f} – {max(times):.1f} s | load 1m {os.getloadavg()[0]:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
