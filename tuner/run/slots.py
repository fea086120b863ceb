"""GPU slots on one box: several trials at once in one `tuner run`, one per slot.

`--gpus 0-7 --gpus-per-trial 4` (or `hardware.gpus` / `hardware.gpus_per_trial`) splits the GPUs
into disjoint slots. Each slot is one worker (`tuner.run.loop.StudyLoop`, in its own thread)
with its own runner: its engines see only the slot's GPUs (`CUDA_VISIBLE_DEVICES`), take their
own free port, and, when `engine.cpu_affinity` is set, their own share of those cores. The loops
share the study exactly as workers on several hosts do (global budget, one config measured at a
time, dead-worker recovery). The main thread handles the signals: one Ctrl-C interrupts every
slot's trial, and a second kills their engines at once.

A slot's next trial starts only after its runner stopped the last engine: `EngineProcess.stop`
returns when no process of the engine's group is left, also after a crash.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import FrameType

import numpy as np

from tuner.errors import UserError
from tuner.run.lock import StudyLock, takes_lock
from tuner.run.loop import StudyLoop
from tuner.run.signals import Interrupted
from tuner.run.summary import RunSummary
from tuner.spec.parts import Serving
from tuner.workload.loop import STOP_SIGNALS

JOIN_POLL_S = 0.2  # the main thread wakes this often, so that signals reach it


@dataclass(frozen=True)
class Slot:
    gpus: list[int]
    cores: list[int] | None  # None: no cpu_affinity in the study file

    @property
    def label(self) -> str:
        return "GPU " + ",".join(str(g) for g in self.gpus)


def plan_slots(spec: Serving) -> list[Slot]:
    """The study's slots; [] when it runs one trial at a time (the cautious default)."""
    gpu_sets = spec.hardware.gpu_slots()
    if not gpu_sets:
        return []
    cores = spec.engine.cpu_affinity
    if not cores:
        return [Slot(g, None) for g in gpu_sets]
    n = len(gpu_sets)
    if len(cores) < n:
        raise UserError(
            f"engine.cpu_affinity has {len(cores)} core(s) for {n} GPU slots: give each slot "
            "at least one core, or fewer slots"
        )
    # in order, each slot a run of the cores; the first len(cores) % n slots one core more
    shares = np.array_split(np.asarray(cores, dtype=int), n)
    return [Slot(g, share.tolist()) for g, share in zip(gpu_sets, shares, strict=True)]


def merge(summaries: list[RunSummary]) -> RunSummary:
    """One summary of every slot's run (counts added, lists joined)."""
    out = RunSummary(summaries[0].study_name)
    for s in summaries:
        for f in fields(RunSummary):
            if f.name == "study_name":
                continue
            a, b = getattr(out, f.name), getattr(s, f.name)
            if isinstance(a, bool):
                setattr(out, f.name, a or b)
            elif isinstance(a, list):
                # slots may recover the same dead worker's trial: count it once
                dedupe = f.name == "interrupted_recovered"
                setattr(out, f.name, sorted({*a, *b}) if dedupe else a + b)
            else:
                setattr(out, f.name, a + b)
    return out


def run_slots(
    loops: list[StudyLoop],
    *,
    n_trials: int | None,
    timeout_s: float | None,
    on_start: Callable[[], None] = lambda: None,
    on_stop: Callable[[], None] = lambda: None,
) -> RunSummary:
    """Run one loop per slot in threads until the study's budget is met; one summary.

    `--n-trials N` gives each slot N more. An exception in one slot (a broken study) stops
    the others; the first one is raised once every thread has ended. The confirmation of the
    best configs (`--confirm`) is the study's, not a slot's: `tuner.run.session` runs it once,
    after the slots.
    """
    first = loops[0]
    results: dict[int, RunSummary] = {}
    errors: list[BaseException] = []
    lock = StudyLock(first.store, first.name) if takes_lock(first.store) else None

    def work(i: int, loop: StudyLoop) -> None:
        try:
            results[i] = loop.run(n_trials=n_trials, timeout_s=timeout_s)
        except BaseException as exc:
            errors.append(exc)
            stop_all(getattr(exc, "signum", signal.SIGINT), close=False)

    signals_seen: list[int] = []

    def stop_all(signum: int, *, close: bool = True) -> None:
        for loop in loops:
            loop.stop_signal = signum
            loop.stop_event.set()
            if close:
                loop.runner.close()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signals_seen:
            for loop in loops:
                loop.runner.kill()
            return
        signals_seen.append(signum)
        stop_all(signum)

    with contextlib.ExitStack() as stack:
        if lock is not None:
            stack.enter_context(lock)
        old = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
        stack.callback(lambda: [signal.signal(s, h) for s, h in old.items()])
        on_start()
        stack.callback(on_stop)
        threads = [
            threading.Thread(target=work, args=(i, loop), name=f"slot-{i}")
            for i, loop in enumerate(loops)
        ]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(JOIN_POLL_S)
    if signals_seen:
        raise Interrupted(signals_seen[0])
    real = [e for e in errors if not isinstance(e, Interrupted)]
    if real:
        raise real[0]
    if errors:
        raise errors[0]
    return merge([results[i] for i in sorted(results)])
