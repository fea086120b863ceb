"""Early stopping in `tuner plan` (simulated): engine time saved, best score kept, false stops.

For each workload and seed, one 40-trial TPE study over search_spaces/vllm-core.yaml
(4×A6000, DeepSeek-R1-Distill-Qwen-32B, TP=4; max-num-seqs from 2 so that hopeless configs
exist) runs three times in virtual time: with early stopping, with early stopping but without
its "stop only when it pays" rule (`pruning.min_saving` 0, as before issue 22), and without
early stopping. Reported per workload, summed over seeds:

- engine time (modelled start-up + workload, `engine_s`) of each, and the saving;
- the best feasible score each found (lower is better; relative to the same baseline);
- false stops: stopped trials whose *full* run (re-simulated without stopping) would have
  been feasible and better than the best feasible score at the time they were stopped;
- late stops: stopped trials stopped in the last 20 % of their full run's workload time.

Every figure is SIMULATED. The default run is small for a 2-core box; the full one (10 seeds)
can run one workload per process and be summed up afterwards:

    .venv/bin/python benchmarks/early_stopping.py [--seeds 2] [--trials 40] [--requests 100]
    .venv/bin/python benchmarks/early_stopping.py --no-late-rule-run   # skip the third study
    .venv/bin/python benchmarks/early_stopping.py --workload long-output --seeds 10 --json lo.json
    .venv/bin/python benchmarks/early_stopping.py --summarize chat.json burst.json lo.json

The simulator is deterministic, so within one process a config is simulated once
(`memo_simulate`): the run without stopping, the run with it and the full re-runs of stopped
configs share results; the studies live on /dev/shm when it exists (SQLite commits, not the
simulator, dominate otherwise on a busy disk). Neither changes a figure.

Quality is compared on the score (a sum of weighted log-ratios, docs/objective.md): a score
difference d means the weighted geometric mean of the metric ratios differs by exp(d) - 1, so
"within 1 %" is |d| <= ln 1.01 = 0.00995.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import optuna
import yaml

import tuner.sim.planner
from tuner import trial as tr
from tuner.measure import objective as obj
from tuner.run.session import RunOptions, run_study
from tuner.runners.plan import PlanRunner
from tuner.runners.trial_runner import TrialContext
from tuner.spec.study import StudySpec
from tuner.store.storage import Store

REPO = Path(__file__).resolve().parent.parent
WORKLOADS = {
    "chat": (
        {"random_input_len": 512, "random_output_len": 128, "request_rate": 8},
        ["p99_ttft_ms<=2000"],
    ),
    "burst": (  # about 3.5 × what the baseline serves: every config queues, the SLO is loose
        {"random_input_len": 512, "random_output_len": 64, "request_rate": 24},
        ["p99_ttft_ms<=10000"],
    ),
    "long-output": (  # the heavy one: long outputs at a loading rate
        {"random_input_len": 256, "random_output_len": 1024, "request_rate": 8},
        ["p99_ttft_ms<=5000", "mean_tpot_ms<=100"],
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


_simulate = tuner.sim.planner.simulate
_memo: dict = {}


def memo_simulate(model, gpu, flags, prompt_lens, output_lens, arrival_s, **kw):  # type: ignore[no-untyped-def]
    """`tuner.sim.planner.simulate`, remembered: it is a pure function of its arguments (a
    refusal is remembered too)."""
    key = (
        str(model),
        str(gpu),
        tuple(sorted((k, str(v)) for k, v in flags.items())),
        tuple(prompt_lens),
        tuple(output_lens),
        tuple(arrival_s),
        tuple(sorted(kw.items())),
    )
    if key not in _memo:
        try:
            _memo[key] = _simulate(model, gpu, flags, prompt_lens, output_lens, arrival_s, **kw)
        except Exception as exc:  # EngineRefused: the same refusal every time
            _memo[key] = exc
    if isinstance(_memo[key], Exception):
        raise _memo[key]
    return _memo[key]


tuner.sim.planner.simulate = memo_simulate  # PlanRunner imports it at each call


def one(spec: StudySpec, pruning: bool, db: Path, runner: PlanRunner) -> dict:
    store = Store(f"sqlite:///{db}")
    runner = runner.with_spec(spec, runner.built())  # same workload; `min_saving` may differ
    # early stopping alone (prediction skips: benchmarks/night_saving.py)
    options = RunOptions(pruning=pruning, prediction_skip=False, check_robustness=False)
    summary = run_study(spec, store, lambda _: runner, options).summary
    points = tr.read_all(store.load_study(f"{spec.name}-simulated").get_trials())
    top = tr.best(points)
    false_stops, late, shares = 0, 0, []
    ref = next((p for p in points if p.baseline and p.measured), None)
    for p in points:
        if p.status != "pruned" or ref is None or p.record.reused_from is not None:
            continue
        # Its full run, re-simulated without stopping: would it have been the best so far?
        before = tr.best([q for q in points if q.number < p.number])
        m = runner.measure(TrialContext(spec.name, p.number, p.params, lambda s: None))
        if m.metrics is None:
            continue
        share = (p.record.pruned_at_s or 0.0) / m.workload_s if m.workload_s else 0.0
        shares.append(share)
        late += share > 0.8
        total = m.metrics.get("completed", 0) + m.metrics.get("failed", 0)
        failed = m.metrics.get("failed", 0) / total if total else 1.0
        cons = obj.constraints(spec.objective, m.metrics, failed_fraction=failed)
        full = obj.score(m.metrics, ref.metrics, spec.objective.weights)
        if all(v <= 0 for v in cons.values()) and (before is None or full < before.score):
            false_stops += 1
    store.close()
    return {
        "engine_s": summary.engine_s,
        "best": top.score if top else None,
        "feasible": sum(p.status == "feasible" for p in points),
        "pruned": sum(p.status == "pruned" for p in points),
        "launched_pruned": sum(
            p.status == "pruned" and p.record.reused_from is None for p in points
        ),
        "false": false_stops,
        "late": late,
        "latest_share": max(shares, default=None),
        "startup_s": summary.startup_s,
    }


def run_pair(name: str, seed: int, requests: int, trials: int, tmp: Path, late: bool) -> dict:
    _memo.clear()  # another seed: other arrival times, no hits; keep memory flat
    spec = spec_for(name, seed, requests, trials)
    runner = PlanRunner(spec)  # its workload (tokenizer, requests) is built once
    runner.prepare()
    off = one(spec, False, tmp / f"{name}-{seed}-off.db", runner)
    on = one(spec, True, tmp / f"{name}-{seed}-on.db", runner)
    out = {"workload": name, "seed": seed, "off": off, "on": on}
    if late:  # as before issue 22: stops at any point of the run
        pruning = spec.pruning.model_copy(update={"min_saving": 0.0})
        spec0 = spec.model_copy(update={"pruning": pruning})
        out["on0"] = one(spec0, True, tmp / f"{name}-{seed}-on0.db", runner)
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}"


def row(r: dict) -> str:
    off, on = r["off"], r["on"]
    on0 = r.get("on0") or {}
    saved = 1 - on["engine_s"] / off["engine_s"] if off["engine_s"] else 0.0
    e0 = f"{on0['engine_s']:.0f}" if on0 else "-"
    share = f"{on['startup_s'] / on['engine_s']:.0%}" if on.get("startup_s") else "-"
    return (
        f"| {r['workload']} | {r['seed']} | {off['engine_s']:.0f} | {on['engine_s']:.0f} | "
        f"{e0} | {saved:.0%} | {share} | {_fmt(off['best'])} | {_fmt(on['best'])} | "
        f"{_fmt(on0.get('best'))} | {on['launched_pruned']} ({_late(on)}) | "
        f"{on0.get('launched_pruned', '-')} ({_late(on0)}) | {on['false']} |"
    )


def _late(result: dict) -> str:
    """Late stops (in the last 20 % of the full run), and the latest stop's share of it."""
    if not result or "late" not in result:
        return "-"
    latest = result.get("latest_share")
    return f"{result['late']} late" + (f", latest {latest:.0%}" if latest is not None else "")


