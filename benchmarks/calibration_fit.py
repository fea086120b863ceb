"""How long the calibration fit takes, and how close it gets, on the demo's shape.

The target (issue 12): a fit in a few seconds at most for up to 50 observations, since the
multi-fidelity loop refits after every real trial. The "real" trials are the simulator's
own figures under a hidden truth (A6000 with 25 % less bandwidth and twice the step
overhead: every figure is SIMULATED); the fit starts from the stock A6000 profile. Configs
are drawn from search_spaces/vllm-core.yaml's ranges at TP=4 (DeepSeek-R1-Distill-Qwen-32B,
48 requests of 256-767 in / 64-191 out at 8 req/s, Poisson, seed 0).

For each count of observations it times a cold fit (two local searches), then a warm one
started from the cold fit's factors with one more observation (what the loop does after
a new trial), over --repeats runs, and prints the median and range of the wall time,
simulations run, the recovered bandwidth factor and the held-out (linearised
leave-one-out) median error per metric.

    .venv/bin/python benchmarks/calibration_fit.py [--counts 10,30,50] [--repeats 3]

Writes a Markdown table to stdout; the figures are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from tuner.sim.fit import Observation, SimWorkload, apply_factors, fit, predict
from tuner.sim.profiles import get_gpu, load_model
from tuner.workload.schedule import arrival_times

TRUTH = {"bandwidth": 0.75, "step_overhead": 2.0}


def workload(n: int = 48) -> SimWorkload:
    rng = np.random.default_rng(0)
    return SimWorkload(
        prompt_lens=tuple(int(x) for x in rng.integers(256, 768, n)),
        output_lens=tuple(int(x) for x in rng.integers(64, 192, n)),
        arrival_s=tuple(float(t) for t in arrival_times(n, 8.0, 1.0, 0)),
    )


def observations(count: int, model, truth, work) -> list[Observation]:
    rng = np.random.default_rng(1)
    out: list[Observation] = []
    while len(out) < count:
        flags = {
            "tensor-parallel-size": 4,
            "max-model-len": 8192,
            "max-num-seqs": round(math.exp(rng.uniform(math.log(8), math.log(256)))),
            "max-num-batched-tokens": round(math.exp(rng.uniform(math.log(512), math.log(16384)))),
            "gpu-memory-utilization": float(rng.choice([0.8, 0.85, 0.9, 0.95])),
        }
        figures = predict(model, truth, flags, work)
        if figures:
            out.append(Observation(flags, figures, len(out)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="10,30,50")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, base = load_model("deepseek-r1-distill-qwen-32b"), get_gpu("a6000")
    truth, work = apply_factors(base, TRUTH), workload()
    print("SIMULATED trials (hidden truth: A6000 bandwidth x0.75, step overhead x2)\n")
    print(
        "| observations given (fitted) | fit | wall s median (min-max) | simulations "
        "| bandwidth factor | held-out TTFT / TPOT / throughput |"
    )
    print("| ---: | --- | ---: | ---: | ---: | --- |")
    for count in (int(c) for c in args.counts.split(",")):
        obs = observations(count + 1, model, truth, work)
        cold = fit(base, obs[:count], model=model, workload=work)
        for kind in ("cold", "warm"):
            times, cal = [], cold
            for _ in range(args.repeats):
                started = time.perf_counter()
                if kind == "cold":
                    cal = fit(base, obs[:count], model=model, workload=work)
                else:
                    cal = fit(base, obs, model=model, workload=work, start=cold.factors)
                times.append(time.perf_counter() - started)
            errors = " / ".join(f"{100 * cal.held_out_error[m]:.1f} %" for m in cal.metrics)
            print(
                f"| {count + (kind == 'warm')} ({cal.observations}) | {kind} "
                f"| {statistics.median(times):.2f} ({min(times):.2f}-{max(times):.2f}) "
                f"| {cal.evaluations} "
                f"| {cal.factors['bandwidth']:.3f} | {errors} |"
            )


if __name__ == "__main__":
    main()
