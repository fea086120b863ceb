"""Predict, before launching, configs that vLLM would refuse for lack of memory or support.

An engine start costs minutes on a GPU box; the simulator's memory model answers in
microseconds. The prediction uses the same code as `tuner sim serve`'s own refusals.
"""

from __future__ import annotations

from dataclasses import replace

from tuner.engine.failures import classify_failure
from tuner.errors import PREDICTABLE, FailureKind
from tuner.measure.measurement import Measurement
from tuner.sim.memory import check_config
from tuner.sim.profile_file import load_gpu
from tuner.sim.profiles import known_model
from tuner.spec.sections import HardwareSpec
from tuner.spec.values import Flags

GiB = 1024**3


def gpu_memory_gib_from_nvml() -> float | None:
    """The first GPU's memory via nvidia-ml-py, where it is installed and a GPU exists."""
    try:
        import pynvml  # optional: only on GPU boxes
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        total_bytes: int = pynvml.nvmlDeviceGetMemoryInfo(handle).total
        return total_bytes / GiB
    except Exception:  # no driver, no device: no reading
        return None


def predict_refusal(
    model: str, hardware: HardwareSpec, flags: Flags, env: dict[str, str]
) -> tuple[str, str] | None:
    """(failure kind, vLLM's message) when the config is predicted not to start, else None.

    Without a known GPU, or a model the simulator knows (`known_model`), no prediction.
    """
    if hardware.accelerator is None:
        return None
    profile = known_model(model)
    if profile is None:
        return None
    gpu = load_gpu(hardware.accelerator)
    memory_gib = hardware.gpu_memory_gib or (
        gpu_memory_gib_from_nvml() if gpu.platform == "cuda" else None
    )
    if memory_gib:
        gpu = replace(gpu, memory_bytes=int(memory_gib * GiB))
    message = check_config(profile, gpu, {**flags, **env})
    return None if message is None else (refusal_kind(message), message)


def refusal_kind(message: str) -> str:
    """The failure kind of one of vLLM's start-up refusals: the engine logs' own table."""
    kind = classify_failure(message, exit_code=1).kind
    return FailureKind.INVALID_ARGUMENT if kind == FailureKind.CRASHED else kind


def precheck_wrong(predicted: tuple[str, str] | None, m: Measurement) -> str | None:
    """Hold the memory precheck to what the engine really did: None when it was right."""
    refused = m.failure_kind in PREDICTABLE and m.startup_s is None
    if predicted is None and not refused:
        return None  # predicted to start, and it did
    if predicted is not None and refused and predicted[0] == m.failure_kind:
        return None  # predicted the very refusal (only seen with --no-precheck)
    said = f"predicted {predicted[0]}" if predicted else "predicted to start"
    did = f"engine {m.failure_kind}" if refused else "engine started"
    return f"{said}; {did}"
