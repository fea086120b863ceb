"""The GPUs on this box, named as the simulator's built-in accelerators (`tuner.sim.profiles`).

nvidia-smi first (an argv list, never a shell), else NVML (`pynvml`, when installed); a box
with neither, or where both fail, has no GPU: the caller falls back to the simulated engine.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import UserError
from tuner.sim.profiles import GPUS

if TYPE_CHECKING:
    from tuner.engine.gpu_memory import BoxMemory

NVIDIA_SMI = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
NVIDIA_SMI_TIMEOUT_S = 20.0
# A driver's product name (lower case) → the built-in profile; the first match wins.
_NAMES = (
    (r"\bh200\b", "h200"),
    (r"\bh100\b.*\bpcie\b", "h100-pcie"),  # "NVIDIA H100 PCIe": not the SXM5 part
    (r"\bh100\b.*\bnvl\b", "h100-nvl"),  # "NVIDIA H100 NVL": 94 GB, 3.9 TB/s
    (r"\bh100\b", "h100"),
    # "NVIDIA A100 80GB PCIe": the PCIe card (P2P assumed; a host without it names
    # a100-pcie-nop2p itself: the driver's name does not tell)
    (r"\ba100\b.*80\s*gb.*\bpcie\b", "a100-pcie"),
    (r"\ba100\b.*80\s*gb|\ba100-sxm4?-80", "a100-80g"),
    (r"\bl40s\b", "l40s"),
    (r"\ba6000\b", "a6000"),
    (r"\bt4\b", "t4"),
)


@dataclass(frozen=True)
class Gpus:
    """What was found: the built-in name, how many, and the driver's own product name."""

    name: str
    count: int
    product: str
    source: str  # "nvidia-smi" or "NVML"


def builtin_name(product: str) -> str | None:
    """`NVIDIA RTX A6000` → `a6000`; None for a GPU the simulator has no profile of."""
    text = product.strip().lower()
    return next((name for pattern, name in _NAMES if re.search(pattern, text)), None)


def _from_nvidia_smi() -> list[str] | None:
    try:
        done = subprocess.run(
            NVIDIA_SMI, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):  # not installed, not runnable, hung
        return None
    if done.returncode != 0:
        return None
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _from_nvml() -> list[str] | None:
    try:
        import pynvml  # optional: only on GPU boxes

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            names = [
                pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)
            ]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # not installed, no driver, no device: no GPU found this way
        return None
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def detect() -> Gpus | None:
    """This box's GPUs, or None when it has none that nvidia-smi or NVML can see. Mixed
    models are refused (one study runs one kind), and so is one the simulator lacks."""
    for source, read in (("nvidia-smi", _from_nvidia_smi), ("NVML", _from_nvml)):
        products = read()
        if products:
            return named(source, products)
    return None


def named(source: str, products: list[str]) -> Gpus:
    """The GPUs `source` listed by product name, as one built-in kind."""
    kinds = sorted(set(products))
    if len(kinds) > 1:
        raise UserError(
            f"{source} lists GPUs of several models ({', '.join(kinds)}): "
            "give the ones to tune as --gpu NAME --count N"
        )
    name = builtin_name(kinds[0])
    if name is None:
        raise UserError(
            f"{source} found {len(products)}× {kinds[0]}, which the simulator has no "
            f"profile of: give --gpu NAME --count N (built in: {', '.join(sorted(GPUS))})"
        )
    return Gpus(name, len(products), kinds[0], source)


def memory_lines(
    read: Callable[[], BoxMemory | None] | None = None, wanted: float | None = None
) -> list[str]:
    """One line per GPU: the memory other processes hold (and which), and the highest
    `gpu-memory-utilization` vLLM would start with now (free / total: vLLM refuses to start
    with less free, `tuner.engine.gpu_memory`). `wanted`: the study's own, named when it
    would not start. None found: no lines."""
    from tuner.engine import gpu_memory

    box = (read or gpu_memory.read_box)()
    if box is None:
        return []
    lines = []
    for g in box.gpus:
        held = gpu_memory.holders_text(box, g)
        line = (
            f"GPU {g.index} ({g.name}): {box.held_by_others_mib(g):,} MiB in use by other "
            f"processes{f': {held}' if held else ''}; {g.free_mib:,} of {g.total_mib:,} MiB "
            f"free: gpu-memory-utilization up to {g.free_fraction:.2f} can start now"
        )
        if wanted is not None and wanted > g.free_fraction:
            line += f" (the study's {wanted:g} would not)"
        lines.append(line)
    return lines
