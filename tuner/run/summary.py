"""What one `tuner run` / `tuner plan` invocation did: trials run, launches saved (rules,
precheck, reuse), engine time used and saved by early stopping. The loop counts into it; the
CLI prints it (`tuner.trial.uptime.summary_line`); GPU slots merge theirs (`tuner.run.slots`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.run.pipeline import Outcome


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
    exhausted: bool = False  # the sampler proposed only measured configs, many times in a row
    engine_s: float = 0.0  # engine time of this run's trials (`tuner.trial.uptime`)
    startup_s: float = 0.0  # the part of it spent starting engines (launch until ready)
    measured_engine_s: list[float] = field(default_factory=list)
    pruned: list[tuple[float, float | None]] = field(default_factory=list)  # (used, full)

    @property
    def new_configs(self) -> int:
        """Trials that were not a reused result: what counts toward the budget."""
        return self.ran - self.saved_by_reuse

    @property
    def launches_saved(self) -> int:
        return self.saved_by_rules + self.saved_by_precheck + self.saved_by_reuse

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
