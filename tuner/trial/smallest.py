"""The smallest change that keeps a config's gain, as a study stores it (`SmallestChange`).

Found at the end of `tuner run` by `tuner.fidelity.smallest_check` (the rule:
`tuner.fidelity.smallest`) and stored here, as the study attr `tuner_smallest:<trial>`. `tuner
best`, `tuner export` and the report read it back through `StudyRecord.smallest_of` and
recommend only the flags that carry the gain (`tuner.results.smallest`). The method: "The
smallest change that keeps the gain" in docs/results.md.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated

from pydantic.dataclasses import dataclass

from tuner.measure.stored import AsWritten, Figure, Lenient, Stored
from tuner.spec.values import Scalar

SIMULATED = "SIMULATED"  # a figure of the calibrated simulator
MEASURED = "MEASURED"  # measured on the engine (`tuner run --confirm`)


@dataclass(frozen=True)
class FlagRevert(Stored):
    """One flag the config changes, reverted alone to vLLM's default."""

    flag: str  # the search-space parameter (`block-size`)
    tuned: Scalar | None = None  # the config's value
    default: Scalar | None = None  # the baseline's value
    score_change: Figure = None  # score reverted − the config's (> 0: worse); None: refused
    carries: bool = False  # reverting it alone loses the gain beyond noise (or is refused)
    why: str = ""  # in words: "within noise (...)", "clearly worse on mean TPOT", "refused: ..."
    # its figures' label where not the record's: MEASURED for a flag the simulator does not
    # model, judged on the study's own trials (issue 50 item 3)
    source: str = ""


@dataclass(frozen=True)
class SmallestChange(Stored):
    """Which of a config's changed flags carry its gain over vLLM's defaults."""

    spec_id: str | None = None  # the spec the check ran under
    checked: bool = False  # False: `note` says why not (no profile, the simulator refuses it)
    note: str = ""  # how it was scored (the profile), or why it was not
    reverts: Annotated[tuple[FlagRevert, ...], Lenient] = ()  # every changed flag, each alone
    kept: tuple[str, ...] = ()  # the flags the recommended command changes
    params: AsWritten[Scalar] = field(default_factory=dict)  # the config, the rest at defaults
    score: Figure = None  # the whole config's score (SIMULATED)
    kept_score: Figure = None  # the recommended config's score (SIMULATED)
    source: str = SIMULATED  # the figures' label: SIMULATED (also a `tuner sim serve` engine's)
    trial: int | None = None  # the trial whose config was checked
    engine: bool = False  # measured on the study's engine (`--confirm`), not the planner

    def applies_to(self, number: int) -> bool:
        """Checked for trial `number`, and some changed flag of it dropped."""
        return self.checked and self.trial == number and bool(self.dropped)

    @property
    def remeasure_starts(self) -> int:
        """Engine starts `tuner run --confirm` spends re-measuring the dropped flags
        (`fidelity.smallest_measured`), one run of the workload each: each dropped flag
        reverted alone, and all of them together when there are several (more only when they
        matter together). The best config itself is not counted: `--confirm`'s latest re-run
        of it stands for it. 0 when nothing was dropped (or not checked)."""
        dropped = len(self.dropped) if self.checked else 0
        return dropped + (dropped > 1)

    @property
    def measured(self) -> bool:
        """Measured on the study's engine (`tuner run --confirm`)."""
        return self.engine

    @property
    def dropped(self) -> tuple[FlagRevert, ...]:
        """The changed flags the recommended command leaves at vLLM's default."""
        return tuple(r for r in self.reverts if r.flag not in self.kept)
