"""CPU time of `tuner plan` on a study file, before against after: each tree (a checkout of
the repo, its `.venv` and `.cache` linked in) runs `python -m tuner.cli plan STUDY --n-trials N`
on a fresh SQLite file, the trees interleaved run by run so a loaded machine loads them alike.
CPU is the plan's user + sys time (`getrusage` of the child): what to compare on a shared
machine; wall time is printed beside it. SIMULATED trials.

Usage: .venv/bin/python benchmarks/plan_cpu.py [--study studies/demo-sim.yaml] [--trials 200]
    [--repeats 3] TREE [TREE ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import tempfile
import time


def _cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def plan_once(tree: str, study: str, trials: int) -> tuple[float, float]:
    """(wall s, CPU s) of one `tuner plan` in `tree`."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [".venv/bin/python", "-m", "tuner.cli", "plan", study]
        command += ["--n-trials", str(trials), "--storage", f"sqlite:///{tmp}/plan.db"]
        t0, cpu0 = time.perf_counter(), _cpu_s()
        subprocess.run(command, cwd=tree, check=True, capture_output=True)
        return time.perf_counter() - t0, _cpu_s() - cpu0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--study", default="studies/demo-sim.yaml")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {tree: [] for tree in args.trees}
    for r in range(args.repeats):
        for tree in args.trees:
            load = os.getloadavg()[0]
            wall, cpu = plan_once(tree, args.study, args.trials)
            runs[tree].append((wall, cpu))
            print(
                f"run {r} {tree}: CPU {cpu:.1f} s, wall {wall:.1f} s (load {load:.1f})", flush=True
            )
    for tree, done in runs.items():
        cpus = sorted(round(c, 1) for _, c in done)
        print(
            f"== {tree}: CPU median {statistics.median(cpus):.1f} s {cpus}, "
            f"wall median {statistics.median(w for w, _ in done):.1f} s"
        )


if __name__ == "__main__":
    main()
