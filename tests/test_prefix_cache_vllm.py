"""The simulator's prefix cache against the real vLLM (CPU build): one shared-document
workload (`longdoc` with 4 questions per document), `tuner bench` against each engine with the
same flags and block size, and the two engines' own prefix-cache hit rates compared."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import VLLM_CPU_FLAGS

from tuner.engine.ports import free_port
from tuner_testing.cli import REPO, tuner
from tuner_testing.waiting import wait_for

pytestmark = pytest.mark.vllm


def _bench(base_url: str, tokenizer: Path, out: Path) -> dict:
    proc = tuner(
        "bench", "--base-url", base_url, "--model", "tiny", "--tokenizer", str(tokenizer),
        "--dataset-name", "longdoc", "--longdoc-lengths", "300,600",
        "--longdoc-questions", "4", "--longdoc-output-len", "4", "--num-prompts", "12",
        "--max-concurrency", "1", "--seed", "7", "--save-result", str(out),
        cwd=REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_the_simulators_hit_rate_is_within_5_points_of_vllms(vllm_server, tiny_model_dir, tmp_path):
    real = _bench(vllm_server.base_url, tiny_model_dir, tmp_path / "vllm.json")
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "tuner.cli",
        "sim",
        "serve",
        "--model",
        str(tiny_model_dir),
        "--served-model-name",
        "tiny",
        "--gpu",
        "cpu",
        "--port",
        str(port),
        *VLLM_CPU_FLAGS,
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    sim = subprocess.Popen(argv, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, cwd=REPO)  # fmt: skip
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, "tuner sim serve ready", 60)
        simulated = _bench(f"http://127.0.0.1:{port}", tiny_model_dir, tmp_path / "sim.json")
    finally:
        os.killpg(sim.pid, signal.SIGTERM)
        sim.wait(timeout=30)
    rates = (real["prefix_cache_hit_rate"], simulated["prefix_cache_hit_rate"])
    ttfts = (real["mean_ttft_ms"], simulated["mean_ttft_ms"])
    print(f"hit rate: vLLM {rates[0]:.3f}, simulator {rates[1]:.3f}; "
          f"mean TTFT: vLLM {ttfts[0]:.1f} ms, simulator {ttfts[1]:.1f} ms")  # fmt: skip
    assert real["total_input_tokens"] == simulated["total_input_tokens"]
    assert real["prefix_cache_hit_rate"] > 0.4  # the engine reuses the documents
    assert abs(real["prefix_cache_hit_rate"] - simulated["prefix_cache_hit_rate"]) <= 0.05
