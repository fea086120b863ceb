"""The outputs docs/verify.md shows: `tuner verify` against simulated engines (SIMULATED
studies, real CLI, real HTTP, real SQLite), in real simulated time (`TUNER_SIM_TIME_SCALE=1`).

1. traffic: the study of tests/test_verify.py (`tuner_testing.sim_study`, 1 trial: vLLM's
   defaults, 24 prompts at 8 req/s), verified against `tuner sim serve --gpu h100` with the
   exported flags and a request log of 10 prompts of 256 tokens (twice the study's): the
   changes, the SIMULATED prediction for that traffic, the re-tune command; then `tuner
   trials`' verify history.
2. capacity: the capacity study of `test_a_capacity_study_is_verified_at_its_capacity_rate`
   (8 prompts, SLO p99_ttft_ms<=3000, capacity start 2, max 4 req/s, 2 runs), verified against
   `tuner sim serve --gpu a6000` with the exported flags, then with `--max-rate 2`.

Usage: .venv/bin/python benchmarks/verify_demo.py [--keep DIR]   (about a minute)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from client_pinning import start_sim_engine

from tuner_testing import TUNER, sim_study

REPO = Path(__file__).resolve().parent.parent
TOKENIZER = REPO / ".cache" / "tiny-qwen2"
ENV = {**os.environ, "TUNER_SIM_TIME_SCALE": "1", "VLLM_SERVER_DEV_MODE": "1"}
ENGINE = [
    "--model",
    "deepseek-r1-distill-qwen-32b",
    "--served-model-name",
    "qwen32b",
    "--tensor-parallel-size",
    "4",
    "--max-model-len",
    "8192",
    "--max-num-seqs",
    "256",
    "--max-num-batched-tokens",
    "2048",
    "--gpu-memory-utilization",
    "0.9",
]  # fmt: skip  (the exported command of both studies: vLLM's defaults)


def tuner(folder: Path, *args: str) -> str:
    done = subprocess.run(
        [*TUNER, *args], cwd=folder, env=ENV, capture_output=True, text=True, timeout=300
    )
    return f"{done.stdout}{done.stderr}(exit {done.returncode})"


def engine(gpu: str) -> tuple[subprocess.Popen, str]:
    return start_sim_engine(*ENGINE, "--gpu", gpu, env=ENV)


def traffic(folder: Path) -> None:
    study = sim_study(
        folder, TOKENIZER, budget={"n_trials": 1}, workload={"num_prompts": 24, "request_rate": 8}
    )
    log = folder / "traffic.jsonl"
    line = json.dumps({"prompt": " ".join(["a"] * 256), "output_len": 16}) + "\n"
    log.write_text(line * 10)
    print(tuner(folder, "run", str(study)).splitlines()[-1])
    proc, url = engine("h100")
    try:
        print(tuner(folder, "verify", str(study), "--base-url", url, "--request-log", str(log)))
    finally:
        proc.terminate()
        proc.wait(10)
    print("\n".join(tuner(folder, "trials", str(study)).splitlines()[-3:]))


def capacity(folder: Path) -> None:
    study = sim_study(
        folder,
        TOKENIZER,
        budget={"n_trials": 1},
        workload={"num_prompts": 8, "request_rate": 2},
        objective={
            "mode": "capacity",
            "slo": ["p99_ttft_ms<=3000"],
            "capacity": {"start_rps": 2, "max_rps": 4, "max_runs": 2},
        },
    )
    print(tuner(folder, "run", str(study)).splitlines()[-1])
    proc, url = engine("a6000")
    try:
        for extra in ([], ["--max-rate", "2"]):
            print(tuner(folder, "verify", str(study), "--base-url", url, "--no-store", *extra))
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="Run in this folder (kept), not a temporary one.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        for name, part in (("traffic", traffic), ("capacity", capacity)):
            (root / name).mkdir(parents=True, exist_ok=True)
            print(f"==== {name}")
            part(root / name)


if __name__ == "__main__":
    main()
