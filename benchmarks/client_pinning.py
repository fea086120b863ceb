"""Does the client's CPU placement move what it measures? A study's trial measures with the
tuner pinned off the engine's cores (`tuner.engine.cores.client_off_engine_cores`: on a 2-core
box, one core), `tuner verify` with the client free on every core. One engine (`tuner sim
serve`, simulated 4xA6000, the exported flags of tests/test_verify.py's study, real simulated
time, pinned to the last core), the same workload (24 random prompts of 128 tokens, 16 out,
8 req/s, seed 0) by the same client (`run_benchmark`), interleaved: the client pinned to
every core but the engine's ("pinned"), then free ("free"), `--rounds` times.

The engine is simulated: its step times do not depend on the host's load, only its lag does,
so a difference between the two is the client's (and the engine's lag under the client's
load). What the box is doing meanwhile (the load average) is printed with each run.

    .venv/bin/python benchmarks/client_pinning.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import httpx

from tuner.engine.cores import client_off_engine_cores
from tuner.engine.ports import free_port
from tuner.spec.workload import WorkloadSpec
from tuner.workload.benchmark import run_benchmark
from tuner.workload.datasets import build_requests
from tuner.workload.tokenizer import load_tokenizer
from tuner_testing import TUNER

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / ".cache" / "tiny-qwen2"
ENGINE = [
    "--model", "deepseek-r1-distill-qwen-32b", "--served-model-name", "qwen32b",
    "--tensor-parallel-size", "4", "--max-model-len", "8192", "--max-num-seqs", "256",
    "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9", "--gpu", "a6000",
]  # fmt: skip
WORKLOAD = WorkloadSpec(
    dataset_name="random",
    random_input_len=128,
    random_output_len=16,
    num_prompts=24,
    request_rate=8,
    seed=0,
    num_warmups=0,
    tokenizer=str(TOKENIZER),
)
FIGURES = ("p99_ttft_ms", "mean_ttft_ms", "mean_tpot_ms")


def start_sim_engine(
    *args: str, env: dict[str, str], core: int | None = None
) -> tuple[subprocess.Popen, str]:
    """`tuner sim serve ARGS` (the tiny tokenizer, a free port; pinned to `core` when given),
    ready: the process and its URL."""
    port = free_port()
    pin = ["taskset", "-c", str(core)] if core is not None else []
    argv = [*pin, *TUNER, "sim", "serve", *args, "--tokenizer", str(TOKENIZER)]
    argv += ["--port", str(port)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            httpx.get(url + "/health", timeout=1).raise_for_status()
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the simulated engine did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    core = max(os.sched_getaffinity(0))
    proc, url = start_sim_engine(
        *ENGINE, env={**os.environ, "TUNER_SIM_TIME_SCALE": "1"}, core=core
    )
    try:
        tok = load_tokenizer(str(TOKENIZER))
        requests = build_requests(WORKLOAD, tok)
        runs: dict[str, list[dict[str, float]]] = {"pinned": [], "free": []}
        for _ in range(args.rounds):
            for label in runs:
                with client_off_engine_cores([core] if label == "pinned" else None):
                    r = run_benchmark(WORKLOAD, url, "qwen32b", requests, tokenizer=tok)
                row = {k: r.metrics[k] for k in FIGURES} | {"load1": os.getloadavg()[0]}
                runs[label].append(row)
                print(label, {k: round(v, 1) for k, v in row.items()}, flush=True)
        for label, rows in runs.items():
            medians = {k: round(statistics.median(r[k] for r in rows), 1) for k in FIGURES}
            spread = {k: (round(min(r[k] for r in rows), 1), round(max(r[k] for r in rows), 1))
                      for k in FIGURES}  # fmt: skip
            print(f"{label}: median {medians}, range {spread}")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
