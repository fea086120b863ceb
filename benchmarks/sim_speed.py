"""How fast the simulator explores: trials of a 200-request workload per second of wall time.

The target (issue 4): 200 trials of a 200-request workload in under 60 s on the 2-core CI
machines. Each trial draws flags from search_spaces/vllm-core.yaml's ranges (4xA6000,
DeepSeek-R1-Distill-Qwen-32B, TP=4, max-model-len 8192), builds the engine and runs the
whole workload in virtual time. Refused configs count as trials too (the check is part of
the cost) and are reported.

    taskset -c 0 .venv/bin/python benchmarks/sim_speed.py [--trials 200] [--requests 200]
        [--repeats 3] [--no-closed-form]

`--no-closed-form` books every pure-decode step one by one (`Engine.run_decodes` switched
off), to show what the closed form buys. With `--repeats`, each row is run that many times
(rows interleaved) and its median wall time is reported, with the spread.

Writes a Markdown table to stdout; the figures are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from tuner.errors import EngineRefused
from tuner.sim.engine import Engine
from tuner.sim.planner import simulate
from tuner.sim.profiles import get_gpu, load_model
from tuner.workload.schedule import arrival_times


def random_flags(rng: np.random.Generator) -> dict:
    def log_int(low: int, high: int) -> int:
        return round(math.exp(rng.uniform(math.log(low), math.log(high))))

    return {
        "tensor-parallel-size": 4,
        "max-model-len": 8192,
        "max-num-seqs": log_int(8, 512),
        "block-size": int(rng.choice([8, 16, 32])),
        "max-num-batched-tokens": log_int(1024, 131072),
        "gpu-memory-utilization": round(float(rng.uniform(0.70, 0.95)), 2),
        "enable-chunked-prefill": bool(rng.random() < 0.5),
    }


def run(trials: int, requests: int, input_len: int, output_len: int, rate: float) -> dict:
    model, gpu = load_model("deepseek-r1-distill-qwen-32b"), get_gpu("a6000")
    rng = np.random.default_rng(0)
    prompt_lens = rng.integers(input_len // 2, input_len * 3 // 2, requests).tolist()
    output_lens = [output_len] * requests
    arrivals = arrival_times(requests, rate, 1.0, 0).tolist()
    refused = events = 0
    start = time.perf_counter()
    for _ in range(trials):
        try:
            result = simulate(model, gpu, random_flags(rng), prompt_lens, output_lens, arrivals)
        except EngineRefused:
            refused += 1
            continue
        events += result.events
    wall_s = time.perf_counter() - start
    return {
        "workload": f"{requests} x random {input_len} in / {output_len} out, rate {rate}",
        "trials": trials,
        "refused": refused,
        "wall_s": wall_s,
        "trials_per_s": trials / wall_s,
        "steps": events,
        "steps_per_s": events / wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-closed-form", action="store_true")
    args = parser.parse_args()
    if args.no_closed_form:
        Engine.run_decodes = lambda self, until_s=math.inf: (0, [])  # type: ignore[method-assign]
    shapes = [(out, rate) for out in (128, 1024) for rate in (8.0, math.inf)]
    runs = [
        [run(args.trials, args.requests, 1024, *s) for s in shapes] for _ in range(args.repeats)
    ]
    print(
        "| workload | trials | refused | wall s (median) | min–max | trials/s | engine steps "
        "| steps/s |"
    )
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for i in range(len(shapes)):
        rows = [r[i] for r in runs]
        walls = sorted(r["wall_s"] for r in rows)
        r, wall = rows[0], statistics.median(walls)
        print(
            f"| {r['workload']} | {r['trials']} | {r['refused']} | {wall:.2f} | "
            f"{walls[0]:.2f}–{walls[-1]:.2f} | {r['trials'] / wall:.1f} | {r['steps']:,} | "
            f"{r['steps'] / wall:,.0f} |"
        )


if __name__ == "__main__":
    main()
