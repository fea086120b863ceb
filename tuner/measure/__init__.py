"""From what the client recorded to a score: records → metrics → objective (and capacity).

Modules:
- `records`: `RequestRecord`, one request as the client (or the simulator) saw it;
- `metrics`: vLLM bench's metrics from records (`compute_metrics`), bootstrap intervals;
- `measurement`: `Measurement`, what a runner hands to the trial pipeline;
- `runs`: the typed results of several runs on one engine start (rate steps, capacity,
  scenarios, the prefix cache per run), in the trial's stored shape; `stored`: their lenient
  reading;
- `objective`: weighted log-ratios against the baseline, SLO constraints, `clearly_better`;
- `modes`: the objective object, one class per mode: every decision that depends on the mode;
- `mixes`: a scenario mix as the composite of one mode's object per scenario, and the
  factory `objective_of` (a study's mode, or its mix): every decision that depends on the mix;
- `mode_words`: what each kind of objective object says to a person (`words_of`);
- `capacity`: the rate search of `objective.mode: capacity` (pure); `rate_verdicts`: the
  evidence of its rates (each run's excess, a rate's verdict by a t bound over its seeds, the
  capacity's 95 % interval, where the next run goes);
- `snapshot`: what an early-stopping check sees (`Snapshot`, `EngineSample`);
- `pruning`: early stopping's rule, from partial records and the engine's gauges;
- `backlog`: queue growth, a lower bound on the latency percentile a run will end with;
- `startup_phases`: an engine's start-up phase by phase, from vLLM's own log lines.

What may be assumed: everything here is computation, no I/O, no HTTP, no storage (`runs`
and `stored` give a value's stored shape; the trial writes it); the same
records give the same figures (the bootstrap is seeded).

Re-exported here: the names every runner and the simulator use (they load numpy, as every
user of this package does). `objective` is not re-exported: it reads the study file
(`tuner.spec.study`), which the simulation core (a user of `metrics`) must not load. Import
it, `modes`, `mixes`, `capacity` and `pruning` from their modules.
"""

from tuner.measure.measurement import Measurement
from tuner.measure.metrics import compute_metrics, confidence_intervals
from tuner.measure.records import RequestRecord

__all__ = [
    "Measurement",
    "RequestRecord",
    "compute_metrics",
    "confidence_intervals",
]
