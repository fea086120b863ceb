"""Real vLLM (CPU build) and the shape flags of issue 23: its parser takes every one of them,
it starts with the exported flags of a shape it supports, and the tuner refuses, in one line
and before launch, a shape the CPU slot cannot hold.

One engine start: the exported shape's, which is also the engine layer's ready server whose
stop must leave nothing (vLLM's shipped process tree; it was a start of its own in
tests/test_engine_vllm.py). It runs in the session server's group, on its core
(`server_core()`): the studies' group, the suite's longest path, keeps its starts for studies.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from conftest import SHIPPED_PROCESSES
from test_engine_vllm import assert_group_gone, assert_shipped_tree

from tuner.engine.ports import free_port, port_is_free
from tuner.engine.process import EngineProcess, group_members
from tuner.run.flagcheck import check_flags
from tuner.spec.space import effective_flags, engine_argv, engine_env, serve_argv, spec_rules
from tuner.spec.study import StudySpec, load_study_spec
from tuner_testing.studies import cpu_study

pytestmark = pytest.mark.vllm

SHAPE_SPACE = {
    "parameters": {
        "tensor-parallel-size": {"type": "categorical", "choices": [1, 2], "default": 1},
        "enable-prefix-caching": {"type": "bool", "default": True},
    },
    "fill_data_parallel": True,
}


PARAMS = {"tensor-parallel-size": 1, "enable-prefix-caching": False}  # the shape that fits
SHAPE_FLAGS = "--tensor-parallel-size 1", "--no-enable-prefix-caching", "--data-parallel-size 1"


def _shape_spec(tmp_path: Path, tiny_model_dir: Path, vllm_python: Path, core: int) -> StudySpec:
    path = cpu_study(tmp_path, tiny_model_dir, vllm_python, core, search_space=SHAPE_SPACE)
    data = yaml.safe_load(path.read_text())
    data["hardware"] = {"gpu": "cpu", "count": 1}  # one engine on the slot's one core
    data["engine"]["env"]["VLLM_CPU_KVCACHE_SPACE"] = "1"  # as the session's vLLM (conftest)
    path.write_text(yaml.safe_dump(data))
    return load_study_spec(path)


@pytest.mark.vllm_env  # vLLM's parser only, no server: not in a real-vLLM group
def test_vllm_s_parser_takes_the_shape_flags_and_a_wide_shape_is_refused_before_launch(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from conftest import server_core

    spec = _shape_spec(tmp_path, tiny_model_dir, vllm_python, server_core())
    # vLLM 0.32's own parser takes every flag the shape writes (`--no-` form included)
    found = check_flags(spec)
    assert not found.problems and "argument parser" in found.against, found
    # a shape wider than the slot: refused before launch, one line, the reason said
    wide = spec_rules(spec, effective_flags(spec, {"tensor-parallel-size": 2}))
    assert wide is not None and "\n" not in wide
    assert "needs 2 GPUs, more than the trial's 1" in wide
    # the export's and the engine's command say the same shape
    exported = " ".join(serve_argv(spec, PARAMS))
    argv = " ".join(engine_argv(spec, PARAMS, port=8000))
    for flags in SHAPE_FLAGS:
        assert flags in exported and flags in argv


def test_cpu_vllm_starts_with_the_exported_shape_flags_and_its_stop_leaves_nothing(
    vllm_python: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The exported shape's engine starts and serves; stopped when ready, its whole process
    group (vLLM's shipped tree: API server, EngineCore, worker) is gone and its port free."""
    from conftest import server_core

    core = server_core()
    spec = _shape_spec(tmp_path, tiny_model_dir, vllm_python, core)
    port = free_port()
    argv = engine_argv(spec, PARAMS, port=port)
    assert all(flags in " ".join(argv) for flags in SHAPE_FLAGS)
    env = {**engine_env(spec, PARAMS), **SHIPPED_PROCESSES}
    log = tmp_path / "engine.log"
    proc = EngineProcess.start(argv, env, log, cpu_affinity=[core])
    try:
        info = proc.wait_ready(f"http://127.0.0.1:{port}", timeout_s=300)
        print(f"ready after {info.startup_s:.1f} s")
        assert not port_is_free("127.0.0.1", port)
        members = group_members(proc.pgid)
        assert len(members) >= 2
        assert_shipped_tree(proc.pgid)
        body = {"model": "tiny", "prompt": "The quick brown fox", "max_tokens": 4}
        resp = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60)
        assert resp.status_code == 200, resp.text
    finally:
        code = proc.stop()
        print(f"stopped, exit code {code}")
    assert_group_gone(proc.pgid)
    assert all(not Path(f"/proc/{pid}").exists() for pid in members)
    assert port_is_free("127.0.0.1", port)
    text = log.read_text()
    assert "'enable_prefix_caching': False" in text or "enable_prefix_caching=False" in text
