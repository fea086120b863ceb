"""`tuner init` writes a space whose baseline (trial 0) is vLLM 0.32's own defaults on the
study's GPU, with bounds that hold them and no block size the GPU's platform refuses (issue 32
§4); and the budget it fits in `--hours` counts the engine's own start-up (§6)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.run.cost import night_cost
from tuner.scaffold.baseline import space_for_gpu
from tuner.sim.profiles import get_gpu
from tuner.spec.space import baseline_params
from tuner.spec.study import load_study_spec
from tuner.spec.vllm_rules import VLLM_VERSION
from tuner.trial.uptime import SIM_STARTUP_S
from tuner_testing.cli import REPO, tuner

CORE = yaml.safe_load((REPO / "search_spaces" / "vllm-core.yaml").read_text())
MODEL = "deepseek-r1-0528-qwen3-8b"


def _init(tmp_path: Path, *args: str) -> tuple[Path, str]:
    out = tmp_path / "s.yaml"
    done = tuner(
        "init", "--no-preview", "--model", MODEL, *args, "-o", str(out), cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return out, done.stdout


@pytest.mark.parametrize(
    ("gpu", "seqs", "tokens"),
    [("h100", 1024, 8192), ("h200", 1024, 8192), ("a100-80g", 256, 2048), ("a6000", 256, 2048)],
)
def test_the_baseline_is_vllm_s_defaults_on_that_gpu(
    tmp_path: Path, gpu: str, seqs: int, tokens: int
) -> None:
    """vllm/engine/arg_utils.py, `EngineArgs.get_batch_defaults`: >= 70 GiB and no "a100" in
    the name gets 1024 / 8192 for `vllm serve`; the A100 and smaller GPUs 256 / 2048."""
    out, said = _init(tmp_path, "--gpu", gpu, "--hours", "1")
    spec = load_study_spec(out)
    base = baseline_params(spec.search_space)
    assert base is not None
    assert (base["max-num-seqs"], base["max-num-batched-tokens"]) == (seqs, tokens)
    assert base["block-size"] == 16 and base["gpu-memory-utilization"] == 0.92
    for name in ("max-num-seqs", "max-num-batched-tokens"):
        p = spec.search_space.parameters[name]
        assert p.low <= base[name] <= p.high, name
    assert 8 not in (spec.search_space.parameters["block-size"].choices or [])
    assert f"baseline (trial 0): vLLM {VLLM_VERSION}'s defaults on 1× {gpu}" in said
    data = yaml.safe_load(out.read_text())
    if (seqs, tokens) == (256, 2048):  # the shipped file's own defaults: named, not copied
        assert isinstance(data["search_space"], str)
    else:
        assert data["search_space"]["parameters"]["max-num-seqs"]["default"] == seqs
        assert "max-num-seqs 1024 (the file says 256)" in said


def test_the_space_for_a_gpu_holds_its_defaults_and_drops_refused_blocks() -> None:
    user = {
        "parameters": {
            "max-num-seqs": {"type": "int", "low": 8, "high": 512, "default": 256},
            "block-size": {"type": "categorical", "choices": [8, 32], "default": 32},
            "max-num-batched-tokens": {"type": "categorical", "choices": [2048, 4096]},
            "enable-chunked-prefill": {"type": "bool", "default": True},
        }
    }
    found = space_for_gpu(user, get_gpu("h100"), 1)
    p = found.space["parameters"]
    assert p["max-num-seqs"] == {"type": "int", "low": 8, "high": 1024, "default": 1024}
    assert p["block-size"] == {"type": "categorical", "choices": [16, 32], "default": 16}
    assert p["max-num-batched-tokens"]["choices"] == [2048, 4096, 8192]
    assert any("block-size without 8" in change for change in found.changes)
    assert user["parameters"]["max-num-seqs"]["high"] == 512  # the file's mapping is kept
    # the CPU build: 128 x world size and 2048 x world size, block size 128
    cpu = space_for_gpu(yaml.safe_load((REPO / "search_spaces" / "cpu-tiny.yaml").read_text()),
                        get_gpu("cpu"), 2)  # fmt: skip
    base = {k: v["default"] for k, v in cpu.space["parameters"].items()}
    assert (base["max-num-seqs"], base["max-num-batched-tokens"], base["block-size"]) == (
        256, 4096, 128,
    )  # fmt: skip
    # the shipped CUDA space on an A6000 is already vLLM's defaults: nothing to change
    assert space_for_gpu(CORE, get_gpu("a6000"), 4).changes == []


def test_the_night_on_the_simulated_engine_counts_its_own_start_up(tmp_path: Path) -> None:
    """A 1-hour study on `tuner sim serve` was budgeted at a real engine's ~88 s start-up per
    trial (59 min announced, 22 taken): the simulated engine starts in seconds."""
    out, said = _init(tmp_path, "--gpu", "h100", "--hours", "1")
    spec = load_study_spec(out)
    cost = night_cost(spec, n_trials=1)
    assert cost.startup_s == SIM_STARTUP_S + 1  # `load-delay-s: 1`, as `tuner init` writes it
    assert "the simulated engine's, measured" in cost.line()
    assert "start-up ~3 s per trial: the simulated engine's" in " ".join(said.split())
    # the same study on `vllm serve` counts a real engine's start-up
    real = spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"command": ["vllm", "serve", "{model}"]})}
    )
    real_cost = night_cost(real, n_trials=1)
    assert real_cost.startup_s is not None and real_cost.startup_s > 30
    assert "a real engine's, estimated" in real_cost.line()
    assert real_cost.trial_s is not None and cost.trial_s is not None
    assert real_cost.trial_s - cost.trial_s == pytest.approx(real_cost.startup_s - 3, abs=0.01)
