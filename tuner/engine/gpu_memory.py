"""The GPUs' memory as the box's state: how much each GPU has in use, and which processes hold
it (docs/reliability.md, "A busy GPU").

Why memory held by another process is not the config's fault (vLLM refuses to start short of
`gpu-memory-utilization` × the total), and how long the runner waits: that section. What callers
may assume: the runner reads it before each start, waits after each stop until the engine's
memory is back, and waits (bounded) on a start that found the GPU busy.

Read with nvidia-smi (an argv list, never a shell), else NVML (`pynvml`, when importable); a box
where neither answers has no GPU to read, and nothing here waits. The parsers are pure.
nvidia-smi numbers GPUs by PCI bus; `CUDA_VISIBLE_DEVICES` counts in CUDA's order, which is the
same unless `CUDA_DEVICE_ORDER` says otherwise (set it to PCI_BUS_ID on a mixed box).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SMI_GPUS = [
    "nvidia-smi",
    "--query-gpu=index,name,memory.used,memory.total,uuid",
    "--format=csv,noheader,nounits",
]
SMI_APPS = [
    "nvidia-smi",
    "--query-compute-apps=pid,used_memory,gpu_uuid",
    "--format=csv,noheader,nounits",
]
SMI_TIMEOUT_S = 10.0
# Memory an engine may leave in use after its stop without holding it (the driver's own).
RELEASE_SLACK_MIB = 256
# Less than this held by other processes does not make a failed start the box's fault.
OTHERS_FLOOR_MIB = 1024
POLL_S = 1.0


@dataclass(frozen=True)
class GpuMemory:
    """One GPU as nvidia-smi names it; MiB."""

    index: int
    name: str
    used_mib: int
    total_mib: int
    uuid: str = ""

    @property
    def free_mib(self) -> int:
        return max(self.total_mib - self.used_mib, 0)

    @property
    def free_fraction(self) -> float:
        """The highest `gpu-memory-utilization` vLLM would start with now (free / total,
        rounded down to 0.01)."""
        return int(100 * self.free_mib / self.total_mib) / 100 if self.total_mib else 0.0


@dataclass(frozen=True)
class GpuApp:
    """A process holding GPU memory (None: the driver does not say how much, or where)."""

    pid: int
    used_mib: int | None
    gpu_uuid: str = ""


@dataclass(frozen=True)
class BoxMemory:
    """Every GPU's memory and the processes holding it, read at one moment."""

    gpus: tuple[GpuMemory, ...]
    apps: tuple[GpuApp, ...] = ()

    def of(self, indexes: Iterable[int] | None) -> list[GpuMemory]:
        """The GPUs with these indexes (None: all of them)."""
        wanted = None if indexes is None else set(indexes)
        return [g for g in self.gpus if wanted is None or g.index in wanted]

    def holders(self, gpu: GpuMemory, exclude: Iterable[int] = ()) -> list[GpuApp]:
        """The processes holding memory on `gpu` (one the driver does not place: on all)."""
        skip = set(exclude)
        return [
            a
            for a in self.apps
            if a.pid not in skip and (not a.gpu_uuid or not gpu.uuid or a.gpu_uuid == gpu.uuid)
        ]

    def held_by_others_mib(self, gpu: GpuMemory, exclude: Iterable[int] = ()) -> int:
        return sum(a.used_mib or 0 for a in self.holders(gpu, exclude))


def _fields(line: str) -> list[str]:
    return [f.strip() for f in line.split(",")]


def _mib(text: str) -> int | None:
    """A MiB figure (`nounits`; "12345 MiB" with units), None for "[N/A]" and the like."""
    text = text.removesuffix("MiB").strip()
    return int(text) if text.isdigit() else None


def parse_gpus(text: str) -> list[GpuMemory]:
    """`nvidia-smi --query-gpu=index,name,memory.used,memory.total[,uuid]` in CSV without header
    or units; lines it cannot read are left out."""
    out = []
    for line in text.splitlines():
        f = _fields(line)
        if len(f) < 4 or not f[0].isdigit():
            continue
        used, total = _mib(f[2]), _mib(f[3])
        if used is None or total is None:
            continue
        out.append(GpuMemory(int(f[0]), f[1], used, total, f[4] if len(f) > 4 else ""))
    return out


def parse_apps(text: str) -> list[GpuApp]:
    """`nvidia-smi --query-compute-apps=pid,used_memory[,gpu_uuid]` in CSV without header; a
    line without a pid ("No running processes found") is left out."""
    out = []
    for line in text.splitlines():
        f = _fields(line)
        if len(f) < 2 or not f[0].isdigit():
            continue
        out.append(GpuApp(int(f[0]), _mib(f[1]), f[2] if len(f) > 2 else ""))
    return out


