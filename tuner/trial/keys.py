"""The names a stored trial and its study carry in Optuna's storage, written once.

Only `tuner.trial` reads or writes these attrs; everything else gets typed fields from
`TrialPoint` (a trial) and `StudyRecord` (the study). docs/storage.md lists every attr with
its type and unit, for analysts reading them in optuna-dashboard or `tuner trials --format json`.

"Simulated" has four distinct meanings here, each with its own name:
- `SIMULATED_FIGURES` (trial attr "simulated"): the trial's figures come from the simulator,
  whether `tuner sim serve` streamed them in real time or `tuner plan` computed them;
- `PLANNED_VERSION` (the trial's `vllm_version` "simulated"): `tuner plan`'s virtual time,
  no engine process at all (`TrialPoint.planned`; the runner that does it: `TrialRunner.planned`);
- `SIMULATED_STUDY` (study attr "simulated"): the study measured the simulator, so every
  figure in it is a prediction (`StudyRecord.simulated`);
- `PLAN_STUDY_SUFFIX` ("-simulated"): the name of the study `tuner plan` keeps beside the
  real one (`tuner.trial.specs.study_name`).
"""

from __future__ import annotations

from tuner.spec.sections import PLAN_STUDY_SUFFIX  # the stored names: `<name>-simulated`

# Study attrs ------------------------------------------------------------------------------
SPEC = "tuner_spec"  # the current StudySpec (Python-mode dump): what `tuner run` last ran
SPEC_ID = "tuner_spec_id"  # its id (`tuner.trial.specs.spec_id`)
SPEC_BY_ID = "tuner_spec:"  # `tuner_spec:<id>`: every spec the study has run under
SIMULATED_STUDY = "simulated"  # the study measured the simulator: every figure is predicted
CALIBRATION = "calibration"  # `search.fidelity: multi`: the screen's latest calibrated profile
# `tuner_robustness:<trial>`: whether that config's gain over the baseline survives small
# workload changes (`tuner.fidelity.robustness`; a `RobustnessRecord`), per spec checked under.
ROBUSTNESS = "tuner_robustness:"
# `tuner_robustness_measured:<trial>`: the same check measured on the engine by `tuner run
# --confirm` (`tuner.fidelity.robustness_measured`); where both exist, the measured one is shown.
ROBUSTNESS_MEASURED = "tuner_robustness_measured:"
# `tuner_smallest:<trial>`: which of that config's changed flags carry its gain over vLLM's
# defaults, each reverted alone on the calibrated simulator (`tuner.fidelity.smallest_check`; a
# `tuner.trial.smallest.SmallestChange`), for the spec it was checked under.
SMALLEST = "tuner_smallest:"
# `tuner_smallest_measured:<trial>`: the same, each config measured on the engine by `tuner run
# --confirm` (`tuner.fidelity.smallest_measured`); where both exist, the measured one is used.
SMALLEST_MEASURED = "tuner_smallest_measured:"

