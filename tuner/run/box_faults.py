"""When the box, not the config, ended a trial: why the run stops, in one line ("A busy GPU, a
failing GPU" in docs/reliability.md). The pipeline tells such a trial to Optuna as nothing
(FAIL), and `reading.budget_used` does not count it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.errors import FailureKind
from tuner.measure.measurement import Measurement


def busy_stop(m: Measurement, wait_s: float) -> str | None:
    """Why the run stops after a start that found the GPU busy through every wait; None for
    any other measurement."""
    if m.failure_kind != FailureKind.BOX_BUSY:
        return None
    return (
        f"the GPU stayed busy through {m.box_waits} wait(s) of {wait_s:g} s "
        f"(trial.busy_wait_s), so the study stops before spending its budget: {m.failure_reason}"
    )


@dataclass
class GpuFaults:
    """The configs this run's GPU faults hit (the runner retried each once already)."""

    configs: set[object] = field(default_factory=set)

    def stop(self, config: object, m: Measurement) -> str | None:
        """Why the night stops after this trial's fault: a fault on a second config of the
        run (the GPU, not the configs). None: no fault, or faults on this config alone (its
        fresh start faulted too: the config's failure, told as one)."""
        if not m.gpu_faults and m.failure_kind != FailureKind.GPU_FAULT:
            return None
        others = self.configs - {config}
        self.configs.add(config)
        if not others:
            return None
        last = m.failure_reason or "retried and measured"
        return (
            f"a GPU fault on a second config this run ({len(others) + 1} configs), so the "
            f"study stops: the GPU needs a look. Last: {last}"
        )
