"""An accelerator profile measured on this machine (`tuner sim profile --measure`;
docs/simulator.md, "Measured profiles").

`run_microbench` runs `microbench_torch.py` with the Python of an environment that has
PyTorch (vLLM's own), at a model's shapes; `measured_profile`, a pure function, turns what it
printed into a `GpuProfile`:

- `flops`: the model's linear layers at the largest token count measured (a prefill step's
  GEMMs), with `flops_efficiency` 1 (the figure is what the GEMMs reached, not a datasheet's);
- `attention_efficiency`: attention's FLOP/s over a prefill chunk at the longest context, as a
  share of `flops`;
- `bandwidth_bytes_s`: a large copy; `bandwidth_efficiency`: the share of it a decode step's
  weight reads reached (every layer's linear maps for one token, and the LM head's row);
- `interconnect_bytes_s`, `allreduce_latency_s`: the all-reduce, across several GPUs only;
- the step, per-request and per-token overheads are the framework's, not a kernel's: no
  microbenchmark sees them, so they are the base profile's (the built-in of the same
  platform, or the one named), as are the all-reduce figures without several GPUs.

A figure outside a profile file's physical bounds (`profile_file.BOUNDS`) is held at the bound
and the description says so.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tuner.errors import UserError
from tuner.sim.profile_file import BOUNDS
from tuner.sim.profiles import GPUS, GpuProfile, ModelProfile

SCRIPT = Path(__file__).with_name("microbench_torch.py")
TIMEOUT_S = 300.0
MEMORY_BOUNDS = (2**30, 2**44)


def model_shapes(model: ModelProfile) -> dict[str, int]:
    """The shapes the microbenchmark takes (its command-line JSON)."""
    return {
        "hidden_size": model.hidden_size,
        "num_heads": model.num_heads,
        "num_kv_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "intermediate_size": model.intermediate_size,
        "vocab_size": model.vocab_size,
        "num_layers": model.num_layers,
    }


def run_microbench(
    python: str, model: ModelProfile, *, threads: int | None = None, quick: bool = False
) -> dict[str, Any]:
    """What `microbench_torch.py` printed, run with `python`; a UserError (one line) when that
    Python cannot run it (no such file, no torch) or it fails."""
    argv = [python, str(SCRIPT), json.dumps(model_shapes(model))]
    argv += ["--threads", str(threads)] if threads else []
    argv += ["--quick"] if quick else []
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError:
        raise UserError(f"--python {python}: no such program") from None
    except PermissionError:
        raise UserError(f"--python {python}: not executable") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"the microbenchmark took over {TIMEOUT_S:.0f} s; stopped") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        raise UserError(f"--python {python}: the microbenchmark failed: {lines[-1]}")
    try:
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise UserError(f"--python {python}: the microbenchmark printed no result") from None
    return found


def _bounded(name: str, value: float, held: list[str]) -> float:
    low, high, _ = BOUNDS[name]
    if low <= value <= high:
        return value
    kept = min(max(value, low), high)
    held.append(f"{name} {value:.3g} held at {kept:.3g}")
    return kept


def base_profile(found: Mapping[str, Any], base: str | None = None) -> GpuProfile:
    """The profile whose overheads a measurement keeps: `base` (a built-in name) when given,
    else the built-in of the measured platform (the CPU's, or the GPU named like the device,
    else the A100's)."""
    if base is not None:
        return GPUS[base.strip().lower()]
    if found.get("platform") == "cpu":
        return GPUS["cpu"]
    device = str(found.get("device_name", "")).lower().replace(" ", "-")
    named = [k for k in GPUS if k != "cpu" and k.split("-")[0] in device]
    named.sort(key=lambda k: (k not in device, -len(k)))  # "h100-pcie" before "h100"
    return GPUS[named[0] if named else "a100-80g"]


def measured_profile(
    found: Mapping[str, Any], model: ModelProfile, name: str, base: GpuProfile
) -> GpuProfile:
    """The profile `found` (what `run_microbench` returned, at `model`'s shapes) measures, over
    `base`'s overheads (see the module doc). KeyError/ValueError: not a measurement."""
    held: list[str] = []
    layers = model.num_layers
    gemm = sorted(found["gemm"], key=lambda g: g["tokens"])
    prefill = gemm[-1]
    flops = _bounded("flops", prefill["flops"] / prefill["seconds"], held)
    bandwidth = _bounded("bandwidth_bytes_s", float(found["bandwidth"]["bytes_s"]), held)
    one, head = gemm[0], found["lm_head"]
    decode_bytes = layers * one["weight_bytes"] + head["weight_bytes"]
    decode_s = layers * one["seconds"] + head["seconds"]
    read_share = _bounded("bandwidth_efficiency", decode_bytes / decode_s / bandwidth, held)
    chunks = [a for a in found["attention"] if a["query"] > 1] or list(found["attention"])
    longest = max(chunks, key=lambda a: (a["context"], a["query"]))
    attention = longest["flops"] / longest["seconds"] / flops
    attention_share = _bounded("attention_efficiency", attention, held)
    interconnect, latency = base.interconnect_bytes_s, base.allreduce_latency_s
    if "allreduce" in found:
        runs = sorted(found["allreduce"]["runs"], key=lambda r: r["bytes"])
        n = found["allreduce"]["devices"]
        latency = _bounded("allreduce_latency_s", runs[0]["seconds"], held)
        moved = 2 * (n - 1) / n * runs[-1]["bytes"]
        interconnect = _bounded(
            "interconnect_bytes_s", moved / max(runs[-1]["seconds"] - latency, 1e-9), held
        )
    memory = int(min(max(int(found["memory_bytes"]), MEMORY_BOUNDS[0]), MEMORY_BOUNDS[1]))
    threads = f", {found['threads']} thread(s)" if "threads" in found else ""
    description = (
        f"measured by tuner sim profile --measure on {found.get('device_name', '?')}{threads} "
        f"(torch {found.get('torch', '?')}) at {model.name}'s shapes; overheads"
        f"{'' if 'allreduce' in found else ' and all-reduce'} from the built-in {base.name}"
    )
    if held:
        description += "; " + "; ".join(held)
    constants = replace(
        base.constants,
        flops_efficiency=1.0,
        attention_efficiency=attention_share,
        bandwidth_efficiency=read_share,
    )
    return GpuProfile(
        name=name,
        memory_bytes=memory,
        bandwidth_bytes_s=bandwidth,
        flops=flops,
        interconnect_bytes_s=interconnect,
        allreduce_latency_s=latency,
        platform="cpu" if found.get("platform") == "cpu" else "cuda",
        description=description,
        constants=constants,
    )