def _smi(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):  # not installed, not runnable, hung
        return None
    return done.stdout if done.returncode == 0 else None


def _from_smi() -> BoxMemory | None:
    text = _smi(SMI_GPUS)
    gpus = parse_gpus(text or "")
    if not gpus:
        return None
    return BoxMemory(tuple(gpus), tuple(parse_apps(_smi(SMI_APPS) or "")))


def _from_nvml() -> BoxMemory | None:
    try:
        import pynvml  # optional: only on GPU boxes

        pynvml.nvmlInit()
        try:
            gpus, apps = [], []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name, uuid = pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h)
                name = name.decode() if isinstance(name, bytes) else str(name)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                gpus.append(GpuMemory(i, name, mem.used >> 20, mem.total >> 20, uuid))
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    used = p.usedGpuMemory
                    apps.append(GpuApp(int(p.pid), used >> 20 if used else None, uuid))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # not installed, no driver, no device: nothing read this way
        return None
    return BoxMemory(tuple(gpus), tuple(apps)) if gpus else None


def read_box() -> BoxMemory | None:
    """The box's GPU memory now; None where neither nvidia-smi nor NVML finds a GPU."""
    return _from_smi() or _from_nvml()


def process_name(pid: int) -> str:
    """The command name of `pid` ("" where /proc does not say: another pid namespace)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def describe(box: BoxMemory, gpu: GpuMemory, names: Callable[[int], str] = process_name) -> str:
    """ "GPU 0 (NVIDIA A100 80GB): 3,328 of 81,920 MiB free, held by pid 42 (python3, 40,000
    MiB)": the GPU, its free memory and who holds the rest."""
    held = holders_text(box, gpu, names)
    who = f", held by {held}" if held else ""
    return f"GPU {gpu.index} ({gpu.name}): {gpu.free_mib:,} of {gpu.total_mib:,} MiB free{who}"


def holders_text(box: BoxMemory, gpu: GpuMemory, names: Callable[[int], str] = process_name) -> str:
    """ "pid 42 (python3, 40,000 MiB); pid 7 (...)": who holds memory on `gpu` ("": nobody)."""
    held = []
    for a in box.holders(gpu):
        what = ", ".join(x for x in (names(a.pid), _show_mib(a.used_mib)) if x)
        held.append(f"pid {a.pid}" + (f" ({what})" if what else ""))
    return "; ".join(held)


def _show_mib(mib: int | None) -> str:
    return f"{mib:,} MiB" if mib is not None else ""


def engine_gpus(gpus: list[int] | None, env: Mapping[str, str]) -> list[int] | None:
    """The GPUs an engine sees: the slot's, else `CUDA_VISIBLE_DEVICES` as plain indexes,
    else all (None). A UUID list or an empty one: all, as far as this module can tell."""
    if gpus is not None:
        return list(gpus)
    visible = env.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if visible and all(v.strip().isdigit() for v in visible):
        return [int(v) for v in visible]
    return None


def busy_now(box: BoxMemory, gpus: list[int] | None, floor_mib: int = OTHERS_FLOOR_MIB) -> str:
    """Which of the engine's GPUs other processes hold at least `floor_mib` of, described;
    "" when none does (read before the engine starts: every holder is another process)."""
    busy = [g for g in box.of(gpus) if box.held_by_others_mib(g) >= floor_mib]
    return "; ".join(describe(box, g) for g in busy)


def wait_released(
    before: BoxMemory,
    gpus: list[int] | None,
    timeout_s: float,
    read: Callable[[], BoxMemory | None] = read_box,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """After an engine's stop: wait until each of its GPUs has no more in use than `before`
    (read before its start) plus `RELEASE_SLACK_MIB`. False when `timeout_s` passed first."""
    used_before = {g.index: g.used_mib for g in before.of(gpus)}
    deadline = time.monotonic() + timeout_s
    while True:
        now = read()
        if now is None or all(
            g.used_mib <= used_before.get(g.index, g.used_mib) + RELEASE_SLACK_MIB
            for g in now.of(gpus)
        ):
            return True
        if time.monotonic() >= deadline:
            return False
        sleep(min(POLL_S, max(deadline - time.monotonic(), 0.0)))


def wait_free(
    fraction: float,
    gpus: list[int] | None,
    timeout_s: float,
    read: Callable[[], BoxMemory | None] = read_box,
    sleep: Callable[[float], None] = time.sleep,
) -> BoxMemory | None:
    """Wait up to `timeout_s` until each of the engine's GPUs has `fraction` of its total
    free (what vLLM asks for); the last reading (None: no GPU to read, after the whole wait)."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = read()
        if now is not None and all(g.free_fraction >= fraction for g in now.of(gpus)):
            return now
        left = deadline - time.monotonic()
        if left <= 0:
            return now
        sleep(min(POLL_S, left) if now is not None else left)
