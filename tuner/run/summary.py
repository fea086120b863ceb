"""What one `tuner run` / `tuner plan` invocation did: trials run, launches saved (rules,
precheck, reuse), engine time used and saved by early stopping. The loop counts into it; the
CLI prints it (`tuner.trial.uptime.summary_line`); GPU slots merge theirs (`tuner.run.slots`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.errors import BOX_FAULTS
from tuner.run.outcome import Outcome


@dataclass
class RunSummary:
    study_name: str
    ran: int = 0
    interrupted_recovered: list[int] = field(default_factory=list)
    orphans_stopped: int = 0
    saved_by_rules: int = 0  # refused by vLLM's scheduler rules: never launched
    saved_by_precheck: int = 0  # predicted not to fit in memory / not supported
    saved_by_reuse: int = 0  # parameters already measured: result reused
    saved_by_prediction: int = 0  # ruled out by the calibrated simulator: never launched
    prediction_saved_s: float = 0.0  # the engine time those launches were expected to take
    precheck_wrong: list[int] = field(default_factory=list)
    refused_out: bool = False  # vLLM's rules refused the sampler's configs, many in a row
    exhausted: bool = False  # the sampler proposed only measured configs, many times in a row
    engine_s: float = 0.0  # engine time of this run's trials (`tuner.trial.uptime`)
    startup_s: float = 0.0  # the part of it spent starting engines (launch until ready)
    measured_engine_s: list[float] = field(default_factory=list)
    pruned: list[tuple[float, float | None]] = field(default_factory=list)  # (used, full)

    @property
    def new_configs(self) -> int:
        """Trials that were not a reused result."""
        return self.ran - self.saved_by_reuse

    def count(self, number: int, outcome: Outcome) -> None:
        self.ran += 1
        if outcome.saved_by is not None:
            name = f"saved_by_{outcome.saved_by}"
            setattr(self, name, getattr(self, name) + 1)
        if outcome.record.precheck_wrong is not None and outcome.kind != "reused":
            self.precheck_wrong.append(number)
        used = float(outcome.record.engine_s or 0.0)
        self.engine_s += used
        split = outcome.record.engine_split_s
        self.startup_s += split[0] if split is not None else 0.0
        if outcome.saved_by == "prediction":
            sp = outcome.record.skip_prediction
            self.prediction_saved_s += (sp.engine_s or 0.0) if sp is not None else 0.0
        elif outcome.kind == "measured":
            self.measured_engine_s.append(used)
        elif outcome.kind == "pruned":
            self.pruned.append((used, outcome.record.engine_full_s))


# A sampler that proposes only measured configs this often in a row has exhausted the space.
MAX_REUSED_IN_A_ROW = 25
# Configs vLLM's rules refuse are free (never launched, not in `n_trials`,
# `tuner.run.reading.budget_used`): this many in a row, and the space holds too few configs
# vLLM takes; the run ends rather than ask for ever.
MAX_REFUSED_IN_A_ROW = 25


def in_budget(outcome: Outcome, multi_fidelity: bool) -> bool:
    """Whether `outcome` uses up a trial of `n_trials`: not a config vLLM's rules refused, a
    reused result, or (multi-fidelity) a launch ruled out on its prediction. The loop's
    budget (`Streaks.counts`) and the live display's "trial i/N" both count by it."""
    if outcome.saved_by == "rules" or outcome.kind == "reused":
        return False
    if outcome.values is None and outcome.record.failure_kind in BOX_FAULTS:
        return False  # the box's state, not a trial of the study (`reading.budget_used`)
    return not (multi_fidelity and outcome.saved_by == "prediction")


@dataclass
class Streaks:
    """The loop's runs of outcomes that use no budget: vLLM's rules' refusals, and reused
    results (multi-fidelity: also launches ruled out on a prediction, issue 37 §4)."""

    multi_fidelity: bool
    refused: int = 0
    repeated: int = 0

    def counts(self, outcome: Outcome, summary: RunSummary) -> bool | None:
        """Whether `outcome` is a trial of the budget; None: stop the run (too many free
        outcomes in a row; `summary` says which)."""
        if outcome.saved_by == "rules":
            self.refused += 1
            summary.refused_out = self.refused >= MAX_REFUSED_IN_A_ROW
            return None if summary.refused_out else False
        self.refused = 0
        if in_budget(outcome, self.multi_fidelity):
            self.repeated = 0
            return True
        self.repeated += 1
        summary.exhausted = self.repeated >= MAX_REUSED_IN_A_ROW
        return None if summary.exhausted else False
