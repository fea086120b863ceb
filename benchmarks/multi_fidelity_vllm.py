"""`fidelity: multi` at 5 real trials against the best of a 20-trial TPE study, on real vLLM.

The engine is vLLM's CPU build with the tiny dummy model (`studies/cpu-tiny.yaml` as shipped:
its workload, its space, its `cpu` profile, the server pinned to one core and the client to
the other). Per sampler seed, two studies run back to back in alternating order (so drift of
the box's load falls on both): **multi** (`search.fidelity: multi`, the screen calibrated
inside the loop from the first real trial) for `--multi-trials`, and **tpe** (plain TPE) for
`--tpe-trials`; early stopping and prediction skips off in both, so each trial is a full
measurement. Trials refused by vLLM's rules count against the budget, as in `tuner run`.

A study's best is chosen on one noisy measurement each, so the best of 20 is flattered by
its luck (the winner's curse) more than the best of 5. The **judge** re-measures, per seed,
vLLM's defaults and the two bests on fresh engines, `--judge-rounds` rounds in rotating order,
and scores each config against the judge's own baseline (its median metrics): that is the
gap the note states. Gap = multi − tpe in score units (lower is better; 0.01 ≈ 1 % on one
weight-1 metric). Needs `make vllm-env model`. Measured, not simulated.

    .venv/bin/python benchmarks/multi_fidelity_vllm.py --seeds 3 --json mf-vllm.json

`--factors` judges instead vLLM's defaults against one change at a time (what the studies'
bests shared: block size 32, a 2 GiB KV cache, both, chunked prefill off; and the two batch
limits, a smaller token budget or 16 sequences), the same way: fresh engines, rotating order,
scores against the defaults' median, with a Mann-Whitney p against the defaults' own runs
and what the `cpu` profile predicts (`--predict-only`: that alone, no engine).

    .venv/bin/python benchmarks/multi_fidelity_vllm.py --factors --judge-rounds 3
    .venv/bin/python benchmarks/multi_fidelity_vllm.py --factors --judge-rounds 8 \\
        --only "block-size 32, KV 2 GiB"
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from tuner.measure.objective import score
from tuner.run.session import RunOptions, engine_runners, first_runner, run_study
from tuner.runners.trial_runner import TrialContext
from tuner.spec.space import baseline_params
from tuner.spec.study import StudySpec, load_study_spec
from tuner.store.storage import Store
from tuner_testing import REPO

METRICS = ("p99_ttft_ms", "mean_tpot_ms", "output_throughput")


def study_file(method: str, seed: int, tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "studies" / "cpu-tiny.yaml").read_text())
    data["name"] = f"{method}-{seed}"
    data["search_space"] = str(REPO / "search_spaces" / "cpu-tiny.yaml")
    engine = data["engine"]
    engine["command"] = [str(REPO / ".venv-vllm" / "bin" / "python"), *engine["command"][1:]]
    engine["model"] = str(REPO / ".cache" / "tiny-qwen2")
    engine["env"] = {**engine.get("env", {}), "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
    data["sampler"] = {"name": "tpe", "seed": seed}
    data["search"] = {"fidelity": "multi" if method == "multi" else "single"}
    data["pruning"] = {"enabled": False}
    path = tmp / f"{method}-{seed}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(method: str, seed: int, trials: int, tmp: Path) -> dict[str, Any]:
    spec = load_study_spec(study_file(method, seed, tmp))
    store = Store(f"sqlite:///{tmp}/{method}-{seed}.db")
    make = engine_runners(spec, tmp / "runs", None)
    options = RunOptions(
        n_trials=trials, pruning=False, prediction_skip=False, check_robustness=False
    )
    t0 = time.perf_counter()
    result = run_study(spec, store, make, options, runner=first_runner(spec, make, options))
    wall_s = time.perf_counter() - t0
    points = sorted(result.points, key=lambda p: p.number)
    best = result.best
    launched = [p for p in points if p.record.engine_s]
    return {
        "method": method,
        "seed": seed,
        "trials": len(points),
        "launched": len(launched),
        "engine_s": sum(p.record.engine_s or 0.0 for p in points),
        "wall_s": wall_s,
        "best_score": best.score if best else None,
        "best_number": best.number if best else None,
        "best_params": dict(best.params) if best else None,
        "curve": _curve(points),
    }


def _curve(points: list) -> list[float]:
    out, best = [], 0.0
    for p in points:
        if p.feasible and p.score is not None:
            best = min(best, p.score)
        out.append(best)
    return out


def judge(spec: StudySpec, configs: dict[str, dict], rounds: int, tmp: Path) -> dict[str, Any]:
    """Re-measure each config `rounds` times on fresh engines, rotating the order each round;
    score every run against the median of the baseline's runs."""
    runner = first_runner(spec, engine_runners(spec, tmp / "judge-runs", None))
    names = list(configs)
    runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    try:
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                ctx = TrialContext("judge", r, configs[name], lambda _: None)
                m = runner.measure(ctx)
                if m.metrics:
                    runs[name].append({k: m.metrics[k] for k in METRICS})
    finally:
        runner.close()
    base = {k: statistics.median(run[k] for run in runs["baseline"]) for k in METRICS}
    weights = spec.objective.weights
    return {
        name: {
            "scores": [score(run, base, weights) for run in rs],
            "median_metrics": {k: statistics.median(run[k] for run in rs) for k in METRICS}
            if rs
            else None,
        }
        for name, rs in runs.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--multi-trials", type=int, default=5)
    ap.add_argument("--tpe-trials", type=int, default=20)
    ap.add_argument("--judge-rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--factors", action="store_true", help="judge one change at a time")
    ap.add_argument(
        "--only", nargs="+", choices=sorted(FACTORS), help="with --factors: these changes only"
    )
    ap.add_argument(
        "--predict-only", action="store_true", help="with --factors: the simulator's figures only"
    )
    args = ap.parse_args()
    if args.factors:
        factors(args.judge_rounds, args.only or list(FACTORS), args.predict_only)
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for seed in range(args.seeds):
            order = ["multi", "tpe"] if seed % 2 == 0 else ["tpe", "multi"]
            studies = {}
            for method in order:
                n = args.multi_trials if method == "multi" else args.tpe_trials
                studies[method] = run(method, seed, n, tmp)
                print(json.dumps({k: v for k, v in studies[method].items() if k != "curve"}))
            spec = load_study_spec(study_file("judge", seed, tmp))
            configs = {"baseline": baseline_params(spec.search_space)}
            for method in ("multi", "tpe"):
                configs[method] = studies[method]["best_params"] or configs["baseline"]
            verdict = judge(spec, configs, args.judge_rounds, tmp)
            row = {"seed": seed, "studies": studies, "judge": verdict}
            rows.append(row)
            print(json.dumps({"seed": seed, "judge": verdict}), flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    summarize(rows, args)


FACTORS = {
    "block-size 32": {"block-size": 32},
    "KV 2 GiB": {"VLLM_CPU_KVCACHE_SPACE": 2},
    "block-size 32, KV 2 GiB": {"block-size": 32, "VLLM_CPU_KVCACHE_SPACE": 2},
    "chunked prefill off": {"enable-chunked-prefill": False},
    "max-num-batched-tokens 512": {"max-num-batched-tokens": 512},
    "max-num-batched-tokens 256": {"max-num-batched-tokens": 256},
    "max-num-seqs 16": {"max-num-seqs": 16},
}


def factors(rounds: int, names: list[str], predict_only: bool = False) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        spec = load_study_spec(study_file("factors", 0, tmp))
        base = baseline_params(spec.search_space)
        configs = {"baseline": base, **{k: {**base, **FACTORS[k]} for k in names}}
        predicted = predictions(spec, configs)
        if predict_only:
            for name, (s, m) in predicted.items():
                figures = ", ".join(f"{k} {m[k]:.2f}" for k in METRICS)
                print(f"{name}: predicted {s:+.3f} ({figures}; SIMULATED, `cpu` profile)")
            return
        verdict = judge(spec, configs, rounds, tmp)
    print(json.dumps(verdict))
    from scipy.stats import mannwhitneyu

    print(
        "| config | score per run (vs the defaults' median) | median | p, against the defaults' "
        "runs | predicted (SIMULATED) | p99 TTFT ms | mean TPOT ms | output tok/s |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, v in verdict.items():
        m = v["median_metrics"] or {}
        runs = ", ".join(f"{x:+.2f}" for x in v["scores"])
        p = mannwhitneyu(v["scores"], verdict["baseline"]["scores"]).pvalue
        print(
            f"| {name} | {runs} | {statistics.median(v['scores']):+.2f} | {p:.2f} | "
            f"{predicted[name][0]:+.3f} | {m.get('p99_ttft_ms', 0):.1f} | "
            f"{m.get('mean_tpot_ms', 0):.2f} | {m.get('output_throughput', 0):.0f} |"
        )


def predictions(spec: StudySpec, configs: dict[str, dict]) -> dict[str, tuple[float, dict]]:
    """The study's `cpu` profile, uncalibrated: each config's score against the defaults'
    prediction, and its predicted metrics."""
    from tuner.fidelity.robustness import simulated
    from tuner.runners.plan import PlanRunner

    runner = PlanRunner(spec)
    out: dict[str, dict] = {}
    for name, params in configs.items():
        m = simulated(runner, params)
        out[name] = m.metrics if m is not None else {}
    base = out["baseline"]
    return {n: (score(m, base, spec.objective.weights), m) for n, m in out.items()}


def summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(
        "| seed | multi: launched / trials | tpe: launched / trials | in-study best multi "
        "| in-study best tpe | judged multi | judged tpe | judged gap (multi − tpe) |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    gaps = []
    for row in rows:
        m, t, j = row["studies"]["multi"], row["studies"]["tpe"], row["judge"]
        jm = statistics.median(j["multi"]["scores"])
        jt = statistics.median(j["tpe"]["scores"])
        gaps.append(jm - jt)
        print(
            f"| {row['seed']} | {m['launched']} / {m['trials']} | {t['launched']} / "
            f"{t['trials']} | {m['best_score']:+.4f} | {t['best_score']:+.4f} | {jm:+.4f} | "
            f"{jt:+.4f} | {jm - jt:+.4f} |"
        )
    if gaps:
        print(
            f"judged gap, median of {len(gaps)} seeds: {statistics.median(gaps):+.4f} "
            f"[{min(gaps):+.4f}, {max(gaps):+.4f}] (MEASURED on vLLM's CPU build, "
            f"{args.multi_trials} vs {args.tpe_trials} trials)"
        )


if __name__ == "__main__":
    main()
