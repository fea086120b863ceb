"""Faults `tuner sim serve` injects on purpose, so the tuner's recovery can be tested cheaply.

- refuse_start: fail at start-up after the load delay, with an engine-init error (exit 1);
- crash_after N: once N requests have started, the process exits abruptly (os._exit)
  after the next engine step, mid-stream for the requests in flight;
- hang_after N: once N requests have started, the engine stops after the next step:
  connections stay open, no more tokens come, /health still answers 200;
- slow_start_s S: S more seconds before the port opens;
- no_usage: streams carry no `usage` chunk, even when the client asks for one (as some
  OpenAI-compatible servers do), so the client must count output tokens from the text.

A GPU box's faults (docs/reliability.md, "A busy GPU"), counted across processes in a state
file (`state`, JSON) since each trial starts a new engine:

- busy_starts N: the first N starts refuse as vLLM 0.32 does when another process holds the
  GPU's memory (vllm/v1/worker/utils.py, `request_memory`), in its words (exit 1);
- gpu_fault_after N: once N requests have started, the engine dies after the next step with
  PyTorch's "CUDA error: an illegal memory access was encountered" (exit 1);
- release_s S: the engine's memory stays held S seconds after its exit (the state file's
  `release_at`, which the tests' stand-in nvidia-smi reads; `engine_pid` while it is up).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REFUSE_START_MESSAGE = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {} (simulated fault: --fault-refuse-start)"
)


# vLLM 0.32's words (vllm/v1/worker/utils.py, `request_memory`), then the API server's.
BUSY_MESSAGE = (
    "ValueError: Free memory on device cuda:0 ({free_gib:.2f}/{total_gib:.2f} GiB) on startup is "
    "less than desired GPU memory utilization ({utilization}, {requested_gib:.2f} GiB). Decrease "
    "GPU memory utilization or reduce GPU memory used by other processes."
)
ENGINE_INIT_FAILED = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore_DP0': 1}"
)
BUSY_FREE_FRACTION = 0.07  # what another process leaves free (3.25 of 47.41 GiB in vLLM's example)
GPU_FAULT_MESSAGE = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


@dataclass(frozen=True, slots=True)
class FaultPlan:
    refuse_start: bool = False
    crash_after: int | None = None
    hang_after: int | None = None
    slow_start_s: float = 0.0
    no_usage: bool = False
    busy_starts: int = 0
    gpu_fault_after: int | None = None
    release_s: float = 0.0
    state: str | None = None  # the state file (starts, engine_pid, release_at)


@contextlib.contextmanager
def _state(path: str | None) -> Iterator[dict[str, object]]:
    """The state file's contents, locked, written back on exit (a dict only, without a file)."""
    if path is None:
        yield {}
        return
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        data: dict[str, object] = json.loads(text) if text.strip() else {}
        yield data
        f.seek(0)
        f.truncate()
        f.write(json.dumps(data))


def count_start(plan: FaultPlan) -> int:
    """This start's number (1 for the first), counted in the state file; its pid noted."""
    with _state(plan.state) as data:
        starts = int(str(data.get("starts", 0))) + 1
        data["starts"], data["engine_pid"] = starts, os.getpid()
    return starts


def note_exit(plan: FaultPlan, *, held: bool = True) -> None:
    """The engine is gone; its memory comes back `release_s` later (now, when not `held`)."""
    with _state(plan.state) as data:
        data.pop("engine_pid", None)
        data["release_at"] = time.time() + (plan.release_s if held else 0.0)


def busy_message(total_bytes: float, utilization: float) -> str:
    """vLLM's refusal on a GPU whose memory another process holds (all but 7 % of it)."""
    gib = total_bytes / 2**30
    return BUSY_MESSAGE.format(
        free_gib=gib * BUSY_FREE_FRACTION,
        total_gib=gib,
        utilization=utilization,
        requested_gib=gib * utilization,
    )


def held_mib(state_file: str | Path, engine_mib: int, now: float | None = None) -> int:
    """What the stand-in nvidia-smi shows the simulated engine holding: `engine_mib` while it
    is up (its pid alive) or its memory is not yet released, else 0."""
    try:
        data = json.loads(Path(state_file).read_text() or "{}")
    except (OSError, ValueError):
        return 0
    pid = data.get("engine_pid")
    up = isinstance(pid, int) and Path(f"/proc/{pid}").exists()
    pending = float(data.get("release_at", 0.0)) > (time.time() if now is None else now)
    return engine_mib if up or pending else 0


class FaultState:
    """Counts started requests and says when a planned fault fires."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.started = 0
        self.hung = False

    def request_started(self) -> None:
        self.started += 1

    def after_step(self) -> None:
        """Called after every engine step: crash or hang once enough requests started."""
        plan = self.plan
        if plan.gpu_fault_after is not None and self.started >= plan.gpu_fault_after:
            print(
                f"ERROR [core.py] EngineCore encountered a fatal error.\n{GPU_FAULT_MESSAGE}",
                file=sys.stderr,
                flush=True,
            )
            note_exit(plan)
            os._exit(1)
        if plan.crash_after is not None and self.started >= plan.crash_after:
            print(
                f"simulated fault: engine process crashed after {self.started} requests "
                "(--fault-crash-after)",
                file=sys.stderr,
                flush=True,
            )
            os._exit(1)
        if plan.hang_after is not None and self.started >= plan.hang_after and not self.hung:
            self.hung = True
            print(
                f"simulated fault: engine hung after {self.started} requests (--fault-hang-after)",
                file=sys.stderr,
                flush=True,
            )
