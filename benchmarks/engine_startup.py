"""Engine start/stop figures for docs/engine.md, measured through tuner.engine on vLLM CPU.

Runs (server pinned to the last core, one at a time):
  - `python -m vllm.entrypoints.openai.api_server` with the brief §5 config (--enforce-eager),
  - the same without --enforce-eager,
  - `vllm serve` (the console script, after `tuner.tools.vllm_env fix-dist-info`) with the config,
    then `vllm bench serve` against it from the other core,
  - --block-size 16 (refused at start).

Usage: .venv/bin/python benchmarks/engine_startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuner.engine.failures import EngineStartFailed
from tuner.engine.ports import free_port, port_is_free
from tuner.engine.process import EngineProcess
from tuner.tools.tinymodel import make_tiny_model

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv-vllm" / "bin"
CORE = max(os.sched_getaffinity(0))
CONFIG = (
    "--load-format dummy --dtype bfloat16 --max-model-len 1024 --max-num-batched-tokens 1024 "
    "--max-num-seqs 8 --block-size 32"
).split()


def run_once(launch: list[str], flags: list[str], logs: Path, bench: bool = False) -> dict:
    port = free_port()
    argv = [*launch, "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": str(CORE)}
    log = logs / f"engine-{port}.log"
    proc = EngineProcess.start([*argv, *CONFIG, *flags], env, log, cpu_affinity=[CORE])
    url = f"http://127.0.0.1:{port}"
    result: dict = {}
    try:
        info = proc.wait_ready(url, timeout_s=300)
        result.update(startup_s=info.startup_s, version=info.version)
        if bench:
            result["bench_ok"] = run_vllm_bench(url, launch_model(launch))
    except EngineStartFailed as exc:
        elapsed = time.monotonic() - proc.started_at
        result.update(failed_after_s=elapsed, kind=exc.failure.kind, reason=exc.failure.reason)
    finally:
        t0 = time.monotonic()
        proc.stop()
        result.update(stop_s=time.monotonic() - t0, port_free=port_is_free("127.0.0.1", port))
    return result


def launch_model(launch: list[str]) -> str:
    return launch[launch.index("--model") + 1] if "--model" in launch else launch[2]


def run_vllm_bench(url: str, model_dir: str) -> bool:
    """`vllm bench serve` from the other core: proves the console script works end to end."""
    client_cores = sorted(os.sched_getaffinity(0) - {CORE}) or [CORE]
    cmd = [
        "taskset", "-c", ",".join(map(str, client_cores)), str(VENV / "vllm"), "bench", "serve",
        "--backend", "vllm", "--base-url", url, "--model", "tiny", "--tokenizer", model_dir,
        "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "32",
        "--num-prompts", "16", "--request-rate", "inf",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(out.stdout[-1500:])
    return out.returncode == 0 and "Successful requests:" in out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = str(make_tiny_model(Path(tmp) / "model"))
        api_server = [str(VENV / "python"), "-m", "vllm.entrypoints.openai.api_server"]
        eager = ["--enforce-eager"]
        cases = {
            "api_server --enforce-eager": ([*api_server, "--model", model], eager),
            "api_server (compiled)": ([*api_server, "--model", model], []),
            "vllm serve --enforce-eager": ([str(VENV / "vllm"), "serve", model], eager),
            "--block-size 16": (
                [*api_server, "--model", model],
                ["--enforce-eager", "--block-size", "16"],
            ),
        }
        for name, (launch, flags) in cases.items():
            runs = [
                run_once(launch, flags, Path(tmp), bench=name.startswith("vllm serve") and i == 0)
                for i in range(args.repeats)
            ]
            for r in runs:
                print(name, r, flush=True)
            key = "startup_s" if "startup_s" in runs[0] else "failed_after_s"
            values = [r[key] for r in runs if key in r]
            stops = [r["stop_s"] for r in runs]
            print(
                f"== {name}: {key} median {statistics.median(values):.1f} "
                f"(min {min(values):.1f}, max {max(values):.1f}); "
                f"stop_s median {statistics.median(stops):.1f}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
