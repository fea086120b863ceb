"""`tuner sim serve`'s start, as `vllm serve` starts: the config checks, the simulated model
load, the start-up log lines, then the port (`tuner.sim.server`'s routes behind it).

`engine_setup` reads the model, the accelerator and the flags the command was given, and
refuses a bad value as a UserError (exit 2) before anything is logged; `serve` then refuses
what vLLM refuses at its start.

Refused configs exit 1 with vLLM's message, and the port opens only after the (simulated) model
load, as vLLM's does.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TypedDict

from aiohttp import web

from tuner import __version__
from tuner.measure import startup_phases as sp
from tuner.measure.startup_phases import vllm_line
from tuner.sim.boot import (
    COMPILE_RANGE,
    GRAPH_CAPTURE_GIB,
    boot_phases,
    compile_cache_hit,
    is_eager,
)
from tuner.sim.faults import (
    ENGINE_INIT_FAILED,
    REFUSE_START_MESSAGE,
    busy_message,
    count_start,
    note_exit,
)
from tuner.sim.memory import (
    EngineConfig,
    MemoryBreakdown,
    config_error,
    devices_error,
    memory_breakdown,
    resolve_flags,
    startup_error,
)
from tuner.sim.profile_file import load_gpu
from tuner.sim.profiles import GiB, GpuProfile, ModelProfile, load_model
from tuner.sim.replicas import Replicas
from tuner.sim.server import ServeOptions, SimServer
from tuner.spec.values import Flags, Scalar


class EngineSetup(TypedDict):
    """The `ServeOptions` fields the model, the accelerator and the flags make."""

    model: ModelProfile
    gpu: GpuProfile
    flags: dict[str, Scalar]  # the flags given (no None), VLLM_CPU_KVCACHE_SPACE among them
    model_path: str


def engine_setup(model_path: str, gpu: str, flags: Flags) -> EngineSetup:
    """The simulated engine's model, accelerator and flags: bad values are a UserError
    here, before the port opens."""
    profile = load_model(model_path)
    accelerator = load_gpu(gpu)
    env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE") or None}
    given = {k: v for k, v in {**flags, **env}.items() if v is not None}
    resolve_flags(profile, accelerator, given)
    return {"model": profile, "gpu": accelerator, "flags": given, "model_path": model_path}


def serve(opts: ServeOptions) -> int:
    """Start like vLLM: validate, "load" the model, size the KV cache, then open the port.

    Returns the process exit code: 1 for a refused config or a port in use (as vLLM).
    """
    cfg = resolve_flags(opts.model, opts.gpu, opts.flags)
    if message := config_error(opts.model, opts.gpu, cfg) or devices_error(
        opts.gpu, cfg, os.environ.get("CUDA_VISIBLE_DEVICES")
    ):
        return _refuse(f"ValueError: {message}")
    _log(
        f"simulated vLLM engine (tuner {__version__}): model={opts.model_path} gpu={opts.gpu.name}"
    )
    _log(f"non-default args: {cfg}")
    _log(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")
    time.sleep(opts.load_delay_s + opts.faults.slow_start_s)
    if opts.faults.busy_starts or opts.faults.state:
        try:
            return _serve(opts, cfg, count_start(opts.faults))
        finally:
            note_exit(opts.faults)
    return _serve(opts, cfg, 0)


def _serve(opts: ServeOptions, cfg: EngineConfig, start: int) -> int:
    """`serve` from the model's load on; `start`: this start's number (0: not counted)."""
    if start and start <= opts.faults.busy_starts:  # another process holds the GPU's memory
        busy = busy_message(opts.gpu.memory_bytes, cfg.gpu_memory_utilization)
        return _refuse(f"{busy}\n{ENGINE_INIT_FAILED}")
    if opts.faults.refuse_start:
        return _refuse(REFUSE_START_MESSAGE.format("{'EngineCore_DP0': 1}"))
    if message := startup_error(opts.model, opts.gpu, cfg):
        return _refuse(f"ValueError: {message}")
    mem = memory_breakdown(opts.model, opts.gpu, cfg)
    log_phases(opts, mem, cfg.max_model_len)
    tp, dp = cfg.tensor_parallel_size, cfg.data_parallel_size
    _log(f"deployment shape: data_parallel_size={dp} x tensor_parallel_size={tp} ({dp * tp} GPUs)")
    _log(f"(# blocks: {mem.num_blocks})")
    server = SimServer(Replicas(opts.model, opts.gpu, opts.flags), opts)
    _log(f"Starting vLLM API server on http://{opts.host}:{opts.port}")
    try:
        web.run_app(
            server.app(),
            host=opts.host,
            port=opts.port,
            print=lambda _: _log("Application startup complete."),
            access_log=None,
            shutdown_timeout=1.0,
        )
    except OSError as exc:
        return _refuse(f"OSError: {exc}")
    return 0


def log_phases(opts: ServeOptions, mem: MemoryBreakdown, tokens_per_request: int) -> None:
    """The start-up's phases in vLLM's words (`tuner.measure.startup_phases`), as a real
    engine on this accelerator would take them (`tuner.sim.boot`: SIMULATED seconds, the
    compile cold on a config's first start under this compile cache, cached after)."""
    eager = is_eager(opts.flags)
    key = [opts.model_path, opts.gpu.name, sorted((k, str(v)) for k, v in opts.flags.items())]
    cached = not eager and compile_cache_hit(os.environ.get("VLLM_CACHE_ROOT"), key)
    cpu = opts.gpu.platform == "cpu"
    phases = boot_phases(opts.model.weight_bytes, eager=eager, cached=cached, cpu=cpu)
    _log(vllm_line(sp.LOADING_WEIGHTS, phases.loading_s) + " (simulated)")
    _log(
        vllm_line(sp.MODEL_LOADING, f"{mem.weights_bytes / GiB:.2f}", phases.loading_s)
        + " (simulated)"
    )
    if phases.compile_s:
        how = sp.CACHED if cached else sp.COMPILED
        _log(vllm_line(how, COMPILE_RANGE, phases.compile_s) + " (simulated)")
    _log(vllm_line(sp.KV_CACHE_MEMORY, f"{mem.kv_cache_bytes / GiB:.2f}"))
    device = "CPU" if cpu else "GPU"
    tokens, most = mem.kv_cache_tokens, tokens_per_request
    _log(vllm_line(sp.KV_CACHE_SIZE, device, f"{tokens:,}", f"{most:,}", tokens / most))
    if phases.graph_capture_s:
        line = vllm_line(sp.GRAPH_CAPTURE, phases.graph_capture_s, GRAPH_CAPTURE_GIB)
        _log(line + " (simulated)")


def _log(line: str) -> None:
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [sim] {line}", flush=True)


def _refuse(line: str) -> int:
    print(line, file=sys.stderr, flush=True)
    return 1
