"""`tuner sim serve --time-scale N`: the same serving N times faster, and the tuner's client
following it (docs/simulator.md). Real processes, real HTTP on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.spec.workload import WorkloadSpec
from tuner.workload.benchmark import run_benchmark
from tuner.workload.probe import server_time_scale
from tuner.workload.request import BenchRequest
from tuner_testing import TUNER, loopback_app

M32 = ["--model", "deepseek-r1-distill-qwen-32b", "--tensor-parallel-size", "4"]


@contextmanager
def sim(tmp_path: Path, tokenizer: Path, scale: str) -> Iterator[str]:
    port = free_port()
    argv = [*TUNER, "sim", "serve", *M32, "--tokenizer", str(tokenizer)]
    argv += ["--served-model-name", "m", "--port", str(port), "--time-scale", scale]
    process = EngineProcess.start(argv, {}, tmp_path / f"sim-{scale}.log")
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_ready(url, 60)
        yield url
    finally:
        process.stop()


@pytest.mark.realtime  # the scales are set here, not by the suite's default
@pytest.mark.slow  # a whole study or workload run: `make test`, not `make test-fast`
def test_a_faster_scale_runs_the_same_workload_in_less_wall_time(tmp_path, tiny_model_dir):
    workload = WorkloadSpec(
        tokenizer=str(tiny_model_dir), num_prompts=12, request_rate=6, random_output_len=24
    )
    requests = [BenchRequest("x " * 100, 101, 24, ignore_eos=True)] * 12
    found = {}
    for scale in ("1", "5"):
        with sim(tmp_path, tiny_model_dir, scale) as url:
            assert server_time_scale(url) == float(scale)
            t0 = time.monotonic()
            result = run_benchmark(workload, url, "m", requests, tokenizer=None)
            found[scale] = (time.monotonic() - t0, result)
    (wall_1, real), (wall_5, fast) = found["1"], found["5"]
    assert real.metrics["completed"] == fast.metrics["completed"] == 12
    # the arrivals (2 s of them) and the engine both ran 5 times faster...
    assert wall_5 < wall_1 / 2, (wall_1, wall_5)
    # ...and the client measured in simulated seconds: the same figures as in real time
    assert fast.duration_s == pytest.approx(real.duration_s, rel=0.25)
    # (TPOT, not TTFT: a ~75 ms TTFT is where the box's lag, 5 times larger, shows most)
    assert fast.metrics["mean_tpot_ms"] == pytest.approx(real.metrics["mean_tpot_ms"], rel=0.3)


def test_only_the_simulator_sets_the_clients_time_scale():
    async def vllm_version(request: web.Request) -> web.Response:
        return web.json_response({"version": "0.11.0"})

    async def odd_version(request: web.Request) -> web.Response:
        return web.json_response({"version": "sim", "time_scale": "fast"})

    for handler in (vllm_version, odd_version):
        app = web.Application()
        app.router.add_get("/version", handler)
        with loopback_app(app) as url:
            assert server_time_scale(url) == 1.0
    with loopback_app(web.Application()) as url:  # no /version at all: 404
        assert server_time_scale(url) == 1.0
    assert server_time_scale(f"http://127.0.0.1:{free_port()}", timeout_s=1) == 1.0  # no server


def test_time_scale_below_one_is_refused(tiny_model_dir):
    import subprocess

    done = subprocess.run(
        [*TUNER, "sim", "serve", *M32, "--time-scale", "0.5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--time-scale" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
