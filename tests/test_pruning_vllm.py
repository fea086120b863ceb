"""Early stopping against real vLLM (CPU build, tiny dummy model): one engine start."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from test_run_sim import _no_engine_left, _trials

from tuner_testing import cpu_study, tuner

pytestmark = pytest.mark.vllm


def test_max_num_seqs_1_at_high_concurrency_is_stopped_early(
    tmp_path: Path, tiny_model_dir: Path, vllm_python: Path
) -> None:
    from conftest import study_core

    study = cpu_study(
        tmp_path,
        tiny_model_dir,
        vllm_python,
        study_core(),
        search_space={
            "parameters": {
                "max-num-seqs": {"type": "categorical", "choices": [1]},
                # The KV cache as the env var says (else vLLM reserves 92 % of RAM on the CPU).
                "VLLM_CPU_KVCACHE_SPACE": {
                    "type": "categorical",
                    "choices": [1],
                    "env": "VLLM_CPU_KVCACHE_SPACE",
                },
            }
        },
        objective={"slo": ["p99_ttft_ms<=500"]},
        pruning={"check_every_s": 1.0},
    )
    data = yaml.safe_load(study.read_text())
    # 64 requests of 128 tokens all at once, served one at a time: minutes to the end.
    data["workload"].update(num_prompts=64, random_output_len=128, request_rate="inf")
    study.write_text(yaml.safe_dump(data, sort_keys=False))
    t0 = time.monotonic()
    run = tuner("run", str(study), "--n-trials", "1", cwd=tmp_path, timeout=300)
    wall = time.monotonic() - t0
    assert run.returncode == 0, run.stderr[-3000:]
    (trial,) = _trials(tmp_path, "cpu-tiny")
    assert trial.state.name == "PRUNED", trial.user_attrs
    assert "p99_ttft_ms<=500 broken for sure" in trial.user_attrs["pruned_reason"]
    # vLLM's own /metrics was read at the checkpoint: its queue holds the requests it has not
    # scheduled (one runs at a time).
    assert "waiting in the engine's queue" in trial.user_attrs["pruned_reason"]
    assert trial.user_attrs["pruned_queue_waiting"] >= 1
    assert trial.user_attrs["partial"] is True
    assert trial.user_attrs["pruned_at_s"] < 15
    assert trial.user_attrs["engine_s"] > trial.user_attrs["pruned_at_s"]
    assert _no_engine_left(tmp_path)
    assert wall < 90 + 60  # start-up (20–60 s here) + a few seconds of workload
