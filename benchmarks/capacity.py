"""Capacity mode (SIMULATED, `tuner plan`'s engine): accuracy of the rate search, and the seed case.

Part 1, accuracy. For several configs of the simulated 4×A6000 (DeepSeek-R1-Distill-Qwen-32B,
TP=4), the capacity the search finds (`objective.mode: capacity`, resolution 5 %, at most 8
runs) against a dense sweep of the same simulated engine: a rate grid 2 % apart over
[0.79×, 1.24×] of the found capacity, plus a coarse grid (35 rates, about 25 % apart) from
0.1 to 200 req/s to catch a feasible rate far away. The sweep's capacity is the highest
grid rate meeting every SLO. Reported: found, swept, the error, the runs each took.

Part 2, the seed case. `tuner plan` of studies/a6000x4-r1-distill-qwen-32b-longdoc.yaml (the
long-document mix) and of a ShareGPT-like mix (random, 256 ± 90 % in, 256 ± 90 % out: no
ShareGPT file is here), each a TPE study in capacity mode. Then vLLM's defaults and the best
config are re-searched under workload seeds 1..K (other requests, other arrivals): the
capacity of each, median and range over seeds.

    .venv/bin/python benchmarks/capacity.py [--quick] [--trials 16] [--seeds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna
import yaml

from tuner import trial as tr
from tuner.measure import capacity
from tuner.run.session import RunOptions, run_study
from tuner.runners.plan import PlanRunner
from tuner.runners.trial_runner import TrialContext
from tuner.spec.study import StudySpec
from tuner.store.storage import Store

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = str(REPO / ".cache" / "tiny-qwen2")
CHAT_SLO = ["p99_ttft_ms<=2000", "mean_tpot_ms<=80"]
CONFIGS = {
    "defaults": {},
    "seqs 32": {"max-num-seqs": 32},
    "seqs 64, mbt 8192": {"max-num-seqs": 64, "max-num-batched-tokens": 8192},
    "mbt 512": {"max-num-batched-tokens": 512},
    "gmu 0.8, seqs 128": {"gpu-memory-utilization": 0.8, "max-num-seqs": 128},
}


def _space() -> dict:
    return yaml.safe_load((REPO / "search_spaces" / "vllm-core.yaml").read_text())


def chat_spec(requests: int, seed: int = 0, mode: str = "capacity", rate: float = 4.0) -> StudySpec:
    return StudySpec.model_validate(
        {
            "name": f"cap-chat-{seed}",
            "engine": {
                "model": "deepseek-r1-distill-qwen-32b",
                "flags": {"tensor-parallel-size": 4, "max-model-len": 65536},
            },
            "hardware": {"gpu": "a6000", "count": 4},
            "search_space": _space(),
            "workload": {
                "tokenizer": TOKENIZER,
                "random_input_len": 256,
                "random_output_len": 256,
                "random_range_ratio": 0.9,
                "num_prompts": requests,
                "request_rate": rate,
                "seed": seed,
            },
            "objective": {"mode": mode, "slo": CHAT_SLO},
            "pruning": {"enabled": False},
        }
    )


def _params(spec: StudySpec, change: dict) -> dict:
    base = {k: p.default for k, p in spec.search_space.parameters.items()}
    return {**base, **change}


def _ctx(spec: StudySpec, params: dict) -> TrialContext:
    return TrialContext(spec.name, 0, params, lambda text: None)


def feasible(runner: PlanRunner, requests: int, params: dict, rate: float) -> bool:
    """One fixed-rate run of the same simulated engine: did it meet every SLO? (The runner
    keeps its requests, which do not depend on the rate; only its spec's rate changes.)"""
    fixed = chat_spec(requests, mode="scalar", rate=rate)
    got = runner.with_spec(fixed, runner.built()).measure(_ctx(fixed, params))
    limit = fixed.objective.max_failed_fraction
    return got.metrics is not None and capacity.meets(
        got.metrics, fixed.slo_limits(), failed_fraction_max=limit
    )


def accuracy(requests: int) -> None:
    print("### Capacity found by the search against a dense rate sweep (SIMULATED)\n")
    print("| config | found req/s | runs | swept req/s | sweep runs | error |")
    print("| --- | --- | --- | --- | --- | --- |")
    errors, runs = [], []
    for label, change in CONFIGS.items():
        spec = chat_spec(requests)
        params = _params(spec, change)
        m = PlanRunner(spec).measure(_ctx(spec, params))
        assert m.capacity is not None, m.failure_reason
        found, n = m.capacity.capacity_rps, m.capacity.runs
        grid = sorted(
            {*np.geomspace(0.1, 200, 35), *(found * 1.02**k for k in range(-12, 12))}
            if found > 0
            else set(np.geomspace(0.1, 200, 35))
        )
        sweeper = PlanRunner(chat_spec(requests, mode="scalar"))
        sweeper.prepare()  # its requests, built once for every rate
        ok = [r for r in grid if feasible(sweeper, requests, params, float(r))]
        swept = max(ok, default=0.0)
        err = (found - swept) / swept if swept else float("nan")
        errors.append(abs(err))
        runs.append(n)
        print(
            f"| {label} | {found:.3f} | {n} | {swept:.3f} | {len(grid)} | {err:+.1%} |", flush=True
        )
    print(
        f"\nmedian |error| {statistics.median(errors):.1%}, max {max(errors):.1%}; "
        f"runs per search: median {statistics.median(runs)}, max {max(runs)}\n"
    )


def longdoc_spec(requests: int, trials: int) -> StudySpec:
    data = yaml.safe_load(
        (REPO / "studies" / "a6000x4-r1-distill-qwen-32b-longdoc.yaml").read_text()
    )
    data["search_space"] = _space()
    data["engine"]["model"] = "deepseek-r1-distill-qwen-32b"
    data["workload"].update(tokenizer=TOKENIZER, num_prompts=requests)
    data["budget"] = {"n_trials": trials}
    return StudySpec.model_validate(data)


def seed_case(name: str, spec: StudySpec, seeds: int, db: Path) -> None:
    store = Store(f"sqlite:///{db}")
    run_study(spec, store, lambda _: PlanRunner(spec), RunOptions(check_robustness=False))
    points = tr.read_all(store.load_study(f"{spec.name}-simulated").get_trials())
    store.close()
    base, top = tr.baseline_of(points), tr.best(points)
    assert base is not None and top is not None
    rows = {}
    for label, p in (("vLLM defaults", base), (f"best (trial {top.number})", top)):
        caps = []
        for seed in range(1, seeds + 1):
            other = spec.model_copy(
                update={"workload": spec.workload.model_copy(update={"seed": seed})}
            )
            m = PlanRunner(other).measure(_ctx(other, p.params))
            caps.append(m.capacity.capacity_rps if m.capacity else 0.0)
        rows[label] = (p.capacity_rps, caps, p.params)
    measured = sum(p.measured for p in points)
    print(f"#### {name}: {len(points)} trials ({measured} measured), SLOs {spec.objective.slo}\n")
    print("| config | capacity in the study | capacity, seeds 1..K: median [min, max] | flags |")
    print("| --- | --- | --- | --- |")
    for label, (cap, caps, params) in rows.items():
        flags = ", ".join(f"{k}={v}" for k, v in params.items())
        print(
            f"| {label} | {cap:.3f} | {statistics.median(caps):.3f} "
            f"[{min(caps):.3f}, {max(caps):.3f}] | {flags} |"
        )
    print(flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller workloads and studies")
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--part", choices=["accuracy", "seed", "both"], default="both")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.monotonic()
    requests = 60 if args.quick else 200
    print(f"SIMULATED (tuner plan's engine, virtual time); {requests} requests per run\n")
    if args.part in ("accuracy", "both"):
        accuracy(requests)
    if args.part in ("seed", "both"):
        trials = 6 if args.quick else args.trials
        doc_requests = 24 if args.quick else 64
        print(f"### Seed case: capacity of vLLM's defaults against the best of {trials} trials\n")
        with tempfile.TemporaryDirectory() as tmp:
            chat = chat_spec(requests).model_copy(
                update={
                    "budget": chat_spec(requests).budget.model_copy(update={"n_trials": trials})
                }
            )
            chat = chat.model_copy(
                update={"pruning": chat.pruning.model_copy(update={"enabled": True})}
            )
            seed_case(
                "ShareGPT-like mix (random 256±90 % in and out)",
                chat,
                args.seeds,
                Path(tmp) / "c.db",
            )
            seed_case(
                "long-document mix (longdoc 512/2k/8k/32k in, 1024 out)",
                longdoc_spec(doc_requests, trials),
                args.seeds,
                Path(tmp) / "d.db",
            )
    print(f"wall time {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
