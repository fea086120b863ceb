"""Deciding earlier (issue 22 §1): how much of an SLO-breaking run early stopping lets run
before it stops it, with rule (c) (queue growth + the engine's gauges) and without it.

Planner traces (4×A6000, DeepSeek-R1-Distill-Qwen-32B, TP=4) over a grid of configs
(max-num-seqs 1..256, max-num-batched-tokens 512 / 8192), workloads (Poisson 4, 12, 30 req/s,
bursty, all at once; fixed 512/128 and varied lengths) and SLOs (P50 / P90 / P99 TTFT at
1, 4 and 16 s). Each run is replayed at checkpoints every `--every` virtual seconds, as
`tuner plan` does (`tuner.measure.pruning.replay`, with the engine's state a `/metrics`
scrape would have read). Reported, over the (trace, SLO) pairs whose full run breaks the
SLO: the fraction of the run's workload time before the stop (1.0: never stopped), its
median and quartiles, and how many were stopped in the first quarter; over the pairs whose
full run meets the SLO: false stops (must be 0). Every figure is SIMULATED.

    .venv/bin/python benchmarks/early_decision.py [--requests 64] [--every 1.0]
    .venv/bin/python benchmarks/early_decision.py --safety-sweep   # the assumption's margin

`--safety-sweep`: over the same traces, at every 0.5 s checkpoint, how often the queue-growth
bound on P50 / P99 TTFT (`tuner.measure.backlog`) exceeds the run's final value with the
assumed admission factor (`backlog.ADMIT_SAFETY`) at 2, 1.5, 1.25 and 1.
"""

from __future__ import annotations

import argparse

import numpy as np

from tuner.measure import backlog
from tuner.measure.pruning import EngineSample, Rule, decide, replay
from tuner.sim.planner import simulate
from tuner.spec.slo import parse_slo
from tuner.workload.schedule import arrival_times

MODEL, GPU = "deepseek-r1-distill-qwen-32b", "a6000"
BASE = {"tensor-parallel-size": 4, "max-model-len": 8192, "gpu-memory-utilization": 0.9}
RATES = ((4.0, 1.0), (12.0, 1.0), (30.0, 0.5), (float("inf"), 1.0))
SLOS = [f"p{q}_ttft_ms<={s}" for q in (50, 90, 99) for s in (1000, 4000, 16000)]


def traces(n: int):
    rng = np.random.default_rng(0)
    shapes = {
        "512/128": ([512] * n, [128] * n),
        "varied": (list(rng.integers(64, 4000, n)), list(rng.integers(8, 400, n))),
    }
    for rate, burstiness in RATES:
        arrivals = [float(t) for t in arrival_times(n, rate, burstiness, 0)]
        for shape, (prompts, outs) in shapes.items():
            for seqs in (1, 2, 4, 16, 64, 256):
                for mbt in (512, 8192):
                    flags = {**BASE, "max-num-seqs": seqs, "max-num-batched-tokens": max(mbt, seqs)}
                    sim = simulate(MODEL, GPU, flags, prompts, outs, arrivals)
                    engine = [EngineSample(*row) for row in sim.engine_trace]
                    yield (rate, shape, seqs, mbt), sim, engine


def stop_fraction(sim, engine, slo, backlog: bool, every_s: float) -> float:
    arrivals = sorted(r.start_s for r in sim.records)
    rule = Rule(slos=slo, backlog=backlog)
    for t, snap in replay(sim.records, every_s, None, engine, arrivals_s=arrivals):
        if decide(snap, rule).stop:
            return t / sim.duration_s
    return 1.0


def safety_sweep(n: int) -> None:
    runs = [(sim, engine) for _, sim, engine in traces(n)]
    print(f"SIMULATED, {len(runs)} planner traces, {n} requests a run, checkpoints every 0.5 s")
    print("| ADMIT_SAFETY | checks | bound above the final value | worst final / bound |")
    print("|---|---|---|---|")
    for safety in (2.0, 1.5, 1.25, 1.0):
        backlog.ADMIT_SAFETY = safety
        checks = over = 0
        worst = np.inf
        for sim, engine in runs:
            ttfts = [r.ttft_s * 1000 for r in sim.records if r.success]
            arrivals = sorted(r.start_s for r in sim.records)
            for _, snap in replay(sim.records, 0.5, None, engine, arrivals_s=arrivals):
                for q in (50, 99):
                    bound = backlog.percentile_bound_ms(snap, "ttft", q)
                    if not bound:
                        continue
                    final = float(np.percentile(ttfts, q))
                    checks += 1
                    over += bound > final + 1e-6
                    worst = min(worst, final / bound)
        print(f"| {safety:g} | {checks} | {over} | {worst:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--every", type=float, default=1.0, help="checkpoint period (virtual s)")
    ap.add_argument("--safety-sweep", action="store_true", help="the assumption's margin")
    args = ap.parse_args()
    if args.safety_sweep:
        safety_sweep(args.requests)
        return
    fractions: dict[bool, list[float]] = {False: [], True: []}
    false_stops = {False: 0, True: 0}
    met_pairs = 0
    for _, sim, engine in traces(args.requests):
        ttfts = [r.ttft_s * 1000 for r in sim.records if r.success]
        for text in SLOS:
            slo = parse_slo(text)
            q = float(slo[0].metric.split("_")[0][1:])
            met = np.percentile(ttfts, q) <= slo[0].value
            met_pairs += met
            for on in (False, True):
                f = stop_fraction(sim, engine, slo, on, args.every)
                if met:
                    false_stops[on] += f < 1.0
                else:
                    fractions[on].append(f)
    broken = len(fractions[True])
    print(f"SIMULATED, planner traces: {broken} SLO-breaking (config, workload, SLO) pairs, ")
    print(
        f"{met_pairs} that meet their SLO; checkpoints every {args.every:g} s; "
        f"{args.requests} requests a run"
    )
    print(
        "| rule | median fraction run | quartiles | stopped in first 25 % | never stopped ", end=""
    )
    print("| false stops |")
    print("|---|---|---|---|---|---|")
    for on, name in ((False, "(a)+(b) (before)"), (True, "(a)+(b)+(c) queue growth (after)")):
        f = np.array(fractions[on])
        q1, q2, q3 = np.percentile(f, [25, 50, 75])
        print(
            f"| {name} | {q2:.2f} | {q1:.2f}-{q3:.2f} | {(f <= 0.25).sum()} of {len(f)} "
            f"| {(f >= 1.0).sum()} | {false_stops[on]} of {met_pairs} |"
        )


if __name__ == "__main__":
    main()
