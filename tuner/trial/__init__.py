"""The stored trial: the one owner of what a trial and its study carry in Optuna's storage.

Only this package reads or writes Optuna attrs (`tests/test_trial_ownership.py` holds every
other module to it). Names: `keys`; payloads with one encoder and decoder each: `payloads`
(what a prediction skip recorded among them; what a runner's runs produce is
`tuner.measure.runs`), pydantic dataclasses on one base that reads them leniently by one rule
(`tuner.measure.stored`);
a trial's attrs typed: `record.TrialRecord`; a trial as read: `point.TrialPoint`; the study's
attrs typed: `study.StudyRecord`; the read model, the one module that reads a study's trials
from Optuna (`read_study`, `tests/test_read_model.py`): `reading`; the one order, the
reference trial, `--confirm`'s re-runs and `read_all` (scores pooled over re-runs of the
reference): `ranking`; the spec a trial ran under: `specs` (its ids: `spec_ids`); scoring a
measurement: `scoring`; is one config clearly better than another: `clearly`; the flags
that carry a config's gain: `smallest`; a trial's
figures in words: `words`; hosts' baselines side by side: `hosts`; engine time: `uptime`;
how each trial ended, counted once: `outcome`.
docs/storage.md lists every attr.
"""

from tuner.errors import PREDICTABLE, FailureKind
from tuner.measure.runs import CapacityResult, PrefixCacheRun, RateStep, ScenarioEntry
from tuner.measure.stored import is_finite
from tuner.trial.keys import *  # noqa: F403 (the attr names are part of the package's API)
from tuner.trial.outcome import OUTCOME_WORDS, Outcome, outcome, tally, tally_line, tally_words
from tuner.trial.payloads import (
    CalibrationRecord,
    Constraints,
    RobustnessRecord,
    ScreenInfo,
    SkipPrediction,
    is_metric,
)
from tuner.trial.point import (
    Status,
    TrialPoint,
    for_scenario,
    have_capacities,
    owner_of,
    read,
    record_of,
)
from tuner.trial.ranking import (
    Config,
    ParamsKey,
    baseline_of,
    best,
    config_figures,
    configs,
    confirmation_misses,
    confirmation_runs,
    host_baselines,
    miss_notes,
    params_key,
    pooled,
    ranked,
    read_all,
    reference,
    reruns,
)
from tuner.trial.record import AttrsHolder, TrialRecord, prediction_error, write, write_constraints
from tuner.trial.smallest import FlagRevert, SmallestChange
from tuner.trial.study import (
    StudyRecord,
    create,
    mark_simulated,
    write_calibration,
    write_checked,
    write_robustness,
    write_smallest,
)

__all__ = [
    "OUTCOME_WORDS",
    "PREDICTABLE",
    "AttrsHolder",
    "CalibrationRecord",
    "CapacityResult",
    "Config",
    "Constraints",
    "FailureKind",
    "FlagRevert",
    "Outcome",
    "ParamsKey",
    "PrefixCacheRun",
    "RateStep",
    "RobustnessRecord",
    "ScenarioEntry",
    "ScreenInfo",
    "SkipPrediction",
    "SmallestChange",
    "Status",
    "StudyRecord",
    "TrialPoint",
    "TrialRecord",
    "baseline_of",
    "best",
    "config_figures",
    "configs",
    "confirmation_misses",
    "confirmation_runs",
    "create",
    "for_scenario",
    "have_capacities",
    "host_baselines",
    "is_finite",
    "is_metric",
    "mark_simulated",
    "miss_notes",
    "outcome",
    "owner_of",
    "params_key",
    "pooled",
    "prediction_error",
    "ranked",
    "read",
    "read_all",
    "record_of",
    "reference",
    "reruns",
    "tally",
    "tally_line",
    "tally_words",
    "write",
    "write_calibration",
    "write_checked",
    "write_constraints",
    "write_robustness",
    "write_smallest",
]
