"""Early stopping in `tuner plan` (simulated): engine time saved, best score kept, false stops.

For each workload and seed, one 40-trial TPE study over search_spaces/vllm-core.yaml
(4×A6000, DeepSeek-R1-Distill-Qwen-32B, TP=4; max-num-seqs from 2 so that hopeless configs
exist) runs twice in virtual time: with early stopping and without. Reported per workload,
summed over seeds:

- engine time (modelled start-up + workload, `engine_s`) with and without, and the saving;
- the best feasible score each found (lower is better; relative to the same baseline);
- false stops: stopped trials whose *full* run (re-simulated without stopping) would have
  been feasible and better than the best feasible score at the time they were stopped.

Every figure is SIMULATED. The default run is small for a 2-core box:

    .venv/bin/python benchmarks/early_stopping.py [--seeds 2] [--trials 40] [--requests 100]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import optuna
import yaml

from tuner import objective as obj
from tuner import trials as tr
from tuner.config import StudySpec
from tuner.runner import PlanRunner, TrialContext
from tuner.store import Store
from tuner.study import StudyLoop

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "chat": (
        {"random_input_len": 512, "random_output_len": 128, "request_rate": 8},
        ["p99_ttft_ms<=2000"],
    ),
    "burst": (
        {"random_input_len": 1024, "random_output_len": 64, "request_rate": 32},
        ["p99_ttft_ms<=8000"],
    ),
    "long-output": (
        {"random_input_len": 256, "random_output_len": 1024, "request_rate": 4},
        ["p99_ttft_ms<=3000", "mean_tpot_ms<=80"],
    ),
}


def spec_for(workload: str, seed: int, requests: int, trials: int) -> StudySpec:
    space = yaml.safe_load((REPO / "search_spaces" / "vllm-core.yaml").read_text())
    space["parameters"]["max-num-seqs"]["low"] = 2
    wl, slo = WORKLOADS[workload]
    return StudySpec.model_validate(
        {
            "name": f"es-{workload}-{seed}",
            "engine": {
                "model": "deepseek-r1-distill-qwen-32b",
                "flags": {"tensor-parallel-size": 4, "max-model-len": 8192},
            },
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": space,
            "workload": {
                "tokenizer": str(REPO / ".cache" / "tiny-qwen2"),
                "num_prompts": requests,
                "seed": seed,
                **wl,
            },
            "objective": {"slo": slo},
            "budget": {"n_trials": trials},
            "sampler": {"name": "tpe", "seed": seed},
        }
    )


def one(spec: StudySpec, pruning: bool, db: Path) -> dict:
    store = Store(f"sqlite:///{db}")
    runner = PlanRunner(spec)
    summary = StudyLoop(spec, store, runner, pruning=pruning).run()
    points = tr.read_all(store.load_study(f"{spec.name}-simulated").get_trials())
    top = tr.best(points)
    false_stops = 0
    ref = next((p for p in points if p.baseline and p.measured), None)
    for p in points:
        if p.status != "pruned" or ref is None:
            continue
        before = tr.best([q for q in points if q.number < p.number])
        m = runner.measure(TrialContext(spec.name, p.number, p.params, lambda s: None))
        if m.metrics is None or before is None:
            continue
        cons = obj.constraints(spec.objective, m.metrics)
        full = obj.score(m.metrics, ref.metrics, spec.objective.weights)
        if all(v <= 0 for v in cons.values()) and full < before.score:
            false_stops += 1
    store.close()
    return {
        "engine_s": summary.engine_s,
        "best": top.score if top else None,
        "pruned": sum(p.status == "pruned" for p in points),
        "false": false_stops,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--requests", type=int, default=100)
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.monotonic()
    print(
        f"SIMULATED (tuner plan): {args.trials}-trial TPE studies, {args.requests} requests, "
        f"seeds 0..{args.seeds - 1}\n"
    )
    print(
        "| workload | seed | engine s without | engine s with | saved | best without | "
        "best with | stopped | false stops |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in WORKLOADS:
            for seed in range(args.seeds):
                spec = spec_for(name, seed, args.requests, args.trials)
                off = one(spec, False, Path(tmp) / f"{name}-{seed}-off.db")
                on = one(spec, True, Path(tmp) / f"{name}-{seed}-on.db")
                saved = 1 - on["engine_s"] / off["engine_s"] if off["engine_s"] else 0.0

                def fmt(x: float | None) -> str:
                    return "-" if x is None else f"{x:+.3f}"

                print(
                    f"| {name} | {seed} | {off['engine_s']:.0f} | {on['engine_s']:.0f} | "
                    f"{saved:.0%} | {fmt(off['best'])} | {fmt(on['best'])} | {on['pruned']} | "
                    f"{on['false']} |",
                    flush=True,
                )
    print(f"\nwall time {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
