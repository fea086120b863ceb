"""Real vLLM (CPU build) and the shape flags of issue 23: its parser takes every one of them,
it starts with the exported flags of a shape it supports, and the tuner refuses, in one line
and before launch, a shape the CPU slot cannot hold."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml

from tuner.engine.ports import free_port
from tuner.engine.process import EngineProcess
from tuner.run.flagcheck import check_flags
from tuner.spec.space import effective_flags, engine_argv, engine_env, serve_argv, spec_rules
from tuner.spec.study import load_study_spec
from tuner_testing.studies import cpu_study

pytestmark = pytest.mark.vllm

SHAPE_SPACE = {
    "parameters": {
        "tensor-parallel-size": {"type": "categorical", "choices": [1, 2], "default": 1},
        "enable-prefix-caching": {"type": "bool", "default": True},
    },
    "fill_data_parallel": True,
}


def test_cpu_vllm_starts_with_the_exported_shape_flags(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from conftest import study_core

    core = study_core()
    path = cpu_study(tmp_path, tiny_model_dir, vllm_python, core, search_space=SHAPE_SPACE)
    data = yaml.safe_load(path.read_text())
    data["hardware"] = {"gpu": "cpu", "count": 1}  # one engine on the slot's one core
    data["engine"]["env"]["VLLM_CPU_KVCACHE_SPACE"] = "1"  # as the session's vLLM (conftest)
    path.write_text(yaml.safe_dump(data))
    spec = load_study_spec(path)
    # vLLM 0.32's own parser takes every flag the shape writes (`--no-` form included)
    found = check_flags(spec)
    assert not found.problems and "argument parser" in found.against, found
    # a shape wider than the slot: refused before launch, one line, the reason said
    wide = spec_rules(spec, effective_flags(spec, {"tensor-parallel-size": 2}))
    assert wide is not None and "\n" not in wide
    assert "needs 2 GPUs, more than the trial's 1" in wide
    # the exported command of the shape that fits, and the engine started with its flags
    params = {"tensor-parallel-size": 1, "enable-prefix-caching": False}
    exported = " ".join(serve_argv(spec, params))
    port = free_port()
    argv = engine_argv(spec, params, port=port)
    shape = "--tensor-parallel-size 1", "--no-enable-prefix-caching", "--data-parallel-size 1"
    for flags in shape:  # the export's and the engine's command say the same shape
        assert flags in exported and flags in " ".join(argv)
    log = tmp_path / "engine.log"
    proc = EngineProcess.start(argv, engine_env(spec, params), log, cpu_affinity=[core])
    try:
        proc.wait_ready(f"http://127.0.0.1:{port}", timeout_s=300)
        body = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 4}
        resp = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60)
        assert resp.status_code == 200, resp.text
    finally:
        proc.stop()
    text = log.read_text()
    assert "'enable_prefix_caching': False" in text or "enable_prefix_caching=False" in text