def _sum(rows: list[dict], run: str, key: str) -> str:
    found = [r[run][key] for r in rows if key in (r.get(run) or {})]
    return f"{sum(found):.0f}" if found else "-"


def summarize(rows: list[dict]) -> str:
    """Per workload: engine time summed over seeds and the saving's spread over seeds; the
    median best score without and with; false stops; all SIMULATED."""
    out = [
        "| workload | seeds | engine s without | engine s with | saved (sum) | saved per seed: "
        "median [min, max] | median best without | median best with | difference | "
        "stopped | false stops | engine s with, no 20 % rule | late stops: with / no rule |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in dict.fromkeys(r["workload"] for r in rows):
        rs = [r for r in rows if r["workload"] == name]
        off = sum(r["off"]["engine_s"] for r in rs)
        on = sum(r["on"]["engine_s"] for r in rs)
        per = [1 - r["on"]["engine_s"] / r["off"]["engine_s"] for r in rs]
        b_off = [r["off"]["best"] for r in rs if r["off"]["best"] is not None]
        b_on = [r["on"]["best"] for r in rs if r["on"]["best"] is not None]
        m_off = statistics.median(b_off) if b_off else None
        m_on = statistics.median(b_on) if b_on else None
        diff = (
            "-"
            if m_off is None or m_on is None
            else f"{m_on - m_off:+.4f} ({math.expm1(m_on - m_off):+.2%})"
        )
        out.append(
            f"| {name} | {len(rs)} | {off:.0f} | {on:.0f} | {1 - on / off:.0%} | "
            f"{statistics.median(per):.0%} [{min(per):.0%}, {max(per):.0%}] | {_fmt(m_off)} "
            f"({len(b_off)} found) | {_fmt(m_on)} ({len(b_on)} found) | {diff} | "
            f"{sum(r['on']['launched_pruned'] for r in rs)} | {sum(r['on']['false'] for r in rs)} |"
            f" {_sum(rs, 'on0', 'engine_s')} | {_sum(rs, 'on', 'late')} / "
            f"{_sum(rs, 'on0', 'late')} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    ap.add_argument("--json", type=Path, help="also write every row here")
    ap.add_argument("--summarize", type=Path, nargs="+", help="only sum up these --json files")
    ap.add_argument(
        "--no-late-rule-run", action="store_true", help="skip the study without min_saving"
    )
    args = ap.parse_args()
    if args.summarize:
        rows = [r for f in args.summarize for r in json.loads(f.read_text())]
        print("SIMULATED (tuner plan)\n")
        print("\n".join([HEADER, *(row(r) for r in rows)]))
        print("\n" + summarize(rows))
        return
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.monotonic()
    seeds = range(args.seed_start, args.seed_start + args.seeds)
    print(
        f"SIMULATED (tuner plan): {args.trials}-trial TPE studies, {args.requests} requests, "
        f"seeds {seeds.start}..{seeds.stop - 1}\n"
    )
    print(HEADER)
    rows = []
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        for name in args.workload or WORKLOADS:
            for seed in seeds:
                late = not args.no_late_rule_run
                rows.append(run_pair(name, seed, args.requests, args.trials, Path(tmp), late))
                print(row(rows[-1]), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=1))
    print("\n" + summarize(rows))
    print(f"\nwall time {time.monotonic() - t0:.0f} s")


HEADER = (
    "| workload | seed | engine s without | engine s with | engine s with, no 20 % rule | "
    "saved | start-up share (with) | best without | best with | best with, no 20 % rule | "
    "stopped (late) | stopped, no 20 % rule (late) | false stops |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)

if __name__ == "__main__":
    main()
