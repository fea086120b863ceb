"""`PlanRunner`: one configuration measured by the simulation core in virtual time, for
`tuner plan` (and the robustness check). The same `TrialRunner` interface as `EngineRunner`:
the study loop never asks which."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from tuner.errors import UserError
from tuner.measure.measurement import Measurement
from tuner.measure.metrics import run_metrics
from tuner.runners.load_runs import measure_all
from tuner.runners.trial_runner import (
    TrialContext,
    TrialRunner,
    failed_measurement,
    nothing_completed,
    run_label,
)
from tuner.sim.boot import estimated_startup_s
from tuner.sim.fit import SimWorkload
from tuner.sim.profile_file import load_gpu, platform_of
from tuner.sim.profiles import GpuProfile
from tuner.spec.parts import Measuring, Serving, Traffic
from tuner.spec.space import simulator_flags
from tuner.spec.values import Flags
from tuner.spec.workload import WorkloadSpec
from tuner.trial import PLANNED_VERSION
from tuner.workload.schedule import arrival_times

if TYPE_CHECKING:
    from tuner.measure.pruning import Decision
    from tuner.measure.snapshot import Snapshot
    from tuner.workload.request import BenchRequest, Workload


class PlanRunner(TrialRunner):
    """The simulation core in virtual time: no server, no waiting. Figures are predictions."""

    planned = True
    # each run's bootstrap intervals (`Measurement.ci`): off where only the figures are read
    # (`tuner init`'s reach of the SLO: ~40 % of its simulations' CPU); a capacity search
    # reads the SLO metrics' intervals, so it needs them
    intervals = True

    def __init__(
        self,
        spec: Measuring,
        measured_startup_s: float | None = None,
        workload: Workload | None = None,
    ) -> None:
        super().__init__(spec, workload)
        self.measured_startup_s = measured_startup_s  # the real study's median, if any
        # the study's accelerator, loaded once (a bad profile file is refused here)
        self.gpu = load_gpu(spec.hardware.accelerator) if spec.hardware.accelerator else None

    def startup_s(self, flags: Flags) -> float:
        """Modelled launch-to-ready seconds: the study file's, the real trials', an estimate."""
        if self.spec.hardware.startup_s is not None:
            return self.spec.hardware.startup_s
        if self.measured_startup_s is not None:
            return self.measured_startup_s
        gpu_name = self.gpu.name if self.gpu else None
        return estimated_startup_s(self.spec.engine.model, gpu_name, flags)

    def measure(self, ctx: TrialContext) -> Measurement:
        from tuner.errors import EngineRefused
        from tuner.runners.precheck import refusal_kind

        spec = self.spec
        flags = simulator_flags(spec, ctx.params)
        ctx.phase("simulating")
        try:
            run = partial(self._simulate, ctx, flags)
            m = measure_all(spec, self.objective, run, ctx.beat, ctx.bracket)
        except EngineRefused as exc:
            m = Measurement(vllm_version=PLANNED_VERSION, simulated=True)
            m.engine_s = self.startup_s(flags)  # a real engine would fail during start-up
            m.workload_s = 0.0  # never ready: all of it is start-up (no `startup_s`)
            return failed_measurement(m, refusal_kind(str(exc)), str(exc), "")
        m.startup_s = self.startup_s(flags)
        m.engine_s += m.startup_s  # one start, then every run (virtual seconds)
        if m.engine_full_s is not None:
            m.engine_full_s += m.startup_s
        return m

    def _simulate(
        self,
        ctx: TrialContext,
        flags: dict[str, Any],
        name: str,
        w: WorkloadSpec,
        /,
        *,
        whole: bool = False,
    ) -> Measurement:
        """One run in virtual time; `engine_s` is its workload part (the start is added once).
        `whole`: never stopped early."""
        from tuner.measure.metrics import confidence_intervals
        from tuner.sim.planner import simulate

        spec, reqs = self.spec, self.requests_for(name, w)
        work = study_workload(spec, reqs, w)
        ctx.phase(f"{run_label(self.objective, name, w)}simulating")
        sim = simulate(
            spec.engine.model,
            self.gpu or str(flags.get("gpu", "")),
            flags,
            list(work.prompt_lens),
            list(work.output_lens),
            list(work.arrival_s),
            max_concurrency=work.max_concurrency,
            prompt_ids=work.prompt_id_lists(),
        )
        m = Measurement(vllm_version=PLANNED_VERSION, simulated=True)
        m.metrics = run_metrics(sim.records, sim.duration_s, w)
        m.records, m.workload_s, m.engine_s = sim.records, sim.duration_s, sim.duration_s
        check = None if whole else ctx.checkpoints.get(name, ctx.checkpoint)
        if check is not None and self._replay_stopped(check, ctx, w, reqs, m, sim.engine_trace):
            return m
        if self.intervals:
            m.ci = confidence_intervals(sim.records, sim.duration_s, m.metrics, seed=w.seed)
        return nothing_completed(m) or m

    def _replay_stopped(
        self,
        check: Callable[[Snapshot], Decision],
        ctx: TrialContext,
        w: WorkloadSpec,
        reqs: list[BenchRequest],
        m: Measurement,
        trace: list[tuple[float, int, float, int]],
    ) -> bool:
        """The same stop rule at the same checkpoints as a real run, in virtual time: the run
        is simulated whole, then its records replayed in time order up to each checkpoint
        (the simulator does not look ahead; the replay shows only what a client had seen,
        and the engine state a `/metrics` scrape would have read then)."""
        from tuner.measure.pruning import replay
        from tuner.measure.snapshot import EngineSample, known_sum

        engine = [EngineSample(t, q, kv, pre) for t, q, kv, pre in trace]
        checkpoints = replay(
            m.records,
            ctx.check_every_s,
            ctx.check_every_requests,
            engine,
            max_output_tokens=known_sum([r.output_len for r in reqs]),
            input_tokens=sum(r.prompt_len for r in reqs),
            arrivals_s=sorted(r.start_s for r in m.records),  # the schedule, as sent
        )
        for t, snap in checkpoints:
            decision = check(snap)
            if not decision.stop:
                continue
            done = [r for r, d in zip(snap.sent, snap.done, strict=True) if d]
            m.metrics = run_metrics(done, t, w) if any(r.success for r in done) else {}
            m.records, m.ci = done, {}
            m.pruned_reason, m.pruned_at_s = decision.reason, t
            m.pruned_engine, m.pruned_decision = decision.engine, decision
            m.engine_full_s, m.workload_s, m.engine_s = m.engine_s, t, t
            return True
        return False


def study_workload(
    spec: Traffic, requests: Sequence[BenchRequest], w: WorkloadSpec | None = None
) -> SimWorkload:
    """The requests and send times of one workload run (the study's, unless `w` names one of
    its rate steps or scenarios), as `vllm bench serve` would send them."""
    w = w or spec.workload
    arrivals = arrival_times(len(requests), w.request_rate, w.burstiness, w.seed)
    return SimWorkload(
        prompt_lens=tuple(r.prompt_len for r in requests),
        output_lens=tuple(r.output_len or w.random_output_len for r in requests),
        arrival_s=tuple(float(t) for t in arrivals),
        max_concurrency=w.max_concurrency,
        prompt_ids=_shared_prompt_ids(requests),
    )


def _shared_prompt_ids(
    requests: Sequence[BenchRequest],
) -> tuple[tuple[int, ...] | None, ...] | None:
    """Each prompt's token ids where the workload kept them (prompts that share prefixes), None
    for a prompt without (the simulator names its blocks by the request alone); None when no
    prompt has them."""
    ids = tuple(getattr(r, "prompt_ids", None) for r in requests)
    return ids if any(i is not None for i in ids) else None


def study_profile(spec: Serving) -> GpuProfile:
    """The accelerator the study's simulator starts from (the screen's and calibration's one
    definition): `hardware.profile` or `hardware.gpu`, else the simulated engine's own `--gpu`
    flag (`tuner sim serve --gpu`); a study that names none is a UserError."""
    name = spec.simulated_accelerator
    if not name:
        raise UserError(
            "hardware.gpu (or hardware.profile) is not set in the study file: "
            "the simulator needs a profile to start from"
        )
    return load_gpu(name)


def study_platform(spec: Serving) -> str | None:
    """The platform ("cuda", "cpu") whose vLLM rules a study's engine meets (its block sizes:
    `tuner.spec.vllm_rules`): `study_profile`'s; None when the study names no accelerator."""
    return platform_of(spec.simulated_accelerator)
