"""Helpers for tests and benchmarks that drive the `tuner` CLI end to end (as `optuna.testing`).

The tests and the benchmarks in benchmarks/ build their study files and run the CLI with
these, so both exercise the same study. A distribution of its own (support/), outside the
tuner's wheel; nothing in the tuner imports it (docs/architecture.md, "Test helpers").
"""

from tuner_testing.cli import REPO, TUNER, start_run, tuner
from tuner_testing.forked import vllm_run
from tuner_testing.postgres import PG_USER, PostgresServer, postgres_missing, start_workers
from tuner_testing.servers import loopback_app
from tuner_testing.stored import request_records, trial_row
from tuner_testing.studies import cpu_study, sim_study, sim_time_scale
from tuner_testing.trials import counted, launched, measured_at_once

__all__ = [
    "PG_USER",
    "REPO",
    "TUNER",
    "PostgresServer",
    "counted",
    "cpu_study",
    "launched",
    "loopback_app",
    "measured_at_once",
    "postgres_missing",
    "request_records",
    "sim_study",
    "sim_time_scale",
    "start_run",
    "start_workers",
    "trial_row",
    "tuner",
    "vllm_run",
]
