"""A profile measured on this machine (`tuner sim profile --measure`, `tuner.sim.measured`):
the writer on a fake measurement (pure), and one real run of the microbenchmark in vLLM's
environment."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

from tuner.errors import UserError
from tuner.sim.measured import base_profile, measured_profile, run_microbench
from tuner.sim.profile_file import load_gpu, profile_to_yaml, read_profile
from tuner.sim.profiles import BUILTIN_MODELS, GPUS, GpuProfile
from tuner_testing.cli import tuner

TINY = BUILTIN_MODELS["tiny-qwen2"]


def _found(**changes: object) -> dict[str, object]:
    """What `microbench_torch.py` prints, in round figures (a 2-layer model on a CPU)."""
    found: dict[str, object] = {
        "torch": "2.x",
        "platform": "cpu",
        "device_name": "cpu",
        "memory_bytes": 32 * 2**30,
        "device_count": 1,
        "threads": 1,
        "gemm": [  # one layer's linear maps: 1e6 weight bytes
            {"tokens": 256, "seconds": 2e-3, "flops": 2.56e8, "weight_bytes": 1e6},
            {"tokens": 1, "seconds": 1e-4, "flops": 1e6, "weight_bytes": 1e6},
        ],
        "lm_head": {"seconds": 3e-4, "flops": 4e6, "weight_bytes": 4e6},
        "attention": [
            {"context": 1024, "query": 1, "seconds": 1e-4, "flops": 5e5},
            {"context": 1024, "query": 256, "seconds": 4e-3, "flops": 1.28e8},
            {"context": 256, "query": 256, "seconds": 1e-3, "flops": 3.2e7},
        ],
        "bandwidth": {"bytes": 1e8, "seconds": 5e-3, "bytes_s": 2e10},
    }
    return {**found, **changes}


def test_the_profile_is_what_the_kernels_reached_over_the_base_s_overheads() -> None:
    base = GPUS["cpu"]
    gpu = measured_profile(_found(), TINY, "cpu-measured", base)
    assert gpu.platform == "cpu" and gpu.name == "cpu-measured"
    assert gpu.flops == pytest.approx(2.56e8 / 2e-3)  # the prefill GEMMs, at efficiency 1
    assert gpu.constants.flops_efficiency == 1.0
    assert gpu.bandwidth_bytes_s == 2e10
    # a decode step reads 2 layers' 1e6 bytes and the head's 4e6 in 2e-4 + 3e-4 s: 12 GB/s
    assert gpu.constants.bandwidth_efficiency == pytest.approx(6e6 / 5e-4 / 2e10)
    # the longest context's prefill chunk: 3.2e10 FLOP/s of 1.28e11
    assert gpu.constants.attention_efficiency == pytest.approx(1.28e8 / 4e-3 / 1.28e11)
    assert gpu.constants.step_overhead_s == base.constants.step_overhead_s  # not measured
    assert gpu.interconnect_bytes_s == base.interconnect_bytes_s  # one device: no all-reduce
    assert "overheads and all-reduce from the built-in cpu" in gpu.description
    assert read_back(gpu) == gpu


def read_back(gpu: GpuProfile) -> GpuProfile:
    """The profile written to a file and read back, as `hardware.profile` reads it."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "p.yaml"
        path.write_text(profile_to_yaml(gpu))
        return read_profile(path)


def test_an_all_reduce_across_gpus_gives_the_interconnect_and_the_base_is_the_named_gpu() -> None:
    runs = [{"bytes": 4096, "seconds": 2e-5}, {"bytes": 64 * 2**20, "seconds": 2e-5 + 1e-3}]
    found = _found(platform="cuda", device_name="NVIDIA H100 PCIe", device_count=4,
                   allreduce={"devices": 4, "runs": runs})  # fmt: skip
    found.pop("threads")
    base = base_profile(found)
    assert base.name == "h100-pcie"
    assert base_profile({**found, "device_name": "NVIDIA H100 80GB HBM3"}).name == "h100"
    assert base_profile({**found, "device_name": "Tesla V100"}).name == "a100-80g"
    gpu = measured_profile(found, TINY, "h100-pcie-measured", base)
    assert gpu.platform == "cuda" and gpu.allreduce_latency_s == 2e-5
    assert gpu.interconnect_bytes_s == pytest.approx(1.5 * 64 * 2**20 / 1e-3)
    assert "overheads from the built-in h100-pcie" in gpu.description


def test_a_figure_past_a_file_s_bounds_is_held_there_and_said() -> None:
    slow = _found(bandwidth={"bytes": 1e8, "seconds": 0.02, "bytes_s": 5e9})  # a loaded box
    gpu = measured_profile(slow, TINY, "cpu-measured", GPUS["cpu"])
    assert gpu.bandwidth_bytes_s == 1e10
    assert "bandwidth_bytes_s 5e+09 held at 1e+10" in gpu.description
    assert read_back(gpu) == gpu


def test_a_python_that_cannot_run_it_is_one_line() -> None:
    with pytest.raises(UserError, match="--python /no/such/python: no such program"):
        run_microbench("/no/such/python", TINY)
    with pytest.raises(UserError, match=r"the microbenchmark failed: ModuleNotFoundError"):
        run_microbench(sys.executable, TINY)  # the tuner's own environment has no torch


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
@pytest.mark.slow  # ~6 s of torch imports and timing on a loaded box
def test_measure_with_vllm_s_python_writes_a_profile_serve_takes(
    tmp_path: Path, vllm_python: Path
) -> None:
    out = tmp_path / "cpu-measured.yaml"
    done = tuner("sim", "profile", "--measure", "--quick", "--python", str(vllm_python),
                 "-o", str(out), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    gpu = load_gpu(str(out))
    assert gpu.platform == "cpu" and gpu.name == "cpu-measured" and gpu.flops > 1e9
    assert "measured by tuner sim profile --measure on cpu, 1 thread(s)" in gpu.description
