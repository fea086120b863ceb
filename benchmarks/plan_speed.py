"""How long `tuner plan` takes for a whole study: the simulation core plus everything around it
(Optuna's sampler, a stored trial per config with its request rows, bootstrap intervals, early
stopping, the robustness check at the end). SIMULATED trials, real CLI and SQLite.

The study: `tuner_testing.sim_study` (simulated 4xA6000, DeepSeek-R1-Distill-Qwen-32B, TP=4,
its three-parameter space) with a long-output workload: 100 random prompts of 256 tokens,
1024-token outputs, 8 req/s. Each run is a fresh database; the wall time is the CLI's,
start to exit, and its CPU time (user + sys: what to compare on a shared, loaded machine).

Usage: .venv/bin/python benchmarks/plan_speed.py [--trials 200] [--sampler tpe] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tuner_testing import TUNER, sim_study

REPO = Path(__file__).resolve().parent.parent
WORKLOAD = {
    "random_input_len": 256,
    "random_output_len": 1024,
    "num_prompts": 100,
    "request_rate": 8,
}


def _cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def plan_once(trials: int, sampler: str, seed: int) -> tuple[float, float]:
    """(wall s, CPU s) of one `tuner plan`."""
    with tempfile.TemporaryDirectory() as tmp:
        study = sim_study(
            Path(tmp),
            REPO / ".cache" / "tiny-qwen2",
            workload=WORKLOAD,
            sampler={"name": sampler, "seed": seed},
            budget={"n_trials": trials},
        )
        t0, cpu0 = time.perf_counter(), _cpu_s()
        subprocess.run(
            [*TUNER, "plan", str(study), "--n-trials", str(trials)],
            cwd=tmp,
            check=True,
            capture_output=True,
        )
        return time.perf_counter() - t0, _cpu_s() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--sampler", default="tpe")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    walls, cpus = [], []
    for seed in range(args.repeats):
        load = os.getloadavg()[0]
        wall, cpu = plan_once(args.trials, args.sampler, seed)
        walls.append(wall)
        cpus.append(cpu)
        line = f"seed {seed}: {wall:.1f} s, CPU {cpu:.1f} s (load 1m before: {load:.2f})"
        print(line, flush=True)
    print(
        f"== tuner plan, {args.trials} trials, {args.sampler}: median "
        f"{statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}), "
        f"CPU median {statistics.median(cpus):.1f} s"
    )


if __name__ == "__main__":
    main()
