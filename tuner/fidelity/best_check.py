"""The best config checked against its baseline, on any runner: one home for what the checks
that end a run share (the robustness check and which flags carry the gain, each on the
simulator and on the engine): the `Check` protocol and what a check is given (`CheckInput`),
the pair they check, one config run, the record stored.

The session (`tuner.run.session`) runs every check of `tuner.fidelity.checks.CHECKS` in order
once the trials have ended, as Optuna's study asks its `BaseSampler`: it never names one. A
new check is one module with an object that implements `Check` and one line in `CHECKS`; what
`tuner best` and the report say of its record is a `tuner.results.section.Section` (results
read no runner, an import-linter contract, so a check's words live there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from tuner import trial as tr
from tuner.measure.measurement import Measurement
from tuner.measure.stored import Stored
from tuner.runners.trial_runner import TrialContext, TrialRunner
from tuner.spec.study import StudySpec
from tuner.spec.values import Params
from tuner.trial import TrialPoint

Record = TypeVar("Record")


@dataclass(frozen=True)
class CheckInput:
    """What every check of the best config is given: the study (whose attrs hold the records),
    its spec, the trials of its current spec, the run's runner (its workload built: the
    planner under `tuner plan`, else the engine's), the run's `--confirm K` and whether it
    re-measures the flags the simulator dropped, and where to say what it does."""

    study: tr.AttrsHolder
    spec: StudySpec
    points: Sequence[TrialPoint]
    runner: TrialRunner
    confirm: int = 0
    confirm_flags: bool = True
    say: Callable[[str], None] = lambda _: None


class Check(Protocol):
    """One check of the best config once a run's trials have ended. Contract:

    - `name`: unique among `CHECKS`; what `tuner.run.session.RunResult.checks` holds its
      record under;
    - `prefix`: the study attr its record is stored under, `<prefix><trial number>`, one per
      checked config; never renamed once shipped (stored studies must stay readable);
    - `record`: the type of that record, a `Stored` payload (it decodes leniently:
      `tuner.measure.stored`), read back with `StudyRecord.checked(prefix, record)`;
    - `on_engine`: it starts the engine; the session then handles Ctrl-C, SIGTERM and SIGHUP
      as during a trial (the first stops the engine and the check records itself as
      interrupted, then `RunInterrupted` names `during`);
    - `during`: the check in words ("the measured robustness check");
    - `wanted(given)`: whether this run asks for it (the planner, `--confirm`, a stored
      check of the same config left unfinished);
    - `run(given)`: check the best config of the current spec against its baseline, store
      the record and return it; None when there is nothing to check (no best, the best is
      the baseline, nothing the check applies to). It may read what a check before it in
      `CHECKS` stored (the measured flags check re-measures what the simulated one dropped).
    """

    name: str
    prefix: str
    record: type[Stored]
    on_engine: bool
    during: str

    def wanted(self, given: CheckInput) -> bool: ...

    def run(self, given: CheckInput) -> Stored | None: ...


def best_pair(points: Sequence[TrialPoint]) -> tuple[TrialPoint, TrialPoint] | None:
    """(the best config of the current spec, its baseline); None when there is no best, or
    the best is the baseline: nothing to check."""
    best, base = tr.best(points), tr.baseline_of(points)
    if best is None or base is None or best.number == base.number:
        return None
    return best, base


def config_run(runner: TrialRunner, params: Params, log_name: str | None = None) -> Measurement:
    """One config measured by the check's runner, every workload it holds; not a trial
    (number −1; `log_name`: its engine log's name, None: the planner has none)."""
    ctx = TrialContext(runner.spec.name, -1, dict(params), lambda _: None, log_name=log_name)
    return runner.measure(ctx)


def check_stored_best(
    study: tr.AttrsHolder,
    points: Sequence[TrialPoint],
    check: Callable[[TrialPoint, TrialPoint], Record],
    store: Callable[[tr.AttrsHolder, int, Record], None],
    current: Callable[[TrialPoint], Record | None] = lambda _: None,
) -> Record | None:
    """`check(best, baseline)` for the best config of the current spec, stored by
    `store(study, best.number, record)` and returned; None when `best_pair` has none.
    `current(best)`: the stored record when nothing it depends on changed, returned as it
    is, not checked again."""
    pair = best_pair(points)
    if pair is None:
        return None
    kept = current(pair[0])
    if kept is not None:
        return kept
    record = check(*pair)
    store(study, pair[0].number, record)
    return record
