"""The search space `tuner init` writes: the chosen one, with vLLM's own defaults on the study's
GPU as its `default:`s (the baseline trial 0), its bounds widened to hold them, and no block
size the GPU's platform refuses (docs/study-file.md, "tuner init").

vLLM's defaults move with the device: 0.32 gives an H100 `max-num-seqs` 1024 and
`max-num-batched-tokens` 8192 where an A6000 gets 256 and 2048 (`tuner.sim.vllm_defaults`, with
the source lines). A baseline that says 256 / 2048 on an H100 is not measuring vLLM's defaults,
and a space whose `max-num-seqs` stops at 512 cannot hold them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TypeGuard

from tuner.sim import vllm_defaults
from tuner.sim.profiles import GpuProfile
from tuner.spec.values import Scalar
from tuner.spec.vllm_rules import VLLM_VERSION, block_size_error


@dataclass
class GpuSpace:
    """The search space for one GPU, and what was changed from the file's, in words."""

    space: dict[str, object]
    changes: list[str] = field(default_factory=list)


def space_for_gpu(space: dict[str, object], gpu: GpuProfile, world_size: int) -> GpuSpace:
    """`space` (a search-space file's mapping, not modified) with the defaults `vllm serve`
    takes on `gpu` at tensor parallel `world_size`, for each flag it searches."""
    out = copy.deepcopy(space)
    params = out.get("parameters") or {}
    if not isinstance(params, dict):
        params = {}
    changes = _drop_refused_blocks(params.get("block-size"), gpu.platform)
    for name, value in vllm_defaults.serve_defaults(gpu, world_size).items():
        p = params.get(name)
        if not isinstance(p, dict) or p.get("env") or p.get("default") == value:
            continue
        was = p.get("default")
        p["default"] = value
        _hold(p, value)
        changes.append(f"{name} {value} (the file says {was})")
    return GpuSpace(out, changes)


def _hold(p: dict[str, object], value: Scalar) -> None:
    """Widen a range, or add a choice, so that the parameter can take `value` (a malformed
    parameter is left as it is: the study's validation names it)."""
    low, high, choices = p.get("low"), p.get("high"), p.get("choices")
    if p.get("type") in ("int", "float") and _number(low) and _number(high):
        p["low"], p["high"] = min(low, value), max(high, value)
    elif p.get("type") == "categorical" and isinstance(choices, list) and value not in choices:
        numbers = all(_number(c) for c in choices)
        p["choices"] = sorted([*choices, value]) if numbers else [*choices, value]


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _drop_refused_blocks(p: object, platform: str) -> list[str]:
    """Remove the block sizes vLLM refuses on `platform` from a categorical `block-size`."""
    if not isinstance(p, dict) or not isinstance(p.get("choices"), list):
        return []
    refused = [c for c in p["choices"] if type(c) is int and block_size_error(c, platform)]
    if not refused:
        return []
    p["choices"] = [c for c in p["choices"] if c not in refused]
    sizes = ", ".join(map(str, refused))
    return [f"block-size without {sizes} (vLLM {VLLM_VERSION} refuses it on {platform})"]
