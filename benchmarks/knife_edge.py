"""The knife-edge table of docs/robustness.md (SIMULATED): scores of a few max-num-batched-tokens
values against vLLM's defaults on fixed-length prompts, nominal and under each perturbation.

The study of `tests/test_robustness.py`: simulated 4xA6000, DeepSeek-R1-Distill-Qwen-32B,
TP=4, 100 prompts of exactly 1024 tokens, 1024-token outputs, 2 req/s; the baseline is
max-num-seqs 256, max-num-batched-tokens 2048, gpu-memory-utilization 0.9. Each cell is the
score (lower is better) of `tuner.fidelity.robustness.gains`: the config against the baseline
re-simulated on the same perturbed workload.

`--scan LOW HIGH` also scores every max-num-batched-tokens in [LOW, HIGH] on the nominal
workload and counts the one-token steps whose score changes by more than 0.01 (1 %).

`--capacity` also gives the capacity example of docs/robustness.md: a capacity study (60
prompts of exactly 1024 tokens, 256-token outputs, SLO p99 TTFT <= 1000 ms, resolution 5 %,
at most 8 runs), each config's capacity against the defaults' on the same workload, nominal
and with prompts -3 % / +3 %, and the check's verdict.

Usage: .venv/bin/python benchmarks/knife_edge.py [--scan 1024 4096] [--capacity]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

from tuner.fidelity import robustness as rb
from tuner.runners.plan import PlanRunner
from tuner.spec.study import load_study_spec
from tuner.trial.scoring import score_trial, simulated_reference
from tuner.workload.request import BenchRequest, Workload
from tuner_testing import sim_study

REPO = Path(__file__).resolve().parent.parent
BASE = {"max-num-seqs": 256, "max-num-batched-tokens": 2048, "gpu-memory-utilization": 0.9}
N = 100
REQUESTS = [BenchRequest("", 1024, 1024, ignore_eos=True)] * N  # the planner reads lengths only
ROWS = (1509, 1510, 1536, 1024, 2000, 4096)


def table(spec) -> None:
    names = [p.name for p in rb.PERTURBATIONS]
    print(
        "| max-num-batched-tokens | score vs vLLM's defaults (2048) | " + " | ".join(names) + " |"
    )
    print("| --- " * (2 + len(names)) + "|")
    for mnbt in ROWS:
        found = rb.gains(spec, REQUESTS, {**BASE, "max-num-batched-tokens": mnbt}, BASE)
        cells = [f"{-found[name]:+.3f}" for name in ("nominal", *names)]
        print(f"| {mnbt} | " + " | ".join(cells) + " |", flush=True)


def scan(spec, low: int, high: int) -> None:
    runner = PlanRunner(spec, workload=Workload(tuple(REQUESTS)))
    base = rb.simulated(runner, BASE)
    ref = simulated_reference(spec, runner.objective, base, dict(BASE))
    scores = {}
    for mnbt in range(low, high + 1):
        m = rb.simulated(runner, {**BASE, "max-num-batched-tokens": mnbt})
        scores[mnbt] = score_trial(spec, runner.objective, m, ref).score if m is not None else None
    jumps = [
        n
        for n in range(low + 1, high + 1)
        if scores[n] is not None
        and scores[n - 1] is not None
        and abs(scores[n] - scores[n - 1]) > 0.01
    ]
    print(f"scan {low}..{high}: {len(jumps)} one-token steps change the score by more than 0.01")
    print("first ones:", jumps[:12])


def capacity(tmp: Path) -> None:
    tmp.mkdir()
    objective = {"mode": "capacity", "slo": ["p99_ttft_ms<=1000"], "capacity": {"max_runs": 8}}
    workload = {"random_input_len": 1024, "random_output_len": 256, "num_prompts": 60}
    spec = load_study_spec(
        sim_study(tmp, REPO / ".cache" / "tiny-qwen2", workload=workload, objective=objective)
    )
    reqs = [BenchRequest("", 1024, 256, ignore_eos=True)] * 60
    noise = math.log1p(spec.objective.search.resolution)
    print("| max-num-batched-tokens | capacity × defaults' | prompts -3% | prompts +3% | verdict |")
    print("| --- | --- | --- | --- | --- |")
    for mnbt in (4096, 1024, 1509, 1510):
        found = rb.gains(spec, reqs, {**BASE, "max-num-batched-tokens": mnbt}, BASE)
        ratios = [
            f"×{math.exp(found[n]):.2f}" if found[n] is not None else "-"
            for n in ("nominal", "prompts -3%", "prompts +3%")
        ]
        _, words = rb.verdict(found, capacity=True, noise=noise)
        print(f"| {mnbt} | " + " | ".join(ratios) + f" | {words.split(':')[0]} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scan", type=int, nargs=2, metavar=("LOW", "HIGH"))
    parser.add_argument("--capacity", action="store_true")
    args = parser.parse_args()
    workload = {
        "random_input_len": 1024,
        "random_output_len": 1024,
        "num_prompts": N,
        "request_rate": 2,
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec = load_study_spec(
            sim_study(Path(tmp), REPO / ".cache" / "tiny-qwen2", workload=workload)
        )
        t0 = time.perf_counter()
        table(spec)
        print(f"(SIMULATED; {time.perf_counter() - t0:.1f} s)")
        if args.scan:
            t0 = time.perf_counter()
            scan(spec, *args.scan)
            print(f"(SIMULATED; {time.perf_counter() - t0:.1f} s)")
        if args.capacity:
            t0 = time.perf_counter()
            capacity(Path(tmp) / "capacity")
            print(f"(SIMULATED; {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
