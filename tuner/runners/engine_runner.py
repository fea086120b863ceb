"""`EngineRunner`: one configuration measured on an engine process. It starts the engine (real
vLLM or `tuner sim serve`: both are just argv) in its own process group with its own IPC
folder and cache root, waits until it is ready (another port when one was taken), drives the
workload over HTTP, and stops it; what it cannot measure it says why (`FailureKind`). The
runner interface it implements: `tuner.runners.trial_runner`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from tuner.engine.cores import client_off_engine_cores
from tuner.engine.sockets import private_ipc_dir
from tuner.errors import FailureKind
from tuner.measure.measurement import Measurement
from tuner.measure.startup_phases import parse_startup_phases
from tuner.runners.load_runs import cache_run, measure_all
from tuner.runners.trial_runner import (
    TrialContext,
    TrialRunner,
    failed_measurement,
    nothing_completed,
    run_label,
)
from tuner.spec.inputs import API_KEY_ENV
from tuner.spec.parts import Measuring
from tuner.spec.space import engine_argv, engine_env
from tuner.spec.workload import WorkloadSpec
from tuner.workload.cold import DEV_MODE_ENV, is_loopback

if TYPE_CHECKING:
    from tuner.engine.gpu_memory import BoxMemory
    from tuner.engine.process import EngineProcess
    from tuner.workload.request import BenchRequest

PORT_ATTEMPTS = 3
GPU_FAULT_RETRIES = 1  # a GPU fault: one more fresh start of the same trial
BUSY_WAITS = 3  # a busy GPU: this many waits of `trial.busy_wait_s`, then the run stops
# Why a launch is tried again (`EngineRunner._launch`)
_LAUNCH_AGAIN = frozenset({FailureKind.PORT_IN_USE, FailureKind.BOX_BUSY, FailureKind.GPU_FAULT})
# vLLM's cache root (vllm/envs.py, 0.32: default ~/.cache/vllm): compiled graphs, kernels and
# model info that a later start reuses. Every trial of a study gets one, beside its logs.
CACHE_ROOT_ENV = "VLLM_CACHE_ROOT"
CACHE_DIR = "vllm-cache"


def is_simulated_version(version: str | None) -> bool:
    """`tuner sim serve` answers /version with "sim-<tuner version>"."""
    return version is not None and version.startswith("sim-")


def redact(
    argv: list[str], env: dict[str, str], secret: str | None
) -> tuple[list[str], dict[str, str]]:
    """The argv and env as stored and logged: the API key never leaves memory."""
    if not secret:
        return list(argv), dict(env)
    return (
        ["***" if a == secret else a for a in argv],
        {k: ("***" if v == secret else v) for k, v in env.items()},
    )


class EngineRunner(TrialRunner):
    """Start the engine as a child process, measure it over HTTP, stop it."""

    def __init__(
        self,
        spec: Measuring,
        log_dir: Path,
        storage_url: str,
        *,
        gpus: list[int] | None = None,
        cores: list[int] | None = None,
        all_engine_cores: list[int] | None = None,
    ) -> None:
        """`storage_url`, the study's database as resolved by the store above (a runner
        measures, it never opens storage), keeps the logs of two databases apart in one
        `log_dir` (see `log_folder`).

        One GPU slot of several (`tuner.run.slots`): its engines see only `gpus`
        (`CUDA_VISIBLE_DEVICES`), are pinned to `cores` instead of `engine.cpu_affinity`,
        and the client keeps off `all_engine_cores` (every slot's)."""
        super().__init__(spec)
        self.log_dir = Path(log_dir).absolute()
        self.storage_url = storage_url
        self.api_key = os.environ.get(spec.engine.api_key_env) if spec.engine.api_key_env else None
        self._engine: EngineProcess | None = None
        self.gpus = gpus
        self.cores = cores if cores is not None else spec.engine.cpu_affinity
        self.client_avoid = all_engine_cores if all_engine_cores is not None else self.cores
        self.implied: dict[
            str, tuple[list[BenchRequest], float]
        ] = {}  # per scenario: its requests' rate

    def measure(self, ctx: TrialContext) -> Measurement:
        spec = self.spec
        env = engine_env(spec, ctx.params)
        if self.api_key:
            env[API_KEY_ENV] = self.api_key
        if is_loopback(spec.engine.host):  # its cache reset between runs (workload.cold)
            env.setdefault(DEV_MODE_ENV, "1")
        if self.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpus)
        folder = log_folder(self.log_dir, self.storage_url, ctx.study_name)
        if CACHE_ROOT_ENV not in env and CACHE_ROOT_ENV not in os.environ:  # the user's wins
            env[CACHE_ROOT_ENV] = str(folder / CACHE_DIR)
        with private_ipc_dir(env):  # vLLM's sockets: gone with the engine (engine.sockets)
            return self._launch(ctx, env, folder)

    def _launch(self, ctx: TrialContext, env: dict[str, str], folder: Path) -> Measurement:
        """Start the engine, run the workload, stop it; start again on another port when one
        was taken, after a wait when another process held the GPU's memory (`BUSY_WAITS` of
        `trial.busy_wait_s`), and once more after a GPU fault (docs/reliability.md)."""
        from tuner.engine import gpu_memory

        spec, started = self.spec, int(time.time())
        gpus = gpu_memory.engine_gpus(self.gpus, {**os.environ, **env})
        tries = _Tries()
        engine_s = 0.0  # over every launch of this trial (a port taken: another launch)
        while True:
            attempt = tries.launches + 1
            again = f"-attempt{attempt}" if attempt > 1 else ""
            name = ctx.log_name or f"trial-{ctx.number:04d}"
            log_path = folder / f"{name}-{started}{again}.log"
            box = gpu_memory.read_box()  # None: no GPU to read (the simulator, a CPU build)
            m, again_why = self._start_once(ctx, env, log_path, box, gpus, engine_s)
            engine_s = m.engine_s
            m.box_waits, m.gpu_faults = tries.busy, tries.faults
            if again_why == FailureKind.GPU_FAULT and box is not None:  # name the GPU
                named = ", ".join(f"GPU {g.index} ({g.name})" for g in box.of(gpus))
                m.failure_reason = f"{m.failure_reason} [{named}]"
            if m.failure_kind == FailureKind.GPU_FAULT:
                tries.fault_reason = m.failure_reason or ""
            elif m.failure_kind is None and tries.faults:  # measured on its retry: why retried
                m.failure_reason = tries.fault_reason
            if again_why is None or not tries.again(again_why):
                return m
            if again_why == FailureKind.BOX_BUSY:
                ctx.phase(f"GPU busy: waiting {spec.trial.busy_wait_s:g} s")
                need = _memory_fraction(m.argv)
                gpu_memory.wait_free(need, gpus, spec.trial.busy_wait_s)

    def _start_once(
        self,
        ctx: TrialContext,
        env: dict[str, str],
        log_path: Path,
        box: BoxMemory | None,
        gpus: list[int] | None,
        engine_s: float,
    ) -> tuple[Measurement, str | None]:
        """One launch: the measurement, and why to launch again (a `FailureKind`: the port
        taken, the GPU busy, a GPU fault) or None."""
        from tuner.engine import gpu_memory
        from tuner.engine.failures import EngineStartFailed, on_busy_box
        from tuner.engine.ports import free_port, wait_port_free
        from tuner.engine.process import EngineProcess

        spec = self.spec
        # The port is free when chosen, but another process may bind it before the engine
        # does: then the engine's log says so, and another port is tried.
        port = free_port(spec.engine.host)
        argv = engine_argv(spec, ctx.params, port=port)
        shown_argv, shown_env = redact(argv, env, self.api_key)
        m = Measurement(argv=shown_argv, env=shown_env, log_path=str(log_path))
        base_url = f"http://{spec.engine.host}:{port}"
        ctx.phase("starting engine")
        why: str | None = None
        launched = time.monotonic()
        engine = EngineProcess.start(argv, env, log_path, cpu_affinity=self.cores)
        self._engine = engine
        ctx.on_engine_started(engine.identity(), str(log_path))
        try:
            try:
                ready = engine.wait_ready(
                    base_url, spec.engine.startup_timeout_s, api_key=self.api_key
                )
            except EngineStartFailed as exc:
                held = gpu_memory.busy_now(box, gpus) if box is not None else ""
                f = on_busy_box(exc.failure, held)
                why = f.kind if f.kind in _LAUNCH_AGAIN else None
                return failed_measurement(m, f.kind, f.reason, f.log_tail), why
            # launch until ready, with any earlier launch a taken port ended
            m.startup_s, m.vllm_version = engine_s + ready.startup_s, ready.version
            m.simulated = is_simulated_version(ready.version)
            phases = parse_startup_phases(engine.read_log())  # logged before ready
            run = partial(self._run_workload, ctx, engine, base_url, m)
            m = measure_all(spec, self.objective, run, ctx.beat, ctx.bracket)
            m.startup_phases = phases
            why = m.failure_kind if m.failure_kind == FailureKind.GPU_FAULT else None
            return m, why
        finally:
            ctx.phase("stopping")
            engine.stop()
            engine_s += time.monotonic() - launched
            m.engine_s = engine_s
            # ready until stopped (warm-ups, every run, the stop): engine_s is the sum;
            # an engine never ready spent all its time starting (no startup_s, 0 here)
            up = m.startup_s
            m.workload_s = max(engine_s - up, 0.0) if up is not None else 0.0
            self._engine = None
            ctx.on_engine_stopped()
            if why != FailureKind.PORT_IN_USE:  # a port someone else holds is not ours
                wait_port_free(spec.engine.host, port, timeout_s=30)
            if box is not None:  # its memory back before the next start reads the box
                gpu_memory.wait_released(box, gpus, spec.trial.busy_wait_s)

    def _run_workload(
        self,
        ctx: TrialContext,
        engine: EngineProcess,
        base_url: str,
        base: Measurement,
        name: str,
        w: WorkloadSpec,
        /,
        *,
        whole: bool = False,
    ) -> Measurement:
        """One run of workload `w` (scenario `name`) against the engine that is up; `whole`:
        never stopped early."""
        from tuner.engine.failures import gpu_fault, tail_lines
        from tuner.workload.benchmark import BenchmarkAborted, BenchmarkPruned, run_benchmark

        spec, m = self.spec, replace(base, rate_steps=[], scenarios={}, prefix_cache_runs=[])
        label = run_label(self.objective, name, w)

        def crashed() -> str | None:
            code = engine.poll()
            return None if code is None else f"engine crashed during measurement (exit {code})"

        def progress(done: int, total: int) -> None:
            ctx.phase(f"{label}measuring {done} of {total} requests")

        ctx.phase(f"{label}warming up" if w.num_warmups else f"{label}measuring")
        t0 = time.monotonic()
        with client_off_engine_cores(self.client_avoid):
            try:
                result = run_benchmark(
                    w,
                    base_url,
                    spec.engine.served_model_name or spec.engine.model,
                    self.requests_for(name, w),
                    api_key=self.api_key,
                    on_progress=progress,
                    should_abort=crashed,
                    stall_timeout_s=spec.trial.stall_timeout_s,
                    tokenizer=self.tokenizer,
                    checkpoint=None if whole else ctx.checkpoints.get(name, ctx.checkpoint),
                    checkpoint_every_s=ctx.check_every_s,
                    checkpoint_every_requests=ctx.check_every_requests,
                )
            except BenchmarkPruned as exc:
                m.prefix_cache_runs = [cache_run(self, name, w, exc.result)]
                m.workload_s = time.monotonic() - t0
                m.metrics, m.records = exc.result.metrics, exc.result.records
                m.pruned_reason, m.pruned_at_s = exc.reason, exc.result.duration_s
                m.pruned_engine, m.pruned_decision = exc.engine, exc.decision
                return m
            except BenchmarkAborted as exc:
                log = engine.read_log()
                fault = gpu_fault(log)  # the GPU failed under it: the box's, retried once
                if fault is not None:
                    reason = f"{exc.reason}: {fault.reason}"
                    return failed_measurement(m, fault.kind, reason, fault.log_tail)
                return failed_measurement(m, _abort_kind(exc.reason), exc.reason, tail_lines(log))
        m.workload_s = time.monotonic() - t0
        m.metrics, m.ci, m.records = result.metrics, result.ci, result.records
        m.prefix_cache_runs = [cache_run(self, name, w, result)]
        return nothing_completed(m, engine.log_tail()) or m

    def close(self) -> None:
        if self._engine is not None:
            self._engine.stop()

    def kill(self) -> None:
        if self._engine is not None:
            self._engine.stop(grace_s=0)  # straight through SIGINT and SIGTERM to SIGKILL


