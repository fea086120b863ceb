"""Measure one configuration: the step between a trial's params and its `Measurement`.

trial params → engine argv/env (`tuner.spec.space`) → a runner starts the engine (or the
simulation core), runs the workload (one run, rate steps, or a scenario mix) → `Measurement`
(records, metrics, intervals, start-up, engine seconds) → the trial pipeline scores it.

Modules:
- `trial_runner`: the runner interface (`TrialRunner`, `TrialContext`), and what both runners
  share;
- `engine_runner`: `EngineRunner`, which measures on a real engine process (vLLM or
  `tuner sim serve`);
- `plan`: `PlanRunner`, the same measurement by the simulation core in virtual time
  (`tuner plan`, the robustness check), and `study_workload`, the simulated workload of a study;
- `load_runs`: several runs on one engine start (capacity mode's rate steps, scenario mixes);
- `precheck`: configs vLLM would refuse for lack of memory, predicted before launching.

What may be assumed: the study loop never asks which runner it has; a runner never scores
or stores (that is `tuner.run.pipeline`'s and `tuner.trial`'s job).

Re-exported here: the interface and the engine runner. `PlanRunner` loads scipy (through the
calibration fit): import it from `tuner.runners.plan`.
"""

from tuner.runners.engine_runner import EngineRunner
from tuner.runners.trial_runner import TrialContext, TrialRunner

__all__ = ["EngineRunner", "TrialContext", "TrialRunner"]
