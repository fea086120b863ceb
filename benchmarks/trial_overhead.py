"""The tuner's own cost per trial, outside engine start-up and the workload itself.

Runs a study of N trials on the simulated engine (real processes, HTTP, SQLite) and, per
measured trial, subtracts the engine's start-up (launch to ready) and the workload's wall
time from the trial's wall time. What is left is the tuner: asking the sampler, rule checks
and the memory precheck, spawning the engine, computing metrics and bootstrap intervals,
writing the per-request rows, telling Optuna, stopping the engine and waiting for its port.

    .venv/bin/python benchmarks/trial_overhead.py --trials 10
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

import optuna

from tuner_testing import TUNER, sim_study

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--num-prompts", type=int, default=200)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="tuner-overhead-"))
    study = sim_study(
        out,
        REPO / ".cache" / "tiny-qwen2",
        workload={"num_prompts": args.num_prompts, "request_rate": 50},
        budget={"n_trials": args.trials},
    )
    subprocess.run([*TUNER, "run", str(study)], cwd=out, check=True, capture_output=True)
    trials = optuna.load_study(study_name="e2e", storage=f"sqlite:///{out}/tuner.db").trials
    overhead_s = []
    for t in trials:
        a = t.user_attrs
        if "startup_s" not in a or a.get("startup_s") is None:
            continue
        wall = (t.datetime_complete - t.datetime_start).total_seconds()
        overhead_s.append(wall - a["startup_s"] - a["workload_s"])
    print(f"trials measured: {len(overhead_s)} of {len(trials)}, {args.num_prompts} requests each")
    rest = overhead_s[1:]
    print(f"first trial: {overhead_s[0]:.3f} s (the workload is built before it, once per run)")
    print(
        f"later trials: median {statistics.median(rest):.3f} s, "
        f"max {max(rest):.3f} s, min {min(rest):.3f} s"
    )


if __name__ == "__main__":
    main()
