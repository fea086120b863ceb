"""Does the first workload run after an engine's start read slower, and is it the engine's
start or the client's first run? A study's trial measures seconds after its engine is ready;
`tuner verify` measures an engine that has been up for a while.

One client process; `tuner sim serve` (simulated 4xA6000, the exported flags of
tests/test_verify.py's study, real simulated time, pinned to the last core, the client off it
as a trial's) started afresh `--reps` times per arm, arms interleaved:

- "at once": two runs right after the engine is ready;
- "after N s": the same, `--wait` seconds after it is ready.

Each run: 24 random prompts of 128 tokens, 16 out, 8 req/s, seed 0, `run_benchmark` (its
initial test request included, no warm-up; the same prompts each run, so without dev mode,
where the client cannot empty the engine's prefix cache, run 2 finds run 1's prompts cached;
`--dev-mode` empties it before each run, as a trial does). The very first run of the client
process is the first "at once" rep's run 1, marked. The engine is simulated: its step times
do not depend on the host's load, only its lag does.

    .venv/bin/python benchmarks/first_run_after_start.py [--reps 3] [--wait 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

from client_pinning import ENGINE, TOKENIZER, WORKLOAD, start_sim_engine

from tuner.engine.cores import client_off_engine_cores
from tuner.workload.benchmark import run_benchmark
from tuner.workload.datasets import build_requests
from tuner.workload.tokenizer import load_tokenizer


def started(core: int, dev_mode: bool) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "TUNER_SIM_TIME_SCALE": "1", "VLLM_SERVER_DEV_MODE": str(int(dev_mode))}
    return start_sim_engine(*ENGINE, env=env, core=core)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--wait", type=float, default=15.0)
    parser.add_argument(
        "--dev-mode",
        action="store_true",
        help="VLLM_SERVER_DEV_MODE=1: the client empties the prefix cache before each run",
    )
    args = parser.parse_args()
    core = max(os.sched_getaffinity(0))
    tok = load_tokenizer(str(TOKENIZER))
    requests = build_requests(WORKLOAD, tok)
    arms = {"at once": 0.0, f"after {args.wait:g} s": args.wait}
    seen: dict[tuple[str, int], list[float]] = {}
    first = True
    for _ in range(args.reps):
        for arm, wait_s in arms.items():
            proc, url = started(core, args.dev_mode)
            try:
                time.sleep(wait_s)
                for run in (1, 2):
                    with client_off_engine_cores([core]):
                        r = run_benchmark(WORKLOAD, url, "qwen32b", requests, tokenizer=tok)
                    p99, mean = r.metrics["p99_ttft_ms"], r.metrics["mean_ttft_ms"]
                    mark = " (the client process's first run)" if first else ""
                    first = False
                    print(
                        f"{arm}, run {run}: p99 TTFT {p99:.1f} ms, mean TTFT {mean:.1f} ms, "
                        f"load {os.getloadavg()[0]:.1f}{mark}",
                        flush=True,
                    )
                    seen.setdefault((arm, run), []).append(p99)
            finally:
                proc.terminate()
                proc.wait(10)
    for (arm, run), values in seen.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"{arm}, run {run}: p99 TTFT median {statistics.median(values):.1f} ms ({shown})")


if __name__ == "__main__":
    main()
