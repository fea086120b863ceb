"""The CPU start-up figure (`tuner.trial.uptime.CPU_STARTUP_S`): launch to ready of the baseline
trial's engine of the CPU study, as the tests run it (`tuner.testing.cpu_study`).

Each run builds the baseline trial's argv and env from the study file (`engine_argv`, the
search space's defaults), starts it pinned to the last core with `EngineProcess`, waits for
/v1/models, and stops it; the start-up is `wait_ready`'s `startup_s`, the figure a trial
records as `startup_s`. Runs are one at a time; the 1-minute load average before each run is
printed beside it, because the box is shared and the figure moves with the load.

Usage: .venv/bin/python benchmarks/cpu_startup.py [--repeats N] [--pause-s S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.spec.space import engine_argv, engine_env
from tuner.spec.study import load_study_spec
from tuner.testing import cpu_study
from tuner.tools.tinymodel import make_tiny_model

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
CORE = max(os.sched_getaffinity(0))


def run_once(spec, tmp: Path) -> float:
    params = {name: p.default for name, p in spec.search_space.parameters.items()}
    port = free_port()
    argv = engine_argv(spec, params, port=port)
    env = engine_env(spec, params)
    proc = EngineProcess.start(
        argv, env, tmp / f"engine-{port}.log", cpu_affinity=spec.engine.cpu_affinity
    )
    try:
        return proc.wait_ready(f"http://127.0.0.1:{port}", timeout_s=300).startup_s
    finally:
        proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pause-s", type=float, default=5.0, help="idle seconds between runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        model = make_tiny_model(tmp / "model")
        spec = load_study_spec(cpu_study(tmp, model, VLLM_PYTHON, CORE))
        values = []
        for i in range(args.repeats):
            load_1m = os.getloadavg()[0]
            startup_s = run_once(spec, tmp)
            values.append(startup_s)
            print(f"run {i + 1}: startup_s {startup_s:.1f} (load 1m before: {load_1m:.2f})")
            time.sleep(args.pause_s)
        print(
            f"== CPU start-up, {len(values)} runs on {os.cpu_count()} cores: median "
            f"{statistics.median(values):.1f} s (min {min(values):.1f}, max {max(values):.1f})"
        )


if __name__ == "__main__":
    main()
