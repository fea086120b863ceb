"""How long `tuner sim serve` takes to answer /health, and its CPU seconds, by tokenizer loader.

A study starts the simulated engine once per trial, so its start-up is paid every trial (and
by every end-to-end test). Three variants, interleaved, each `--repeats` times:
  - no tokenizer (a built-in model name: prompts counted as words),
  - `--tokenizer DIR` through `tuner.workload.tokenizer.load_counter` (the `tokenizers` library,
    what `tuner sim serve` uses),
  - the same directory through transformers' AutoTokenizer (`load_tokenizer`, what the server
    used before), loaded in a child process the same way.
Prints the median and the range of wall seconds to ready and of CPU seconds.

Usage: .venv/bin/python benchmarks/sim_startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tuner.engine.ports import free_port
from tuner.tools.tinymodel import make_tiny_model

SERVE = [sys.executable, "-m", "tuner.cli", "sim", "serve", "--model",
         "deepseek-r1-distill-qwen-32b", "--tensor-parallel-size", "4"]  # fmt: skip


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_start(extra: list[str]) -> tuple[float, float]:
    """(wall seconds until /health answers 200, CPU seconds of the server to that point)."""
    port = free_port()
    cpu0, start = _children_cpu_s(), time.monotonic()
    proc = subprocess.Popen([*SERVE, *extra, "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"sim serve exited {proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.01)
        ready_s = time.monotonic() - start
    finally:
        proc.terminate()
        proc.wait()
    return ready_s, _children_cpu_s() - cpu0


def transformers_load_cpu_s(tokenizer: Path) -> float:
    """CPU seconds of importing transformers and loading the tokenizer, in a fresh process."""
    cpu0 = _children_cpu_s()
    code = ("from tuner.workload.tokenizer import load_tokenizer; "
            f"load_tokenizer({str(tokenizer)!r})")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return _children_cpu_s() - cpu0


def _summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (range {min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tok = make_tiny_model(Path(tmp) / "tiny")
        runs: dict[str, list[tuple[float, float]]] = {"no tokenizer": [], "load_counter": []}
        extra_cpu: list[float] = []
        for _ in range(args.repeats):  # interleaved: the box's noise hits every variant
            runs["no tokenizer"].append(one_start([]))
            runs["load_counter"].append(one_start(["--tokenizer", str(tok)]))
            extra_cpu.append(transformers_load_cpu_s(tok))
    for name, values in runs.items():
        walls, cpus = [w for w, _ in values], [c for _, c in values]
        print(f"{name:14s} ready s {_summary(walls)}; CPU s {_summary(cpus)}")
    print(f"transformers import + AutoTokenizer load, CPU s {_summary(extra_cpu)}")


if __name__ == "__main__":
    main()