# Trial user attrs -------------------------------------------------------------------------
# weighted log-ratio against the baseline (docs/objective.md); both modes. As scored when the
# trial was told: readers get it recomputed from the metrics (`tuner.trial.scoring.rejudge`)
SCORE = "score"
BASELINE = "baseline"  # vLLM's defaults, measured first: the reference of every score
REFERENCE = "reference_trial"  # the trial this score is relative to (the baseline if measured)
SPEC_OF = "spec_id"  # the measurement this trial ran under (`tuner.trial.specs.spec_id`)
JUDGING_OF = "judging_id"  # the judging it was scored under when told (`specs.judging_id`)
HOST = "host"  # the host it was measured on (`$TUNER_HOST_ID` or the hostname)
SIMULATED_FIGURES = "simulated"  # figures are the simulator's predictions
CONFIRM_OF = "confirm_of"  # a `--confirm` re-measurement of trial N
# a re-run of trial N: an interruption ended it, or it was stopped early under a judging the
# study no longer uses (docs/reliability.md, "Re-judging")
RETRY_OF = "retry_of"
REUSED_FROM = "reused_from"  # same parameters as trial N: its result, not launched
FAILURE_KIND = "failure_kind"  # a FailureKind value: present on every trial without metrics
FAILURE_REASON = "failure_reason"  # in words, usually the engine's own log line
PREDICTED = "predicted"  # refused before launch (vLLM's rules or the memory precheck)
# `search.fidelity: multi` (docs/multi-fidelity.md): what the calibrated simulator predicted
# for a trial before it ran, as `predicted_<metric>` (vLLM's keys) beside each measured one,
# and the predicted score; never a measurement, never read as one.
PREDICTED_PREFIX = "predicted_"
PREDICTED_SCORE = "predicted_score"
PREDICTION_ERROR = "prediction_error"  # {metric: measured / predicted - 1, score: difference}
SCREEN = "screen"  # how the screen chose it (a `ScreenInfo`)
# The prediction skip: the prediction before launch, and why a launch was skipped
SKIP_PREDICTION = "skip_prediction"  # a `SkipPrediction` (tuner.trial.payloads)
WARM_START = "warm_start"  # enqueued from another study's best (`--from-plan`, `--warm-start`)
PRECHECK_WRONG = "precheck_wrong"  # what the memory precheck said, against what happened
BOX_WAITS = "box_waits"  # starts that found the GPU's memory held by another process, waited
GPU_FAULTS = "gpu_faults"  # GPU faults (Xid, illegal access, NCCL, ECC), each retried fresh
VLLM_VERSION = "vllm_version"
PLANNED_VERSION = "simulated"  # the VLLM_VERSION of a `tuner plan` trial: virtual time, no engine
LOG_PATH = "log_path"
STARTUP_S = "startup_s"  # launch until ready
WORKLOAD_S = "workload_s"  # warm-ups and workload
ENGINE_S = "engine_s"  # seconds the engine was up, launch until stopped (0: never launched)
# Unix time (s, the measuring worker's clock) of the trial's first engine launch: what an
# interruption's engine_s is counted from (`tuner.trial.uptime.interrupted_engine_s`).
ENGINE_STARTED_AT = "engine_started_at"
ENGINE_FULL_S = "engine_full_s"  # `tuner plan`, a pruned trial: its engine time had it run on
PARTIAL = "partial"  # True: the metrics cover only the requests done when it was stopped
PRUNED_REASON = "pruned_reason"  # why early stopping stopped it, in words
PRUNED_AT_S = "pruned_at_s"  # seconds into the workload when it was stopped
PRUNED_QUEUE = "pruned_queue_waiting"  # the engine's vllm:num_requests_waiting then
PRUNED_KV_USAGE = "pruned_kv_cache_usage"  # its vllm:kv_cache_usage_perc then (0..1)
PRUNED_PREEMPTIONS = "pruned_preemptions"  # its vllm:num_preemptions_total then
# "cannot beat the best": the lower bound on its final score it was stopped on (what the
# sampler is told, as the PRUNED trial's intermediate value; docs/early-stopping.md)
PRUNED_SCORE_BOUND = "pruned_score_bound"
PRUNED_SENT = "pruned_sent_fraction"  # the share of the workload's requests sent by the stop
# rule (c), queue growth: the lower bound (ms) on the SLO's percentile it was stopped on
PRUNED_BACKLOG_BOUND = "pruned_backlog_bound_ms"
CI_SUFFIX = "_ci"  # `<metric>_ci`: [low, high] of its 95 % bootstrap interval
# Capacity mode (docs/objective.md): the highest offered rate that met every SLO; the trial's
# metrics are those of the run at that rate (when none met them, of the lowest-rate run).
CAPACITY_RPS = "capacity_rps"  # req/s; 0: no rate tried met the SLOs
CAPACITY_GOODPUT = "capacity_goodput_rps"  # request_goodput of the run at that rate
CAPACITY = "capacity"  # the search (a `CapacityResult`)
RATE_STEPS = "rate_steps"  # every run (a list of `RateStep`)
# Scenario mixes: {name: `ScenarioEntry`}; the trial's own metrics then pool every
# scenario's requests, and its score aggregates the scenarios' scores.
SCENARIOS = "scenarios"
# Every run's prefix-cache hit rate, measured and implied by its prompts (a list of
# `PrefixCacheRun`): a run above what its workload implies was measured warm.
PREFIX_CACHE_RUNS = "prefix_cache_runs"
# The engine's start-up phase by phase, as vLLM's log told it (a `StartupPhases`)
STARTUP_PHASES = "startup_phases"

# Trial system attrs -----------------------------------------------------------------------
OWNER = "tuner:owner"  # host, boot id, pid and its start time of the tuner running the trial
LEGACY_CONSTRAINTS = "constraints"  # the list optuna-dashboard reads to grey a trial out
NAMED_CONSTRAINT_PREFIX = "constraints:"  # where Optuna's `set_constraint` stores key=value

# The names, for `from tuner.trial import *`: a literal list, so that type checkers see them
# (tests/test_packages.py checks it names every constant above).
__all__ = [
    "BASELINE",
    "BOX_WAITS",
    "CALIBRATION",
    "CAPACITY",
    "CAPACITY_GOODPUT",
    "CAPACITY_RPS",
    "CI_SUFFIX",
    "CONFIRM_OF",
    "ENGINE_FULL_S",
    "ENGINE_S",
    "ENGINE_STARTED_AT",
    "FAILURE_KIND",
    "FAILURE_REASON",
    "GPU_FAULTS",
    "HOST",
    "JUDGING_OF",
    "LEGACY_CONSTRAINTS",
    "LOG_PATH",
    "NAMED_CONSTRAINT_PREFIX",
    "OWNER",
    "PARTIAL",
    "PLANNED_VERSION",
    "PLAN_STUDY_SUFFIX",
    "PRECHECK_WRONG",
    "PREDICTED",
    "PREDICTED_PREFIX",
    "PREDICTED_SCORE",
    "PREDICTION_ERROR",
    "PREFIX_CACHE_RUNS",
    "PRUNED_AT_S",
    "PRUNED_BACKLOG_BOUND",
    "PRUNED_KV_USAGE",
    "PRUNED_PREEMPTIONS",
    "PRUNED_QUEUE",
    "PRUNED_REASON",
    "PRUNED_SCORE_BOUND",
    "PRUNED_SENT",
    "RATE_STEPS",
    "REFERENCE",
    "RETRY_OF",
    "REUSED_FROM",
    "ROBUSTNESS",
    "ROBUSTNESS_MEASURED",
    "SCENARIOS",
    "SCORE",
    "SCREEN",
    "SIMULATED_FIGURES",
    "SIMULATED_STUDY",
    "SKIP_PREDICTION",
    "SMALLEST",
    "SMALLEST_MEASURED",
    "SPEC",
    "SPEC_BY_ID",
    "SPEC_ID",
    "SPEC_OF",
    "STARTUP_PHASES",
    "STARTUP_S",
    "VLLM_VERSION",
    "WARM_START",
    "WORKLOAD_S",
]
