"""Start, watch, classify and stop an engine process (real vLLM or `tuner sim serve` alike).

engine argv (from `tuner.spec.space`) → `EngineProcess` → ready (`/health`, `/v1/models`, the
port proven the engine's own) → the workload runs → stopped, its whole process group gone.

Modules:
- `process`: `EngineProcess` (start in its own process group, parent-death signal, CPU
  pinning, `wait_ready`, `stop`), `identity`/`stop_orphan` for a dead tuner's engine;
- `ready`: readiness polling and `ReadyInfo` (start-up seconds, vLLM version);
- `ports`: free ports, waiting for a port's release, who holds a port (`/proc`);
- `failures`: why an engine failed to start, classified from its log (`Failure`,
  `EngineStartFailed`, `classify_failure`);
- `gpu_memory`: the GPUs' memory as the box's state (nvidia-smi, NVML), and the waits for a
  busy GPU and for a stopped engine's memory;
- `cores`: the client's CPUs beside a pinned engine;
- `sockets`: a private folder for the engine's IPC sockets, removed once it stopped;
- `vllm_flags`: the flags an engine accepts, asked of vLLM's own parser in its python.

What may be assumed: nothing here knows whether the engine is real or simulated, nor reads a
study file or a trial; a stopped engine leaves no process and its port is free.

Re-exported here: the names without third-party imports. `EngineProcess` and `wait_ready` load
httpx: import them from `tuner.engine.process` and `tuner.engine.ready`.
"""

from tuner.engine.cores import client_off_engine_cores
from tuner.engine.failures import EngineStartFailed, Failure, classify_failure
from tuner.engine.ports import free_port, port_holder, port_is_free, wait_port_free

__all__ = [
    "EngineStartFailed",
    "Failure",
    "classify_failure",
    "client_off_engine_cores",
    "free_port",
    "port_holder",
    "port_is_free",
    "wait_port_free",
]