@dataclass
class _Tries:
    """One trial's launches so far, and whether another is allowed."""

    launches: int = 0
    ports: int = 0
    busy: int = 0  # starts that found the GPU busy (each followed by a wait)
    faults: int = 0
    fault_reason: str = ""  # the last GPU fault's

    def again(self, why: str) -> bool:
        """Count this launch's ending `why`; whether to launch again."""
        self.launches += 1
        if why == FailureKind.PORT_IN_USE:
            self.ports += 1
            return self.ports < PORT_ATTEMPTS
        if why == FailureKind.BOX_BUSY:
            self.busy += 1
            return self.busy <= BUSY_WAITS
        self.faults += 1
        return self.faults <= GPU_FAULT_RETRIES


def _memory_fraction(argv: list[str] | None) -> float:
    """The `--gpu-memory-utilization` of an engine's argv (vLLM's default 0.9 without it)."""
    args = argv or []
    for i, a in enumerate(args):
        if a.startswith("--gpu-memory-utilization="):
            return float(a.split("=", 1)[1])
        if a == "--gpu-memory-utilization" and i + 1 < len(args):
            return float(args[i + 1])
    return 0.9


def log_folder(log_dir: Path, storage_url: str, study_name: str) -> Path:
    """`<log_dir>/<study>-<8 hex>`: the hex hashes the database (a SQLite file by its resolved
    path, any other by its URL without password) and the study name, so two databases sharing
    a log directory, or two studies whose names read alike, never write into each other's."""
    import hashlib
    import re

    from sqlalchemy.engine import make_url

    url = make_url(storage_url)
    db = url.database or ""
    if url.drivername.startswith("sqlite") and db not in ("", ":memory:"):
        where = "sqlite:" + str(Path(db.removeprefix("file:")).resolve())
    else:
        where = url.render_as_string(hide_password=True)
    digest = hashlib.sha256(f"{where}\n{study_name}".encode()).hexdigest()[:8]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", study_name)[:80] or "study"
    return log_dir / f"{readable}-{digest}"


def _abort_kind(reason: str) -> str:
    """Why the workload stopped: the engine hung or died, or it refused the first request
    (as `vllm bench serve`, the run stops there: e.g. a prompt longer than max-model-len)."""
    if reason.startswith("initial test request failed"):
        return FailureKind.REQUESTS_FAILED
    return FailureKind.ENGINE_HUNG if "hung" in reason else FailureKind.ENGINE_CRASHED
